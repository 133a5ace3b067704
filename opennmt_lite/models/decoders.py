"""The Transformer decoder: OpenNMT-tf's SelfAttentionDecoder."""

import keras
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.layers import fast_paths
from opennmt_lite.layers.common import Dense
from opennmt_lite.layers.fast_paths import DecodingCache
from opennmt_lite.layers.position import absolute_positions
from opennmt_lite.layers.transformer import SelfAttentionDecoderLayer
from opennmt_lite.models.stack import TransformerStack, sequence_mask
from opennmt_lite.recorder import record, recording_scope


def future_mask(sequence_length, maximum_length):
    """[batch, time, time] float mask: query i may attend key j iff j <= i and j < length."""
    causal = ops.tril(ops.ones((maximum_length, maximum_length)))
    keys = sequence_mask(sequence_length, maximum_length)
    return ops.expand_dims(causal, 0) * ops.expand_dims(keys, 1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttentionDecoder(TransformerStack):
    """A stack of decoder layers and the output projection to the target vocabulary.

    Teacher forcing: call(inputs [batch, time, depth] (target embeddings), sequence_length [batch],
    memory [batch, src_time, depth], memory_sequence_length [batch])
    -> (logits [batch, time, vocab], attention [batch, time, src_time])
    Incremental decoding: `initial_state(memory, memory_sequence_length)`, then
    `step(inputs [batch, depth], step, state, memory_sequence_length)` -> (logits [batch, vocab],
    state, attention [batch, src_time]).

    `hyperparameters`: the model's `ModelHyperparameters` (`output_layer_bias` included).
    The attention returned is the first head of the last layer's memory attention (OpenNMT-tf's
    alignment vector). `output_layer` can reuse the target embedding (`share_output_embedding`).

    Records scaled_inputs, position_encoded_inputs, each layer's tensors under `layers/<i>/`,
    output (after the final norm) and logits, in teacher forcing and in each `step` (where a
    later step's tensors replace an earlier one's of the same name).
    """

    def __init__(self, hyperparameters, vocabulary_size, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.layers = [SelfAttentionDecoderLayer(**self.layer_arguments(i))
                       for i in range(hyperparameters.num_layers)]
        self.output_layer = Dense(
            vocabulary_size, use_bias=hyperparameters.output_layer_bias, dtype=self.dtype_policy,
            name="output_layer",
        )

    def share_output_embedding(self, embedding):
        """Projects with the target embedding `[vocab, depth]`, transposed (before `build`)."""
        self.output_layer.set_kernel(embedding, transpose=True)

    def build(self, inputs_shape, memory_shape=None):
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        for layer in self.layers:
            layer.build(inputs_shape, memory_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(inputs_shape)
        self.output_layer.build(inputs_shape)

    def _run(self, x, attention_mask, memory, memory_mask, cache, step, training,
             cache_index=None, cache_slot=None):
        positions = absolute_positions(x, step)
        x = self.embed(x, positions, training)
        new_cache = []
        attention = None
        for i, layer in enumerate(self.layers):
            with recording_scope(f"layers/{i}"):
                x, layer_cache, attention = layer(
                    x,
                    attention_mask=attention_mask,
                    memory=memory,
                    memory_mask=memory_mask,
                    cache=None if cache is None else cache[i],
                    positions=positions,
                    training=training,
                    cache_index=cache_index,
                    cache_slot=cache_slot,
                )
            new_cache.append(layer_cache)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        record("output", x)
        logits = self.output_layer(x)
        record("logits", logits)
        return logits, new_cache, attention[:, 0]

    def call(
        self,
        inputs,
        sequence_length=None,
        memory=None,
        memory_sequence_length=None,
        training=None,
    ):
        time = ops.shape(inputs)[1]
        if sequence_length is None:
            sequence_length = ops.full((ops.shape(inputs)[0],), time, dtype="int32")
        attention_mask = future_mask(sequence_length, time)
        memory_mask = self._memory_mask(memory, memory_sequence_length)
        logits, _, attention = self._run(
            inputs, attention_mask, memory, memory_mask, None, None, training
        )
        return logits, attention

    def _memory_mask(self, memory, memory_sequence_length):
        if memory_sequence_length is None:
            return None
        return sequence_mask(memory_sequence_length, ops.shape(memory)[1])

    def initial_state(self, memory, memory_sequence_length=None, maximum_length=None):
        """Decoding state: per layer, empty self-attention keys/values and the projected memory.

        Tensors are [batch, heads, time, depth / heads]; "memory_mask" is [batch, src_time].
        Beam search reorders only the self-attention entries: the rest is the same for all beams.
        With the fast paths on, the self-attention entries are `DecodingCache` buffers
        [capacity, batch, heads, depth / heads] instead, and "self_kv_index" [batch, time] int32
        lists the buffer slots of each row's positions: then beam search reorders only that index.
        With `maximum_length` (the portable cache, for a loop compiled with fixed shapes, as
        under JAX; not with the fast paths), the self-attention entries are zeros [batch, heads,
        maximum_length, depth / heads] that `step(..., fixed_cache=True)` fills one slot at a
        time.
        """
        batch = ops.shape(memory)[0]
        heads, units = self.hyperparameters.num_heads, self.hyperparameters.num_units
        empty = ops.zeros((batch, heads, 0, units // heads), memory.dtype)
        state = {
            "memory": memory,
            "memory_mask": self._memory_mask(memory, memory_sequence_length),
            "layers": [],
        }
        if maximum_length is not None:
            if fast_paths.enabled():
                raise ValueError("the fixed-size decoding cache is not for the fast paths")
            empty = ops.zeros((batch, heads, maximum_length, units // heads), memory.dtype)
        elif fast_paths.enabled():
            empty = DecodingCache.empty_buffer(batch, heads, units // heads, memory.dtype)
            state["self_kv_index"] = ops.zeros((batch, 0), "int32")
        for layer in self.layers:
            memory_kv = layer.attention[0].layer.project_kv(memory)
            state["layers"].append({"self_kv": (empty, empty), "memory_kv": memory_kv})
        return state

    def step(self, inputs, step, state, training=None, fixed_cache=False):
        """One decoding step: inputs [batch, depth] (embedding of the previous token).
        `fixed_cache`: the state was made by `initial_state(..., maximum_length)`: this step's
        keys and values go to slot `step`, and the slots after it are masked."""
        layers, cache_index, cache_slot, self_mask = state["layers"], None, None, None
        if fixed_cache:
            cache_slot = ops.cast(step, "int32")
            capacity = layers[0]["self_kv"][0].shape[2]
            # [1, capacity]: the same keys (slots 0 .. step) for every row
            self_mask = ops.expand_dims(
                ops.cast(ops.arange(capacity, dtype="int32") <= cache_slot, "float32"), 0)
        new_state = dict(state)
        if "self_kv_index" in state:  # the fast path's buffers (see initial_state)
            cache_index = DecodingCache.index(state["self_kv_index"], step)
            new_state["self_kv_index"] = cache_index
            buffers = DecodingCache.with_room(
                [buffer for layer in layers for buffer in layer["self_kv"]], step)
            layers = [dict(layer, self_kv=tuple(buffers[2 * i:2 * i + 2]))
                      for i, layer in enumerate(layers)]
        logits, layers, attention = self._run(
            ops.expand_dims(inputs, 1),
            self_mask,
            state["memory"],
            state["memory_mask"],
            layers,
            step,
            training,
            cache_index,
            cache_slot,
        )
        new_state["layers"] = layers
        return logits[:, 0], new_state, attention[:, 0]

    # No compute_output_shape: symbolic calls trace `call` for its (logits, attention).

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size)
        return config
