"""Evaluation of a sequence tagger or classifier, as OpenNMT-tf 2.32's `eval` computes it: the
loss, its perplexity, and the model's metrics: token accuracy over the real positions (tagger)
or label accuracy (classifier), and with `data.tagging_scheme: bioes` the chunk precision,
recall and F1 of inference/tagging_metrics.py.

The loss is OpenNMT-tf's: summed cross-entropy over the tags (or labels) divided by their number;
with CRF, each batch's mean of minus the log-likelihood, averaged over the batches (OpenNMT-tf's
CRF loss is a per-batch mean, and its evaluation averages per-batch losses then). The batches
are eval.batch_size lines in file order.

The periodic machinery (history, TensorBoard, early stopping, export on best) is the Transformer
evaluator's (inference/evaluation.py).
"""

import math

import numpy as np
import tensorflow as tf

from opennmt_lite.data.labels import load_labeled_corpus
from opennmt_lite.data.pipeline import pad_parallel_batch
from opennmt_lite.inference.evaluation import Evaluator
from opennmt_lite.inference.tagging_metrics import tagging_metrics
from opennmt_lite.training.losses import encoder_model_losses


def labeled_batches(corpus, batch_size):
    """The padded batches of every example of `corpus`, `batch_size` lines each, in file order."""
    for start in range(0, len(corpus), batch_size):
        yield pad_parallel_batch(corpus, np.arange(start, min(start + batch_size, len(corpus))),
                                 with_index=True)


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
        self._losses = tf.function(lambda batch: encoder_model_losses(model, batch)[:2],
                                   reduce_retracing=True)

    def compute(self, step):
        """{"step", "loss", "perplexity", "accuracy"[, "f1", "precision", "recall"]}."""
        crf = getattr(self.model, "crf_decoding", False)
        loss_sum = normalizer = 0.0
        gold, predicted = [], []
        for batch in labeled_batches(self.corpus, self.batch_size):
            inputs = {k: tf.constant(batch[k]) for k in
                      ("source_ids", "source_length", "target_ids_out", "target_length")}
            losses, mask = (float(tf.reduce_sum(t)) for t in self._losses(inputs))
            if crf:  # (the batch's mean, averaged over batches)
                loss_sum, normalizer = loss_sum + losses / mask, normalizer + 1
            else:
                loss_sum, normalizer = loss_sum + losses, normalizer + mask
            length = batch["target_length"]
            if self.kind == "tags":
                tags = np.asarray(self.model.predict_tags(batch["source_ids"], batch["source_length"]))
                gold.extend(list(row[:n]) for row, n in zip(batch["target_ids_out"], length))
                predicted.extend(list(row[:n]) for row, n in zip(tags, length))
            else:
                labels = np.asarray(self.model.predict_labels(batch["source_ids"],
                                                              batch["source_length"]))
                gold.extend([int(row[0])] for row in batch["target_ids_out"])
                predicted.extend([int(label)] for label in labels)
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
