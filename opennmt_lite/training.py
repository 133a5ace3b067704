"""`run.py train`: the training loop.

One iteration = one optimizer update over a group of `accum_steps` batches (training_step.py).
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

import keras
import numpy as np
import tensorflow as tf

from opennmt_lite import onmt_compat
from opennmt_lite.checkpoint import Checkpoint, checkpoint_directory
from opennmt_lite.data import TrainingInput, accum_steps as count_accum_steps
from opennmt_lite.distribute import is_chief, make_strategy, replica_shards
from opennmt_lite.optimizers import inner_optimizer, make_optimizer
from opennmt_lite.resources import create_model, find_onmt_checkpoint, load_assets, set_precision
from opennmt_lite.training_step import configure_threads, make_train_step

logger = logging.getLogger("opennmt_lite")


class TrainingError(RuntimeError):
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
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
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
        self.writer = tf.summary.create_file_writer(model_dir) if enabled else None
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
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", record["loss"])
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("tokens_per_sec/source", record["source_tokens_per_sec"])
            tf.summary.scalar("tokens_per_sec/target", record["target_tokens_per_sec"])
        self.writer.flush()
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


def batch_size_multiple(train_config, policy):
    if train_config.get("batch_size_multiple"):
        return train_config["batch_size_multiple"]
    # 8 in half precision (Tensor Core shapes; OpenNMT-tf does the same with mixed precision).
    return 8 if train_config["batch_type"] == "tokens" and policy != "float32" else 1


def make_training_input(config, assets, policy, num_shards=1, shard_index=0):
    train = config["train"]
    data = config["data"]
    for key in ("train_features_file", "train_labels_file"):
        if not data.get(key):
            raise TrainingError(f"data.{key} must be set to train")
    if not train.get("batch_size"):
        raise TrainingError("train.batch_size must be set to train")
    accum = count_accum_steps(train.get("effective_batch_size"), train["batch_size"], num_shards)
    return TrainingInput(
        data["train_features_file"], data["train_labels_file"],
        source_vocabulary=assets.source_vocabulary, target_vocabulary=assets.target_vocabulary,
        source_tokenizer=assets.source_tokenizer, target_tokenizer=assets.target_tokenizer,
        batch_size=train["batch_size"], batch_type=train["batch_type"],
        batch_size_multiple=batch_size_multiple(train, policy), scheme=train["batching"],
        length_bucket_width=train["length_bucket_width"],
        sample_buffer_size=train["sample_buffer_size"],
        maximum_features_length=train["maximum_features_length"],
        maximum_labels_length=train["maximum_labels_length"],
        shuffle=True, seed=train["seed"], repeat=not train["single_pass"],
        pad_to_multiple=train["pad_to_multiple"], accum_steps=accum,
        num_shards=num_shards, shard_index=shard_index,
    )


def grouped_dataset(training_input, skip_groups):
    """The training input's dataset of groups, starting after `skip_groups` groups (resume)."""
    accum = training_input.accum_steps

    def generate():
        batches = training_input.numpy_batches(skip_batches=skip_groups * accum)
        yield from batches

    dataset = tf.data.Dataset.from_generator(generate, output_signature=training_input.element_spec)
    if accum == 1:
        dataset = dataset.map(lambda batch: (batch,))
    return dataset.prefetch(tf.data.AUTOTUNE)


def replica_groups_dataset(training_inputs, skip_groups):
    """Elements: one group per local replica, each replica reading its own shard."""
    datasets = tuple(grouped_dataset(t, skip_groups) for t in training_inputs)
    return tf.data.Dataset.zip(datasets)


