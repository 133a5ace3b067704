"""Multi-head attention with optional relative position representations (Shaw et al., 2018)."""

import keras
import tensorflow as tf

from opennmt_lite import PACKAGE
from opennmt_lite.layers.common import Dense, apply_dropout, einsum, make_seed_generator, matmul
from opennmt_lite.layers.fast_paths import DecodingCache
from opennmt_lite.recorder import record


def split_heads(x, num_heads):
    """[batch, time, depth] -> [batch, heads, time, depth / heads]."""
    batch, time = tf.shape(x)[0], tf.shape(x)[1]
    depth = x.shape[-1]
    x = tf.reshape(x, [batch, time, num_heads, depth // num_heads])
    return tf.transpose(x, [0, 2, 1, 3])


def combine_heads(x):
    """[batch, heads, time, depth_per_head] -> [batch, time, heads * depth_per_head]."""
    batch, time = tf.shape(x)[0], tf.shape(x)[2]
    heads, depth = x.shape[1], x.shape[3]
    x = tf.transpose(x, [0, 2, 1, 3])
    return tf.reshape(x, [batch, time, heads * depth])


def relative_positions(query_positions, num_keys, maximum_position):
    """Indices into the relative-position tables, `[queries, keys]`.

    Query i sits at absolute position `query_positions[i]` ([queries] int32: 0 .. time - 1 for
    a whole sequence, the current step in incremental decoding) and key j at position j (the keys
    are every position from the first, cached ones included). The distance j - position_i is
    clipped to [-maximum_position, maximum_position] and shifted by maximum_position, so that it
    indexes the 2 * maximum_position + 1 rows of the tables.
    """
    key_positions = tf.range(num_keys)
    distance = key_positions[tf.newaxis, :] - query_positions[:, tf.newaxis]
    distance = tf.clip_by_value(distance, -maximum_position, maximum_position)
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
    batch, heads, time_q = tf.shape(queries)[0], tf.shape(queries)[1], tf.shape(queries)[2]
    time_k = tf.shape(positions)[1]
    window = tf.shape(relative_keys)[0]
    flat_queries = tf.reshape(queries, [-1, queries.shape[-1]])
    scores = matmul(flat_queries, relative_keys, transpose_b=True)  # [batch*heads*time_q, 2k+1]
    scores = tf.reshape(scores, [batch * heads, time_q * window])
    index = tf.range(time_q)[:, tf.newaxis] * window + positions  # row i's own scores
    logits = tf.gather(scores, tf.reshape(index, [-1]), axis=1)
    return tf.reshape(logits, [batch, heads, time_q, time_k])


def relative_context(attention, relative_values, positions):
    """out[b, h, i, :] = sum_j attention[b, h, i, j] * relative_values[positions[i, j], :].

    attention [batch, heads, time_q, time_k], relative_values [2k+1, depth] (the table),
    positions [time_q, time_k] -> [batch, heads, time_q, depth]. The attention weights are first
    summed per distance bucket ([..., 2k+1]), then multiplied by the table (one 2-D matmul).
    """
    window = tf.shape(relative_values)[0]
    one_hot = tf.one_hot(positions, window, dtype=attention.dtype)
    buckets = einsum("bhij,ijr->bhir", attention, one_hot)
    context = matmul(tf.reshape(buckets, [-1, window]), relative_values)
    return tf.reshape(context, tf.concat([tf.shape(attention)[:3], [relative_values.shape[-1]]], 0))


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over `num_heads` heads.

    call(inputs [batch, time_q, depth], memory=None [batch, time_k, depth] (None: self-attention),
         attention_mask=None: [batch, time_k] or [batch, time_q, time_k], 1 = may attend,
         cache=None: (keys, values) [batch, heads, time_cached, depth / heads],
         positions=None: [time_q] int32, the queries' absolute positions, read by relative
         positions (None: 0 .. time_q - 1, a whole sequence without cache),
         cache_index=None: with a cache of `DecodingCache` buffers (the decoding fast path),
         [batch, time_k] int32, the buffer slots of the keys/values to attend to)
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
             training=None, cache_index=None):
        queries = split_heads(self.linear_queries(inputs), self.num_heads)
        queries *= tf.cast(self.num_units_per_head**-0.5, queries.dtype)
        new_cache = None
        if memory is None:
            keys, values = self.project_kv(inputs)
            if cache_index is not None:
                new_cache = tuple(DecodingCache.write(buffer, new, positions[0])
                                  for buffer, new in zip(cache, (keys, values)))
                keys, values = (DecodingCache.read(buffer, cache_index) for buffer in new_cache)
            elif cache is not None:
                keys = tf.concat([cache[0], keys], axis=2)
                values = tf.concat([cache[1], values], axis=2)
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
            query_positions = tf.range(tf.shape(queries)[2]) if positions is None else positions
            # (from here on, `positions` are the [time_q, time_k] indices into the tables)
            positions = relative_positions(
                query_positions, tf.shape(keys)[2], self.maximum_relative_position
            )
            relative_keys = tf.cast(self.relative_position_keys, queries.dtype)
            relative_values = tf.cast(self.relative_position_values, queries.dtype)
            relative_scores = relative_logits(queries, relative_keys, positions)
            record("relative_positions", positions)
            # The representations of each (query, key) pair, [time_q, time_k, depth]: computed
            # only for a recording (the math above uses the tables directly).
            record("relative_keys", lambda: tf.gather(relative_keys, positions))
            record("relative_values", lambda: tf.gather(relative_values, positions))
            record("content_logits", logits)
            record("relative_logits", relative_scores)
            logits += relative_scores
        record("logits", logits)

        # Masking and softmax run in float32 whatever the compute dtype: the mask value is the
        # most negative float32, as in OpenNMT-tf (not -inf, which would give NaN on empty rows).
        logits = tf.cast(logits, tf.float32)
        if attention_mask is not None:
            mask = tf.cast(attention_mask, tf.float32)
            # (expand_dims, not [:, tf.newaxis]: TFLite has no kernel for that strided slice)
            if mask.shape.rank == 2:
                mask = tf.expand_dims(mask, 1)  # same mask for every query
            mask = tf.expand_dims(mask, 1)  # same mask for every head
            logits = logits * mask + (1.0 - mask) * tf.float32.min
        attention = tf.nn.softmax(logits)
        record("attention", attention)
        attention = tf.cast(attention, queries.dtype)
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
