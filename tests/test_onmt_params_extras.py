"""OpenNMT-tf 2.32's params.dropout, params.freeze_layers, params.mask_loss_outliers, its
scheduled sampling keys and data.tagging_scheme, and its own documented configuration
(tests/fixtures/onmt_config) loaded whole."""

import copy
import json
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

from conftest import FIXTURES
from opennmt_lite import build
from opennmt_lite.checkpointing.store import contents
from opennmt_lite.cli import main
from opennmt_lite.config import ConfigError, build_config, load_config
from opennmt_lite.models import Transformer
from opennmt_lite.models.freezing import find_layers
from opennmt_lite.training.losses import outlier_mask, token_cross_entropy
from opennmt_lite.training.step import outlier_keeps, reduce_loss

DOCUMENTED = FIXTURES / "onmt_config"
SCHEDULED = ("scheduled_sampling_type", "scheduled_sampling_read_probability")


def dropout_sites(layer, path=""):
    """{attribute path: rate} of every dropout rate in `layer`'s tree (what OpenNMT-tf's
    set_dropout reaches: numeric attributes whose name contains "dropout")."""
    sites = {}
    for name, value in vars(layer).items():
        where = f"{path}/{name}" if path else name
        if name.startswith("_"):
            continue
        if isinstance(value, keras.layers.Layer):
            sites.update(dropout_sites(value, where))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if isinstance(item, keras.layers.Layer):
                    sites.update(dropout_sites(item, f"{where}/{index}"))
        elif "dropout" in name and isinstance(value, (int, float)) and not isinstance(value, bool):
            sites[where] = value
    return sites


# ---------------------------------------------------------------------------------------------
# OpenNMT-tf's documented configuration


