"""Bounded batch shapes for XLA (train.jit_compile, batching.ShapePlan / ShapePlanner): few
fixed shapes, the token budget kept, every example once, exact resume; and a jit-compiled train
step on such a padded batch computes the plain step's loss and gradients."""

import collections
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURES
from opennmt_lite.data import TrainingInput
from opennmt_lite.data.batching import ShapePlan, ShapePlanner
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from training_helpers import make_optimizer, make_train_step

# (150 pairs of 1 to 23 words)
DATA = FIXTURES / "onmt_bucket_boundary"
VOCABULARY = Vocabulary.from_file(str(DATA / "vocab.txt"))
BUDGET = 128
MAX_SHAPES = 4


def shaped_input(**arguments):
    values = dict(source_vocabulary=VOCABULARY, target_vocabulary=VOCABULARY, batch_size=BUDGET,
                  batch_type="tokens", batch_size_multiple=2, max_shapes=MAX_SHAPES, seed=3)
    values.update(arguments)
    return TrainingInput(str(DATA / "train.src"), str(DATA / "train.tgt"), **values)


def test_plan_bounds_the_shapes_and_covers_every_example():
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 90, 3000), rng.integers(2, 70, 3000)
    plan = ShapePlan(source, target, batch_size=2048, batch_size_multiple=8, max_shapes=5,
                     length_multiple=4)
    assert len(plan.shapes) == 5
    held = plan.shapes[plan.example_shape]
    assert (held[:, 0] >= source).all() and (held[:, 1] >= target).all()
    assert (plan.shapes % 4 == 0).all()
    assert plan.shapes.max(0).tolist() == [92, 72]  # the corner holding everything
    assert (plan.sizes % 8 == 0).all() and (plan.sizes * plan.shapes.max(1) <= 2048).all()
    # more shapes, less padding
    finer = ShapePlan(source, target, batch_size=2048, max_shapes=20, length_multiple=4)
    assert finer.padding_fraction() < plan.padding_fraction()


def test_batches_take_few_shapes_within_the_budget():
    data = shaped_input()
    plan = data.shape_plan
    assert len(plan.shapes) <= MAX_SHAPES
    shapes = collections.Counter()
    for number, batch in zip(range(200), data.numpy_batches()):  # (several epochs)
        size, source_time = batch["source_ids"].shape
        target_time = batch["target_ids_in"].shape[1]
        shapes[size, source_time, target_time] += 1
        assert size % 2 == 0 and size * max(source_time, target_time) <= BUDGET
        assert batch["source_length"].max() <= source_time
        assert batch["target_length"].max() <= target_time
    assert len(shapes) <= len(plan.shapes)
    assert set(shapes) <= {(int(n), int(s), int(t)) for (s, t), n in zip(plan.shapes, plan.sizes)}


def test_every_example_once_per_pass_and_across_epochs():
    data = shaped_input(repeat=False)
    seen = np.concatenate(list(data.index_batches()))
    assert np.array_equal(np.sort(seen), np.arange(len(data.corpus)))
    # repeating: what is carried out of an epoch comes in the next one, so after E epochs
    # plus the carry every example has come E times
    planner = ShapePlanner(data.shape_plan)
    counts = np.zeros(len(data.corpus), np.int64)
    for epoch in range(3):
        rng = np.random.default_rng([1, epoch])
        batches, dropped = planner.plan_epoch(rng.permutation(len(data.corpus)), rng, final=False)
        assert len(dropped) == 0
        for batch in batches:
            assert len(batch) == data.shape_plan.sizes[data.shape_plan.example_shape[batch[0]]]
            np.add.at(counts, batch, 1)
    np.add.at(counts, planner.carry, 1)
    assert (counts == 3).all()


def test_resume_is_exact():
    data = shaped_input(sample_buffer_size=40)
    stream = [b for _, b in zip(range(120), data.index_batches())]
    resumed = [b for _, b in zip(range(120 - 47), data.index_batches(skip_batches=47))]
    assert len(resumed) == 120 - 47
    assert all(np.array_equal(a, b) for a, b in zip(stream[47:], resumed))
    full = [b for _, b in zip(range(3), data.numpy_batches(skip_batches=47))]
    again = [b for _, b in zip(range(3), shaped_input(sample_buffer_size=40).numpy_batches(
        skip_batches=47))]
    for a, b in zip(full, again):
        assert all(np.array_equal(a[k], b[k]) for k in a)


def make_model():
    keras.utils.set_random_seed(11)
    model = Transformer(ModelHyperparameters(
        num_layers=1, num_units=32, num_heads=2, ffn_inner_dim=32, dropout=0.0,
        attention_dropout=0.0, ffn_dropout=0.0, maximum_relative_position=4),
        len(VOCABULARY) + 1, len(VOCABULARY) + 1)
    model.build()
    return model


