"""Building blocks shared by every Transformer sub-layer: Dense, LayerNorm, LayerWrapper, and the
matrix products and dropout every layer uses.

The layers are written in `keras.ops` and `keras.random`, so that the same classes run on Keras'
TensorFlow and JAX backends, and follow the Keras 3 layer protocol: hyper-parameters in
`__init__`, weights in `build`, math in `call`, `get_config` for serialization. As in keras-hub,
every sub-layer is created with `dtype=self.dtype_policy`, so that a layer built with
`dtype="mixed_bfloat16"` computes in bfloat16 all the way down, whatever the global policy.
Layers `record` their intermediate tensors (see opennmt_lite.recorder).

Model and speed: the lines here are the model, written as the plain formulas. On the TensorFlow
backend a formula that TensorFlow computes faster or leaner in another form asks
`fast_paths.enabled()` (always False on another backend) and, when it is, hands its operands to
`opennmt_lite.layers.fast_paths` (measurements there):
  - `matmul`, `einsum`: bfloat16 operands through float32 on a CPU without native bfloat16, where
    TensorFlow's bfloat16 MatMul truncates (products 0.28 % too small) and is slower;
  - `apply_dropout`: masks from 16 random bits per element (the generator dominates dropout);
  - `LayerNorm.call`: a hand-written gradient in training (two activations of the input's size
    fewer to keep), the fused oneDNN kernel in inference (about twice as fast);
  - the feed-forward network (transformer.py): Dense + ReLU + dropout with a gradient that keeps
    only the output and the input.
The switch is chosen once at start-up (`fast_paths.configure`). Speed that changes no formula stays
in the layer: Dense's 2-D product (fused with its bias and activation) and float16 padding. On
TensorFlow every product is `fast_paths.matmul` (with the switch off: MatMul -> BiasAdd ->
activation, the form TensorFlow's graph optimizer fuses into one kernel), so that backend's
numbers and graphs are those of the TensorFlow-only layers this code replaced.
"""

import keras
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.layers import fast_paths
from opennmt_lite.recorder import record


def matmul(a, b, transpose_a=False, transpose_b=False, bias=None, activation=None):
    """activation(a @ b + bias), the one matrix product of the layers (with `einsum`).

    a [..., m, k] and b [..., k, n] (each transposed first when flagged; batch dimensions
    broadcast), optional bias [n] and element-wise activation -> [..., m, n] in a's dtype.
    On TensorFlow, `fast_paths.matmul`: MatMul -> BiasAdd -> activation in the form the graph
    optimizer fuses into one kernel (and, with the switch on, bfloat16 through float32 on some
    CPUs). Elsewhere the keras.ops formula (XLA folds the transposes into the product).
    """
    if fast_paths.TENSORFLOW:
        return fast_paths.matmul(a, b, transpose_a, transpose_b, bias, activation)
    if transpose_a:
        a = ops.swapaxes(a, -1, -2)
    if transpose_b:
        b = ops.swapaxes(b, -1, -2)
    outputs = ops.matmul(a, b)
    if bias is not None:
        outputs = outputs + bias
    return outputs if activation is None else activation(outputs)


def einsum(equation, a, b):
    """The Einstein sum of two operands (fast path: bfloat16 through float32 on some CPUs)."""
    if fast_paths.enabled():
        return fast_paths.einsum(equation, a, b)
    return ops.einsum(equation, a, b)


def apply_dropout(x, rate, seed_generator, training):
    """Inverted dropout, active only when `training` is true (like OpenNMT-tf's `common.dropout`).

    Uses a Keras `SeedGenerator` owned by the calling layer: its state is a variable, so it is saved
    in checkpoints and a resumed run draws the same masks as an uninterrupted one. Fast path:
    16-bit masks.
    """
    if not training or rate == 0:
        return x
    if fast_paths.enabled():
        return fast_paths.dropout(x, rate, seed_generator)
    return keras.random.dropout(x, rate, seed=seed_generator)


