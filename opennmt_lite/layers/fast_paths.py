"""The layers' TensorFlow fast paths, behind one switch chosen once at start-up.

The layers (common.py, attention.py, transformer.py) are written as their plain formulas: those
lines are the model. Where TensorFlow computes a formula faster, with less memory or more exactly
in another form, that form lives here, and a layer takes it when `enabled()`. Every line of this
module is speed (or, for the bfloat16 products, accuracy on some CPUs); none changes what the
model computes beyond float rounding (and which dropout mask a seed draws):

- `layer_norm` (training): a hand-written gradient. Automatic differentiation of the formula
  keeps x, x - mean and the normalized x for the backward pass; this one keeps the normalized x
  and the reciprocal deviation [..., 1]: two activations of the input's size fewer per layer norm.
- `layer_norm_inference`: the same layer norm as a fused batch norm, which TensorFlow's grappler
  rewrites into one oneDNN layer-norm kernel, about twice as fast as the separate ops (and the way
  OpenNMT-tf's Keras 2 layer computes).
- `dropout`: masks from 16 random bits per element, half of what a float32 uniform costs (the
  random number generator dominates dropout's time); the backward pass keeps only the mask. On a
  CPU the bits come from a counter-based hash of the element's index keyed by the seed
  (`hashed_bits`), 4.6 times faster than TensorFlow's Philox kernel, which took 5.8 % of a
  bfloat16 training step's op time (tests/test_fast_paths.py checks its rates and independence).
- `dense_relu_dropout`: Dense + ReLU + dropout with a hand-written gradient that keeps only the
  output and the input, not the ReLU output and the mask as well; in float32 the dropout scale is
  folded into the kernel and bias (measured on an AVX2 CPU, where a pass over [tokens, units] is
  not fused).
- the decoding cache (`DecodingCache`): incremental decoding keeps the self-attention keys and
  values of earlier positions in time-major buffers written in place, and a beam search reorders
  only an index of buffer rows [rows, time] int32; the plain cache is a [rows, heads, time, depth]
  tensor grown by a concatenation and gathered whole at each beam reordering: two copies of every
  layer's keys and values per step, which dominated a small model's decoding (measured,
  docs/performance.md). Attention reads the same values in the same order (same numbers).
- `matmul`'s kernel gradient on a CPU running TensorFlow's own (Eigen) kernels
  (`oriented_product`): automatic differentiation of a float32 [tokens, in] @ [in, out] product
  always forms the kernel gradient as x^T @ dy [in, out], which Eigen multiplies about 40 %
  slower when in > out (the FFN's outer layer, 1 024 -> 256) than the same product in its wider
  orientation, dy^T @ x [out, in], transposed afterwards (a small [in, out] tensor; measured at
  the model's shapes, docs/performance.md). oneDNN and GPUs keep the automatic gradients.
- `matmul`'s bias in bfloat16 on a oneDNN CPU (`Setting.separate_bias`): TensorFlow fuses
  MatMul -> BiasAdd (-> ReLU) into one oneDNN inner product, whose bfloat16 kernel (gemm:jit) ran
  the training step's forward products about 25 % slower than the plain MatMul's (brgemm) on an
  AVX512_BF16 EPYC; the bias is added in a separate op there, or, for a product much wider than
  its input (the output layer), by the product itself against a column of ones appended to the
  input, which saves the add's and the bias gradient's passes over [tokens, vocab]
  (docs/performance.md).
- `matmul` / `einsum`: on a CPU without native bfloat16 (see opennmt_lite.cpu), bfloat16 operands
  are multiplied in float32 and rounded once: TensorFlow 2.21's bfloat16 MatMul there truncates
  its accumulations (products 0.28 % too small on average, biasing mixed_bfloat16 gradients toward
  zero) and is slower than a float32 MatMul between two casts.

The switch: `configure(enabled=True, bfloat16_matmul=None, oriented_gradients=None,
separate_bias=None, hashed_dropout_bits=None)` reads the
CPU, TensorFlow's kernels and OPENNMT_LITE_BF16_MATMUL once and stores a frozen `Setting`; `build` calls it at start-up, where it
sets the precision, and the first use configures the defaults if nothing did. The layers read the
stored setting when they are traced, never the environment: a new setting reaches functions traced
afterwards. With the switch off, the layers compute the plain formulas (automatic gradients, Keras'
dropout drawn from the same seed generators, the plain matrix products).

Only on Keras' TensorFlow backend: on any other (JAX), `enabled()` is False, `configure` stores a
disabled setting, and this module does not import TensorFlow, so that the layers run their
portable keras.ops formulas without it. (`matmul` with the switch off is TensorFlow's plain
product, MatMul -> BiasAdd -> activation: the layers' form of a product on that backend.)
"""

