"""The training loop (`run.py train`; objects built by `opennmt_lite.build.trainer`).

One iteration = one optimizer update over a group of `accum_steps` batches (training/step.py).
Around it: checkpoints (with the input position, for exact resume), reports to the console,
TensorBoard and `<model_dir>/metrics.jsonl`, periodic evaluation with early stopping, a clean
stop on SIGINT/SIGTERM, and a stop that keeps the last good checkpoint if the loss is NaN.
"""

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import tempfile
import time

from opennmt_lite.checkpointing.formats import restore_for_training
from opennmt_lite.checkpointing.names import inner_optimizer
from opennmt_lite.checkpointing.store import CheckpointWriteError, checkpoint_directory
from opennmt_lite.checkpointing.training_checkpoint import (
    GROUPS_DONE, restored_trained_weights, training_checkpoint)
from opennmt_lite.errors import UserError
from opennmt_lite.layers.fast_paths import TENSORFLOW
from opennmt_lite.training.summaries import create_writer

logger = logging.getLogger("opennmt_lite")


class TrainingError(UserError, RuntimeError):
    pass


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag checked between steps (restored on exit)."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread: no handler
                pass
        return self

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            # A second Ctrl-C stops at once, without saving (`run.py` exits with status 130; the
            # newest checkpoint on disk is intact: checkpointing/store.py skips a save cut short).
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        logger.warning("%s received: finishing the current step, then saving a checkpoint", self.signal)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Reporter:
    """Accumulates step statistics and prints/records them every `every` steps."""

    def __init__(self, model_dir, every, max_step, start_step, enabled=True):
        self.enabled = enabled
        self.every = every
        self.max_step = max_step
        self.start_step = start_step
        self.writer = create_writer(model_dir) if enabled else None
        self.metrics_path = os.path.join(model_dir, "metrics.jsonl")
        self.started = time.time()
        self._reset(time.time())

    def _reset(self, now):
        self.interval_start = now
        self.steps = 0
        self.source_tokens = 0
        self.target_tokens = 0

    def update(self, step, stats, learning_rate):
        self.steps += 1
        self.source_tokens += int(stats["source_tokens"])
        self.target_tokens += int(stats["target_tokens"])
        if step % self.every != 0 or not self.enabled:
            return None
        now = time.time()
        elapsed = max(now - self.interval_start, 1e-9)
        record = {
            "step": step,
            "loss": float(stats["loss"]),
            "learning_rate": learning_rate,
            "source_tokens_per_sec": self.source_tokens / elapsed,
            "target_tokens_per_sec": self.target_tokens / elapsed,
            "tokens_per_sec": (self.source_tokens + self.target_tokens) / elapsed,
            "seconds_per_step": elapsed / self.steps,
            "elapsed": now - self.started,
        }
        eta = ""
        if self.max_step:
            remaining = (self.max_step - step) * record["seconds_per_step"]
            eta = f" | {format_duration(remaining)} left"
        logger.info(
            "step %d%s | loss %.4f | lr %.3e | %s src + %s tgt tok/s | %.2f s/step%s",
            step, f"/{self.max_step}" if self.max_step else "", record["loss"], learning_rate,
            f"{record['source_tokens_per_sec']:,.0f}", f"{record['target_tokens_per_sec']:,.0f}",
            record["seconds_per_step"], eta,
        )
        if self.writer is not None:
            self.writer.scalars(step, {
                "loss": record["loss"], "learning_rate": learning_rate,
                "tokens_per_sec/source": record["source_tokens_per_sec"],
                "tokens_per_sec/target": record["target_tokens_per_sec"]})
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        self._reset(now)
        return record


def format_duration(seconds):
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def current_learning_rate(optimizer):
    """The learning rate of the *next* update (what OpenNMT-tf logs)."""
    inner = inner_optimizer(optimizer)
    rate = inner.learning_rate
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)


def is_chief(strategy):
    """Whether this process writes the checkpoints and reports (always without a strategy)."""
    if strategy is None:
        return True
    from opennmt_lite.training.distribute import is_chief as strategy_chief

    return strategy_chief(strategy)


def numpy_groups(training_inputs, skip_groups):
    """The groups of the train step without tf.data (Keras' JAX backend): one tuple of
    `accum_steps` NumPy batches per replica's input, per update, after `skip_groups` groups,
    padded a few updates ahead in a thread (`prefetched`, as tf.data's prefetch)."""
    from opennmt_lite.data.pipeline import prefetched

    return prefetched(zip(*(t.groups(skip_groups=skip_groups) for t in training_inputs)))


