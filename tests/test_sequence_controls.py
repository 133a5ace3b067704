"""`data.source_sequence_controls` / `target_sequence_controls` (and OpenNMT-tf's older
`data.sequence_controls`): how the config reads them, what the batches hold, and, against
OpenNMT-tf 2.32's own outputs on a model it trained with a source `</s>`
(tests/fixtures/onmt_tf_seqctl/README.md), what infer, score and the exports print."""

import dataclasses

import numpy as np
import pytest
import yaml

from opennmt_lite.config import ConfigError, UNSUPPORTED_ONMT_KEYS, load_config
from opennmt_lite.data.corpus import Controls, ParallelCorpus, RaggedIds, filter_mask
from opennmt_lite.data.pipeline import pad_parallel_batch, pad_source_batch

MINIMAL = {"model_dir": "runs/x", "model": {"preset": "TransformerTiny"}}


def controls_of(tmp_path, data):
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(dict(MINIMAL, data=data)))
    config = load_config(str(path))
    return ((config.data.source_sequence_controls.start, config.data.source_sequence_controls.end),
            (config.data.target_sequence_controls.start, config.data.target_sequence_controls.end))


@pytest.mark.parametrize("data, expected", [
    ({}, ((False, False), (True, True))),  # OpenNMT-tf's defaults
    ({"source_sequence_controls": {"start": False, "end": True}}, ((False, True), (True, True))),
    ({"source_sequence_controls": {"end": True}}, ((False, True), (True, True))),  # missing = false
    ({"target_sequence_controls": {"end": True}}, ((False, False), (False, True))),
    ({"target_sequence_controls": {"start": True, "end": None}}, ((False, False), (True, False))),
    ({"target_sequence_controls": {}}, ((False, False), (True, True))),  # empty: the default
    # the older unprefixed key applies to each side whose own key is unset (or null)
    ({"sequence_controls": {"start": True, "end": True}}, ((True, True), (True, True))),
    ({"sequence_controls": {"start": True}, "source_sequence_controls": {"end": True}},
     ((False, True), (True, False))),
    ({"sequence_controls": {"end": True}, "source_sequence_controls": None},
     ((False, True), (False, True))),
])
def test_the_config_reads_the_controls_as_opennmt_tf(tmp_path, data, expected):
    assert controls_of(tmp_path, data) == expected


@pytest.mark.parametrize("value, message", [
    (True, "data.source_sequence_controls must be a mapping, got True"),
    ("end", "data.source_sequence_controls must be a mapping, got 'end'"),
    ({"end": 1}, "data.source_sequence_controls.end: expected true or false, got 1"),
    ({"end": "yes"}, "data.source_sequence_controls.end: expected true or false, got 'yes'"),
    ({"ends": True}, "data.source_sequence_controls.ends: unknown key (did you mean "
                     "data.source_sequence_controls.end?)"),
])
def test_a_bad_value_is_one_line_naming_the_key(tmp_path, value, message):
    with pytest.raises(ConfigError) as error:
        controls_of(tmp_path, {"source_sequence_controls": value})
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not any("sequence_controls" in name for name in UNSUPPORTED_ONMT_KEYS)