import dataclasses

import keras

from opennmt_lite import cpu

# Whether Keras computes with TensorFlow (decided once, when Keras is imported).
TENSORFLOW = keras.backend.backend() == "tensorflow"
if TENSORFLOW:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Setting:
    """enabled: whether the layers take the fast paths (False: the plain formulas).
    bfloat16_matmul: cpu.FLOAT32 or cpu.NATIVE, how `matmul` and `einsum` multiply bfloat16.
    oriented_gradients: whether float32 `matmul`s differentiate through `oriented_product`.
    separate_bias: whether bfloat16 `matmul`s add their bias in an op of its own (see the module
    doc) instead of the BiasAdd that TensorFlow fuses into the product.
    hashed_dropout_bits: whether dropout draws its bits from `hashed_bits` (CPU) instead of
    TensorFlow's Philox kernel."""

    enabled: bool
    bfloat16_matmul: str
    oriented_gradients: bool = False
    separate_bias: bool = False
    hashed_dropout_bits: bool = False


_setting = None


def configure(enabled=True, bfloat16_matmul=None, oriented_gradients=None, separate_bias=None,
              hashed_dropout_bits=None):
    """Chooses the fast paths for the process and returns the stored `Setting`.

    bfloat16_matmul None: OPENNMT_LITE_BF16_MATMUL when set, else the hardware's choice
    (`cpu.bfloat16_matmul_path`, which logs it); a bad value of the variable raises
    `EnvironmentVariableError`. oriented_gradients None: on where TensorFlow runs its own kernels
    on a CPU (neither oneDNN nor a GPU), where they were measured. separate_bias None: on where
    bfloat16 products are native on a CPU running oneDNN (no GPU), where it was measured.
    hashed_dropout_bits None: on without a GPU (where Philox is cheap and uint32 arithmetic may
    have no kernel). With `enabled` False the products are the plain ops (NATIVE, automatic
    gradients, fused bias), whatever the others say.
    """
    global _setting
    if not TENSORFLOW:  # nothing here runs on another backend
        _setting = Setting(False, cpu.NATIVE)
        return _setting
    if not enabled:
        bfloat16_matmul = cpu.NATIVE
    elif bfloat16_matmul is None:
        bfloat16_matmul = cpu.bfloat16_matmul_path()
    elif bfloat16_matmul not in (cpu.NATIVE, cpu.FLOAT32):
        raise ValueError(f"bfloat16_matmul must be {cpu.NATIVE!r} or {cpu.FLOAT32!r}, "
                         f"got {bfloat16_matmul!r}")
    if oriented_gradients is None:
        oriented_gradients = cpu.onednn_enabled() is False and not cpu.gpu_present()
    if separate_bias is None:
        separate_bias = (bfloat16_matmul == cpu.NATIVE and cpu.onednn_enabled() is True
                         and not cpu.gpu_present())
    if hashed_dropout_bits is None:
        hashed_dropout_bits = not cpu.gpu_present()
    _setting = Setting(bool(enabled), bfloat16_matmul, bool(enabled and oriented_gradients),
                       bool(enabled and separate_bias), bool(enabled and hashed_dropout_bits))
    return _setting


def restore(previous):
    """Stores `previous` (a `Setting` that `setting()` returned earlier) back as it was."""
    global _setting
    _setting = previous


def setting():
    """The stored `Setting`; the first call without an earlier `configure` configures the
    defaults."""
    return _setting or configure()


def enabled():
    """Whether the layers take the fast paths (read when a layer is traced)."""
    return setting().enabled


def _multiply_in_float32(a):
    """Whether a product of `a` (and its same-dtype partner) is computed in float32 and rounded."""
    return a.dtype == tf.bfloat16 and setting().bfloat16_matmul == cpu.FLOAT32