def documented_user():
    with open(DOCUMENTED / "configuration.yml", encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def test_the_documented_configuration_loads(monkeypatch, caplog):
    monkeypatch.chdir(DOCUMENTED)  # (its target_tokenization file: config/tokenization/)
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        config = load_config("configuration.yml")
    assert config.data.train_files_weights is None
    assert config.params.guided_alignment_type is None
    assert config.train.moving_average_decay == 0.9999
    assert (config.eval.export_on_best, config.eval.early_stopping.min_improvement) == ("bleu", 0.01)
    assert config.params.regularization == {"type": "l2", "scale": (0.0, 1e-4)}  # (`1e-4`: a string)
    assert config.params.freeze_layers == ("encoder/layers/0", "decoder/output_layer")
    assert config.params.mask_loss_outliers is False
    assert config.data.target_tokenization.params["mode"] == "aggressive"
    # params.dropout: 0.3 overrides every rate of the preset's (0.1)
    hyper = config.model.hyperparameters
    assert (hyper.dropout, hyper.attention_dropout, hyper.ffn_dropout, hyper.embedding_dropout,
            hyper.layer_input_dropout) == (0.3,) * 5
    for name in ("data.tagging_scheme", "params.scheduled_sampling_k"):
        assert f"configuration.yml: {name} has no effect in opennmt-lite" in caplog.text
    # Its scheduled sampling (constant, read probability 1) is what OpenNMT-tf's Transformer
    # refuses to train with: each key alone is refused, naming it; without both, what remains is
    # its alignment file without guided_alignment_type (another of the documented values).
    with pytest.raises(ConfigError,
                       match="^params.scheduled_sampling_type: scheduled sampling is not supported"):
        config.check_training()
    for name in SCHEDULED:
        user = documented_user()
        user["params"].pop(next(other for other in SCHEDULED if other != name))
        with pytest.raises(ConfigError) as error:
            build_config(user).check_training()
        assert str(error.value).startswith(f"params.{name}: scheduled sampling is not supported "
                                           "by the Transformer's decoder (OpenNMT-tf 2.32 refuses")
        assert "\n" not in str(error.value)
    user = documented_user()
    for name in SCHEDULED:
        user["params"].pop(name)
    with pytest.raises(ConfigError, match="^data.train_alignments is set but"):
        build_config(user).check_training()


def test_regularization_scales_written_as_strings_read_as_float_reads_them():
    # (YAML 1.1 reads `1e-4` as a string; OpenNMT-tf calls float() on it)
    assert tiny_config({"regularization": {"type": "l1_l2", "scale": ["1e-4", 2e-4]}}).params.regularization \
        == {"type": "l1_l2", "scale": (1e-4, 2e-4)}
    with pytest.raises(ConfigError,
                       match=r"^config: params.regularization.scale: expected a number, got 'abc'$"):
        tiny_config({"regularization": {"type": "l2", "scale": "abc"}})


# ---------------------------------------------------------------------------------------------
# params.dropout


TINY = {"num_layers": 1, "num_units": 16, "num_heads": 2, "ffn_inner_dim": 16,
        "dropout": 0.1, "attention_dropout": 0.2, "ffn_dropout": 0.3}


def tiny_config(params=None, model=None, **sections):
    return build_config({"model_dir": "unused", "auto_config": False,
                         "model": dict(TINY, **(model or {})), "params": params or {}, **sections})


def test_dropout_override_reaches_what_opennmt_tf_set_dropout_reaches():
    plain = Transformer(tiny_config().model.hyperparameters, 11, 13)
    sites = dropout_sites(plain)
    # OpenNMT-tf's Transformer of one layer has 19 dropout attributes (its set_dropout prints
    # them): each stack's input dropout, each WordEmbedder's, each TransformerLayerWrapper's input
    # and output dropouts (2 in the encoder, 3 in the decoder), each attention's, each FFN's.
    assert len(sites) == 19
    kinds = sorted(set(sites.values()))
    assert kinds == [0.0, 0.1, 0.2, 0.3]  # (embedder and wrapper inputs: 0, as in OpenNMT-tf)
    assert sorted(path for path, v in sites.items() if v == 0) == sorted(
        ["source_inputter/dropout", "target_inputter/dropout",
         "encoder/layers/0/self_attention/input_dropout",
         "encoder/layers/0/ffn/input_dropout", "decoder/layers/0/self_attention/input_dropout",
         "decoder/layers/0/attention/0/input_dropout", "decoder/layers/0/ffn/input_dropout"])
    overridden = Transformer(tiny_config({"dropout": 0.25}).model.hyperparameters, 11, 13)
    assert dropout_sites(overridden) == {path: 0.25 for path in sites}
    # each site really drops: it has its seed generator
    for sublayer in overridden._flatten_layers():
        for name, value in vars(sublayer).items():
            if "dropout" in name and isinstance(value, float):
                assert getattr(sublayer, f"{name}_seed") is not None, (sublayer.name, name)
    embedded = overridden.source_inputter(tf.ones([4, 50], tf.int32), training=True).numpy()
    assert 0.15 < np.mean(embedded == 0) < 0.35
    # the model section's own rates are overridden too, whatever they are
    config = tiny_config({"dropout": 0.0}, model={"dropout": 0.5})
    assert config.model.dropout == 0.0 and config.model.ffn_dropout == 0.0


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_dropout_out_of_range_is_refused(value):
    with pytest.raises(ConfigError, match=rf"config: params.dropout must be in \[0, 1\), got {value}"):
        tiny_config({"dropout": value})


# ---------------------------------------------------------------------------------------------
# params.freeze_layers


@pytest.fixture(scope="module")
def run_user(tmp_path_factory):
    """A two-layer model (num_units 32) on a small pre-tokenized corpus, dropout 0.3 (params),
    with OpenNMT-tf's paths of its first encoder layer, source embedding and output layer frozen,
    and mask_loss_outliers on."""
    tmp_path = tmp_path_factory.mktemp("freeze")
    corpus = FIXTURES / "onmt_bucket_boundary"
    data = {"train_features_file": str(corpus / "train.src"),
            "train_labels_file": str(corpus / "train.tgt"),
            "source_vocabulary": str(corpus / "vocab.txt"),
            "target_vocabulary": str(corpus / "vocab.txt")}
    return {"model_dir": str(tmp_path / "run"), "auto_config": False, "data": data,
            "model": {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 32},
            "params": {"optimizer": "Adam", "learning_rate": 0.01, "dropout": 0.3,
                       "mask_loss_outliers": True,
                       "freeze_layers": ["encoder/layers/0", "examples_inputter/features_inputter",
                                         "decoder/output_layer"]},
            "train": {"batch_type": "tokens", "batch_size": 512, "max_step": 2,
                      "save_checkpoints_steps": 2, "sub_batches": 1, "seed": 7}}


@pytest.fixture(scope="module")
def trained(run_user):
    """(trainer after 2 steps, {variable path: value before training})."""
    from opennmt_lite.checkpointing.names import named_variables

    trainer = build.trainer(build_config(run_user))
    before = {path: v.numpy().copy()
              for path, v in named_variables(trainer.model, include_seeds=False).items()}
    assert trainer.run()["step"] == 2
    return trainer, before


def test_frozen_layers_do_not_move_the_others_do(trained):
    from opennmt_lite.checkpointing.names import named_variables

    trainer, before = trained
    model = trainer.model
    frozen_prefixes = ("encoder/layers/0/", "source_inputter/", "decoder/output_layer/")
    moved = {}
    for path, variable in named_variables(model, include_seeds=False).items():
        frozen = path.startswith(frozen_prefixes)
        assert variable.trainable is not frozen, path
        moved[path] = not np.array_equal(variable.numpy(), before[path])
        if frozen:
            assert not moved[path], path
    assert all(moved[path] for path in moved if path.startswith(("encoder/layers/1/", "target_inputter/",
                                                                 "decoder/layers/"))
               and "layer_norm" not in path)
    # no Adam moments for the frozen weights in the checkpoint
    stored = contents(trainer.checkpoint.latest)
    assert "optimizer/m/encoder/layers/1/ffn/layer/inner/kernel" in stored
    assert not any(name.startswith("optimizer/") and any(p in name for p in frozen_prefixes)
                   for name in stored)
    # frozen layers drop nothing; the others keep params.dropout
    rates = dropout_sites(model)
    assert {v for path, v in rates.items() if path.startswith("encoder/layers/0/")} == {0}
    assert {v for path, v in rates.items() if path.startswith("decoder/layers/")} == {0.3}
    assert model.source_inputter.dropout == 0 and model.target_inputter.dropout == 0.3
    assert model.encoder.dropout == 0.3 and model.encoder.layers[1].ffn.output_dropout == 0.3


@pytest.mark.parametrize("value", [[3], [""], ["encoder", None]])
def test_a_path_that_is_not_a_string_is_refused_at_load(value):
    with pytest.raises(ConfigError, match="^config: params.freeze_layers: expected a layer path"):
        tiny_config({"freeze_layers": value})


def test_a_run_resumed_with_the_layers_unfrozen_trains_them(run_user, trained, tmp_path):
    """Freeze, then unfreeze on resume (fine-tuning): the checkpoint has no Adam moments for
    the frozen weights; they start at zero, as in OpenNMT-tf, and the weights move."""
    import shutil

    trainer, _ = trained
    model_dir = str(tmp_path / "run")
    shutil.copytree(run_user["model_dir"], model_dir)
    params = {k: v for k, v in run_user["params"].items() if k != "freeze_layers"}
    train = dict(run_user["train"], max_step=3, save_checkpoints_steps=100)
    resumed = build.trainer(build_config(dict(run_user, model_dir=model_dir, params=params, train=train)))
    kernel = resumed.model.encoder.layers[0].ffn.layer.inner.kernel
    frozen = trainer.model.encoder.layers[0].ffn.layer.inner.kernel.numpy()
    np.testing.assert_array_equal(kernel.numpy(), frozen)
    assert kernel.trainable and resumed.run()["step"] == 3
    assert not np.array_equal(kernel.numpy(), frozen)
    assert "optimizer/m/encoder/layers/0/ffn/layer/inner/kernel" in contents(resumed.checkpoint.latest)


def test_paths_follow_opennmt_tf_names(run_user):
    assert tiny_config({"freeze_layers": "encoder"}).params.freeze_layers == ("encoder",)

    config = build_config(run_user)
    model = build.model(config.model, build.assets(config.data))
    assert find_layers(model, "examples_inputter") == [model.source_inputter, model.target_inputter]
    assert find_layers(model, "labels_inputter") == [model.target_inputter]
    assert find_layers(model, "decoder/layers/1/attention/0/layer") == [
        model.decoder.layers[1].attention[0].layer]
    assert find_layers(model, "encoder/layers/0/ffn/layer/inner") == [
        model.encoder.layers[0].ffn.layer.inner]


def test_a_shared_table_frozen_in_one_holder_stays_trained(run_user, caplog):
    """share_embeddings: target: the output layer's kernel is the target table; freezing the
    output layer freezes its bias only (OpenNMT-tf collects the table from the inputter)."""
    config = build_config(dict(
        run_user, model=dict(run_user["model"], share_embeddings="target"),
        params=dict(run_user["params"], freeze_layers="decoder/output_layer")))
    model = build.model(config.model, build.assets(config.data))
    build.freeze(model, config.params)
    assert model.decoder.output_layer.kernel is model.target_inputter.embedding
    assert model.target_inputter.embedding.trainable
    assert not model.decoder.output_layer.bias.trainable
    # shared input tables: one layer here, two in OpenNMT-tf, where the other holder keeps the
    # table trained: freezing one side freezes nothing (a warning); both sides freeze it
    params = {k: v for k, v in run_user["params"].items() if k != "dropout"}  # (0.3 everywhere)
    config = build_config(dict(run_user, model=dict(run_user["model"], share_embeddings="all"),
                               params=dict(params, freeze_layers="labels_inputter")))
    model = build.model(config.model, build.assets(config.data))
    assert find_layers(model, "examples_inputter") == [model.source_inputter] * 2
    with caplog.at_level(logging.WARNING, logger="opennmt_lite"):
        assert find_layers(model, "labels_inputter") == []
        build.freeze(model, config.params)
    assert "shared with the other inputter" in caplog.text and "nothing is frozen" in caplog.text
    assert model.source_inputter.embedding.trainable
    # ... but one side cannot drop out alone here (params.dropout: 0.3 reaches the embeddings)
    config = build_config(dict(run_user, model=dict(run_user["model"], share_embeddings="all")))
    model = build.model(config.model, build.assets(config.data))
    with pytest.raises(ConfigError, match="^params.freeze_layers: 'features_inputter': with "
                       "model.share_embeddings: all the source and target inputters are one layer"):
        find_layers(model, "features_inputter")


@pytest.mark.parametrize("path, message", [
    ("encoder/layers/2", "encoder/layers is a list of 2 layers, '2' is not an index of it"),
    ("encoder/layer/0", "encoder has no attribute 'layer'"),
    ("examples_inputter/source_inputter",
     "examples_inputter has no 'source_inputter' (its layers: features_inputter, labels_inputter)"),
    ("encoder/layers/0/ffn/layer/inner/kernel", "names a Variable, not a layer"),
])
def test_a_path_naming_no_layer_is_one_line_exit_2(run_user, tmp_path, capsys, path, message):
    user = copy.deepcopy(run_user)
    user["params"]["freeze_layers"] = path
    user["model_dir"] = str(tmp_path / "run")
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(user))
    assert main(["train", "--config", str(config)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[-1] == f"error: params.freeze_layers: {path!r}: {message}"


def test_scheduled_sampling_is_refused_to_train_exit_2(run_user, tmp_path, capsys):
    user = copy.deepcopy(run_user)
    user["params"]["scheduled_sampling_read_probability"] = 1.0
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(user))
    assert main(["train", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "error: params.scheduled_sampling_read_probability: scheduled sampling is not supported")


# ---------------------------------------------------------------------------------------------
# params.mask_loss_outliers

with open(FIXTURES / "onmt_tf_outliers" / "outliers.json", encoding="utf-8") as stream:
    OUTLIER_BATCHES = json.load(stream)


def numpy_keep(scores):
    """The reference: numpy's "nearest" percentiles (index rounded half to even, as
    tfp.stats.percentile's default) and the Q3 + 1.5 IQR threshold."""
    q1, q3 = np.percentile(scores, [25, 75], method="nearest")
    return (scores <= q3 + 1.5 * (q3 - q1)).astype(np.float32)


@pytest.mark.parametrize("index", range(len(OUTLIER_BATCHES)))
def test_outlier_masking_equals_opennmt_tf(index):
    case = OUTLIER_BATCHES[index]
    logits, labels = tf.constant(case["logits"]), tf.constant(case["labels"])
    lengths = tf.constant(case["lengths"])
    for result in case["results"]:
        smoothing = result["label_smoothing"]
        outputs = token_cross_entropy(logits, labels, lengths, smoothing, training=True) + (None,)
        batch = {"target_length": lengths}
        if result["weighted"]:
            batch["example_weight"] = tf.constant(case["weights"])
        token_loss, mask, _ = outputs
        keep = outlier_mask(tf.reduce_sum(token_loss, -1), tf.reduce_sum(mask, -1))
        scores = (tf.reduce_sum(token_loss, -1) / tf.reduce_sum(mask, -1)).numpy()
        np.testing.assert_array_equal(keep.numpy(), numpy_keep(scores))
        loss, normalizer = reduce_loss(batch, outputs, result["average_in_time"], keep=keep)
        np.testing.assert_allclose(loss.numpy(), result["loss"], rtol=1e-6)
        np.testing.assert_allclose(normalizer.numpy(), result["normalizer"], rtol=1e-6)
        # the same keep, whichever slices the batch is cut into (its statistics are the batch's)
        cut = 3
        slices = [tuple(t[:cut] for t in outputs[:2]) + (None,),
                  tuple(t[cut:] for t in outputs[:2]) + (None,)]
        np.testing.assert_array_equal(tf.concat(outlier_keeps(slices), 0).numpy(), keep.numpy())
    assert 0 < keep.numpy().sum() <= len(case["lengths"])


def test_nearest_rank_rounds_half_to_even():
    # 5 values: (n - 1) * 0.25 = 1 and * 0.75 = 3; 7 values: 1.5 -> 2 and 4.5 -> 4 (half to even)
    for values in ([1.0, 2.0, 3.0, 4.0, 20.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 50.0]):
        scores = np.array(values, np.float32)
        keep = outlier_mask(tf.constant(scores), tf.ones_like(scores)).numpy()
        np.testing.assert_array_equal(keep, numpy_keep(scores))
        assert keep[-1] == 0 and keep[:-1].all()


def test_the_train_step_masks_over_the_whole_batch(run_user, trained):
    """batch_gradients with mask_loss_outliers: the loss and normalizer of the masked examples
    left out, computed on the whole batch's scores whether the batch is cut in 1 or 3 slices.
    One example's target is a token the output bias makes unlikely: the outlier."""
    from opennmt_lite.training.step import batch_gradients

    assert tiny_config().params.mask_loss_outliers is False
    assert trained[0].train_step.mask_outliers is True
    keras.utils.set_random_seed(3)
    hyper = tiny_config(model={"dropout": 0.0, "attention_dropout": 0.0, "ffn_dropout": 0.0})
    model = Transformer(hyper.model.hyperparameters, 9, 9)
    model.build()
    model.decoder.output_layer.bias.assign(np.where(np.arange(9) == 1, -6.0, 2.0).astype(np.float32))
    targets = [[2, 3, 4], [5, 2, 0], [3, 3, 0], [1, 1, 1], [4, 2, 6], [6, 5, 0], [2, 0, 0]]
    lengths = [3, 3, 2, 3, 3, 2, 1]
    batch = {"source_ids": tf.constant([[2, 3, 4, 5]] * 7),
             "source_length": tf.constant([4, 3, 4, 2, 4, 4, 3]),
             "target_ids_in": tf.constant(targets), "target_ids_out": tf.constant(targets),
             "target_length": tf.constant(lengths)}
    logits, _ = model(batch, training=True)
    token_loss, mask = token_cross_entropy(logits, batch["target_ids_out"], batch["target_length"],
                                           0.1, training=True)
    scores = (tf.reduce_sum(token_loss, -1) / tf.reduce_sum(mask, -1)).numpy()
    keep = numpy_keep(scores)
    assert keep.tolist() == [1, 1, 1, 0, 1, 1, 1]
    expected = (token_loss.numpy() * keep[:, None]).sum()
    optimizer = keras.optimizers.SGD(0.1)
    for parts in (1, 3):
        _, loss, normalizer = batch_gradients(model, optimizer, batch, 0.1, False, parts,
                                              mask_outliers=True)
        np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
        assert normalizer.numpy() == 6.0  # examples kept (average_loss_in_time false)
    _, loss, normalizer = batch_gradients(model, optimizer, batch, 0.1, True, 1)
    np.testing.assert_allclose(loss.numpy(), token_loss.numpy().sum(), rtol=1e-5)
    assert normalizer.numpy() == sum(lengths)
