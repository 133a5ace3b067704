"""The Transformer sequence-to-sequence model and OpenNMT-tf's catalog presets."""

import keras

from opennmt_lite import PACKAGE
from opennmt_lite.models.decoders import SelfAttentionDecoder
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.recorder import record, recording_scope

SHARE_EMBEDDINGS = ("none", "source_target_input", "target", "all")

# OpenNMT-tf 2.32's opennmt/models/catalog.py, hyper-parameter for hyper-parameter.
_BASE = dict(num_layers=6, num_units=512, num_heads=8, ffn_inner_dim=2048, dropout=0.1,
             attention_dropout=0.1, ffn_dropout=0.1, maximum_relative_position=None,
             pre_norm=True, share_embeddings="none")
_BIG = dict(_BASE, num_units=1024, num_heads=16, ffn_inner_dim=4096)
PRESETS = {
    "Transformer": dict(_BASE),
    "TransformerBase": dict(_BASE),
    "TransformerBig": dict(_BIG),
    "TransformerRelative": dict(_BASE, maximum_relative_position=20),
    "TransformerBaseRelative": dict(_BASE, maximum_relative_position=20),
    "TransformerBigRelative": dict(_BIG, maximum_relative_position=20),
    "TransformerBaseSharedEmbeddings": dict(_BASE, share_embeddings="all"),
    "TransformerBigSharedEmbeddings": dict(_BIG, share_embeddings="all"),
    "TransformerTiny": dict(_BASE, num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=64),
}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Transformer(keras.Model):
    """Encoder-decoder Transformer.

    call(features) with features = {"source_ids" [batch, src_time], "source_length" [batch],
    "target_ids_in" [batch, tgt_time], "target_length" [batch]}
    -> (logits [batch, tgt_time, target_vocabulary_size], attention [batch, tgt_time, src_time])

    share_embeddings: "none"; "source_target_input" (one table for source and target inputs,
    which then need the same vocabulary); "target" (target input table = output projection);
    "all" (both).

    Records source_embedded, the encoder's tensors under `encoder/`, target_embedded and the
    decoder's under `decoder/` (see opennmt_lite.recorder).
    """

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        num_layers=6,
        num_units=512,
        num_heads=8,
        ffn_inner_dim=2048,
        dropout=0.1,
        attention_dropout=0.1,
        ffn_dropout=0.1,
        ffn_activation="relu",
        maximum_relative_position=None,
        pre_norm=True,
        position_encoding="auto",
        share_embeddings="none",
        output_layer_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if share_embeddings not in SHARE_EMBEDDINGS:
            raise ValueError(f"share_embeddings must be one of {SHARE_EMBEDDINGS}, got {share_embeddings!r}")
        if share_embeddings in ("source_target_input", "all") and (
            source_vocabulary_size != target_vocabulary_size
        ):
            raise ValueError(
                f"share_embeddings={share_embeddings!r} needs one vocabulary for source and target, "
                f"got sizes {source_vocabulary_size} and {target_vocabulary_size}"
            )
        self.hyper_parameters = dict(
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            num_layers=num_layers,
            num_units=num_units,
            num_heads=num_heads,
            ffn_inner_dim=ffn_inner_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            ffn_activation=ffn_activation,
            maximum_relative_position=maximum_relative_position,
            pre_norm=pre_norm,
            position_encoding=position_encoding,
            share_embeddings=share_embeddings,
            output_layer_bias=output_layer_bias,
        )
        # What the encoder and the decoder take (the rest is the model's own).
        common = {key: value for key, value in self.hyper_parameters.items() if key not in (
            "source_vocabulary_size", "target_vocabulary_size", "num_layers", "share_embeddings",
            "output_layer_bias")}
        self.source_inputter = WordEmbedder(
            source_vocabulary_size, num_units, dtype=self.dtype_policy, name="source_inputter"
        )
        if share_embeddings in ("source_target_input", "all"):
            self.target_inputter = self.source_inputter
        else:
            self.target_inputter = WordEmbedder(
                target_vocabulary_size, num_units, dtype=self.dtype_policy, name="target_inputter"
            )
        self.encoder = SelfAttentionEncoder(
            num_layers, dtype=self.dtype_policy, name="encoder", **common
        )
        self.decoder = SelfAttentionDecoder(
            num_layers, target_vocabulary_size, output_layer_bias=output_layer_bias,
            dtype=self.dtype_policy, name="decoder", **common,
        )

    @property
    def share_embeddings(self):
        return self.hyper_parameters["share_embeddings"]

    def build(self, input_shape=None):
        units = self.hyper_parameters["num_units"]
        self.source_inputter.build()
        if not self.target_inputter.built:
            self.target_inputter.build()
        if self.share_embeddings in ("target", "all"):
            self.decoder.share_output_embedding(self.target_inputter.embedding)
        self.encoder.build((None, None, units))
        self.decoder.build((None, None, units), (None, None, units))
        self.built = True

    def encode(self, source_ids, source_length, training=None):
        """-> encoder outputs [batch, src_time, depth]."""
        embedded = self.source_inputter(source_ids, training=training)
        record("source_embedded", embedded)
        with recording_scope("encoder"):
            return self.encoder(embedded, sequence_length=source_length, training=training)

    def decode(self, target_ids_in, target_length, memory, memory_length, training=None):
        """Teacher forcing -> (logits [batch, tgt_time, vocab], attention [batch, tgt_time, src_time])."""
        embedded = self.target_inputter(target_ids_in, training=training)
        record("target_embedded", embedded)
        with recording_scope("decoder"):
            return self.decoder(
                embedded, sequence_length=target_length, memory=memory,
                memory_sequence_length=memory_length, training=training,
            )

    def call(self, features, training=None):
        memory = self.encode(features["source_ids"], features["source_length"], training=training)
        return self.decode(
            features["target_ids_in"], features["target_length"], memory,
            features["source_length"], training=training,
        )

    def get_config(self):
        # Layer's config (name, trainable, dtype policy) and the hyper-parameters.
        config = super().get_config()
        config.update(self.hyper_parameters)
        return config