def matmul(a, b, transpose_a=False, transpose_b=False, bias=None, activation=None):
    """activation(a @ b + bias), as the fast path computes it.

    a [..., m, k] and b [..., k, n] (each transposed first when flagged; batch dimensions
    broadcast), optional bias [n] and element-wise activation -> [..., m, n] in a's dtype.
    bfloat16 operands on the FLOAT32 path are multiplied in float32, bias and activation applied,
    and the result rounded to bfloat16 once. Autodiff follows the casts, so the gradients are
    float32 products (and a float32 bias sum) rounded to bfloat16. With `separate_bias`, a
    bfloat16 a [m, k] is multiplied by the plain MatMul and the bias added without a BiasAdd
    (`_product_with_bias`: a narrow product is rounded to bfloat16 before the bias is added, as
    by unfused Keras layers; a wide one adds it inside the product). Otherwise the plain ops
    MatMul -> BiasAdd -> activation, which TensorFlow's graph optimizer fuses into one kernel.
    """
    in_float32 = _multiply_in_float32(a)
    dtype = a.dtype
    if in_float32:
        a, b = tf.cast(a, tf.float32), tf.cast(b, tf.float32)
        bias = None if bias is None else tf.cast(bias, tf.float32)
    if _oriented(a, b) and not transpose_a:
        outputs = oriented_product(a, b, transpose_b, bias)
    elif bias is not None and _separate_bias(a) and not transpose_a:
        outputs = _product_with_bias(a, b, transpose_b, bias)
    else:
        outputs = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        if bias is not None:
            outputs = tf.nn.bias_add(outputs, bias)
    if activation is not None:
        outputs = activation(outputs)
    return tf.cast(outputs, dtype) if in_float32 else outputs


def _oriented(a, b):
    """Whether the product of a and b takes `oriented_product`'s gradients."""
    return (setting().oriented_gradients and a.dtype == tf.float32 and a.shape.rank == 2
            and b.shape.rank == 2)


def _separate_bias(a):
    """Whether a bfloat16 product of `a` [m, k] adds its bias in an op of its own."""
    return setting().separate_bias and a.dtype == tf.bfloat16 and a.shape.rank == 2


def _product_with_bias(x, kernel, transpose_kernel, bias):
    """x [m, k] @ kernel [k, n] ([n, k] when `transpose_kernel`) + bias [n] without the BiasAdd
    that grappler would fuse (`Setting.separate_bias`). A wide product (n > 4k: the output layer)
    takes the bias as one more row of the kernel against a column of ones appended to x (and
    a zero row and column keeping k even, as bfloat16 kernels pair their inputs): the product
    then adds it in float32 and its gradient sums it, which saves two passes over [m, n] (the
    add and the bias gradient's sum; the output layer's forward and backward 5 % faster,
    measured). Otherwise the bias is added to the product reshaped to [1, m, n], which grappler
    does not fuse."""
    m, k = tf.shape(x)[0], x.shape[-1]
    n = kernel.shape[0] if transpose_kernel else kernel.shape[-1]
    if not n > 4 * k:
        outputs = tf.matmul(x, kernel, transpose_b=transpose_kernel)
        return tf.squeeze(tf.expand_dims(outputs, 0) + bias, 0)
    extra = 2 - k % 2  # the ones column, and a zero one when k is even
    columns = [x, tf.ones([m, 1], x.dtype)] + ([tf.zeros([m, 1], x.dtype)] if extra == 2 else [])
    rows = [bias[tf.newaxis]] + ([tf.zeros([1, n], bias.dtype)] if extra == 2 else [])
    if transpose_kernel:
        kernel = tf.concat([kernel] + [tf.transpose(row) for row in rows], axis=1)  # [n, k + extra]
    else:
        kernel = tf.concat([kernel] + rows, axis=0)  # [k + extra, n]
    return tf.matmul(tf.concat(columns, axis=1), kernel, transpose_b=transpose_kernel)


def kernel_gradient(x, d_outputs, transpose_kernel=False):
    """x^T @ d_outputs: the gradient of a kernel [in, out] ([out, in] when `transpose_kernel`)
    from x [tokens, in] and d_outputs [tokens, out], formed as the wider of its two orientations
    and transposed if that is not the kernel's."""
    if x.shape[-1] > d_outputs.shape[-1]:
        product = tf.matmul(d_outputs, x, transpose_a=True)  # [out, in]
        return product if transpose_kernel else tf.transpose(product)
    product = tf.matmul(x, d_outputs, transpose_a=True)  # [in, out]
    return tf.transpose(product) if transpose_kernel else product


