"""Transformer sub-layers: feed-forward network, the residual wrapper, encoder and decoder layers."""

import keras
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.layers import fast_paths
from opennmt_lite.layers.attention import MultiHeadAttention
from opennmt_lite.layers.common import (
    Dense,
    LayerWrapper,
    apply_dropout,
    dtype_name,
    make_seed_generator,
)
from opennmt_lite.recorder import record, recording_scope


@keras.saving.register_keras_serializable(package=PACKAGE)
class FeedForwardNetwork(keras.layers.Layer):
    """outer(dropout(activation(inner(x)))), on [batch, time, depth] -> [batch, time, output_dim].

    Records `inner` (the activation, before dropout) and `output`. In training with ReLU and
    dropout, with the fast paths on, Dense + ReLU + dropout run as one op
    (`fast_paths.dense_relu_dropout`) whether or not something records: that path has no
    pre-dropout activation, so it records `output` only.
    """

    def __init__(self, inner_dim, output_dim, dropout=0.1, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.inner_dim = inner_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.activation = activation
        self.inner = Dense(inner_dim, activation=activation, dtype=self.dtype_policy, name="inner")
        self.outer = Dense(output_dim, dtype=self.dtype_policy, name="outer")
        self.dropout_seed = make_seed_generator(dropout)

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.outer.build(tuple(input_shape[:-1]) + (self.inner_dim,))

    def call(self, inputs, training=None):
        dense = self.inner
        if (fast_paths.enabled() and training and self.dropout > 0 and self.activation == "relu"
                and not dense.transpose and dtype_name(inputs) != "float16"):
            # Dense, ReLU and dropout as one op whose gradient keeps less (memory). Not in
            # float16, where Dense pads its kernel to a multiple of 8 for Tensor Cores.
            inner = fast_paths.dense_relu_dropout(
                inputs, ops.cast(dense.kernel, inputs.dtype), ops.cast(dense.bias, inputs.dtype),
                self.dropout, self.dropout_seed)
        else:
            inner = self.inner(inputs)
            record("inner", inner)
            inner = apply_dropout(inner, self.dropout, self.dropout_seed, training)
        outputs = self.outer(inner)
        record("output", outputs)
        return outputs

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            inner_dim=self.inner_dim,
            output_dim=self.output_dim,
            dropout=self.dropout,
            activation=self.activation,
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerLayerWrapper(LayerWrapper):
    """The Transformer's residual block around a sub-layer.

    pre_norm=True:  y = dropout(layer(layer_norm(x))) + x
    pre_norm=False: y = layer_norm(dropout(layer(x)) + x)
    """

    def __init__(self, layer, output_dropout, pre_norm=True, input_dropout=0.0, **kwargs):
        for key in ("normalize_input", "normalize_output", "residual_connection"):
            kwargs.pop(key, None)  # fixed by pre_norm; present when restored from get_config()
        super().__init__(
            layer,
            normalize_input=pre_norm,
            normalize_output=not pre_norm,
            input_dropout=input_dropout,
            output_dropout=output_dropout,
            residual_connection=True,
            **kwargs,
        )
        self.pre_norm = pre_norm

    def get_config(self):
        config = super().get_config()
        config.update(pre_norm=self.pre_norm)
        return config


class _TransformerLayer(keras.layers.Layer):
    """What the encoder and decoder layers share: the model's hyper-parameters (a
    `ModelHyperparameters`, of which a layer reads the sizes, dropouts, activation, biases,
    relative positions and pre_norm) and how their sub-layers are made: each an attention or
    feed-forward network in a TransformerLayerWrapper, built with the layer's dtype policy."""

    def __init__(self, hyperparameters, **kwargs):
        super().__init__(**kwargs)
        self.hyperparameters = hyperparameters

    def _wrapped(self, layer, name):
        return TransformerLayerWrapper(
            layer, self.hyperparameters.dropout, pre_norm=self.hyperparameters.pre_norm,
            input_dropout=self.hyperparameters.layer_input_dropout, dtype=self.dtype_policy, name=name,
        )

    def _attention(self, name, memory=False):
        """Self-attention (with the relative positions, if any) or attention over the memory
        (no relative positions; returns its attention weights)."""
        hyper = self.hyperparameters
        attention = MultiHeadAttention(
            hyper.num_heads,
            hyper.num_units,
            bias=hyper.mha_bias,
            dropout=hyper.attention_dropout,
            maximum_relative_position=None if memory else hyper.maximum_relative_position,
            return_attention=memory,
            dtype=self.dtype_policy,
            name="layer",
        )
        return self._wrapped(attention, name)

    def _ffn(self):
        hyper = self.hyperparameters
        ffn = FeedForwardNetwork(
            hyper.ffn_inner_dim,
            hyper.num_units,
            dropout=hyper.ffn_dropout,
            activation=hyper.ffn_activation,
            dtype=self.dtype_policy,
            name="layer",
        )
        return self._wrapped(ffn, "ffn")

    def get_config(self):
        config = super().get_config()
        config.update(hyperparameters=self.hyperparameters.to_dict())
        return config

    @classmethod
    def from_config(cls, config):
        hyperparameters = ModelHyperparameters.from_dict(config["hyperparameters"])
        return cls(**dict(config, hyperparameters=hyperparameters))


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttentionEncoderLayer(_TransformerLayer):
    """Self-attention then feed-forward, each in a TransformerLayerWrapper.

    call(inputs [batch, time, depth], attention_mask [batch, time] (1 = real token),
         positions [time] (absolute, for relative positions; None: 0 .. time - 1))
    -> [batch, time, depth]

    Records the sub-layers' tensors under `self_attention/` and `ffn/`, then output.
    """

    def __init__(self, hyperparameters, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.ffn = self._ffn()

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)

    def call(self, inputs, attention_mask=None, positions=None, training=None):
        # (Not named `mask`: Keras gives that argument name its own masking semantics.)
        with recording_scope("self_attention"):
            outputs, _ = self.self_attention(
                inputs, attention_mask=attention_mask, positions=positions, training=training
            )
        with recording_scope("ffn"):
            outputs = self.ffn(outputs, training=training)
        record("output", outputs)
        return outputs

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttentionDecoderLayer(_TransformerLayer):
    """Masked self-attention, attention over the encoder output (memory), then feed-forward.

    call(inputs [batch, time, depth], attention_mask [batch, time, time] (future and padding),
         memory [batch, src_time, depth], memory_mask [batch, src_time],
         cache: {"self_kv": (k, v), "memory_kv": (k, v)} for step-by-step decoding,
         positions [time] (absolute, for relative positions; None: 0 .. time - 1),
         cache_index: the self-attention's `cache_index` when "self_kv" holds `DecodingCache`
         buffers, or cache_slot when it holds fixed-size buffers (see MultiHeadAttention))
    -> (outputs [batch, time, depth], new cache, attention over memory [batch, heads, time, src_time])

    `attention` is a list with one wrapper per source, as in OpenNMT-tf (checkpoint path
    `attention/0/...`); opennmt-lite uses exactly one source.

    Records the sub-layers' tensors under `self_attention/`, `attention/` and `ffn/`, then output.
    """

    def __init__(self, hyperparameters, **kwargs):
        super().__init__(hyperparameters, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.attention = [self._attention("attention_0", memory=True)]
        self.ffn = self._ffn()

    def build(self, inputs_shape, memory_shape=None):
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        self.self_attention.build(inputs_shape)
        # The memory attention's keys/values project the memory, whose depth may differ.
        wrapper = self.attention[0]
        wrapper.layer.build(inputs_shape, memory_shape)
        wrapper.build(inputs_shape)
        wrapper.built = True
        self.ffn.build(inputs_shape)

    def call(
        self,
        inputs,
        attention_mask=None,
        memory=None,
        memory_mask=None,
        cache=None,
        positions=None,
        training=None,
        cache_index=None,
        cache_slot=None,
    ):
        cache = cache or {}
        with recording_scope("self_attention"):
            outputs, self_kv = self.self_attention(
                inputs,
                attention_mask=attention_mask,
                cache=cache.get("self_kv"),
                positions=positions,
                training=training,
                cache_index=cache_index,
                cache_slot=cache_slot,
            )
        with recording_scope("attention"):
            outputs, memory_kv, attention = self.attention[0](
                outputs,
                memory=memory,
                attention_mask=memory_mask,
                cache=cache.get("memory_kv"),
                training=training,
            )
        with recording_scope("ffn"):
            outputs = self.ffn(outputs, training=training)
        record("output", outputs)
        return outputs, {"self_kv": self_kv, "memory_kv": memory_kv}, attention

    # No compute_output_shape: symbolic calls trace `call` for its (outputs, cache, attention).
