"""The input pipeline without tf.data (Keras' JAX backend, an install without TensorFlow):
`TrainingInput.groups`, read through `pipeline.prefetched` in a process where TensorFlow cannot
be imported (tests/numpy_pipeline_worker.py), yields the same batches, in the same order, as
`TrainingInput.dataset` (tf.data) for the same seed, over more than one epoch, and resumes at the
same position (`skip_groups`, what a restored training run passes). The cases cover the sorted
and OpenNMT-tf schemes, gradient accumulation, bucket-boundary padding, XLA's bounded shapes,
contrastive negatives, example weights, several weighted files and gold alignments."""

import itertools
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import numpy_pipeline_worker as worker
from opennmt_lite.data.pipeline import prefetched

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("numpy_pipeline")
    worker.write_data(directory / "data")
    return directory


@pytest.fixture(scope="module")
def without_tensorflow(data):
    """The worker's arrays ({name: array}), made in a process without TensorFlow."""
    out = data / "numpy.npz"
    completed = subprocess.run(
        [sys.executable, str(TESTS / "numpy_pipeline_worker.py"), str(data / "data"), str(out)],
        env=dict(os.environ, PYTHONPATH=str(TESTS.parent)), capture_output=True, text=True,
        timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    with np.load(out) as stored:
        return dict(stored)


def tf_groups(dataset, count):
    """The first `count` elements of a tf.data dataset of groups, as tuples of NumPy dicts."""
    return [tuple({key: value.numpy() for key, value in batch.items()} for batch in group)
            for group in dataset.take(count)]


def numpy_groups(arrays, prefix):
    """The groups the worker stored under `prefix` (`<case>/full` or `<case>/resumed`)."""
    groups = {}
    for name, value in arrays.items():
        if not name.startswith(prefix + "/"):
            continue
        group, batch, key = name[len(prefix) + 1:].split("/")
        groups.setdefault(int(group), {}).setdefault(int(batch), {})[key] = value
    return [tuple(groups[g][b] for b in sorted(groups[g])) for g in sorted(groups)]


def assert_same_groups(numpy_side, tf_side, where):
    assert len(numpy_side) == len(tf_side), where
    for number, (ours, theirs) in enumerate(zip(numpy_side, tf_side)):
        assert len(ours) == len(theirs), (where, number)
        for batch, (a, b) in enumerate(zip(ours, theirs)):
            assert set(a) == set(b), (where, number, batch)
            for key in a:
                assert a[key].dtype == b[key].dtype, (where, number, batch, key)
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where} {number} {key}")


@pytest.mark.parametrize("case", list(worker.CASES))
def test_numpy_groups_equal_tf_data_and_resume_at_the_same_position(case, data, without_tensorflow):
    training = worker.make_input(case, data / "data")
    reference = tf_groups(training.dataset(), worker.FULL)
    full = numpy_groups(without_tensorflow, f"{case}/full")
    assert_same_groups(full, reference, f"{case}, from the start")
    # (more than one epoch: the plans of the next epochs, and their carried remainders, agree)
    epoch = len(training.epoch_batches(0)) // training.accum_steps
    assert epoch < worker.FULL
    resumed = numpy_groups(without_tensorflow, f"{case}/resumed")
    expected = reference[worker.SKIP:worker.SKIP + worker.RESUMED]
    assert_same_groups(resumed, expected, f"{case}, resumed after {worker.SKIP} groups")
    # tf.data resumed the same way
    again = worker.make_input(case, data / "data").dataset(skip_groups=worker.SKIP)
    assert_same_groups(tf_groups(again, worker.RESUMED), expected, f"{case}, tf.data resumed")
    # The keys are those of the TensorFlow backend's signature.
    assert set(full[0][0]) == set(training.element_spec[0])


def test_prefetched_keeps_order_and_raises_where_the_item_would_come():
    assert list(prefetched(range(100), size=3)) == list(range(100))

    def failing():
        yield 1
        yield 2
        raise ValueError("bad line 3")

    items = prefetched(failing())
    assert next(items) == 1 and next(items) == 2
    with pytest.raises(ValueError, match="bad line 3"):
        next(items)
    with pytest.raises(StopIteration):
        next(items)


def test_prefetched_stops_its_thread_when_closed():
    produced = []

    def endless():
        for number in itertools.count():
            produced.append(number)
            yield number

    before = set(threading.enumerate())
    with prefetched(endless(), size=2) as items:
        assert [next(items) for _ in range(5)] == [0, 1, 2, 3, 4]
        (thread,) = set(threading.enumerate()) - before
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(produced) <= 5 + 2 + 2  # (the items read, the queue, one waiting to be put)