def oriented_product(x, kernel, transpose_kernel=False, bias=None):
    """x [tokens, in] @ kernel [in, out] ([out, in] when `transpose_kernel`) + bias [out], float32,
    whose kernel gradient is `kernel_gradient` (the input's as automatic differentiation forms it,
    the bias' the column sums). The forward ops stay MatMul -> BiasAdd, which TensorFlow fuses."""

    @tf.custom_gradient
    def product(x, kernel, *bias):
        outputs = tf.matmul(x, kernel, transpose_b=transpose_kernel)
        if bias:
            outputs = tf.nn.bias_add(outputs, bias[0])

        def grad(d_outputs):
            gradients = (tf.matmul(d_outputs, kernel, transpose_b=not transpose_kernel),
                         kernel_gradient(x, d_outputs, transpose_kernel))
            return gradients + ((tf.reduce_sum(d_outputs, axis=0),) if bias else ())

        return outputs, grad

    return product(x, kernel) if bias is None else product(x, kernel, bias)


def einsum(equation, a, b):
    """tf.einsum(equation, a, b) of two operands, computed like `matmul` (float32 then rounded,
    for bfloat16 on the FLOAT32 path)."""
    if _multiply_in_float32(a):
        return tf.cast(tf.einsum(equation, tf.cast(a, tf.float32), tf.cast(b, tf.float32)), a.dtype)
    return tf.einsum(equation, a, b)


# Dropout draws 16 random bits per element: an element is dropped when its bits are below
# round(rate * 2^16), so the rate is exact to 2^-16 and the kept values are scaled by the exact
# inverse of the keep probability.
_DROPOUT_LEVELS = 1 << 16


