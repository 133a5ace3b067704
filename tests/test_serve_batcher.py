"""The batcher alone (no server, no model): how it forms batches while another is in flight."""

import asyncio
import threading
import types

import numpy as np

from opennmt_lite.serving.batcher import Batcher, Job


class HeldModel:
    """A model whose `translate` records each batch's size and blocks until released."""

    model_id = 0

    def __init__(self):
        self.sizes = []
        self.release = threading.Event()
        self.assets = types.SimpleNamespace(target_tokenizer=types.SimpleNamespace(
            tokenize=lambda text: [text], tokenize_batch=lambda texts: [[t] for t in texts]))

    def translate(self, sources, options, alignments=None):
        self.sizes.append(len(sources))
        self.release.wait(10)
        return [[("x", 0.0)] for _ in sources]


class Metrics:
    def __init__(self):
        gauge = types.SimpleNamespace(set=lambda value: None)
        self.queue_depth = self.in_flight = types.SimpleNamespace(labels=lambda label: gauge)

    def batch(self, *args):
        pass


async def settled(condition, timeout=10.0):
    """Waits until `condition()` holds (a worker thread's start is slow on a loaded machine)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


def test_a_free_worker_waits_for_a_batch_as_large_as_the_one_in_flight():
    settings = types.SimpleNamespace(max_batch_size=64, max_batch_tokens=None, batch_timeout_ms=0,
                                     queue_limit=1000, batch_workers=2)
    model = HeldModel()
    options = types.SimpleNamespace(n_best=1)
    source = types.SimpleNamespace(tokens=["a"], ids=np.array([1], np.int32))

    async def scenario():
        loop = asyncio.get_running_loop()
        batcher = Batcher(model, settings, Metrics())
        batcher.start()
        jobs = [Job([source], options, None, loop) for _ in range(8)]
        for job in jobs:
            batcher.submit(job)
        await settled(lambda: model.sizes)
        await asyncio.sleep(0.2)
        assert model.sizes == [8]  # (one batch of the 8 waiting)
        late = [Job([source], options, None, loop) for _ in range(7)]
        for job in late:
            batcher.submit(job)
            await asyncio.sleep(0.05)
        assert model.sizes == [8]  # 7 < 8: the free worker waits (no batches of 1)
        last = Job([source], options, None, loop)
        batcher.submit(last)
        await settled(lambda: len(model.sizes) > 1)
        assert model.sizes == [8, 8]
        model.release.set()
        results = await asyncio.gather(*(job.done for job in jobs + late + [last]))
        assert [r[0][0][0] for r in results] == ["x"] * 16
        await batcher.stop()

    asyncio.run(scenario())
