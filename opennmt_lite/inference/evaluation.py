"""Periodic evaluation during training: loss, perplexity, BLEU/chrF, and early stopping.

As in OpenNMT-tf: the loss is the validation set's summed cross-entropy (no label smoothing)
divided by its number of target tokens, perplexity = exp(loss); scorers compare the detokenized
greedy translations with the raw lines of `eval_labels_file` using sacrebleu. Evaluation results
are appended to `<model_dir>/eval/history.jsonl` (read back on resume, for early stopping) and
written to TensorBoard under `<model_dir>/eval`.
"""

import json
import logging
import math
import os

import numpy as np
import sacrebleu
import tensorflow as tf

from opennmt_lite.data import batch_signature, read_lines
from opennmt_lite.inference.decoding import translation_function
from opennmt_lite.training.losses import cross_entropy_sequence_loss

logger = logging.getLogger("opennmt_lite")

SCORERS = {
    "bleu": lambda hyps, refs: sacrebleu.corpus_bleu(hyps, [refs], force=True).score,
    "chrf": lambda hyps, refs: sacrebleu.corpus_chrf(hyps, [refs]).score,
}


def early_stop(values, steps, min_improvement, higher_is_better):
    """OpenNMT-tf's rule: stop when none of the last `steps` values improved by more than
    `min_improvement` on the value `steps` evaluations earlier."""
    if len(values) < steps + 1:
        return False
    reference = values[-steps - 1]
    if higher_is_better:
        improved = [v > reference + min_improvement for v in values[-steps:]]
    else:
        improved = [v < reference - min_improvement for v in values[-steps:]]
    return not any(improved)


def detokenize(ids, length, assets):
    tokens = assets.target_vocabulary.to_tokens(np.asarray(ids)[: int(length)])
    return assets.target_tokenizer.detokenize(tokens)


class Evaluator:
    """Evaluates a model on a built `EvaluationInput` every `eval_config.steps` steps (the `eval`
    section), writing under `directory`; its translations decode with `options` (a
    DecodingOptions: build.evaluator's greedy search)."""

    def __init__(self, model, assets, evaluation_input, references_file, eval_config, directory,
                 options, current_step=0):
        self.model = model
        self.assets = assets
        self.every = eval_config.steps
        self.scorers = list(eval_config.scorers)
        self.early_stopping = eval_config.early_stopping
        self.save_predictions = eval_config.save_eval_predictions or bool(self.scorers)
        self.directory = directory
        os.makedirs(self.directory, exist_ok=True)
        self.input = evaluation_input
        self.references = read_lines(references_file)
        self._loss = tf.function(self._batch_loss, input_signature=[batch_signature()])
        self._decode = translation_function(model, options)
        self.writer = tf.summary.create_file_writer(self.directory)
        self.history_path = os.path.join(self.directory, "history.jsonl")
        self.history = self._read_history(current_step)

    def _read_history(self, current_step):
        if not os.path.exists(self.history_path):
            return []
        with open(self.history_path, encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
        return [e for e in entries if e["step"] <= current_step]

    def _batch_loss(self, batch):
        logits, _ = self.model(batch, training=False)
        return cross_entropy_sequence_loss(logits, batch["target_ids_out"], batch["target_length"])

    def due(self, step):
        return bool(self.every) and step % self.every == 0

    def evaluated(self, step):
        return bool(self.history) and self.history[-1]["step"] == step

    def translate(self):
        """Greedy translations of the evaluation sources, detokenized, in file order."""
        predictions = [None] * len(self.references)
        for batch in self.input.numpy_batches():
            result = self._decode(batch["source_ids"], batch["source_length"])
            ids, lengths = result.ids.numpy()[:, 0], result.lengths.numpy()[:, 0]
            for index, row, length in zip(batch["index"], ids, lengths):
                predictions[int(index)] = detokenize(row, length, self.assets)
        return predictions

    def __call__(self, step):
        loss_sum, tokens = 0.0, 0.0
        for batch in self.input.numpy_batches():
            batch_loss, batch_tokens = self._loss({k: batch[k] for k in batch_signature()})
            loss_sum += float(batch_loss)
            tokens += float(batch_tokens)
        loss = loss_sum / max(tokens, 1.0)
        metrics = {"step": step, "loss": loss, "perplexity": math.exp(min(loss, 700.0))}
        if self.scorers or self.save_predictions:
            predictions = self.translate()
            if self.save_predictions:
                path = os.path.join(self.directory, f"predictions.txt.{step}")
                with open(path, "w", encoding="utf-8") as f:
                    f.writelines(p + "\n" for p in predictions)
            for name in self.scorers:
                metrics[name] = SCORERS[name](predictions, self.references)
        logger.info(
            "evaluation at step %d: %s", step,
            ", ".join(f"{k} = {v:.4f}" for k, v in metrics.items() if k != "step"),
        )
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                if name != "step":
                    tf.summary.scalar(f"metrics/{name}", value)
        self.writer.flush()
        with open(self.history_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        self.history.append(metrics)
        return metrics

    def should_stop(self):
        stopping = self.early_stopping
        if not stopping:
            return False
        values = [entry[stopping.metric] for entry in self.history if stopping.metric in entry]
        stop = early_stop(values, stopping.steps, stopping.min_improvement, stopping.higher_is_better)
        if stop:
            logger.info(
                "early stopping: %s did not improve by more than %g in the last %d evaluations",
                stopping.metric, stopping.min_improvement, stopping.steps,
            )
        return stop
