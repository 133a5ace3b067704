"""Periodic evaluation during training: loss, perplexity, BLEU/chrF, and early stopping.

As in OpenNMT-tf: the loss is the validation set's summed cross-entropy (no label smoothing)
divided by its number of target tokens, perplexity = exp(loss); scorers compare the detokenized
greedy translations with the raw lines of `eval_labels_file` using sacrebleu. Evaluation results
are appended to `<model_dir>/eval/history.jsonl` (read back on resume, for early stopping) and
written to TensorBoard under `<model_dir>/eval`.

Export on best (eval.export_on_best), as OpenNMT-tf: after an evaluation whose metric is the best
of the history so far (strictly), the model is exported to `<model_dir>/export/<step>` by the
exporter build.best_model_exporter made for eval.export_format; then only the newest
eval.max_exports_to_keep exports are kept. An export is written beside its destination and moved
there once complete; one that fails is logged in one line and training goes on.
"""

import json
import logging
import math
import os
import shutil
import tempfile

import numpy as np
import sacrebleu

from opennmt_lite.config import LOWER_IS_BETTER
from opennmt_lite.data import batch_signature, read_lines
from opennmt_lite.data.pipeline import TRAINING_KEYS
from opennmt_lite.layers.fast_paths import TENSORFLOW
from opennmt_lite.outputs import describe
from opennmt_lite.training.losses import cross_entropy_sequence_loss
from opennmt_lite.training.summaries import create_writer

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


def detokenize(ids, length, assets, noise=None):
    tokens = assets.target_vocabulary.to_tokens(np.asarray(ids)[: int(length)])
    return assets.target_tokenizer.detokenize(noise(tokens) if noise else tokens)


def best_hypotheses(result):
    """(ids [batch, time], lengths [batch]) NumPy of each sentence's best hypothesis, from a
    decoding result: TensorFlow's DecodingResult of tensors, or the JAX loop's (a result with
    NumPy `ids`/`lengths`, or the tuple (ids, lengths, log_probs))."""
    ids, lengths = result[:2] if isinstance(result, tuple) else (result.ids, result.lengths)
    ids, lengths = (np.asarray(x.numpy() if hasattr(x, "numpy") else x) for x in (ids, lengths))
    return ids[:, 0], lengths[:, 0]


