"""OpenNMT-tf's LanguageModel: a self-attention decoder with no source (the catalog's GPT2Small
is one with learned positions and gelu).

Built from the existing pieces: the TransformerStack (input scaling, final layer norm), the
transformer layers' self-attention and feed-forward wrappers, the WordEmbedder and Dense; only the
layer without memory attention and the learned position table are new here. Attribute names
follow OpenNMT-tf's checkpoint (`model/decoder/layers/<i>/{self_attention,ffn}`,
`model/decoder/position_encoder/position_embedding`, `model/decoder/output_layer/bias`,
`model/examples_inputter/embedding`); the output layer reuses the embedding, as OpenNMT-tf's
`reuse_embedding=True` default.

Data (OpenNMT-tf's defaults for a language model): a line's tokens are the inputs and the same
tokens shifted by one plus `</s>` the outputs, so the first token is never predicted.
"""

import keras
import numpy as np
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.layers.common import Dense
from opennmt_lite.layers.transformer import FeedForwardNetwork, _TransformerLayer
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.models.stack import TransformerStack
from opennmt_lite.recorder import record, recording_scope

END_ID = 2  # `</s>`, line 3 of an OpenNMT-tf vocabulary


class PositionEmbedder(keras.layers.Layer):
    """Adds a learned encoding of each position: inputs [batch, time, depth], positions [time]
    (0-based) -> [batch, time, depth]. As OpenNMT-tf's PositionEmbedder, position p reads row
    min(p + 1, maximum_position) of a [maximum_position + 1, depth] table."""

    def __init__(self, maximum_position=128, **kwargs):
        super().__init__(**kwargs)
        self.maximum_position = int(maximum_position)

    def build(self, input_shape):
        self.position_embedding = self.add_weight(
            name="position_embedding", shape=(self.maximum_position + 1, int(input_shape[-1])),
            initializer="glorot_uniform")

    def call(self, inputs, positions):
        rows = ops.minimum(ops.cast(positions, "int32") + 1, self.maximum_position)
        table = ops.cast(self.position_embedding, inputs.dtype)
        return inputs + ops.take(table, rows, axis=0)[None, :, :]


def approximate_gelu(x):
    """OpenNMT-tf's `opennmt.layers.gelu` (GPT2Small's activation): GELU's tanh approximation,
    not Keras' exact "gelu"."""
    return keras.activations.gelu(x, approximate=True)


class LanguageModelLayer(_TransformerLayer):
    """Masked self-attention then feed-forward (a decoder layer without memory attention).

    call(inputs [batch, time, depth], attention_mask [batch, time, time], positions [time])
    -> [batch, time, depth]

    `gelu_approximation`: with ffn_activation "gelu", use the tanh approximation.
    """

    def __init__(self, hyperparameters, gelu_approximation=False, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        self.gelu_approximation = gelu_approximation
        self.self_attention = self._attention("self_attention")
        self.ffn = self._ffn()

    def _ffn(self):
        hyper = self.hyperparameters
        if not (self.gelu_approximation and hyper.ffn_activation == "gelu"):
            return super()._ffn()
        ffn = FeedForwardNetwork(hyper.ffn_inner_dim, hyper.num_units, dropout=hyper.ffn_dropout,
                                 activation=approximate_gelu, dtype=self.dtype_policy, name="layer")
        return self._wrapped(ffn, "ffn")

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)

    def call(self, inputs, attention_mask=None, positions=None, training=None, cache=None,
             cache_slot=None):
        """With `cache` ((keys, values) [batch, heads, time_cached, depth / heads] of the earlier
        positions): -> (outputs, the cache extended by these positions). With `cache_slot` (an
        int32 scalar), the cache is of fixed-size buffers [batch, heads, capacity, depth /
        heads] and the one new position is written at that slot (MultiHeadAttention's
        `cache_slot`; `attention_mask` hides the slots after it)."""
        with recording_scope("self_attention"):
            outputs, new_cache = self.self_attention(inputs, attention_mask=attention_mask,
                                                     positions=positions, training=training,
                                                     cache=cache, cache_slot=cache_slot)
        with recording_scope("ffn"):
            outputs = self.ffn(outputs, training=training)
        record("output", outputs)
        return outputs if cache is None else (outputs, new_cache)


