"""`run_layer_test`: the checks every public layer must pass, in the spirit of keras-hub's
`TestCase.run_layer_test` (serialization, symbolic and eager calls, mixed precision, gradients),
on whichever Keras backend this process runs (TensorFlow in the suite's processes; JAX in
tests/jax_worker.py's subprocess)."""

import inspect

import keras
import numpy as np
from keras import ops, tree

BACKEND = keras.backend.backend()

DTYPES = ("float32", "mixed_float16", "mixed_bfloat16")


def run_layer_test(cls, init_kwargs, input_data, call_kwargs=None, dtypes=DTYPES):
    """Checks layer class `cls` under each dtype policy of `dtypes`, given to the layer as `dtype=`
    (the global policy stays float32):

    - symbolic call on `keras.Input`s (which runs `compute_output_spec`), eager calls (inference,
      and training when `call` takes `training`), and a compiled call (TensorFlow: a
      `tf.function` traced for inputs of unknown batch and time; JAX: `jax.jit` of the stateless
      call), equal to the eager call in float32: every floating output is in the policy's compute
      dtype, and the symbolic outputs have the eager ones' structure and shapes;
    - in float32, every trainable weight has a finite gradient (`layer_gradients`), not all zero;
    - every weight is float32, and every sub-layer (the whole tree) has the layer's policy;
    - `from_config(get_config())`, and Keras' generic (de)serialization, give an equal config, and
      with the same weights the same outputs.

    init_kwargs: the constructor's arguments, or a function dtype name -> arguments (for a
      wrapper, whose wrapped layer must be built with the same dtype).
    input_data: the first call argument, an array or a dict of arrays (the Transformer's features).
    call_kwargs: further call arguments; arrays become `keras.Input`s in the symbolic call.
    Symbolic inputs have unknown batch and time: only the last dimension of a floating array of
    rank 3 or more (the depth) is known (on JAX, only the batch is unknown).
    """
    call_kwargs = call_kwargs or {}
    assert keras.config.dtype_policy().name == "float32"
    for dtype in dtypes:
        context = f"{cls.__name__} under {dtype}"

        def make():
            # A new set of arguments each time: a wrapped layer is not shared between wrappers.
            kwargs = init_kwargs(dtype) if callable(init_kwargs) else dict(init_kwargs)
            return cls(**kwargs, dtype=dtype)

        # Symbolic call: a fresh layer, built by Keras from the symbolic shapes.
        symbolic_layer = make()
        symbolic = symbolic_layer(_symbolic(input_data), **_symbolic(call_kwargs))
        check_dtypes(symbolic_layer, symbolic, dtype, context + " (symbolic)")

        layer = make()
        outputs = layer(input_data, **call_kwargs)
        check_dtypes(layer, outputs, dtype, context)
        _check_shapes(symbolic, outputs, context)
        graph_outputs = _graph_call(layer, input_data, call_kwargs)
        check_dtypes(layer, graph_outputs, dtype, context + " (compiled)")
        _check_shapes(symbolic, graph_outputs, context + " (compiled)")
        if dtype == "float32":
            for got, want in zip(tree.flatten(graph_outputs), tree.flatten(outputs)):
                np.testing.assert_allclose(_numpy(got), _numpy(want), rtol=1e-5, atol=1e-5,
                                           err_msg=context + " (compiled)")
            gradients = layer_gradients(layer, input_data, call_kwargs)
            assert len(gradients) == len(layer.trainable_weights), context
            for gradient, weight in zip(gradients, layer.trainable_weights):
                assert gradient.shape == tuple(weight.shape), f"{context}: {weight.path}"
                assert np.isfinite(gradient).all(), f"{context}: gradient of {weight.path}"
            assert not gradients or any(np.abs(g).max() > 0 for g in gradients), context
        if "training" in inspect.signature(layer.call).parameters:
            trained = layer(input_data, training=True, **call_kwargs)
            check_dtypes(layer, trained, dtype, context + " (training)")
            _check_shapes(symbolic, trained, context + " (training)")

        _randomize(layer)
        check_round_trip(layer, input_data, call_kwargs, context)
    assert keras.config.dtype_policy().name == "float32", "the test changed the global policy"


def check_dtypes(layer, outputs, dtype, context):
    """Outputs in the compute dtype, weights float32, the whole sub-layer tree under `dtype`."""
    policy = keras.DTypePolicy(dtype)
    assert layer.dtype_policy.name == dtype, context
    for output in tree.flatten(outputs):
        output_dtype = keras.backend.standardize_dtype(output.dtype)
        if "float" in output_dtype:
            assert output_dtype == policy.compute_dtype, (
                f"{context}: an output is {output_dtype}, expected {policy.compute_dtype}")
    for weight in layer.weights:
        assert weight.dtype == "float32", f"{context}: weight {weight.path} is {weight.dtype}"
    for sublayer in layer._flatten_layers(include_self=False, recursive=True):
        assert sublayer.dtype_policy.name == dtype, (
            f"{context}: sub-layer {sublayer.path or sublayer.name} "
            f"({type(sublayer).__name__}) has policy {sublayer.dtype_policy.name}")