def test_jit_step_on_a_shaped_batch_equals_the_plain_step():
    """Padding to the plan's shape changes no number (loss and normalizer count real tokens
    only), and XLA computes what the plain step computes: the same update."""
    data = shaped_input()
    indices = next(iter(data.index_batches()))[:6]
    shaped = data._pad(0, indices)
    data.shape_plan = None
    plain = data._pad(0, indices)
    assert shaped["source_ids"].shape[1] > plain["source_ids"].shape[1] \
        or shaped["target_ids_in"].shape[1] > plain["target_ids_in"].shape[1]
    results = []
    for batch, jit in ((plain, False), (shaped, True)):
        model = make_model()
        optimizer = make_optimizer({"optimizer": "SGD", "learning_rate": 0.5})
        optimizer.build(model.trainable_variables)
        step = make_train_step(model, optimizer, 1, label_smoothing=0.1,
                               jit_compile=jit)
        batch = {k: tf.constant(v) for k, v in batch.items()}
        stats = step(((batch,),))
        results.append((float(stats["loss"]), float(stats["normalizer"]),
                        [v.numpy() for v in model.trainable_variables]))
    (loss, normalizer, weights), (xla_loss, xla_normalizer, xla_weights) = results
    assert xla_normalizer == normalizer
    assert abs(xla_loss - loss) <= 1e-5 * abs(loss)
    scale = max(np.abs(w).max() for w in weights)
    assert max(np.abs(a - b).max() for a, b in zip(weights, xla_weights)) <= 1e-5 * scale


def xla_config(tmp_path, **train):
    from opennmt_lite.config import build_config

    vocabulary = str(DATA / "vocab.txt")
    return build_config({
        "model_dir": str(tmp_path), "auto_config": False, "model": {"preset": "TransformerTiny"},
        "data": {"train_features_file": str(DATA / "train.src"),
                 "train_labels_file": str(DATA / "train.tgt"),
                 "source_vocabulary": vocabulary, "target_vocabulary": vocabulary},
        "train": {"batch_type": "tokens", "batch_size": 256, "jit_compile": True, **train}})


def test_the_config_keys_reach_the_training_input(tmp_path, monkeypatch):
    from opennmt_lite import build
    from opennmt_lite.config import ConfigError

    config = xla_config(tmp_path, xla_shapes=3)
    assets = build.assets(config.data)
    (sorted_input,) = build.training_inputs(config.data, config.train, assets, None)
    assert len(sorted_input.shape_plan.shapes) == 3
    assert (sorted_input.shape_plan.sizes % 8 == 0).all()  # OpenNMT-tf's multiple under XLA
    # the opennmt scheme under XLA is OpenNMT-tf's XLA mode: width >= 8, bucket boundary
    config = xla_config(tmp_path, batching="opennmt", length_bucket_width=2)
    (bucketed,) = build.training_inputs(config.data, config.train, assets, None)
    assert bucketed.shape_plan is None and bucketed.bucket_width == 8
    widths = {batch["source_ids"].shape[1] % 8 for _, batch in zip(range(20), bucketed.numpy_batches())}
    assert widths == {0}
    # without XLA, nothing changes
    config = xla_config(tmp_path, jit_compile=False)
    (plain,) = build.training_inputs(config.data, config.train, assets, None)
    assert plain.shape_plan is None and plain.batch_size_multiple == 1
    with pytest.raises(ConfigError, match="train.sub_batches=2 with train.jit_compile"):
        xla_config(tmp_path, sub_batches=2).check_training()



def test_the_xla_cache_is_set_before_tensorflow_starts(tmp_path, monkeypatch):
    from opennmt_lite import cpu
    from opennmt_lite.cli import before_tensorflow

    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    config = tmp_path / "c.yml"
    config.write_text(f"model_dir: {tmp_path}/run\nmodel: {{preset: TransformerTiny}}\n"
                      "train: {jit_compile: true}\n")
    before_tensorflow(["train", "--config", str(config), "--log_level", "INFO"])
    assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_persistent_cache_directory={tmp_path}/run/xla_cache"
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_persistent_cache_directory=/elsewhere")
    cpu.use_xla_cache(str(tmp_path))
    assert os.environ["TF_XLA_FLAGS"] == "--tf_xla_persistent_cache_directory=/elsewhere"
    monkeypatch.delenv("TF_XLA_FLAGS")
    config.write_text(f"model_dir: {tmp_path}/run\nmodel: {{preset: TransformerTiny}}\n")
    before_tensorflow(["train", "--config", str(config)])
    assert "TF_XLA_FLAGS" not in os.environ


def test_jit_compile_warns_on_avx512_cpus(tmp_path, monkeypatch, caplog):
    from opennmt_lite import build, cpu

    monkeypatch.setattr(cpu, "gpu_present", lambda: False)
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo("flags : avx2 avx512f"))
    build.warn_surprises(xla_config(tmp_path).train)
    assert "XLA's train step ran at 0.45x" in caplog.text
    caplog.clear()
    build.warn_surprises(xla_config(tmp_path, jit_compile=False).train)
    monkeypatch.setattr(cpu, "cpu_features", lambda: cpu.parse_cpuinfo("flags : avx2 fma"))
    build.warn_surprises(xla_config(tmp_path).train)
    assert "XLA" not in caplog.text


def test_long_sentences_coarsen_the_grid():
    rng = np.random.default_rng(1)
    source, target = rng.integers(1, 2000, 5000), rng.integers(1, 2000, 5000)
    plan = ShapePlan(source, target, batch_size=4096, max_shapes=16, length_multiple=4)
    assert plan.length_multiple > 4 and len(plan.shapes) == 16
    held = plan.shapes[plan.example_shape]
    assert (held[:, 0] >= source).all() and (held[:, 1] >= target).all()