class Trainer:
    """One training run over built objects (see `opennmt_lite.build.trainer`).

    `restore()` restores the newest intact opennmt-lite checkpoint of model_dir (or imports an
    OpenNMT-tf one found there); `run()` trains until max_step, early stopping, a signal, or NaN.
    """

    def __init__(self, model_dir, train_config, model, optimizer, training_inputs, train_step,
                 strategy=None, evaluator=None, moving_average=None):
        """Objects built by `opennmt_lite.build.trainer`; `train_config` is the `train` section.
        `training_inputs` holds one TrainingInput per local replica; `moving_average`: a
        training.moving_average.MovingAverage of the model, or None. Nothing is restored yet
        (see restore)."""
        self.moving_average = moving_average
        self.model_dir = model_dir
        self.train_config = train_config
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.chief = is_chief(strategy)
        self.evaluator = evaluator
        save_dir = checkpoint_directory(self.model_dir)
        if not self.chief:  # every worker saves (collectives), only the chief's files are kept
            self._scratch = tempfile.mkdtemp(prefix="opennmt_lite_worker_")
        self.checkpoint = training_checkpoint(
            self.model, self.optimizer,
            save_dir=save_dir if self.chief else self._scratch,
            restore_dir=save_dir,  # every worker resumes from the chief's checkpoints
            max_to_keep=train_config.keep_checkpoint_max,
            averages=moving_average.averages if moving_average else None,
        )
        # Groups of batches consumed so far: saved with the weights so that a resumed run reads
        # the data from where the interrupted one stopped.
        self.groups_done = self.checkpoint.variables[GROUPS_DONE]
        self.restored = None
        self.max_step = train_config.max_step
        self.training_inputs = training_inputs
        self.training_input = training_inputs[0]
        stats = self.training_input.stats
        logger.info(
            "training data%s: %d examples kept, %d dropped %s; %d batch(es) per step "
            "(accum_steps) on each of %d replica(s)",
            f" (shard {stats.shard_index + 1}/{stats.num_shards})" if stats.num_shards > 1 else "",
            stats.num_examples, stats.num_dropped, stats.dropped, self.training_input.accum_steps,
            strategy.num_replicas_in_sync if strategy else len(training_inputs),
        )
        self.train_step = train_step
        self.last_saved = None

    def restore(self):
        """Restores the newest readable opennmt-lite checkpoint of model_dir, else imports an
        OpenNMT-tf one (or an average or vocabulary update) found directly in model_dir; returns
        its prefix, or None (training starts from scratch). TrainingError if the step restored
        already reaches train.max_step."""
        self.restored = restore_for_training(self.checkpoint, self.model_dir)
        if self.moving_average is not None:
            if restored_trained_weights(self.checkpoint):
                self.moving_average.fresh = False  # (the averages were restored too)
            else:
                self.moving_average.start_from_weights()
        if self.max_step is not None and self.step >= self.max_step:
            raise TrainingError(
                f"the checkpoint is at step {self.step}, which reaches train.max_step="
                f"{self.max_step}: raise max_step to train further"
            )
        self.last_saved = self.step if self.restored else None
        return self.restored

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def save(self):
        if self.last_saved != self.step:
            try:
                path = self.checkpoint.save(self.step)
            except CheckpointWriteError as error:  # a full disk, a read-only model_dir...
                newest = self.checkpoint.latest
                resume = (f"the next run resumes from {newest}, the newest intact checkpoint"
                          if newest else "no checkpoint to resume from: the next run starts over")
                raise CheckpointWriteError(f"{error}; {resume}") from None
            self.last_saved = self.step
            if self.chief:
                logger.info("saved checkpoint %s", path)

    def evaluate(self, step):
        """Runs the evaluator (and its export on best) on the averaged weights if there is a
        moving average, as OpenNMT-tf does."""
        if self.moving_average is None:
            return self.evaluator(step)
        with self.moving_average.averaged_weights():
            return self.evaluator(step)

    def run(self):
        """Trains; returns {"step", "loss", "stopped", "checkpoint"}."""
        train_config = self.train_config
        reporter = Reporter(self.model_dir, train_config.save_summary_steps, self.max_step, self.step,
                            enabled=self.chief)
        save_every = train_config.save_checkpoints_steps
        evaluator = self.evaluator
        summary = {"stopped": "max_step", "step": self.step, "loss": None}
        # One group per local replica, each replica reading its own shard.
        skip = int(self.groups_done.numpy())
        if TENSORFLOW:
            import tensorflow as tf

            dataset = tf.data.Dataset.zip(
                tuple(t.dataset(skip_groups=skip) for t in self.training_inputs))
        else:
            dataset = numpy_groups(self.training_inputs, skip)
        with StopRequest() as stop, contextlib.closing(dataset) if not TENSORFLOW \
                else contextlib.nullcontext():
            for group in dataset:
                result = self.train_step(group)
                self.groups_done.assign_add(1)
                step = self.step
                if self.moving_average is not None:
                    self.moving_average.update(step)
                loss = float(result["loss"])
                summary.update(step=step, loss=loss)
                if not math.isfinite(loss):
                    latest = self.checkpoint.latest
                    message = (
                        f"training stopped at step {step}: the loss is {loss}. "
                        + (f"The last good checkpoint, {latest}, is kept. " if latest
                           else "No checkpoint was saved. ")
                        + "Lower params.learning_rate or check the data."
                    )
                    logger.error(message)
                    raise TrainingError(message)
                reporter.update(step, result, current_learning_rate(self.optimizer))
                if step == 1 or (save_every and step % save_every == 0):
                    self.save()
                if evaluator is not None and evaluator.due(step):
                    self.evaluate(step)
                    if evaluator.should_stop():
                        summary["stopped"] = "early_stopping"
                        break
                if stop.signal:
                    summary["stopped"] = stop.signal
                    break
                if self.max_step is not None and step >= self.max_step:
                    break
            else:
                summary["stopped"] = "end_of_data"
            # (still under StopRequest: a first signal during the last save does not cut it short)
            self.save()
            if (evaluator is not None and summary["stopped"] in ("max_step", "end_of_data")
                    and not evaluator.evaluated(self.step)):
                self.evaluate(self.step)
        summary["checkpoint"] = self.checkpoint.latest
        if not self.chief:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if summary["stopped"] in ("SIGINT", "SIGTERM"):
            logger.info("stopped by %s at step %d; run the same command to continue",
                        summary["stopped"], self.step)
        return summary