def check_round_trip(layer, input_data, call_kwargs, context):
    """Equal configs through from_config and through Keras' serialization; same weights give
    the same outputs (inference)."""
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config, context
    generic = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(generic) is type(layer) and generic.get_config() == config, context
    expected = tree.flatten(layer(input_data, **call_kwargs))
    for copy in (clone, generic):
        copy(input_data, **call_kwargs)  # builds it
        assert len(copy.weights) == len(layer.weights), context
        copy.set_weights(layer.get_weights())
        for got, want in zip(tree.flatten(copy(input_data, **call_kwargs)), expected):
            np.testing.assert_array_equal(_numpy(got), _numpy(want), err_msg=context)


def layer_gradients(layer, input_data, call_kwargs, seed=7):
    """Gradients [NumPy, one per trainable weight, in order] of sum(outputs * upstream) for an
    inference call of a built float32 `layer`, with `upstream` drawn from `seed` for each floating
    output: TensorFlow's GradientTape, or jax.grad of the stateless call."""
    rng = np.random.default_rng(seed)
    structure = tree.flatten(layer(input_data, **call_kwargs))
    upstream = [rng.normal(size=_numpy(o).shape).astype(np.float32)
                if "float" in keras.backend.standardize_dtype(o.dtype) else None
                for o in structure]

    def weighted_sum(outputs):
        return sum(ops.sum(ops.cast(o, "float32") * u)
                   for o, u in zip(tree.flatten(outputs), upstream) if u is not None)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = weighted_sum(layer(input_data, **call_kwargs))
        gradients = tape.gradient(loss, layer.trainable_weights)
        return [_numpy(tf.convert_to_tensor(g)) for g in gradients]
    import jax

    def loss(trainable, non_trainable):
        return weighted_sum(_stateless(layer, trainable, non_trainable, input_data, call_kwargs))

    gradients = jax.jit(jax.grad(loss))([v.value for v in layer.trainable_variables],
                               [v.value for v in layer.non_trainable_variables])
    return [np.asarray(g) for g in gradients]


def _stateless(layer, trainable, non_trainable, data, kwargs):
    """`layer(data, **kwargs)` with its variables' values taken from the two lists (for JAX's
    transformations). Through `__call__`, which casts the inputs to the compute dtype
    (`stateless_call` would run `call` on them as they are)."""
    mapping = list(zip(layer.trainable_variables, trainable))
    mapping += list(zip(layer.non_trainable_variables, non_trainable))
    with keras.StatelessScope(state_mapping=mapping):
        return layer(data, **kwargs)


def _numpy(value):
    return ops.convert_to_numpy(value)


def _unknown_shape(value):
    """Batch and time unknown; the depth (last dimension of a float array of rank >= 3) known.
    On JAX only the batch: its symbolic shapes name every unknown dimension alike, so that a
    known time against an unknown one cannot broadcast (and `jax.jit` compiles for each shape)."""
    if BACKEND == "jax":
        return (None,) + tuple(value.shape[1:])
    known_depth = value.dtype.kind == "f" and value.ndim >= 3
    return (None,) * (value.ndim - 1) + ((value.shape[-1],) if known_depth else (None,))


def _symbolic(data):
    def to_input(value):
        if not isinstance(value, np.ndarray):
            return value
        return keras.Input(batch_shape=_unknown_shape(value), dtype=value.dtype.name)

    return tree.map_structure(to_input, data)


def _graph_call(layer, input_data, call_kwargs):
    """The layer's inference call compiled: on TensorFlow a graph traced for inputs of unknown
    batch and time, on JAX `jax.jit` of the stateless call (JAX compiles for the shapes given)."""
    if BACKEND == "jax":
        import jax

        def call(trainable, non_trainable, data, kwargs):
            return _stateless(layer, trainable, non_trainable, data, kwargs)

        return jax.jit(call)([v.value for v in layer.trainable_variables],
                             [v.value for v in layer.non_trainable_variables],
                             input_data, call_kwargs)
    import tensorflow as tf

    def to_spec(value):
        return tf.TensorSpec(_unknown_shape(value), value.dtype.name)

    function = tf.function(lambda data, kwargs: layer(data, **kwargs))
    concrete = function.get_concrete_function(
        tree.map_structure(to_spec, input_data), tree.map_structure(to_spec, call_kwargs))
    return concrete(tree.map_structure(tf.constant, input_data),
                    tree.map_structure(tf.constant, call_kwargs))


def _check_shapes(symbolic, outputs, context):
    tree.assert_same_structure(symbolic, outputs)
    for spec, output in zip(tree.flatten(symbolic), tree.flatten(outputs)):
        assert len(spec.shape) == len(output.shape), context
        for known, actual in zip(spec.shape, output.shape):
            assert known is None or known == actual, f"{context}: {spec.shape} vs {output.shape}"


def _randomize(layer):
    """Random weights (not the initializers' zeros and ones), so outputs depend on every weight."""
    rng = np.random.default_rng(0)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(np.float32))
