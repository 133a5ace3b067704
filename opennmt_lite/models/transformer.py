"""The Transformer sequence-to-sequence model."""

import keras

from opennmt_lite import PACKAGE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models.decoders import SelfAttentionDecoder
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.recorder import record, recording_scope


@keras.saving.register_keras_serializable(package=PACKAGE)
class Transformer(keras.Model):
    """Encoder-decoder Transformer.

    call(features) with features = {"source_ids" [batch, src_time], "source_length" [batch],
    "target_ids_in" [batch, tgt_time], "target_length" [batch]}
    -> (logits [batch, tgt_time, target_vocabulary_size], attention [batch, tgt_time, src_time])

    `hyperparameters`: a `ModelHyperparameters` (opennmt_lite.hyperparameters), handed to the
    encoder, the decoder and their layers; `share_embeddings` there says which tables are shared
    (sharing the input tables needs one vocabulary for source and target).

    Records source_embedded, the encoder's tensors under `encoder/`, target_embedded and the
    decoder's under `decoder/` (see opennmt_lite.recorder).
    """

    def __init__(self, hyperparameters, source_vocabulary_size, target_vocabulary_size, **kwargs):
        super().__init__(**kwargs)
        if hyperparameters.shares_input_embeddings and (
            source_vocabulary_size != target_vocabulary_size
        ):
            raise ValueError(
                f"share_embeddings={hyperparameters.share_embeddings!r} needs one vocabulary for "
                f"source and target, got sizes {source_vocabulary_size} and {target_vocabulary_size}"
            )
        self.hyperparameters = hyperparameters
        self.source_vocabulary_size = source_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        units = hyperparameters.num_units
        self.source_inputter = WordEmbedder(
            source_vocabulary_size, units, dropout=hyperparameters.embedding_dropout,
            dtype=self.dtype_policy, name="source_inputter"
        )
        if hyperparameters.shares_input_embeddings:
            self.target_inputter = self.source_inputter
        else:
            self.target_inputter = WordEmbedder(
                target_vocabulary_size, units, dropout=hyperparameters.embedding_dropout,
                dtype=self.dtype_policy, name="target_inputter"
            )
        self.encoder = SelfAttentionEncoder(hyperparameters, dtype=self.dtype_policy, name="encoder")
        self.decoder = SelfAttentionDecoder(
            hyperparameters, target_vocabulary_size, dtype=self.dtype_policy, name="decoder"
        )

    def build(self, input_shape=None):
        units = self.hyperparameters.num_units
        self.source_inputter.build()
        if not self.target_inputter.built:
            self.target_inputter.build()
        if self.hyperparameters.shares_output_embedding:
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
        # Layer's config (name, trainable, dtype policy), the hyper-parameters and the sizes.
        config = super().get_config()
        config.update(hyperparameters=self.hyperparameters.to_dict(),
                      source_vocabulary_size=self.source_vocabulary_size,
                      target_vocabulary_size=self.target_vocabulary_size)
        return config

    @classmethod
    def from_config(cls, config):
        hyperparameters = ModelHyperparameters.from_dict(config["hyperparameters"])
        return cls(**dict(config, hyperparameters=hyperparameters))
