"""OpenNMT-tf's models made of the self-attention encoder alone: SequenceTagger (a tag per token,
optionally CRF-decoded) and SequenceClassifier (a label per sequence).

Both embed the token ids (WordEmbedder, depth = num_units), run the existing
SelfAttentionEncoder over them and project with a Dense `output_layer`, as OpenNMT-tf 2.32's
`opennmt.models.SequenceTagger` / `SequenceClassifier` do; attribute names follow OpenNMT-tf's so
that its checkpoints map one to one (opennmt_lite/checkpointing/onmt_encoder_models.py).
"""

import keras
from keras import ops

from opennmt_lite import PACKAGE
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.layers import crf
from opennmt_lite.layers.common import Dense
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.recorder import record, recording_scope


def is_encoder_model(model):
    """Whether `model` is a SequenceTagger or SequenceClassifier (not a Transformer)."""
    return isinstance(model, _EncoderModel)


class _EncoderModel(keras.Model):
    """The embedder, the encoder and the output layer of `num_outputs` units."""

    def __init__(self, hyperparameters, source_vocabulary_size, num_outputs, **kwargs):
        super().__init__(**kwargs)
        self.hyperparameters = hyperparameters
        self.source_vocabulary_size = int(source_vocabulary_size)
        self.num_outputs = int(num_outputs)
        self.features_inputter = WordEmbedder(
            source_vocabulary_size, hyperparameters.num_units,
            dropout=hyperparameters.embedding_dropout, dtype=self.dtype_policy,
            name="features_inputter")
        self.encoder = SelfAttentionEncoder(hyperparameters, dtype=self.dtype_policy,
                                            name="encoder")
        self.output_layer = Dense(self.num_outputs, dtype=self.dtype_policy, name="output_layer")

    def build(self, input_shape=None):
        units = self.hyperparameters.num_units
        self.features_inputter.build()
        self.encoder.build((None, None, units))
        self.output_layer.build((None, units))
        self.built = True

    def encode(self, ids, length, training=None):
        """ids [batch, time], length [batch] -> encoder outputs [batch, time, num_units]
        (recorded as the Transformer's: `source_embedded`, then under `encoder/`, so that
        `run.py inspect` walks through it)."""
        embedded = self.features_inputter(ids, training=training)
        record("source_embedded", embedded)
        with recording_scope("encoder"):
            return self.encoder(embedded, sequence_length=length, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(hyperparameters=self.hyperparameters.to_dict(),
                      source_vocabulary_size=self.source_vocabulary_size,
                      num_outputs=self.num_outputs)
        return config

    @classmethod
    def from_config(cls, config):
        hyperparameters = ModelHyperparameters.from_dict(config["hyperparameters"])
        return cls(**dict(config, hyperparameters=hyperparameters))


@keras.saving.register_keras_serializable(package=PACKAGE)
class SequenceTagger(_EncoderModel):
    """A tag per token.

    call(ids [batch, time], length [batch]) -> logits [batch, time, num_tags];
    predict_tags(...) -> tag ids [batch, time] (valid up to each length); loss(...) -> scalar.

    With `crf_decoding`, a `transition_params` [num_tags, num_tags] weight: the loss is minus the
    batch mean of the CRF log-likelihood and the tags its Viterbi path (opennmt_lite/layers/crf.py);
    without, the tags are the per-token argmax.
    """

    def __init__(self, hyperparameters, source_vocabulary_size, num_outputs, crf_decoding=False,
                 **kwargs):
        super().__init__(hyperparameters, source_vocabulary_size, num_outputs, **kwargs)
        self.crf_decoding = bool(crf_decoding)
        self.transition_params = None

    def build(self, input_shape=None):
        super().build(input_shape)
        if self.crf_decoding:
            self.transition_params = self.add_weight(
                name="transition_params", shape=(self.num_outputs, self.num_outputs),
                initializer="glorot_uniform")

    def call(self, ids, length, training=None):
        return self.output_layer(self.encode(ids, length, training=training))

    def predict_tags(self, ids, length):
        """-> tag ids [batch, time] int32 (inference mode)."""
        logits = ops.cast(self(ids, length, training=False), "float32")
        if self.crf_decoding:
            tags, _ = crf.crf_decode(logits, self.transition_params, length)
            return tags
        return ops.cast(ops.argmax(logits, axis=-1), "int32")

    def crf_loss(self, logits, tags, length):
        """OpenNMT-tf's CRF loss: -sum(log-likelihood) / batch size."""
        log_likelihood = crf.crf_log_likelihood(logits, tags, length, self.transition_params)
        return -ops.mean(log_likelihood)

    def get_config(self):
        config = super().get_config()
        config.update(crf_decoding=self.crf_decoding)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SequenceClassifier(_EncoderModel):
    """A label per sequence: the encoder outputs averaged over the real positions (OpenNMT-tf's
    pooling when the encoder returns no state), then the output layer.

    call(ids [batch, time], length [batch]) -> logits [batch, num_labels];
    predict_labels(...) -> label ids [batch].
    """

    def pool(self, outputs, length):
        """Mean of outputs [batch, time, depth] over each sequence's first `length` positions
        -> [batch, depth]."""
        mask = ops.arange(ops.shape(outputs)[1])[None, :] < ops.cast(length, "int32")[:, None]
        mask = ops.cast(mask, outputs.dtype)[:, :, None]
        total = ops.sum(outputs * mask, axis=1)
        return total / ops.cast(length, outputs.dtype)[:, None]

    def call(self, ids, length, training=None):
        outputs = self.encode(ids, length, training=training)
        return self.output_layer(self.pool(outputs, length))

    def predict_labels(self, ids, length):
        logits = self(ids, length, training=False)
        return ops.cast(ops.argmax(logits, axis=-1), "int32")