def dtype_name(x):
    """The dtype of tensor `x` as Keras names it ("float32", "bfloat16"...), on any backend."""
    return keras.backend.standardize_dtype(x.dtype)


def make_seed_generator(rate):
    """A seed generator for a dropout site, or None when the site never drops anything.

    Its initial seed comes from Python's `random`, which `keras.utils.set_random_seed` seeds.
    """
    return keras.random.SeedGenerator() if rate > 0 else None


@keras.saving.register_keras_serializable(package=PACKAGE)
class Dense(keras.layers.Layer):
    """Affine projection `x @ kernel + bias`, kernel `[in, out]`, on inputs `[..., in]`.

    In float16 with a unit count that is not a multiple of 8, the kernel is zero-padded to the next
    multiple of 8 for the matmul and the result sliced back, so that GPU Tensor Cores are used
    (OpenNMT-tf does the same). The kernel may be another layer's weight (`set_kernel`), optionally
    transposed: the decoder's output layer reuses the target embedding `[vocab, depth]` this way.
    """

    def __init__(self, units, use_bias=True, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.use_bias = use_bias
        self.activation = keras.activations.get(activation)
        self.transpose = False
        self._shared_kernel = None

    def set_kernel(self, weight, transpose=False):
        """Uses `weight` as the kernel instead of creating one (must be called before `build`)."""
        if self.built:
            raise ValueError("set_kernel() must be called before the layer is built")
        self._shared_kernel = weight
        self.transpose = transpose

    def build(self, input_shape):
        input_dim = int(input_shape[-1])
        if self._shared_kernel is not None:
            expected = (self.units, input_dim) if self.transpose else (input_dim, self.units)
            if tuple(self._shared_kernel.shape) != expected:
                raise ValueError(
                    f"shared kernel has shape {tuple(self._shared_kernel.shape)}, "
                    f"expected {expected}"
                )
            self.kernel = self._shared_kernel
        else:
            self.kernel = self.add_weight(
                name="kernel", shape=(input_dim, self.units), initializer="glorot_uniform"
            )
        self.bias = (
            self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
            if self.use_bias
            else None
        )

    def call(self, inputs):
        kernel = ops.cast(self.kernel, inputs.dtype)
        bias = ops.cast(self.bias, inputs.dtype) if self.bias is not None else None
        units = self.units
        pad = (-units) % 8 if dtype_name(inputs) == "float16" else 0
        if pad:
            kernel = ops.pad(kernel, [[0, pad], [0, 0]] if self.transpose else [[0, 0], [0, pad]])
            bias = ops.pad(bias, [[0, pad]]) if bias is not None else None
        # One 2-D matmul on [batch * time, in], then bias and activation on the 2-D result: in
        # this form TensorFlow's graph optimizer fuses MatMul + BiasAdd (+ ReLU) into a single
        # oneDNN kernel, which a 3-D tensordot followed by a BiasAdd prevents.
        leading = ops.shape(inputs)[:-1]
        outputs = ops.reshape(inputs, (-1, inputs.shape[-1]))
        outputs = matmul(outputs, kernel, transpose_b=self.transpose, bias=bias,
                         activation=self.activation)
        if pad:
            outputs = outputs[:, :units]
        return ops.reshape(outputs, tuple(leading) + (units,))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            use_bias=self.use_bias,
            activation=keras.activations.serialize(self.activation),
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.Layer):
    """Layer normalization over the last axis, `gamma * (x - mean) / sqrt(var + epsilon) + beta`.

    epsilon defaults to 1e-3 (Keras' `LayerNormalization` default, which OpenNMT-tf inherits).
    Statistics are always computed in float32, whatever the compute dtype, and the result is cast
    back: this is what keeps half-precision training stable.
    """

    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        depth = int(input_shape[-1])
        # autocast=False: gamma and beta are read in float32 even under a mixed policy.
        self.gamma = self.add_weight(
            name="gamma", shape=(depth,), initializer="ones", autocast=False
        )
        self.beta = self.add_weight(
            name="beta", shape=(depth,), initializer="zeros", autocast=False
        )

    def call(self, inputs, training=None):
        x = ops.cast(inputs, "float32")
        gamma, beta = self.gamma, self.beta
        if fast_paths.enabled():
            # Training keeps the hand-written gradient (less memory); inference (training False
            # or None, as Keras passes it down from the model's call) takes the fused kernel.
            normalize = fast_paths.layer_norm if training else fast_paths.layer_norm_inference
            outputs = normalize(x, gamma, beta, self.epsilon)
        else:
            mean = ops.mean(x, axis=-1, keepdims=True)
            variance = ops.var(x, axis=-1, keepdims=True)
            outputs = (x - mean) * ops.rsqrt(variance + self.epsilon) * gamma + beta
        return ops.cast(outputs, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerWrapper(keras.layers.Layer):
    """Wraps `layer` with optional input/output layer norm, input/output dropout and a residual.

        y = dropout_out(layer(dropout_in(norm_in(x)))) (+ x if residual_connection)
        y = norm_out(y)

    When the wrapped layer returns a tuple, the wrapper transforms its first element and passes the
    others through (attention returns `(outputs, cache[, attention])`).

    Records normalized_input, residual_output and normalized_output (when they exist).
    """

    def __init__(
        self,
        layer,
        normalize_input=False,
        normalize_output=False,
        input_dropout=0.0,
        output_dropout=0.0,
        residual_connection=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.layer = layer
        self.input_layer_norm = (
            LayerNorm(dtype=self.dtype_policy, name="input_layer_norm") if normalize_input else None
        )
        self.output_layer_norm = (
            LayerNorm(dtype=self.dtype_policy, name="output_layer_norm") if normalize_output else None
        )
        self.input_dropout = input_dropout
        self.output_dropout = output_dropout
        self.residual_connection = residual_connection
        self.input_dropout_seed = make_seed_generator(input_dropout)
        self.output_dropout_seed = make_seed_generator(output_dropout)

    def build(self, input_shape):
        if self.input_layer_norm is not None:
            self.input_layer_norm.build(input_shape)
        if not self.layer.built:
            self.layer.build(input_shape)
        if self.output_layer_norm is not None:
            self.output_layer_norm.build(self.layer.compute_output_shape(input_shape))

    def call(self, inputs, *args, training=None, **kwargs):
        # The wrapped layer records under the wrapper's scope, without one of its own
        # (`self_attention/queries`, not `self_attention/layer/queries`).
        x = inputs
        if self.input_layer_norm is not None:
            x = self.input_layer_norm(x)
            record("normalized_input", x)
        x = apply_dropout(x, self.input_dropout, self.input_dropout_seed, training)
        all_outputs = self.layer(x, *args, training=training, **kwargs)
        extra = None
        if isinstance(all_outputs, tuple):
            outputs, extra = all_outputs[0], all_outputs[1:]
        else:
            outputs = all_outputs
        outputs = apply_dropout(outputs, self.output_dropout, self.output_dropout_seed, training)
        if self.residual_connection and outputs.shape[-1] == inputs.shape[-1]:
            outputs = outputs + inputs
            record("residual_output", outputs)
        if self.output_layer_norm is not None:
            outputs = self.output_layer_norm(outputs)
            record("normalized_output", outputs)
        if extra is not None:
            return (outputs,) + tuple(extra)
        return outputs

    # No compute_output_shape: the outputs are the wrapped layer's, possibly a tuple; symbolic
    # calls trace `call`.

    def get_config(self):
        config = super().get_config()
        config.update(
            layer=keras.layers.serialize(self.layer),
            normalize_input=self.input_layer_norm is not None,
            normalize_output=self.output_layer_norm is not None,
            input_dropout=self.input_dropout,
            output_dropout=self.output_dropout,
            residual_connection=self.residual_connection,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        layer = keras.layers.deserialize(config.pop("layer"))
        return cls(layer, **config)