def test_bad_controls_exit_2_from_the_command_line(tmp_path, capsys):
    import run

    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(dict(MINIMAL, data={"target_sequence_controls": [True]})))
    assert run.main(["infer", "--config", str(path), "--features_file", "x"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("data.target_sequence_controls must be a mapping, got [True]")
    assert "Traceback" not in error and len(error.splitlines()) == 1


# -- the batches ------------------------------------------------------------------------------

BOS, EOS = 1, 2


def corpus(source_controls, target_controls):
    """Two examples: source [5 6 7] / target [8 9], and source [5] / target [8 9 10]."""
    source = RaggedIds(np.array([5, 6, 7, 5]), np.array([0, 3, 4]))
    target = RaggedIds(np.array([8, 9, 8, 9, 10]), np.array([0, 2, 5]))
    return ParallelCorpus(source, target, [0, 1], None, Controls(*source_controls),
                          Controls(*target_controls))


def test_default_controls_make_the_batches_they_always_made():
    batch = pad_parallel_batch(corpus((False, False), (True, True)), [0, 1])
    np.testing.assert_array_equal(batch["source_ids"], [[5, 6, 7], [5, 0, 0]])
    np.testing.assert_array_equal(batch["source_length"], [3, 1])
    np.testing.assert_array_equal(batch["target_ids_in"], [[BOS, 8, 9, 0], [BOS, 8, 9, 10]])
    np.testing.assert_array_equal(batch["target_ids_out"], [[8, 9, EOS, 0], [8, 9, 10, EOS]])
    np.testing.assert_array_equal(batch["target_length"], [3, 4])


@pytest.mark.parametrize("source_controls, source_ids, source_length", [
    ((False, True), [[5, 6, 7, EOS], [5, EOS, 0, 0]], [4, 2]),
    ((True, False), [[BOS, 5, 6, 7], [BOS, 5, 0, 0]], [4, 2]),
    ((True, True), [[BOS, 5, 6, 7, EOS], [BOS, 5, EOS, 0, 0]], [5, 3]),
])
def test_the_source_gets_its_controls_in_training_and_inference_batches(source_controls, source_ids,
                                                                        source_length):
    data = corpus(source_controls, (True, True))
    for batch in (pad_parallel_batch(data, [0, 1]), pad_source_batch(data, [0, 1])):
        np.testing.assert_array_equal(batch["source_ids"], source_ids)
        np.testing.assert_array_equal(batch["source_length"], source_length)
    np.testing.assert_array_equal(data.source_lengths, source_length)  # (what batching counts)


@pytest.mark.parametrize("target_controls, ids_in, ids_out, length", [
    # OpenNMT-tf's decoder mode: the full sequence, read but for its last id, predicted but for
    # its first.
    ((False, True), [[8, 9, 0], [8, 9, 10]], [[9, EOS, 0], [9, 10, EOS]], [2, 3]),
    ((True, False), [[BOS, 8, 0], [BOS, 8, 9]], [[8, 9, 0], [8, 9, 10]], [2, 3]),
    ((False, False), [[8, 0], [8, 9]], [[9, 0], [9, 10]], [1, 2]),
])
def test_the_target_controls_shift_what_the_decoder_reads_and_predicts(target_controls, ids_in,
                                                                       ids_out, length):
    batch = pad_parallel_batch(corpus((False, False), target_controls), [0, 1])
    np.testing.assert_array_equal(batch["target_ids_in"], ids_in)
    np.testing.assert_array_equal(batch["target_ids_out"], ids_out)
    np.testing.assert_array_equal(batch["target_length"], length)


def test_the_training_filter_counts_the_controls():
    # A source of 3 pieces with </s> is 4 long: kept up to maximum_features_length 4, not 3.
    keep, _ = filter_mask([3], [2], 3, None, source_controls=Controls(False, True))
    assert not keep[0]
    keep, _ = filter_mask([3], [2], 4, None, source_controls=Controls(False, True))
    assert keep[0]
    # A target of 2 pieces without <s> is 2 long for the decoder (3 by default).
    keep, _ = filter_mask([1], [2], None, 2, target_controls=Controls(False, True))
    assert keep[0]
    keep, _ = filter_mask([1], [2], None, 2)
    assert not keep[0]
    # An empty source with </s> has length 1: OpenNMT-tf keeps it.
    keep, reasons = filter_mask([0], [2], None, None, source_controls=Controls(False, True))
    assert keep[0] and not reasons["empty_source"][0]


# -- against OpenNMT-tf 2.32 -------------------------------------------------------------------

from conftest import FIXTURES  # noqa: E402

SEQCTL = FIXTURES / "onmt_tf_seqctl"
# The model of SEQCTL/model.py, as a model section.
MODEL = {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
         "maximum_relative_position": 8}
SCORE_TOLERANCE = 1e-4
TRUNCATED_SCORE_TOLERANCE = 1e-3


def fixture_lines(name):
    return (SEQCTL / name).read_text(encoding="utf-8").splitlines()


def fixture_config(*extra):
    """The fixture's own OpenNMT-tf YAML (and `extra` ones of its folder), with the model."""
    overrides = {"model_dir": str(SEQCTL), "auto_config": False, "model": MODEL}
    return load_config([str(SEQCTL / "config.yml")] + [str(SEQCTL / name) for name in extra],
                       overrides)


@pytest.fixture(scope="module")
def onmt_model():
    from opennmt_lite import build

    config = fixture_config()
    model, assets, _ = build.inference_model(config)
    return model, assets


def infer(onmt_model, extra, features="test.first100.tok.en"):
    """The lines `infer` prints with the fixture's config and `extra` (its OpenNMT-tf file)."""
    from opennmt_lite import build
    from opennmt_lite.inference.translate import format_lines, translate_file

    model, assets = onmt_model
    config = fixture_config(extra)
    data = build.inference_input(str(SEQCTL / features), config.infer, assets, config.data)
    options = build.decoding_options(config.params, config.infer)
    results = translate_file(model, assets, data, options, progress=False,
                             alignments=config.infer.with_alignments)
    return list(format_lines(results, config.infer.with_scores, config.infer.with_alignments))


def same_lines(ours, theirs, soft=False):
    """How many `SCORE ||| text ||| alignment` lines are equal (scores within 1e-4, soft
    alignments within 1e-5); an equal text always has an equal alignment."""
    assert len(ours) == len(theirs)
    equal = 0
    for mine, reference in zip(ours, theirs):
        a, b = mine.split(" ||| "), reference.split(" ||| ")
        if a[1] != b[1]:
            print(f"differs:\n  ours: {mine[:160]}\n  onmt: {reference[:160]}")
            continue
        equal += 1
        # (a hypothesis stopped at 250 tokens sums 250 float32 log-probabilities)
        tolerance = TRUNCATED_SCORE_TOLERANCE if len(a[1].split()) >= 250 else SCORE_TOLERANCE
        assert abs(float(a[0]) - float(b[0])) <= tolerance, (mine, reference)
        if soft:
            np.testing.assert_allclose([[float(x) for x in v.split()] for v in a[2].split(" ; ")],
                                       [[float(x) for x in v.split()] for v in b[2].split(" ; ")],
                                       atol=1e-5, rtol=0)
        elif len(a) == 3:
            assert a[2] == b[2], (mine, reference)
    return equal


@pytest.mark.parametrize("tag", ["beam1.hard", "beam4.hard", "beam4.replace.hard",
                                 "beam4.source-bos.replace.hard"])
def test_infer_prints_what_opennmt_tf_prints(onmt_model, tag):
    """Translations, scores and hard alignments of a model trained with a source `</s>`
    (alignment columns over the source the model sees, its `</s>` included, as OpenNMT-tf prints
    them); with replace_unknown_target, the `</s>` (and a `<s>`, shifted out) never chosen."""
    theirs = fixture_lines(f"pred.first100.{tag}.tok.de")
    ours = infer(onmt_model, f"infer-{tag}.yml")
    assert same_lines(ours, theirs) >= 99
    if "replace" in tag:
        assert not any("<unk>" in line.split(" ||| ")[1] for line in ours)


def test_soft_alignments_hold_the_source_end_column(onmt_model):
    theirs = fixture_lines("pred.first20.beam1.soft.tok.de")
    ours = infer(onmt_model, "infer-beam1.soft.yml", "test.first20.tok.en")
    assert same_lines(ours, theirs, soft=True) == 20


@pytest.mark.parametrize("extra, expected", [
    (None, "score.first100.txt"),
    ("score.target-no-start.yml", "score.first100.target-no-start.txt"),
    ("score.target-no-end.yml", "score.first100.target-no-end.txt"),
    ("score.legacy-keys.yml", "score.first100.legacy-keys.txt"),
])
def test_score_prints_what_opennmt_tf_prints(onmt_model, extra, expected):
    """`score` with the source `</s>`, and with target controls that shift what the decoder reads
    and predicts (the training loss's teacher forcing): OpenNMT-tf's NLL and tokens."""
    from opennmt_lite import build
    from opennmt_lite.inference.score import format_lines, score_pairs

    model, assets = onmt_model
    config = fixture_config(*([extra] if extra else []))
    data = build.scoring_input(str(SEQCTL / "test.first100.tok.en"),
                               str(SEQCTL / "test.first100.tok.de"), config.score, assets,
                               config.data)
    targets = [line.split() for line in fixture_lines("test.first100.tok.de")]
    ours = list(format_lines(score_pairs(model, data), targets))
    theirs = fixture_lines(expected)
    for mine, reference in zip(ours, theirs):
        assert mine.split(" ||| ")[1] == reference.split(" ||| ")[1]
        assert abs(float(mine.split(" ||| ")[0]) - float(reference.split(" ||| ")[0])) <= SCORE_TOLERANCE
    assert len(ours) == len(theirs) == 100


@pytest.mark.parametrize("tag", ["default", "no-start", "no-end"])
def test_score_token_level_prints_what_opennmt_tf_prints(onmt_model, tag):
    """score.with_token_level with target controls given whole (score.token-level.TAG.yml): one
    value per target piece as OpenNMT-tf prints them (without a `<s>`, the first piece unscored
    and `</s>`'s value last; without a `</s>`, every value a piece's, adding up to the NLL).
    (score.target-no-*.yml merge into config.yml's {start: true, end: true}: the default.)"""
    from opennmt_lite import build
    from opennmt_lite.inference.score import format_lines, score_pairs

    model, assets = onmt_model
    config = fixture_config(f"score.token-level.{tag}.yml")
    assert config.score.with_token_level
    data = build.scoring_input(str(SEQCTL / "test.first100.tok.en"),
                               str(SEQCTL / "test.first100.tok.de"), config.score, assets,
                               config.data)
    targets = [line.split() for line in fixture_lines("test.first100.tok.de")]
    scores, token_scores, _ = score_pairs(model, data, details=True)
    ours = list(format_lines(scores, targets, token_scores))
    theirs = fixture_lines(f"score.first100.token-level.{tag}.txt")
    assert len(ours) == len(theirs) == 100
    for mine, reference in zip(ours, theirs):
        (score, text, values), (onmt_score, onmt_text, onmt_values) = (
            mine.split(" ||| "), reference.split(" ||| "))
        assert text == onmt_text
        assert abs(float(score) - float(onmt_score)) <= SCORE_TOLERANCE
        np.testing.assert_allclose([float(v) for v in values.split()],
                                   [float(v) for v in onmt_values.split()], atol=SCORE_TOLERANCE)


def test_ctranslate2_export_adds_the_source_end_itself(onmt_model, tmp_path):
    """The exported model's config.json asks CTranslate2 for the source `</s>` (as its own
    OpenNMT-tf converter does): greedy translations and scores are OpenNMT-tf's. Its attention
    covers the sentence's own tokens only (no `</s>` column), so hard alignments OpenNMT-tf points
    at `</s>` differ."""
    import json

    from opennmt_lite import build
    from opennmt_lite.export import ctranslate2 as ct2_export
    from opennmt_lite.inference import ctranslate2 as ct2_infer
    from opennmt_lite.inference.translate import format_lines

    model, assets = onmt_model
    config = fixture_config("infer-beam1.hard.yml")
    options = build.decoding_options(config.params, config.infer)
    directory = str(tmp_path / "ct2")
    ct2_export.export_model(model, assets, options, config.data, directory)
    settings = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert settings["add_source_eos"] is True and settings["add_source_bos"] is False
    translator = ct2_infer.load_translator(directory, assets)
    data = build.inference_input(str(SEQCTL / "test.first100.tok.en"), config.infer, assets,
                                 config.data)
    results = ct2_infer.translate_file(translator, assets, data, options, progress=False)
    ours = list(format_lines(results, True))
    theirs = [" ||| ".join(line.split(" ||| ")[:2]) for line in fixture_lines("pred.first100.beam1.hard.tok.de")]
    assert same_lines(ours, theirs) >= 99


def test_saved_model_adds_the_source_end_in_the_graph(onmt_model, tmp_path):
    """serving_default (OpenNMT-tf's signature) on raw tokens: the graph appends `</s>`, so its
    tokens, scores and alignment (over the source and its `</s>`) are OpenNMT-tf's."""
    import tensorflow as tf

    from opennmt_lite import build
    from opennmt_lite.export.saved_model import export_model

    model, assets = onmt_model
    config = fixture_config()  # (beam_width 1)
    directory = str(tmp_path / "saved_model")
    export_model(model, assets, build.decoding_options(config.params, config.infer), config.data,
                 directory)
    served = tf.saved_model.load(directory).signatures["serving_default"]
    sentences = [line.split() for line in fixture_lines("test.first100.tok.en")[:16]]
    width = max(len(s) for s in sentences)
    result = served(tokens=tf.constant([s + [""] * (width - len(s)) for s in sentences]),
                    length=tf.constant([len(s) for s in sentences], tf.int32))
    assert result["alignment"].shape[-1] == width + 1  # the `</s>` column
    for row, reference in enumerate(fixture_lines("pred.first100.beam1.hard.tok.de")[:16]):
        score, text, pairs = reference.split(" ||| ")
        length = int(result["length"][row, 0])
        tokens = [t.decode() for t in result["tokens"].numpy()[row, 0, :length]]
        assert " ".join(tokens) == text
        assert abs(float(result["log_probs"][row, 0]) - float(score)) <= TRUNCATED_SCORE_TOLERANCE
        alignment = result["alignment"].numpy()[row, 0][:length]
        printed = " ".join(f"{s}-{t}" for t, s in enumerate(np.argmax(alignment, -1)))
        assert printed == pairs


def test_training_and_evaluation_inputs_carry_the_controls():
    """What `train` feeds the model (build.training_inputs) and evaluates it on: the fixture's
    source `</s>`, counted by maximum_features_length (a 3-piece limit keeps 2-piece sources)."""
    from opennmt_lite import build

    source, target = str(SEQCTL / "test.first100.tok.en"), str(SEQCTL / "test.first100.tok.de")
    config = fixture_config()
    data = dataclasses.replace(config.data, train_features_file=source, train_labels_file=target,
                               eval_features_file=source, eval_labels_file=target)
    train = dataclasses.replace(config.train, maximum_features_length=3, batch_type="examples",
                                batch_size=8, length_bucket_width=1)
    assets = build.assets(data)
    training, = build.training_inputs(data, train, assets, None)
    pieces = [len(line.split()) for line in fixture_lines("test.first100.tok.en")]
    assert training.stats.num_examples == sum(0 < n <= 2 for n in pieces)
    batch = next(training.numpy_batches(num_epochs=1))
    rows = np.arange(len(batch["source_length"]))
    np.testing.assert_array_equal(batch["source_ids"][rows, batch["source_length"] - 1], EOS)
    np.testing.assert_array_equal(batch["target_ids_in"][:, 0], BOS)
    evaluation = next(build.evaluation_input(data, config.eval, assets).numpy_batches())
    first = np.array(assets.source_vocabulary.lookup(fixture_lines("test.first100.tok.en")[0].split()))
    np.testing.assert_array_equal(evaluation["source_ids"][0, :len(first) + 1], np.append(first, EOS))


def test_inspect_shows_the_source_as_the_model_reads_it():
    from opennmt_lite import build
    from opennmt_lite.commands import inspect as inspect_command

    config = fixture_config()
    args = type("Args", (), {"sentence": "Cannot open file", "ids": None, "batch": None})()
    sources = inspect_command.sources_of(args, build.assets(config.data), None,
                                         config.data.source_sequence_controls)
    assert sources[0][0] == ["Cannot", "open", "file", "</s>"] and sources[0][1][-1] == EOS


def test_infer_ctranslate2_refuses_a_model_exported_with_other_controls(tmp_path):
    import json

    from opennmt_lite.errors import ArgumentError
    from opennmt_lite.inference import ctranslate2 as ct2_infer

    (tmp_path / "config.json").write_text(json.dumps({"add_source_eos": False}))
    config = fixture_config()
    with pytest.raises(ArgumentError) as error:  # (exit 2)
        ct2_infer.check_source_controls(str(tmp_path), config.data.source_sequence_controls)
    assert str(error.value).endswith("its config.json has add_source_eos: false but "
                                     "data.source_sequence_controls.end is true (the source </s>): "
                                     "export the model with this config")
    (tmp_path / "config.json").write_text(json.dumps({"add_source_eos": True}))
    ct2_infer.check_source_controls(str(tmp_path), config.data.source_sequence_controls)
