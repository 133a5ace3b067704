"""Multi-head attention with optional relative position representations (Shaw et al., 2018)."""

import warnings

import keras
import numpy as np
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.layers.common import Dense, apply_dropout, einsum, make_seed_generator, matmul
from opennmt_lite.layers.fast_paths import DecodingCache
from opennmt_lite.recorder import record

# The masked logits' value: the most negative float32, as in OpenNMT-tf (not -inf, which would
# give NaN on rows with nothing to attend to).
MASKED_LOGIT = float(np.finfo(np.float32).min)


def split_heads(x, num_heads):
    """[batch, time, depth] -> [batch, heads, time, depth / heads]."""
    batch, time = ops.shape(x)[0], ops.shape(x)[1]
    depth = x.shape[-1]
    x = ops.reshape(x, (batch, time, num_heads, depth // num_heads))
    return ops.transpose(x, (0, 2, 1, 3))


def combine_heads(x):
    """[batch, heads, time, depth_per_head] -> [batch, time, heads * depth_per_head]."""
    batch, time = ops.shape(x)[0], ops.shape(x)[2]
    heads, depth = x.shape[1], x.shape[3]
    x = ops.transpose(x, (0, 2, 1, 3))
    return ops.reshape(x, (batch, time, heads * depth))


def softmax(logits):
    """Softmax over the last axis of `logits` [..., time_k] (tf.nn.softmax on TensorFlow).

    keras.ops warns about an axis of size 1, which attention meets at the first decoding step
    (one key): there the result is right (1), so the warning is silenced.
    """
    if logits.shape[-1] != 1:
        return ops.softmax(logits, axis=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ops.softmax(logits, axis=-1)


def relative_positions(query_positions, num_keys, maximum_position):
    """Indices into the relative-position tables, `[queries, keys]`.

    Query i sits at absolute position `query_positions[i]` ([queries] int32: 0 .. time - 1 for
    a whole sequence, the current step in incremental decoding) and key j at position j (the keys
    are every position from the first, cached ones included). The distance j - position_i is
    clipped to [-maximum_position, maximum_position] and shifted by maximum_position, so that it
    indexes the 2 * maximum_position + 1 rows of the tables.
    """
    key_positions = ops.arange(num_keys, dtype="int32")
    distance = ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 1)
    distance = ops.clip(distance, -maximum_position, maximum_position)
    return distance + maximum_position


def relative_logits(queries, relative_keys, positions):
    """out[b, h, i, j] = queries[b, h, i, :] . relative_keys[positions[i, j], :].

    queries [batch, heads, time_q, depth], relative_keys [2k+1, depth] (the table),
    positions [time_q, time_k] -> [batch, heads, time_q, time_k].
    One 2-D matmul of every query against the 2k+1 table rows, then a gather of the right row
    for each (i, j): cheaper than materialising the [time_q, time_k, depth] gathered table.
    (2-D, not a batched matmul broadcasting the table: without oneDNN, as on AVX2 CPUs, the
    broadcast form runs batch * heads thin products, and its gradient for the table a batched
    product reduced afterwards.)
    """
    batch, heads, time_q = ops.shape(queries)[0], ops.shape(queries)[1], ops.shape(queries)[2]
    time_k = ops.shape(positions)[1]
    window = relative_keys.shape[0]
    flat_queries = ops.reshape(queries, (-1, queries.shape[-1]))
    scores = matmul(flat_queries, relative_keys, transpose_b=True)  # [batch*heads*time_q, 2k+1]
    scores = ops.reshape(scores, (batch * heads, time_q * window))
    # row i's own scores
    index = ops.expand_dims(ops.arange(time_q, dtype="int32"), 1) * window + positions
    logits = ops.take(scores, ops.reshape(index, (-1,)), axis=1)
    return ops.reshape(logits, (batch, heads, time_q, time_k))


def relative_context(attention, relative_values, positions):
    """out[b, h, i, :] = sum_j attention[b, h, i, j] * relative_values[positions[i, j], :].

    attention [batch, heads, time_q, time_k], relative_values [2k+1, depth] (the table),
    positions [time_q, time_k] -> [batch, heads, time_q, depth]. The attention weights are first
    summed per distance bucket ([..., 2k+1]), then multiplied by the table (one 2-D matmul).
    """
    window = relative_values.shape[0]
    one_hot = ops.one_hot(positions, window, dtype=attention.dtype)
    buckets = einsum("bhij,ijr->bhir", attention, one_hot)
    context = matmul(ops.reshape(buckets, (-1, window)), relative_values)
    return ops.reshape(context, tuple(ops.shape(attention)[:3]) + (relative_values.shape[-1],))


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over `num_heads` heads.

    call(inputs [batch, time_q, depth], memory=None [batch, time_k, depth] (None: self-attention),
         attention_mask=None: [batch, time_k] or [batch, time_q, time_k], 1 = may attend,
         cache=None: (keys, values) [batch, heads, time_cached, depth / heads],
         positions=None: [time_q] int32, the queries' absolute positions, read by relative
         positions (None: 0 .. time_q - 1, a whole sequence without cache),
         cache_index=None: with a cache of `DecodingCache` buffers (the decoding fast path),
         [batch, time_k] int32, the buffer slots of the keys/values to attend to,
         cache_slot=None: with a cache of fixed-size buffers [batch, heads, capacity, depth /
         heads] (the portable decoding cache, for compiled loops), the int32 time slot where
         the one new position's keys/values are written; the keys are then every slot, and
         `attention_mask` must hide the slots not yet written)
    -> (outputs [batch, time_q, depth], (keys, values)[, attention [batch, heads, time_q, time_k]])

    In self-attention the cache holds the projected keys/values of earlier positions and grows by
    the new ones; in memory attention it holds the projected memory, computed once (`project_kv`).
    With `cache_index`, the cache is a pair of `DecodingCache` buffers [capacity, batch, heads,
    depth / heads]: the one new position (time_q 1, at positions[0]) is written into them, and
    the keys/values are read at `cache_index`; the buffers are returned as the cache.

    Records queries, keys, values, (with relative positions) relative_positions, relative_keys,
    relative_values [time_q, time_k, depth / heads], content_logits, relative_logits, then logits,
    attention (float32), heads, combined_heads and output.
    """

    def __init__(
        self,
        num_heads,
        num_units,
        bias=True,
        dropout=0.1,
        return_attention=False,
        maximum_relative_position=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_units % num_heads != 0:
            raise ValueError(
                f"num_units ({num_units}) must be divisible by num_heads ({num_heads})"
            )
        self.num_heads = num_heads
        self.num_units = num_units
        self.num_units_per_head = num_units // num_heads
        self.bias = bias
        self.dropout = dropout
        self.return_attention = return_attention
        self.maximum_relative_position = maximum_relative_position
        policy = self.dtype_policy
        self.linear_queries = Dense(num_units, use_bias=bias, dtype=policy, name="linear_queries")
        self.linear_keys = Dense(num_units, use_bias=bias, dtype=policy, name="linear_keys")
        self.linear_values = Dense(num_units, use_bias=bias, dtype=policy, name="linear_values")
        self.linear_output = Dense(num_units, use_bias=bias, dtype=policy, name="linear_output")
        self.dropout_seed = make_seed_generator(dropout)

    def build(self, inputs_shape, memory_shape=None):
        # Argument names match call()'s `inputs` and `memory`, so Keras can build on first call.
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        self.linear_queries.build(inputs_shape)
        self.linear_keys.build(memory_shape)
        self.linear_values.build(memory_shape)
        self.linear_output.build(tuple(inputs_shape[:-1]) + (self.num_units,))
        if self.maximum_relative_position is not None:
            shape = (2 * self.maximum_relative_position + 1, self.num_units_per_head)
            self.relative_position_keys = self.add_weight(
                name="relative_position_keys", shape=shape, initializer="glorot_uniform"
            )
            self.relative_position_values = self.add_weight(
                name="relative_position_values", shape=shape, initializer="glorot_uniform"
            )

    def project_kv(self, x):
        """Projected keys and values of `x` [batch, time, depth], each [batch, heads, time, d]."""
        keys = split_heads(self.linear_keys(x), self.num_heads)
        values = split_heads(self.linear_values(x), self.num_heads)
        return keys, values

    def call(self, inputs, memory=None, attention_mask=None, cache=None, positions=None,
             training=None, cache_index=None, cache_slot=None):
        queries = split_heads(self.linear_queries(inputs), self.num_heads)
        queries *= ops.cast(self.num_units_per_head**-0.5, queries.dtype)
        new_cache = None
        if memory is None:
            keys, values = self.project_kv(inputs)
            if cache_index is not None:
                new_cache = tuple(DecodingCache.write(buffer, new, positions[0])
                                  for buffer, new in zip(cache, (keys, values)))
                keys, values = (DecodingCache.read(buffer, cache_index) for buffer in new_cache)
            elif cache is not None and cache_slot is not None:
                keys = ops.slice_update(cache[0], (0, 0, cache_slot, 0), keys)
                values = ops.slice_update(cache[1], (0, 0, cache_slot, 0), values)
            elif cache is not None:
                keys = ops.concatenate([cache[0], keys], axis=2)
                values = ops.concatenate([cache[1], values], axis=2)
        elif cache is not None:
            keys, values = cache
        else:
            keys, values = self.project_kv(memory)
        new_cache = (keys, values) if new_cache is None else new_cache
        record("queries", queries)
        record("keys", keys)
        record("values", values)

        logits = matmul(queries, keys, transpose_b=True)
        relative_values = None
        if self.maximum_relative_position is not None:
            if memory is not None:
                raise ValueError("relative position representations need self-attention")
            if positions is None and cache is not None:
                raise ValueError("relative positions with a cache need the queries' positions")
            query_positions = (ops.arange(ops.shape(queries)[2], dtype="int32")
                               if positions is None else positions)
            # (from here on, `positions` are the [time_q, time_k] indices into the tables)
            positions = relative_positions(
                query_positions, ops.shape(keys)[2], self.maximum_relative_position
            )
            relative_keys = ops.cast(self.relative_position_keys, queries.dtype)
            relative_values = ops.cast(self.relative_position_values, queries.dtype)
            relative_scores = relative_logits(queries, relative_keys, positions)
            record("relative_positions", positions)
            # The representations of each (query, key) pair, [time_q, time_k, depth]: computed
            # only for a recording (the math above uses the tables directly).
            record("relative_keys", lambda: ops.take(relative_keys, positions, axis=0))
            record("relative_values", lambda: ops.take(relative_values, positions, axis=0))
            record("content_logits", logits)
            record("relative_logits", relative_scores)
            logits += relative_scores
        record("logits", logits)

        # Masking and softmax run in float32 whatever the compute dtype, with MASKED_LOGIT.
        logits = ops.cast(logits, "float32")
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "float32")
            # (expand_dims, not [:, None]: TFLite has no kernel for that strided slice)
            if len(mask.shape) == 2:
                mask = ops.expand_dims(mask, 1)  # same mask for every query
            mask = ops.expand_dims(mask, 1)  # same mask for every head
            logits = logits * mask + (1.0 - mask) * MASKED_LOGIT
        attention = softmax(logits)
        record("attention", attention)
        attention = ops.cast(attention, queries.dtype)
        dropped_attention = apply_dropout(attention, self.dropout, self.dropout_seed, training)

        heads = matmul(dropped_attention, values)
        if relative_values is not None:
            heads += relative_context(dropped_attention, relative_values, positions)
        record("heads", heads)
        combined = combine_heads(heads)
        record("combined_heads", combined)
        outputs = self.linear_output(combined)
        record("output", outputs)

        if self.return_attention:
            return outputs, new_cache, attention
        return outputs, new_cache

    def compute_output_shape(self, input_shape):
        """The shape of `outputs` only (what LayerWrapper's output norm needs)."""
        return tuple(input_shape[:-1]) + (self.num_units,)

    def compute_output_spec(self, *args, **kwargs):
        # Keras would describe every output by compute_output_shape, which gives `outputs` only:
        # symbolic calls trace `call` instead (the keys' length depends on memory and cache).
        return keras.Operation.compute_output_spec(self, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            num_units=self.num_units,
            bias=self.bias,
            dropout=self.dropout,
            return_attention=self.return_attention,
            maximum_relative_position=self.maximum_relative_position,
        )
        return config