def _mix32(x):
    """A bijective hash of uint32 x (any shape) with strong avalanche: xor-shifts and odd
    multipliers (the constants of Chris Wellons' "lowbias32")."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
    x = x * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(15, tf.uint32)))
    x = x * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))


def hashed_bits(shape, seed):
    """uint32 random bits [shape] from a counter-based generator: `_mix32(i * m + k)` for each
    flat index i, where the odd multiplier m and the offset k are hashed from both words of
    `seed` [2] int32. Two seeds give two different affine maps of the indices, so two masks are
    not shifted copies of one stream (as they would be with one multiplier and the seed in k
    only: Keras' seed generators advance one word). Eight elementwise ops, 4.6 times faster than
    TensorFlow's Philox kernel on a CPU (measured, docs/performance.md)."""
    words = tf.bitcast(seed, tf.uint32)
    first = _mix32(words[0] + tf.constant(0x9E3779B9, tf.uint32))
    multiplier = tf.bitwise.bitwise_or(_mix32(first ^ words[1]), tf.constant(1, tf.uint32))
    offset = _mix32(multiplier + words[1])
    index = tf.bitcast(tf.range(tf.reduce_prod(shape), dtype=tf.int32), tf.uint32)
    return tf.reshape(_mix32(index * multiplier + offset), shape)


def dropout_keep_mask(shape, rate, seed_generator):
    """(keep [shape] bool, scale): keep each element with probability 1 - rate (to 2^-16).
    A rate that rounds to 1 keeps nothing (scale 0: the output and its gradient are zeros)."""
    threshold = int(round(rate * _DROPOUT_LEVELS))
    if threshold >= _DROPOUT_LEVELS:
        return tf.zeros(shape, tf.bool), 0.0
    seed = tf.cast(seed_generator.next(), tf.int32)
    halves = tf.concat([shape[:-1], [(shape[-1] + 1) // 2]], axis=0)
    if setting().hashed_dropout_bits:
        bits = hashed_bits(halves, seed)
    else:
        bits = tf.random.stateless_uniform(halves, seed, minval=None, maxval=None, dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(bits, tf.uint16), tf.concat([shape[:-1], [-1]], axis=0))
    bits = bits[..., : shape[-1]]  # an odd last dimension drew one spare half
    keep = bits >= tf.constant(threshold, tf.uint16)
    return keep, _DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold)


def dropout(x, rate, seed_generator):
    """Inverted dropout of x [...] in training, with a mask of `dropout_keep_mask`."""
    keep, scale = dropout_keep_mask(tf.shape(x), rate, seed_generator)
    return tf.where(keep, x * tf.cast(scale, x.dtype), tf.zeros((), x.dtype))


def dense_relu_dropout(x, kernel, bias, rate, seed_generator):
    """dropout(relu(x @ kernel + bias)) in training, [..., in] -> [..., units], with a
    hand-written gradient.

    Where the output is positive both the ReLU and the dropout let the gradient through (times the
    dropout scale s); everywhere else it is zero. So the backward pass needs only the output (which
    the next layer keeps anyway) and x, instead of the ReLU output and the mask as well. The
    forward ops stay MatMul -> BiasAdd -> Relu, which TensorFlow fuses into one kernel.
    In float32, s > 0 commutes with the ReLU, so it multiplies the (small) kernel and bias instead
    of the [tokens, units] output, and the small products of the backward pass: no pass over a
    [tokens, units] tensor is spent on it (measured on an AVX2 CPU, where such passes are not
    fused). In 16-bit types the scaled kernel would be rounded once more, so the output is
    scaled there.
    """
    units = kernel.shape[-1]
    leading = tf.shape(x)[:-1]
    x2d = tf.reshape(x, [-1, x.shape[-1]])
    keep, scale = dropout_keep_mask(tf.stack([tf.shape(x2d)[0], units]), rate, seed_generator)
    scale = tf.cast(scale, x.dtype)
    fold = x.dtype == tf.float32
    zero = tf.zeros((), x.dtype)

    @tf.custom_gradient
    def forward(x2d, kernel, bias):
        if fold:
            kernel, bias = kernel * scale, bias * scale
        inner = matmul(x2d, kernel, bias=bias, activation=tf.nn.relu)
        outputs = tf.where(keep, inner if fold else inner * scale, zero)

        def grad(upstream):
            d_inner = tf.where(outputs > 0, upstream if fold else upstream * scale, zero)
            d_x = matmul(d_inner, kernel, transpose_b=True)
            if _oriented(x2d, kernel):
                d_kernel = kernel_gradient(x2d, d_inner)
            else:
                d_kernel = matmul(x2d, d_inner, transpose_a=True)
            # reduce_sum accumulates bfloat16 in float32 and rounds once (measured, TF 2.21 on
            # CPU): no float32 detour needed. (BiasAddGrad in bfloat16 does not: its sums came
            # out 6.7 % too small on an AVX2 CPU, hence the float32 bias in `matmul`.)
            d_bias = tf.reduce_sum(d_inner, axis=0)
            if fold:
                d_kernel, d_bias = d_kernel * scale, d_bias * scale
            return d_x, d_kernel, d_bias

        return outputs, grad

    return tf.reshape(forward(x2d, kernel, bias), tf.concat([leading, [units]], axis=0))


def layer_norm(x, gamma, beta, epsilon):
    """`gamma * (x - mean) * rsqrt(var + epsilon) + beta` over the last axis of float32 `x`
    [..., depth], with a hand-written gradient.

    Automatic differentiation of this formula keeps x, x - mean and the normalized x for the
    backward pass; the gradient below needs only the normalized x and the reciprocal deviation
    [..., 1], which saves two activations of the input's size per layer norm in training. With
    g the incoming gradient and x_hat the normalized input:
      d beta = sum g,  d gamma = sum g * x_hat  (over every axis but the last),
      d x = rstd * (g*gamma - mean(g*gamma) - x_hat * mean(g*gamma * x_hat))  (means over depth).
    """

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)
        x_hat = (x - mean) * rstd
        outputs = x_hat * gamma + beta

        def grad(upstream):
            reduce_axes = tf.range(tf.rank(upstream) - 1)
            d_beta = tf.reduce_sum(upstream, axis=reduce_axes)
            d_gamma = tf.reduce_sum(upstream * x_hat, axis=reduce_axes)
            d_x_hat = upstream * gamma
            d_x = rstd * (
                d_x_hat
                - tf.reduce_mean(d_x_hat, axis=-1, keepdims=True)
                - x_hat * tf.reduce_mean(d_x_hat * x_hat, axis=-1, keepdims=True)
            )
            return d_x, d_gamma, d_beta

        return outputs, grad

    # (gamma and beta read here: a custom gradient takes tensors, not the layer's variables)
    return normalize(x, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta))


def layer_norm_inference(x, gamma, beta, epsilon):
    """The same layer norm as `layer_norm`, written for the forward pass only.

    Every row of float32 `x` [..., depth] is seen as one channel of a [1, rows, depth, 1] NCHW
    image, normalized by the fused batch-norm op, then scaled and shifted. TensorFlow's grappler
    rewrites exactly this chain into one oneDNN layer-norm kernel (`_MklLayerNorm`), about twice
    as fast as the separate mean, variance and arithmetic ops (and the way OpenNMT-tf's Keras 2
    layer computes). Not for training: the batch-norm gradient would keep two activations of
    the input's size where `layer_norm`'s keeps one.
    """
    # An explicit shape check in front: without it, grappler does not fuse the chain when x
    # comes from a Cast (as under mixed precision), measured with TensorFlow 2.21.
    x = tf.ensure_shape(x, x.shape)
    gamma, beta = tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)
    shape = tf.shape(x)
    rows = tf.reduce_prod(shape[:-1])
    images = tf.reshape(x, [1, rows, shape[-1], 1])
    normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(
        images,
        scale=tf.ones([rows], tf.float32),
        offset=tf.zeros([rows], tf.float32),
        epsilon=epsilon,
        data_format="NCHW",
    )
    return tf.reshape(normalized, shape) * gamma + beta