def _padded(size, multiple):
    return max(-(-int(size) // multiple) * multiple, multiple)


def padded_sources(source_ids, source_length, time_multiple=16, rows_multiple=8):
    """A source batch padded as `jax_loss_function` pads (extra rows: copies of the first)."""
    rows, time = source_ids.shape
    total = _padded(rows, rows_multiple)
    ids = np.zeros((total, _padded(time, time_multiple)), source_ids.dtype)
    ids[:rows, :time] = source_ids
    ids[rows:, :time] = source_ids[:1]
    lengths = np.concatenate([source_length, np.repeat(source_length[:1], total - rows)])
    return ids, lengths


def jax_loss_function(model, time_multiple=16, rows_multiple=8):
    """The evaluation loss of a batch on Keras' JAX backend: (summed cross-entropy, target
    tokens) by the model in inference mode, compiled by `jax.jit` once per padded shape (each
    length rounded up to `time_multiple`, the rows to `rows_multiple`: few shapes whatever the
    batches; the added rows copy the first example and weigh 0, so they add nothing)."""
    import jax

    trainable, non_trainable = model.trainable_variables, model.non_trainable_variables

    @jax.jit
    def summed(trainable_values, non_trainable_values, batch, weight):
        (logits, _), _ = model.stateless_call(trainable_values, non_trainable_values, batch,
                                              training=False)
        return cross_entropy_sequence_loss(logits, batch["target_ids_out"], batch["target_length"],
                                           example_weight=weight)

    def call(batch):
        rows = len(batch["source_length"])
        total = _padded(rows, rows_multiple)
        padded = {}
        for name in ("source_ids", "source_length", "target_ids_in", "target_ids_out",
                     "target_length"):
            value = np.asarray(batch[name])
            value = np.concatenate([value, np.repeat(value[:1], total - rows, axis=0)])
            if value.ndim == 2:
                value = np.pad(value, [(0, 0), (0, _padded(value.shape[1], time_multiple)
                                                - value.shape[1])])
            padded[name] = value
        weight = (np.arange(total) < rows).astype(np.float32)
        return summed([v.value for v in trainable], [v.value for v in non_trainable], padded,
                      weight)

    return call


class Evaluator:
    """Evaluates a model on a built `EvaluationInput` every `eval_config.steps` steps (the `eval`
    section), writing under `directory`; its translations decode with `options` (a
    DecodingOptions: build.evaluator's greedy search). `exporter(directory, step)` writes the
    model into an empty directory (eval.export_on_best; None: no export), under `export_directory`."""

    def __init__(self, model, assets, evaluation_input, references_file, eval_config, directory,
                 options, current_step=0, exporter=None, export_directory=None):
        self._keep_records(model, assets, eval_config, directory, current_step, exporter,
                           export_directory, scorers=eval_config.scorers)
        self.input = evaluation_input
        self.references = read_lines(references_file)
        if TENSORFLOW:
            import tensorflow as tf

            from opennmt_lite.inference.decoding import translation_function

            self._loss = tf.function(self._batch_loss, input_signature=[batch_signature()])
            self._decode = translation_function(model, options)
        else:
            from opennmt_lite.inference import portable_decoding

            self._loss = jax_loss_function(model)
            self._decode = portable_decoding.translation_function(model, options)
        self.options = options

    def _keep_records(self, model, assets, eval_config, directory, current_step, exporter,
                      export_directory, scorers=()):
        """What every evaluator keeps: its model, schedule, scorers, early stopping, directory
        (made), summary writer, history (read back up to `current_step`) and export on best."""
        self.model = model
        self.assets = assets
        self.every = eval_config.steps
        self.scorers = list(scorers)
        self.early_stopping = eval_config.early_stopping
        self.save_predictions = eval_config.save_eval_predictions or bool(self.scorers)
        self.directory = directory
        os.makedirs(self.directory, exist_ok=True)
        self.writer = create_writer(self.directory)
        self.history_path = os.path.join(self.directory, "history.jsonl")
        self.history = self._read_history(current_step)
        self.export_on_best = eval_config.export_on_best if exporter is not None else None
        self.max_exports_to_keep = eval_config.max_exports_to_keep
        self.exporter = exporter
        self.export_directory = export_directory

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
        # (params.decoding_noise, as OpenNMT-tf noises its evaluation predictions; the same
        # draws at each evaluation)
        noise = self.options.token_noise()
        for batch in self.input.numpy_batches():
            source_ids, source_length = batch["source_ids"], batch["source_length"]
            if not TENSORFLOW:  # (few shapes for jax.jit: the rows after the batch's are cut)
                source_ids, source_length = padded_sources(source_ids, source_length)
            ids, lengths = best_hypotheses(self._decode(source_ids, source_length))
            for index, row, length in zip(batch["index"], ids, lengths):
                predictions[int(index)] = detokenize(row, length, self.assets, noise)
        return predictions

    def __call__(self, step):
        """Evaluates, records the metrics, exports if the model is the best so far; returns the
        metrics."""
        metrics = self.compute(step)
        self.record(metrics)
        if self.exporter is not None:
            self.export_if_best(step, metrics)
        return metrics

    def compute(self, step):
        """{"step", "loss", "perplexity", and each scorer} of the model as it is now."""
        loss_sum, tokens = 0.0, 0.0
        for batch in self.input.numpy_batches():
            batch_loss, batch_tokens = self._loss({k: batch[k] for k in TRAINING_KEYS})
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
        return metrics

    def record(self, metrics):
        """Logs the metrics and appends them to TensorBoard, history.jsonl and the history."""
        step = metrics["step"]
        logger.info(
            "evaluation at step %d: %s", step,
            ", ".join(f"{k} = {v:.4f}" for k, v in metrics.items() if k != "step"),
        )
        if self.writer is not None:
            self.writer.scalars(step, {f"metrics/{name}": value
                                       for name, value in metrics.items() if name != "step"})
        with open(self.history_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        self.history.append(metrics)

    def is_best(self, metric):
        """Whether the newest value of `metric` beats every earlier one (OpenNMT-tf's rule)."""
        values = [entry[metric] for entry in self.history if metric in entry]
        if not values:
            return False
        if len(values) == 1:
            return True
        if metric in LOWER_IS_BETTER:
            return values[-1] < min(values[:-1])
        return values[-1] > max(values[:-1])

    def export_if_best(self, step, metrics):
        """Exports to export_directory/<step> if export_on_best is at its best, then removes the
        exports beyond max_exports_to_keep. A failure is logged; nothing is raised."""
        metric = self.export_on_best
        if metric is not None and self.is_best(metric):
            target = os.path.join(self.export_directory, str(step))
            logger.info("exporting the model to %s (best %s so far: %.4f)", target, metric,
                        metrics[metric])
            try:
                self._export(target, step)
            except Exception as error:  # (whatever the exporter raises: training goes on)
                logger.error("export to %s failed, training goes on: %s", target, describe(error))
        try:
            self._remove_old_exports()
        except OSError as error:
            logger.error("removing old exports from %s failed: %s", self.export_directory,
                         describe(error))

    def _export(self, target, step):
        os.makedirs(self.export_directory, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", dir=self.export_directory)
        try:
            self.exporter(staging, step)
            if os.path.isdir(target):  # (the same step evaluated again after a resume)
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _remove_old_exports(self):
        """Keeps the newest max_exports_to_keep exports (directories named by their step)."""
        if self.max_exports_to_keep is None or not os.path.isdir(self.export_directory):
            return
        steps = sorted(int(name) for name in os.listdir(self.export_directory) if name.isdigit()
                       and os.path.isdir(os.path.join(self.export_directory, name)))
        for step in steps[: max(len(steps) - self.max_exports_to_keep, 0)]:
            shutil.rmtree(os.path.join(self.export_directory, str(step)))
            logger.info("removed the export %s (eval.max_exports_to_keep: %d)",
                        os.path.join(self.export_directory, str(step)), self.max_exports_to_keep)

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