class Trainer:
    """Everything one training run holds: assets, model, optimizer, checkpoint, input, step fn.

    Construction restores the latest opennmt-lite checkpoint of model_dir (or imports an
    OpenNMT-tf one found there); `run()` trains until max_step, early stopping, a signal, or NaN.
    """

    def __init__(self, config, evaluator_factory=None):
        self.config = config
        train_config = config["train"]
        self.model_dir = config["model_dir"]
        # First, before TensorFlow starts: thread pools for sub-batches, and the CPU may have to
        # be split into logical devices.
        configure_threads(train_config["sub_batches"])
        self.strategy = make_strategy(train_config["num_devices"])
        self.chief = is_chief(self.strategy)
        os.makedirs(self.model_dir, exist_ok=True)
        self.policy = set_precision(train_config["mixed_precision"])
        keras.utils.set_random_seed(train_config["seed"])
        self.assets = load_assets(config)

        with self.strategy.scope() if self.strategy else contextlib.nullcontext():
            self.model = create_model(config, self.assets)
            self.optimizer = make_optimizer(config["params"], train_config["mixed_precision"])
            self.optimizer.build(self.model.trainable_variables)
        # Groups of batches consumed so far: saved with the weights so that a resumed run reads
        # the data from where the interrupted one stopped.
        self.groups_done = keras.Variable(0, dtype="int64", trainable=False, name="groups_done")
        directory = checkpoint_directory(self.model_dir)
        if not self.chief:  # every worker saves (collectives), only the chief's files are kept
            self._scratch = tempfile.mkdtemp(prefix="opennmt_lite_worker_")
            directory = self._scratch
        self.checkpoint = Checkpoint(
            self.model, self.optimizer, directory,
            max_to_keep=train_config["keep_checkpoint_max"],
            extra={"data/groups_done": self.groups_done},
        )
        if not self.chief:  # resume from the chief's checkpoints
            self.checkpoint.directory = checkpoint_directory(self.model_dir)
        self.restored = self.checkpoint.restore()
        if self.restored:
            logger.info("restored %s (step %d)", self.restored, self.step)
        else:
            onmt_path = find_onmt_checkpoint(self.model_dir)
            if onmt_path:
                onmt_compat.load_onmt_model(onmt_path, self.model)
                step = onmt_compat.load_onmt_optimizer_state(onmt_path, self.model, self.optimizer)
                logger.info(
                    "imported OpenNMT-tf checkpoint %s (step %d); opennmt-lite checkpoints go to %s",
                    onmt_path, step, checkpoint_directory(self.model_dir),
                )
        self.max_step = train_config["max_step"]
        if self.max_step is not None and self.step >= self.max_step:
            raise TrainingError(
                f"the checkpoint is at step {self.step}, which reaches train.max_step="
                f"{self.max_step}: raise max_step to train further"
            )
        self.training_inputs = [
            make_training_input(config, self.assets, self.policy, num_shards=n, shard_index=i)
            for n, i in replica_shards(self.strategy)
        ]
        self.training_input = self.training_inputs[0]
        stats = self.training_input.stats
        logger.info(
            "training data%s: %d examples kept, %d dropped %s; %d batch(es) per step "
            "(accum_steps) on each of %d replica(s)",
            f" (shard {stats.shard_index + 1}/{stats.num_shards})" if stats.num_shards > 1 else "",
            stats.num_examples, stats.num_dropped, stats.dropped, self.training_input.accum_steps,
            self.strategy.num_replicas_in_sync if self.strategy else 1,
        )
        params = config["params"]
        self.train_step = make_train_step(
            self.model, self.optimizer, self.training_input.accum_steps,
            label_smoothing=params["label_smoothing"],
            average_loss_in_time=params["average_loss_in_time"],
            jit_compile=train_config["jit_compile"], strategy=self.strategy,
            sub_batches=train_config["sub_batches"],
        )
        self.evaluator = (
            evaluator_factory(config, self.model, self.assets, self.step)
            if evaluator_factory and self.chief else None
        )
        self.last_saved = self.step if self.restored else None

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def save(self):
        if self.last_saved != self.step:
            path = self.checkpoint.save(self.step)
            self.last_saved = self.step
            if self.chief:
                logger.info("saved checkpoint %s", path)

    def run(self):
        """Trains; returns {"step", "loss", "stopped", "checkpoint"}."""
        train_config = self.config["train"]
        reporter = Reporter(self.model_dir, train_config["save_summary_steps"], self.max_step, self.step,
                            enabled=self.chief)
        save_every = train_config["save_checkpoints_steps"]
        evaluator = self.evaluator
        summary = {"stopped": "max_step", "step": self.step, "loss": None}
        dataset = replica_groups_dataset(self.training_inputs, int(self.groups_done.numpy()))
        with StopRequest() as stop:
            for group in dataset:
                result = self.train_step(group)
                self.groups_done.assign_add(1)
                step = self.step
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
                    evaluator(step)
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
        self.save()
        if (evaluator is not None and summary["stopped"] in ("max_step", "end_of_data")
                and not evaluator.evaluated(self.step)):
            evaluator(self.step)
        summary["checkpoint"] = self.checkpoint.latest
        if not self.chief:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if summary["stopped"] in ("SIGINT", "SIGTERM"):
            logger.info("stopped by %s at step %d; run the same command to continue",
                        summary["stopped"], self.step)
        return summary


def train(config, evaluator_factory=None):
    """Trains as configured (see Trainer). Returns a summary dict."""
    return Trainer(config, evaluator_factory).run()