class DecodingCache:
    """The self-attention cache of incremental decoding, written in place (the fast path).

    Each layer's keys and values live in buffers [capacity, rows, heads, depth] (time-major), whose
    slot `position * rows + row` holds what row `row` projected at step `position`; capacity
    doubles when full (amortized: each position is copied about once). The decoding state's
    index `rows_index` [rows, time] int32 lists, for each row, the slots of its hypothesis'
    earlier positions in order: reordering beams gathers this index (int32, [rows, time]) instead
    of every layer's keys and values, and attention gathers its keys and values from the buffer
    once per step (`read`) instead of concatenating and, after the beam search, gathering them.
    The buffers are updated with InplaceUpdate, which reuses the buffer when nothing else holds
    it (true in the decoding loop): appending costs one position, not the cache. (Not a TFLite
    builtin: TFLite traces the plain formulas, with the fast paths off.)
    """

    MINIMUM_CAPACITY = 16

    @staticmethod
    def empty_buffer(rows, heads, depth, dtype):
        """An empty buffer [0, rows, heads, depth]."""
        return tf.zeros([0, rows, heads, depth], dtype)

    @classmethod
    def with_room(cls, buffers, step):
        """`buffers` (a list of same-shaped buffers) with capacity for position `step` (int32
        scalar): doubled (at least MINIMUM_CAPACITY) when full, else unchanged."""
        capacity = tf.shape(buffers[0])[0]

        def grown():
            extra = tf.maximum(capacity, cls.MINIMUM_CAPACITY)
            return [tf.concat([b, tf.zeros(tf.concat([[extra], tf.shape(b)[1:]], 0), b.dtype)], 0)
                    for b in buffers]

        return tf.cond(step >= capacity, grown, lambda: [tf.identity(b) for b in buffers])

    @staticmethod
    def index(rows_index, step):
        """rows_index [rows, time] -> [rows, time + 1]: with the slot of this step's position."""
        rows = tf.shape(rows_index)[0]
        current = tf.cast(step, tf.int32) * rows + tf.range(rows)
        return tf.concat([rows_index, current[:, tf.newaxis]], axis=1)

    @staticmethod
    def write(buffer, values, step):
        """`buffer` with `values` [rows, heads, 1, depth] (one position) at position `step`."""
        values = tf.reshape(values, tf.concat([[1], tf.shape(buffer)[1:]], 0))
        return tf.raw_ops.InplaceUpdate(x=buffer, i=tf.reshape(tf.cast(step, tf.int32), [1]),
                                        v=values)

    @staticmethod
    def read(buffer, index):
        """The keys or values at the slots `index` [rows, time] -> [rows, heads, time, depth]."""
        heads, depth = buffer.shape[2], buffer.shape[3]
        slots = index[:, tf.newaxis, :] * heads + tf.range(heads)[tf.newaxis, :, tf.newaxis]
        return tf.gather(tf.reshape(buffer, [-1, depth]), slots)
