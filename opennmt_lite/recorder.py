"""Recording of named intermediate tensors, for inspection and step-by-step tests.

    with recording() as tensors:          # an ordered {name: tensor}
        model.encode(ids, lengths)
    tensors["encoder/layers/0/self_attention/queries"]

Layers call `record(name, tensor)` where they compute something worth showing, and parents wrap a
child's call in `recording_scope("layers/0")`, so that names follow the layer tree. Both are no-ops
when nothing is recording, so layers have no recording arguments and run the same code either way.

Recording happens in eager calls only. Inside a `tf.function` or under `jax.jit` (and in Keras'
symbolic calls, `keras.Input` or `compute_output_spec`) `record` does nothing: a graph tensor or a
JAX tracer cannot be used outside its trace, and the function's Python code runs once, when it is
traced, not on each call. To inspect a computation, call it eagerly inside `recording()`.

This module sits at the bottom of the package (it imports only Keras and its backend), so that the
layers and models can record without importing `opennmt_lite.inspection`, which shows what was
recorded. It works on Keras' TensorFlow and JAX backends.
"""

import contextlib
import threading

import keras

# TensorFlow says whether it runs eagerly; JAX tells a traced value by its type.
_BACKEND = keras.backend.backend()
if _BACKEND == "tensorflow":
    import tensorflow as tf
elif _BACKEND == "jax":
    import jax

# Per thread, so that work running on other threads (parallel sub-batches, tf.data) neither sees
# nor disturbs a recording.
_local = threading.local()


def _stack(name):
    if not hasattr(_local, name):
        setattr(_local, name, [])
    return getattr(_local, name)


class Recording(dict):
    """The tensors recorded by one `recording()` block: {name: tensor}, in recording order."""

    def __init__(self, scope_depth):
        super().__init__()
        # Scopes already open when the recording began do not prefix its names.
        self.scope_depth = scope_depth

    def numpy(self):
        """The recorded tensors as NumPy arrays, in recording order."""
        return {name: keras.ops.convert_to_numpy(value) for name, value in self.items()}


@contextlib.contextmanager
def recording():
    """Records, in the block, what layers `record` in this thread's eager calls (not inside a
    `tf.function`); yields the `Recording`.

    Blocks nest: the innermost one receives the records. A name recorded twice keeps its last
    value (and its first position).
    """
    recordings = _stack("recordings")
    tensors = Recording(len(_stack("scopes")))
    recordings.append(tensors)
    try:
        yield tensors
    finally:
        recordings.pop()


@contextlib.contextmanager
def recording_scope(name):
    """Prefixes the names recorded in the block with `name/` (scopes nest)."""
    scopes = _stack("scopes")
    scopes.append(name)
    try:
        yield
    finally:
        scopes.pop()


def is_recording():
    """True when a `record` call here would keep its tensor (inside `recording()`, and on
    TensorFlow eager; on JAX `record` then drops a traced value)."""
    if not _stack("recordings"):
        return False
    return tf.executing_eagerly() if _BACKEND == "tensorflow" else True


def _traced(value):
    """Whether `value` is a symbolic or traced stand-in rather than an array (JAX, other backends;
    TensorFlow's graphs are excluded by `is_recording`)."""
    if keras.backend.is_keras_tensor(value):
        return True
    return _BACKEND == "jax" and isinstance(value, jax.core.Tracer)


def record(name, value):
    """Keeps `value` under the current scope's `name` when recording, else does nothing.

    `value` is a tensor, or a function of no arguments returning one: use a function for a tensor
    that exists only to be shown, so that it is computed only when something records it.
    """
    if not is_recording():
        return
    tensors = _local.recordings[-1]
    if callable(value):
        value = value()
    if _BACKEND != "tensorflow" and _traced(value):
        return
    scopes = _local.scopes[tensors.scope_depth:]
    tensors["/".join(scopes + [name])] = value
