"""Batching across requests: the sentences of concurrent requests to one model, gathered into
batches, translated on worker threads, each request answered once its own sentences are done.

One `Batcher` per model, on the server's asyncio loop. Sentences wait in one FIFO queue (at most
serve.queue_limit: a request that would pass it is refused at once, `Overloaded`, never queued).
A batch is formed when a worker is free: from the oldest waiting sentence on, those decoded with
the same options, at most serve.max_batch_size sentences and serve.max_batch_tokens source tokens
(rows x the longest), after waiting at most serve.batch_timeout_ms from the oldest sentence's
arrival for the batch to fill. While every worker is busy, sentences keep arriving: the next
batch takes what gathered (larger batches under load, no wait when idle). A free worker while
another batch is in flight waits until as many sentences wait as a batch in flight holds (on
average), or until a batch finishes: taken at once, the few sentences that arrived since the last
batch would start a small batch, their clients' next requests a smaller one, and so on (at 32
clients on 2 workers the mean batch fell to 3 sentences, and the throughput with it). Workers are threads
(TensorFlow and CTranslate2 release the GIL while they compute); serve.batch_workers of them.
"""

import asyncio
import collections
import concurrent.futures
import logging
import time

logger = logging.getLogger("opennmt_lite")


class Overloaded(Exception):
    """The queue cannot take a request's sentences (HTTP 503)."""


class Job:
    """One request's sentences: `results[i]` the hypotheses of sentence i once translated;
    `done` a future set when all are (or with the batch's exception)."""

    def __init__(self, sources, options, alignments, loop):
        self.sources = sources
        self.options = options
        self.alignments = alignments
        self.results = [None] * len(sources)
        self.remaining = len(sources)
        self.done = loop.create_future()
        self.arrival = time.monotonic()

    @property
    def key(self):
        return (self.options, self.alignments)


class Batcher:
    def __init__(self, model, settings, metrics, workers=None):
        self.model = model
        self.max_sentences = settings.max_batch_size
        self.max_tokens = settings.max_batch_tokens
        self.timeout = settings.batch_timeout_ms / 1000
        self.queue_limit = settings.queue_limit
        self.workers = workers or settings.batch_workers or model.default_workers()
        self.metrics = metrics
        self.label = str(model.model_id)
        self.waiting = collections.deque()  # (job, index of the sentence), oldest first
        self.in_flight = 0  # (sentences being translated)
        self.batches_in_flight = 0
        self._arrived = None
        self._task = None

    def start(self):
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self.workers, thread_name_prefix=f"translate-{self.label}")
        self._slots = asyncio.Semaphore(self.workers)
        self._arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._form_batches())

    async def stop(self):
        """After the last request was answered: ends the loop and the worker threads."""
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._executor.shutdown(wait=True)

    def submit(self, job):
        """Queues the sentences of `job` (empty ones are answered without the model)."""
        pending = [i for i, source in enumerate(job.sources) if source.tokens]
        if len(self.waiting) + len(pending) > self.queue_limit:
            raise Overloaded(f"the queue of model {self.label} is full ({len(self.waiting)} of "
                             f"serve.queue_limit={self.queue_limit} sentences waiting)")
        n_best = job.options.n_best
        for i, source in enumerate(job.sources):
            if not source.tokens:  # (OpenNMT-py's rule: nothing to translate, "" scored 0)
                job.results[i] = [("", 0.0) + ((_empty_alignment(),) if job.alignments else ())] * n_best
                job.remaining -= 1
        if not job.remaining:
            job.done.set_result(job.results)
            return
        self.waiting.extend((job, i) for i in pending)
        self.metrics.queue_depth.labels(self.label).set(len(self.waiting))
        self._arrived.set()

    def withdraw(self, job):
        """Removes the waiting sentences of a job that timed out (those being translated finish)."""
        self.waiting = collections.deque(item for item in self.waiting if item[0] is not job)
        self.metrics.queue_depth.labels(self.label).set(len(self.waiting))

    @property
    def depth(self):
        return len(self.waiting)

    async def _form_batches(self):
        loop = asyncio.get_running_loop()
        while True:
            while not self.waiting:
                self._arrived.clear()
                await self._arrived.wait()
            await self._slots.acquire()
            # Fill the batch until it is full or the oldest sentence has waited long enough.
            while self.waiting and len(self.waiting) < self.max_sentences:
                left = self.waiting[0][0].arrival + self.timeout - time.monotonic()
                if left <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    break
            while self.waiting and self.batches_in_flight and len(self.waiting) < min(
                    self.max_sentences, -(-self.in_flight // self.batches_in_flight)):
                self._arrived.clear()  # (set by an arrival and by a batch that finishes)
                await self._arrived.wait()
            batch = self._take()
            if not batch:
                self._slots.release()
                continue
            loop.create_task(self._translate(batch))

    def _take(self):
        """The next batch: [(job, index)] from the oldest waiting sentence, same options."""
        if not self.waiting:
            return []
        key = self.waiting[0][0].key
        batch, kept, longest = [], collections.deque(), 0
        while self.waiting:
            job, index = item = self.waiting.popleft()
            length = len(job.sources[index].ids)
            fits = len(batch) < self.max_sentences and (
                not batch or not self.max_tokens
                or (len(batch) + 1) * max(longest, length) <= self.max_tokens)
            if job.key == key and fits:
                batch.append(item)
                longest = max(longest, length)
            elif job.key == key or len(batch) >= self.max_sentences:
                kept.append(item)
                break
            else:
                kept.append(item)
        kept.extend(self.waiting)
        self.waiting = kept
        self.metrics.queue_depth.labels(self.label).set(len(self.waiting))
        return batch

    async def _translate(self, batch):
        loop = asyncio.get_running_loop()
        job0 = batch[0][0]
        sources = [job.sources[index] for job, index in batch]
        self.in_flight += len(batch)
        self.batches_in_flight += 1
        self.metrics.in_flight.labels(self.label).set(self.in_flight)
        try:
            results, target_tokens = await loop.run_in_executor(
                self._executor, self._run, sources, job0.options, job0.alignments)
        except Exception as error:  # noqa: BLE001 (answered as a 500 to each request of the batch)
            logger.exception("model %s: a batch of %d sentences failed", self.label, len(batch))
            for job, _ in batch:
                if not job.done.done():
                    job.done.set_exception(error)
            return
        finally:
            self.in_flight -= len(batch)
            self.batches_in_flight -= 1
            self.metrics.in_flight.labels(self.label).set(self.in_flight)
            self._slots.release()
            self._arrived.set()
        self.metrics.batch(self.label, len(batch), sum(len(s.tokens) for s in sources), target_tokens)
        for (job, index), hypotheses in zip(batch, results):
            job.results[index] = hypotheses
            job.remaining -= 1
            if not job.remaining and not job.done.done():
                job.done.set_result(job.results)


    def _run(self, sources, options, alignments):
        """(the batch's results, the target tokens of its best hypotheses), on a worker thread."""
        from opennmt_lite.serving.backends import tokenized

        results = self.model.translate(sources, options, alignments)
        best = [hypotheses[0][0] for hypotheses in results]
        return results, sum(map(len, tokenized(self.model.assets.target_tokenizer, best)))


def _empty_alignment():
    import numpy as np

    return np.zeros([0, 0], np.float32)
