"""TensorBoard scalars of a training run (`<model_dir>` and `<model_dir>/eval`), on either Keras
backend: through `tf.summary` where TensorFlow computes, else written as TensorBoard's event
files by the `tensorboard` package's record writer and protocol buffers (no TensorFlow), and not
at all when that package is absent (the reports still go to the console and metrics.jsonl).
"""

import logging
import os
import socket
import time

from opennmt_lite.layers.fast_paths import TENSORFLOW

logger = logging.getLogger("opennmt_lite")


class _TensorFlowWriter:
    def __init__(self, directory):
        import tensorflow as tf

        self._tf = tf
        self._writer = tf.summary.create_file_writer(directory)

    def scalars(self, step, values):
        with self._writer.as_default(step=step):
            for name, value in values.items():
                self._tf.summary.scalar(name, value)
        self._writer.flush()


class _EventFileWriter:
    """One `events.out.tfevents.*` file of TensorBoard's Event records (its first record the
    file version, as TensorFlow writes)."""

    def __init__(self, directory, event_pb2, summary_pb2, record_writer):
        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        os.makedirs(directory, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        self._file = open(os.path.join(directory, name), "ab")
        self._records = record_writer(self._file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event):
        self._records.write(event.SerializeToString())

    def scalars(self, step, values):
        summary = self._summary_pb2.Summary(value=[
            self._summary_pb2.Summary.Value(tag=name, simple_value=float(value))
            for name, value in values.items()])
        self._write(self._event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))
        self._file.flush()


def create_writer(directory):
    """A writer of TensorBoard scalars in `directory` (`.scalars(step, {name: value})`), or None
    when TensorBoard's files cannot be written here (no `tensorboard` package on JAX)."""
    if TENSORFLOW:
        return _TensorFlowWriter(directory)
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        logger.info("no TensorBoard summaries: the tensorboard package is not installed "
                    "(reports still go to the console and metrics.jsonl)")
        return None
    return _EventFileWriter(directory, event_pb2, summary_pb2, RecordWriter)