class LanguageModelDecoder(TransformerStack):
    """The decoder of a language model: call(embedded [batch, time, depth], length [batch]) ->
    logits [batch, time, vocabulary_size]. `maximum_position`: learned positions (GPT2Small);
    None: the hyper-parameters' encoding (sinusoidal by default). `gelu_approximation`: see
    LanguageModelLayer."""

    def __init__(self, hyperparameters, vocabulary_size, maximum_position=None,
                 gelu_approximation=False, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        if maximum_position is not None:
            self.position_encoder = PositionEmbedder(
                maximum_position, dtype=self.dtype_policy, name="position_encoder")
        self.layers = [LanguageModelLayer(gelu_approximation=gelu_approximation,
                                          **self.layer_arguments(i))
                       for i in range(hyperparameters.num_layers)]
        self.output_layer = Dense(vocabulary_size, dtype=self.dtype_policy, name="output_layer")

    def build(self, input_shape):
        if self.position_encoder is not None and hasattr(self.position_encoder, "maximum_position"):
            self.position_encoder.build(input_shape)
        for layer in self.layers:
            layer.build(input_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(input_shape)
        self.output_layer.build(input_shape)

    def call(self, inputs, sequence_length, training=None):
        time = ops.shape(inputs)[1]
        positions = ops.arange(time)
        x = self.embed(inputs, positions, training)
        causal = ops.cast(positions[None, :] <= positions[:, None], "float32")
        keys = ops.cast(positions[None, :] < ops.cast(sequence_length, "int32")[:, None],
                        "float32")
        mask = causal[None, :, :] * keys[:, None, :]
        record("mask", mask)
        for index, layer in enumerate(self.layers):
            with recording_scope(f"layers/{index}"):
                x = layer(x, attention_mask=mask, positions=positions, training=training)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        record("output", x)
        logits = self.output_layer(x)
        record("logits", logits)
        return logits

    def empty_cache(self, batch):
        """Per layer, (keys, values) of no position: [batch, heads, 0, depth / heads]."""
        heads, units = self.hyperparameters.num_heads, self.hyperparameters.num_units
        empty = ops.zeros((batch, heads, 0, units // heads), self.compute_dtype)
        return [(empty, empty) for _ in self.layers]

    def decode_slot(self, inputs, position, cache):
        """New positions with a cache of fixed-size buffers (`fixed_cache`), for a step compiled
        once whatever the position: inputs [batch, time, depth] at positions `position` ..
        `position` + time - 1 (`position` an int32 scalar, the first one's slot) -> (logits
        [batch, time, vocabulary_size], the buffers with their keys and values written; the
        slots after them stay masked)."""
        time = ops.shape(inputs)[1]
        positions = ops.cast(position, "int32") + ops.arange(time, dtype="int32")
        x = self.embed(inputs, positions, False)
        capacity = ops.shape(cache[0][0])[2]
        mask = ops.cast(ops.arange(capacity, dtype="int32")[None, :] <= positions[:, None],
                        "float32")
        mask = ops.broadcast_to(mask[None], (ops.shape(inputs)[0], time, capacity))
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache):
            x, layer_cache = layer(x, attention_mask=mask, positions=positions, training=False,
                                   cache=layer_cache, cache_slot=positions[0])
            new_cache.append(layer_cache)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return self.output_layer(x), new_cache

    def fixed_cache(self, batch, capacity):
        """Per layer, (keys, values) buffers of `capacity` empty slots for `decode_slot`:
        [batch, heads, capacity, depth / heads] zeros (NumPy)."""
        heads, units = self.hyperparameters.num_heads, self.hyperparameters.num_units
        empty = np.zeros((batch, heads, capacity, units // heads), self.compute_dtype)
        return [(empty, empty) for _ in self.layers]

    def decode_cached(self, inputs, positions, cache):
        """Inference on new positions after the cached ones, every row as long:
        inputs [batch, time, depth] at `positions` [time] (0-based, following the cache's)
        -> (logits [batch, time, vocabulary_size], the extended cache)."""
        x = self.embed(inputs, positions, False)
        time = ops.shape(inputs)[1]
        cached = ops.shape(cache[0][0])[2]
        # Query i (at cached + i) sees the cached keys and the new ones up to itself.
        keys = ops.arange(cached + time)[None, :]
        mask = ops.cast(keys <= cached + ops.arange(time)[:, None], "float32")
        mask = ops.broadcast_to(mask[None], (ops.shape(inputs)[0], time, cached + time))
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache):
            x, layer_cache = layer(x, attention_mask=mask, positions=positions,
                                   training=False, cache=layer_cache)
            new_cache.append(layer_cache)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return self.output_layer(x), new_cache


@keras.saving.register_keras_serializable(package=PACKAGE)
class LanguageModel(keras.Model):
    """call(ids [batch, time], length [batch]) -> logits [batch, time, vocabulary_size] of the
    next token at each position. `vocabulary_size`: rows of the embedding (lines + 1);
    `maximum_position`, `gelu_approximation`: see LanguageModelDecoder (GPT2Small: 1024, True)."""

    def __init__(self, hyperparameters, vocabulary_size, maximum_position=None,
                 gelu_approximation=False, **kwargs):
        super().__init__(**kwargs)
        self.hyperparameters = hyperparameters
        self.vocabulary_size = int(vocabulary_size)
        self.maximum_position = maximum_position
        self.gelu_approximation = gelu_approximation
        self.examples_inputter = WordEmbedder(
            vocabulary_size, hyperparameters.num_units, dtype=self.dtype_policy,
            name="examples_inputter")
        self.decoder = LanguageModelDecoder(hyperparameters, vocabulary_size, maximum_position,
                                            gelu_approximation, dtype=self.dtype_policy,
                                            name="decoder")

    def build(self, input_shape=None):
        self.examples_inputter.build()
        self.decoder.output_layer.set_kernel(self.examples_inputter.embedding, transpose=True)
        self.decoder.build((None, None, self.hyperparameters.num_units))
        self.built = True

    def call(self, ids, length=None, training=None):
        """ids [batch, time] and length [batch] -> logits; or a Transformer batch (a dict: the
        training, evaluation and scoring inputs, data/pipeline.py) -> (logits of its
        `target_ids_in` over `target_length`, None: no attention), as the Transformer's call,
        so that the train step, evaluation and `score` run a language model unchanged."""
        if isinstance(ids, dict):
            return self.call(ids["target_ids_in"], ids["target_length"], training=training), None
        embedded = self.examples_inputter(ids, training=training)
        record("embedded", embedded)
        with recording_scope("decoder"):
            return self.decoder(embedded, length, training=training)

    def score(self, ids, length):
        """Sum over each line of -log p(next token), the last one `</s>` ([batch] float32):
        OpenNMT-tf's `score` of a language model. ids [batch, time] are the line's tokens."""
        logits = ops.cast(self(ids, length, training=False), "float32")
        ids = ops.cast(ids, "int32")
        length = ops.cast(length, "int32")
        batch, time = ops.shape(ids)[0], ops.shape(ids)[1]
        positions = ops.arange(time)[None, :]
        shifted = ops.concatenate([ids[:, 1:], ops.zeros((batch, 1), "int32")], axis=1)
        targets = ops.where(positions == length[:, None] - 1, END_ID, shifted)
        log_probs = ops.log_softmax(logits, axis=-1)
        picked = ops.take_along_axis(log_probs, targets[:, :, None], axis=2)[:, :, 0]
        mask = ops.cast(positions < length[:, None], "float32")
        return -ops.sum(picked * mask, axis=1)

    def greedy_continue(self, ids, length, maximum_length=250):
        """Greedy continuation of each prefix ids[b, :length[b]] (prefixes may differ in length):
        a list of the generated id lists, each up to (without) `</s>` and at most
        `maximum_length` ids long, `</s>` counted. The prefixes of each length are decoded
        together, with a key/value cache."""
        ids = np.asarray(ids, np.int32)
        length = np.asarray(length, np.int32)
        generated = [None] * ids.shape[0]
        for prefix_length in np.unique(length):
            rows = np.flatnonzero(length == prefix_length)
            group = self._greedy_cached(ids[rows, :prefix_length], maximum_length)
            for row, continuation in zip(rows, group):
                generated[row] = continuation
        return generated

    def _greedy_cached(self, ids, maximum_length):
        """greedy_continue of prefixes ids [batch, time] of one length."""
        batch, time = ids.shape
        logits, cache = self.decoder.decode_cached(
            self.examples_inputter(ids), ops.arange(time), self.decoder.empty_cache(batch))
        generated = [[] for _ in range(batch)]
        done = np.zeros(batch, bool)
        for step in range(maximum_length):
            next_ids = np.asarray(logits[:, -1]).argmax(-1).astype(np.int32)
            for b in np.flatnonzero(~done):
                if next_ids[b] == END_ID:
                    done[b] = True
                else:
                    generated[b].append(int(next_ids[b]))
            if done.all() or step == maximum_length - 1:
                break
            logits, cache = self.decoder.decode_cached(
                self.examples_inputter(next_ids[:, None]), ops.arange(time + step, time + step + 1),
                cache)
        return generated

    def greedy_continue_uncached(self, ids, length, maximum_length=250):
        """greedy_continue recomputing every position at each step, all prefixes in one batch
        (a reference for the cached path)."""
        ids = np.asarray(ids, np.int32)
        length = np.asarray(length, np.int32).copy()
        batch = ids.shape[0]
        buffer = np.zeros((batch, int(length.max()) + maximum_length), np.int32)
        buffer[:, : ids.shape[1]] = ids
        generated = [[] for _ in range(batch)]
        done = np.zeros(batch, bool)
        for _ in range(maximum_length):
            width = int(length.max())
            logits = np.asarray(self(buffer[:, :width], length, training=False))
            next_ids = logits[np.arange(batch), length - 1].argmax(-1)
            for b in np.flatnonzero(~done):
                if next_ids[b] == END_ID:
                    done[b] = True
                    continue
                generated[b].append(int(next_ids[b]))
                buffer[b, length[b]] = next_ids[b]
                length[b] += 1
            if done.all():
                break
        return generated

    def get_config(self):
        config = super().get_config()
        config.update(hyperparameters=self.hyperparameters.to_dict(),
                      vocabulary_size=self.vocabulary_size,
                      maximum_position=self.maximum_position,
                      gelu_approximation=self.gelu_approximation)
        return config

    @classmethod
    def from_config(cls, config):
        hyperparameters = ModelHyperparameters.from_dict(config["hyperparameters"])
        return cls(**dict(config, hyperparameters=hyperparameters))


def gpt2_small(vocabulary_size, **kwargs):
    """OpenNMT-tf's catalog GPT2Small: 12 layers of 768 units, 12 heads, FFN 3072 with the tanh
    gelu, positions learned up to 1024, output layer tied to the embedding."""
    hyperparameters = ModelHyperparameters(num_layers=12, num_units=768, num_heads=12,
                                           ffn_inner_dim=3072, ffn_activation="gelu")
    return LanguageModel(hyperparameters, vocabulary_size, maximum_position=1024,
                         gelu_approximation=True, **kwargs)
