"""Evaluation of a sequence tagger or classifier, as OpenNMT-tf 2.32's `eval` computes it: the
loss, its perplexity, and the model's metrics: token accuracy over the real positions (tagger)
or label accuracy (classifier), and with `data.tagging_scheme: bioes` the chunk precision,
recall and F1 of inference/tagging_metrics.py.

The loss is OpenNMT-tf's: summed cross-entropy over the tags (or labels) divided by their number;
with CRF, each batch's mean of minus the log-likelihood, averaged over the batches (OpenNMT-tf's
CRF loss is a per-batch mean, and its evaluation averages per-batch losses then). The batches
are eval.batch_size lines in file order.

The periodic machinery (history, TensorBoard, early stopping, export on best) is the Transformer
evaluator's (inference/evaluation.py). On TensorFlow the loss is a tf.function and the predictions
the model's eager call; on JAX both are one `jax.jit` function of the weights, compiled once per
padded batch shape (`other_models.padded_batch`).
"""

import math

import keras
import numpy as np

from opennmt_lite.data.labels import load_labeled_corpus
from opennmt_lite.data.pipeline import pad_parallel_batch
from opennmt_lite.inference.evaluation import Evaluator
from opennmt_lite.inference.other_models import padded_batch, predict
from opennmt_lite.inference.portable_decoding import jit_with_weights
from opennmt_lite.inference.tagging_metrics import tagging_metrics
from opennmt_lite.training.losses import encoder_model_losses

# What the loss and the predictions read of a batch.
BATCH_KEYS = ("source_ids", "source_length", "target_ids_out", "target_length")


def labeled_batches(corpus, batch_size):
    """The padded batches of every example of `corpus`, `batch_size` lines each, in file order."""
    for start in range(0, len(corpus), batch_size):
        yield pad_parallel_batch(corpus, np.arange(start, min(start + batch_size, len(corpus))),
                                 with_index=True)


def batch_function(model):
    """A function (batch of NumPy arrays: `BATCH_KEYS`) -> NumPy (losses, mask, predictions):
    `encoder_model_losses`' per-token (or per-example) losses and mask, and the model's tag ids
    [batch, time] or label ids [batch] (`other_models.predict`)."""
    if keras.backend.backend() == "jax":
        return _jax_batch_function(model)
    import tensorflow as tf

    losses = tf.function(lambda batch: encoder_model_losses(model, batch)[:2],
                         reduce_retracing=True)

    def call(batch):
        loss, mask = losses({k: tf.constant(batch[k]) for k in BATCH_KEYS})
        predictions = predict(model, batch["source_ids"], batch["source_length"])
        return loss.numpy(), mask.numpy(), np.asarray(predictions)

    return call


def _jax_batch_function(model):
    def outputs(batch):
        loss, mask, _ = encoder_model_losses(model, batch)
        return loss, mask, predict(model, batch["source_ids"], batch["source_length"])

    compiled = jit_with_weights(model, outputs)

    def call(batch):
        # (the added rows copy the first example: cut from every output; a classifier's one
        # label per example keeps its one column)
        padded, rows = padded_batch({k: batch[k] for k in BATCH_KEYS},
                                    keep_time=() if hasattr(model, "predict_tags")
                                    else ("target_ids_out",))
        return tuple(np.asarray(x)[:rows] for x in compiled(padded))

    return call


class EncoderModelEvaluator(Evaluator):
    """`Evaluator` of a SequenceTagger or SequenceClassifier on the evaluation files."""

    def __init__(self, model, assets, features_file, labels_file, kind, eval_config, directory,
                 tagging_scheme=None, current_step=0, exporter=None, export_directory=None):
        self._keep_records(model, assets, eval_config, directory, current_step, exporter,
                           export_directory)
        self.kind = kind
        self.tagging_scheme = tagging_scheme
        self.corpus = load_labeled_corpus(
            features_file, labels_file, kind, source_vocabulary=assets.source_vocabulary,
            labels=assets.target_vocabulary, source_tokenizer=assets.source_tokenizer,
            filter_examples=False)
        self.batch_size = eval_config.batch_size
        self._outputs = batch_function(model)

    def compute(self, step):
        """{"step", "loss", "perplexity", "accuracy"[, "f1", "precision", "recall"]}."""
        crf = getattr(self.model, "crf_decoding", False)
        loss_sum = normalizer = 0.0
        gold, predicted = [], []
        for batch in labeled_batches(self.corpus, self.batch_size):
            losses, mask, predictions = self._outputs(batch)
            losses, mask = float(np.sum(losses)), float(np.sum(mask))
            if crf:  # (the batch's mean, averaged over batches)
                loss_sum, normalizer = loss_sum + losses / mask, normalizer + 1
            else:
                loss_sum, normalizer = loss_sum + losses, normalizer + mask
            length = batch["target_length"]
            if self.kind == "tags":
                gold.extend(list(row[:n]) for row, n in zip(batch["target_ids_out"], length))
                predicted.extend(list(row[:n]) for row, n in zip(predictions, length))
            else:
                gold.extend([int(row[0])] for row in batch["target_ids_out"])
                predicted.extend([int(label)] for label in predictions)
        loss = loss_sum / max(normalizer, 1.0)
        metrics = {"step": step, "loss": loss, "perplexity": math.exp(min(loss, 700.0))}
        names = self.assets.target_vocabulary
        computed = tagging_metrics(
            [[names[i] for i in row] for row in gold], [[names[i] for i in row] for row in predicted],
            self.tagging_scheme if self.kind == "tags" else None)
        # (in the order OpenNMT-tf prints them)
        for name in ("accuracy", "f1", "precision", "recall"):
            if name in computed:
                metrics[name] = computed[name]
        return metrics
