"""CTranslate2 export (`run.py export --format ctranslate2`) and inference (`run.py infer
--ctranslate2`) against OpenNMT-tf's and opennmt-lite's own translations.

* OpenNMT-tf's model (tests/fixtures/onmt_tf_relative, pre-norm, relative positions): float32
  CTranslate2 translations of the 100 test sentences against OpenNMT-tf 2.32's predictions (same
  batches of 16, maximum length 250), at least 99/100 identical with beam 1 and 95/100 with beam
  4, every difference a tie (its two hypotheses' log-probabilities within 1e-4); scores against
  OpenNMT-tf's (greedy) or its `score` of the prediction (beam: OpenNMT-tf prints, for a
  hypothesis that finished and moved to another beam slot, that slot's old score; CTranslate2
  and opennmt-lite's teacher forcing give the real log-probability).
* Two models trained by opennmt-lite (tests/fixtures/ct2_models: post-norm + GELU, and sinusoidal
  + share_embeddings: all + swish + no output bias): the same counts against opennmt-lite's own
  `run.py infer` translations of data/test.en.
* `score_batch` of the references: within 1e-4 of opennmt-lite's teacher-forced log-probabilities
  (per token) for those three models and for random-weight models of every option combination.
Measured (2026-11-23): onmt fixture beam 1 100/100 (largest score gap 1.1e-5), beam 4 100/100.
"""

import dataclasses
import itertools
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import run
from conftest import FIXTURES, ONMT_FIXTURE
from opennmt_lite import build
from opennmt_lite.config import build_config, load_config
from opennmt_lite.data.tokenizers import SpaceTokenizer
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.export import ctranslate2 as ct2_export
from opennmt_lite.inference import ctranslate2 as ct2_infer
from opennmt_lite.inference.translate import translate_file
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer

ctranslate2 = pytest.importorskip("ctranslate2")

ONMT_CONFIG = FIXTURES / "onmt_fixture.yml"
REPO = FIXTURES.parents[1]
TRAINED = {name: FIXTURES / "ct2_models" / name / "config.yml" for name in ("postnorm", "shared")}
SCORE_TOLERANCE = 1e-4
TRUNCATED_SCORE_TOLERANCE = 1e-3  # a hypothesis stopped at the maximum length sums 250 terms


def export(config, directory, **kwargs):
    model, assets, _ = build.inference_model(config)
    options = build.decoding_options(config.params, config.infer)
    ct2_export.export_model(model, assets, options, config.data, str(directory), **kwargs)
    return model, assets


def cumulative_score_tolerance(score, terms):
    """The bound on two decoders' cumulative float32 scores of `terms` tokens: SCORE_TOLERANCE,
    or, for long hypotheses, what the two float32 running sums alone may round apart (half a
    unit in the last place of the score per addition, on each side). Measured on an AVX-512
    EPYC: a 44-token greedy hypothesis scored -46.025 by opennmt-lite (3.8e-5 from the float32
    teacher-forced sum) and 1.07e-4 from it by CTranslate2: 1.45e-4 apart, within that bound
    (1.7e-4) but not within SCORE_TOLERANCE; 9.2e-5 on an AVX2 host."""
    return max(SCORE_TOLERANCE, terms * float(np.spacing(np.float32(abs(score)))))


def teacher_forced(model, assets, sources, targets, batch_size=16):
    """Per-token log-probabilities (targets then `</s>`) of token lists, opennmt-lite's model."""
    scores = []
    for start in range(0, len(sources), batch_size):
        src = [assets.source_vocabulary.lookup(s) for s in sources[start:start + batch_size]]
        tgt = [assets.target_vocabulary.lookup(t) for t in targets[start:start + batch_size]]
        src_len = np.array([len(s) for s in src], np.int32)
        tgt_len = np.array([len(t) + 1 for t in tgt], np.int32)
        src_ids = np.zeros([len(src), max(src_len.max(), 1)], np.int32)
        tgt_in = np.zeros([len(tgt), tgt_len.max()], np.int32)
        tgt_out = np.zeros_like(tgt_in)
        for row, (s, t) in enumerate(zip(src, tgt)):
            src_ids[row, :len(s)] = s
            tgt_in[row, :len(t) + 1] = np.concatenate([[1], t])
            tgt_out[row, :len(t) + 1] = np.concatenate([t, [2]])
        logits, _ = model({"source_ids": src_ids, "source_length": src_len,
                           "target_ids_in": tgt_in, "target_length": tgt_len}, training=False)
        log_probs = tf.gather(tf.nn.log_softmax(logits), tgt_out, batch_dims=2).numpy()
        scores += [log_probs[row, :length] for row, length in enumerate(tgt_len)]
    return scores


def ct2_scores(translator, sources, targets):
    results = translator.score_batch(sources, targets, max_input_length=0)
    return [np.array(result.log_probs) for result in results]


def assert_same_log_probs(model, assets, translator, sources, targets):
    ours = teacher_forced(model, assets, sources, targets)
    theirs = ct2_scores(translator, sources, targets)
    gaps = [np.abs(a - b).max() for a, b in zip(ours, theirs)]
    print(f"score_batch vs teacher forcing: largest per-token gap {max(gaps):.2e}")
    assert max(gaps) <= SCORE_TOLERANCE
    assert max(abs(a.sum() - b.sum()) for a, b in zip(ours, theirs)) <= SCORE_TOLERANCE


def compare_first_best(ours, reference, true_score, minimum):
    """`ours`/`reference`: [(score, token list)] per sentence; `true_score(i, tokens)`: the
    log-probability of sentence i's hypothesis. At least `minimum` identical; every difference
    a tie. Returns the number identical."""
    identical = 0
    for i, ((_, tokens), (_, expected)) in enumerate(zip(ours, reference)):
        if tokens == expected:
            identical += 1
            continue
        mine, theirs = true_score(i, tokens), true_score(i, expected)
        print(f"line {i + 1}: CTranslate2 {mine:.6f} {' '.join(tokens)!r}\n"
              f"         reference {theirs:.6f} {' '.join(expected)!r} (gap {abs(mine - theirs):.2e})")
        assert abs(mine - theirs) <= SCORE_TOLERANCE
    print(f"{identical}/{len(reference)} identical")
    assert identical >= minimum
    return identical


# -- OpenNMT-tf's model ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onmt(tmp_path_factory):
    config = load_config(str(ONMT_CONFIG))
    directory = tmp_path_factory.mktemp("ct2") / "onmt"
    model, assets = export(config, directory)
    translator = ct2_infer.load_translator(str(directory), assets)
    return config, model, assets, translator, directory


def onmt_lines(name):
    return (ONMT_FIXTURE / name).read_text(encoding="utf-8").splitlines()


def ct2_translate(config, assets, translator, features_file, beam_width):
    options = build.decoding_options(config.params, config.infer, beam_width, 1)
    data = build.inference_input(str(features_file), config.infer, assets)
    results = ct2_infer.translate_file(translator, assets, data, options, progress=False)
    return [(score, text.split()) for ((text, score),) in results]


@pytest.mark.parametrize("beam", [1, 4])
def test_onmt_model_translations_match_opennmt_tf(onmt, beam):
    config, model, assets, translator, _ = onmt
    ours = ct2_translate(config, assets, translator, ONMT_FIXTURE / "test.first100.tok.en", beam)
    reference = [(float(s), t.split()) for s, t in
                 (line.split(" ||| ") for line in onmt_lines(f"pred.first100.beam{beam}.scores.tok.de"))]
    # OpenNMT-tf's own rescoring (`onmt-main score`, negative log-likelihoods) of its predictions.
    rescored = [-float(line.split(" ||| ")[0])
                for line in onmt_lines(f"rescore.first100.beam{beam}.scores.txt")]
    sources = [line.split() for line in onmt_lines("test.first100.tok.en")]

    def true_score(i, tokens):
        return float(teacher_forced(model, assets, [sources[i]], [tokens])[0].sum())

    compare_first_best(ours, reference, true_score, 99 if beam == 1 else 95)
    expected = [score for score, _ in reference] if beam == 1 else rescored
    for (score, tokens), (_, reference_tokens), value in zip(ours, reference, expected):
        if tokens == reference_tokens:
            tolerance = TRUNCATED_SCORE_TOLERANCE if len(tokens) >= 250 else SCORE_TOLERANCE
            assert abs(score - value) <= tolerance


def test_onmt_model_score_batch_matches_teacher_forcing(onmt):
    _, model, assets, translator, _ = onmt
    sources = [line.split() for line in onmt_lines("test.first100.tok.en")]
    targets = [line.split() for line in onmt_lines("test.first100.tok.de")]
    assert_same_log_probs(model, assets, translator, sources, targets)


def test_export_writes_tokenizers_settings_and_layer_norm_epsilon(onmt):
    *_, directory = onmt
    config = json.loads((directory / "config.json").read_text())
    assert config["layer_norm_epsilon"] == pytest.approx(1e-3)
    assert config["unk_token"] == "<unk>"
    vocabulary = json.loads((directory / "source_vocabulary.json").read_text())
    assert vocabulary[:3] == ["<blank>", "<s>", "</s>"] and vocabulary[-1] == "<unk>"
    assert len(vocabulary) == 801
    decoding = json.loads((directory / "decoding.json").read_text())["translate_batch"]
    assert decoding == {"beam_size": 4, "num_hypotheses": 1, "length_penalty": 0.0,
                        "max_decoding_length": 250, "min_decoding_length": 0, "coverage_penalty": 0.0,
                        "sampling_topk": 1, "sampling_temperature": 1.0, "replace_unknowns": False,
                        "max_input_length": 0, "return_scores": True}
    assert "translate_batch" in (directory / "README.md").read_text()


# -- the command line --------------------------------------------------------------------------

@pytest.mark.parametrize("beam", [1, 4])
def test_cli_infer_with_ctranslate2_matches_infer(onmt, tmp_path, beam):
    *_, directory = onmt
    outputs = {}
    for name, extra in (("lite", []), ("ct2", ["--ctranslate2", str(directory)])):
        outputs[name] = tmp_path / f"{name}.txt"
        assert run.main(["infer", "--config", str(ONMT_CONFIG), "--features_file",
                         str(ONMT_FIXTURE / "test.first8.tok.en"), "--predictions_file",
                         str(outputs[name]), "--beam_width", str(beam), "--with_scores"] + extra) == 0
    lite = [line.split(" ||| ") for line in outputs["lite"].read_text().splitlines()]
    ct2 = [line.split(" ||| ") for line in outputs["ct2"].read_text().splitlines()]
    assert [text for _, text in ct2] == [text for _, text in lite]
    if beam == 1:  # (beam scores: see the module docstring)
        assert max(abs(float(a) - float(b)) for (a, _), (b, _) in zip(ct2, lite)) <= SCORE_TOLERANCE


def test_cli_export_refuses_an_existing_model_unless_forced(tmp_path, capsys):
    output = tmp_path / "model"
    command = ["export", "--config", str(ONMT_CONFIG), "--format", "ctranslate2",
               "--output", str(output), "--quantization", "int8"]
    assert run.main(command) == 0
    first = (output / "model.bin").stat().st_mtime_ns
    assert run.main(command) == 2
    assert "already holds a model: pass --force" in capsys.readouterr().err
    assert (output / "model.bin").stat().st_mtime_ns == first
    assert run.main(command + ["--force"]) == 0
    # A directory holding something else is never replaced.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert run.main(command[:-4] + ["--output", str(other), "--force"]) == 2
    assert (other / "notes.txt").read_text() == "keep me"
    assert not list(tmp_path.glob(".ctranslate2-*"))  # no staging directory left behind


def test_cli_export_rejects_an_unknown_quantization(capsys):
    assert run.main(["export", "--config", str(ONMT_CONFIG), "--format", "ctranslate2",
                     "--output", "unused", "--quantization", "int4"]) == 2
    assert "invalid choice: 'int4'" in capsys.readouterr().err


def test_quantized_exports_are_smaller_and_translate(onmt, tmp_path):
    config, _, assets, translator, directory = onmt
    reference = ct2_translate(config, assets, translator, ONMT_FIXTURE / "test.first100.tok.en", 1)
    sizes = {"float32": (directory / "model.bin").stat().st_size}
    for quantization in ("int8", "int16"):
        path = tmp_path / quantization
        export(config, path, quantization=quantization)
        sizes[quantization] = (path / "model.bin").stat().st_size
        quantized = ct2_infer.load_translator(str(path), assets)
        ours = ct2_translate(config, assets, quantized, ONMT_FIXTURE / "test.first100.tok.en", 1)
        same = sum(a[1] == b[1] for a, b in zip(ours, reference))
        print(f"{quantization}: {sizes[quantization]} bytes, {same}/100 greedy translations as float32")
        # (a tiny, briefly trained model: many near-ties; BLEU of a real model: see docs/performance.md)
        assert same >= 40
    assert sizes["int8"] < sizes["int16"] < sizes["float32"]


def test_infer_rejects_a_model_of_other_vocabularies(onmt, tmp_path):
    *_, directory = onmt
    other = Vocabulary.from_file(ONMT_FIXTURE / "src-vocab.txt")
    assets = build.Assets(other, other, None, None)  # target vocabulary differs from the model's
    with pytest.raises(ValueError, match="target vocabulary differs"):
        ct2_infer.load_translator(str(directory), assets)


# -- models trained by opennmt-lite -------------------------------------------------------------

@pytest.fixture(scope="module", params=sorted(TRAINED))
def trained(request, tmp_path_factory):
    config = load_config(str(TRAINED[request.param]))
    directory = tmp_path_factory.mktemp("ct2") / request.param
    model, assets = export(config, directory)
    return config, model, assets, ct2_infer.load_translator(str(directory), assets)


TEST_LINES = 100


@pytest.fixture(scope="module")
def test_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("test_data")
    files = {}
    for side in ("en", "de"):
        lines = (REPO / "data" / f"test.{side}").read_text(encoding="utf-8").splitlines()[:TEST_LINES]
        files[side] = directory / f"test.{side}"
        files[side].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


@pytest.mark.parametrize("beam", [1, 4])
def test_trained_model_translations_match_opennmt_lite(trained, test_files, beam):
    config, model, assets, translator = trained
    options = build.decoding_options(config.params, config.infer, beam, 1)
    data = build.inference_input(str(test_files["en"]), config.infer, assets)
    # What `run.py infer` computes, with the pieces joined by spaces instead of detokenized.
    as_pieces = assets._replace(target_tokenizer=SpaceTokenizer())
    lite = translate_file(model, as_pieces, data, options, progress=False)
    ct2 = ct2_infer.translate_file(translator, as_pieces, data, options, progress=False)
    ours = [(score, text.split()) for ((text, score),) in ct2]
    reference = [(score, text.split()) for ((text, score),) in lite]
    assert sum(len(tokens) for _, tokens in reference) > TEST_LINES  # it translates something
    sources = [list(tokens) for tokens in data.corpus.tokens]

    def true_score(i, tokens):
        return float(teacher_forced(model, assets, [sources[i]], [tokens])[0].sum())

    identical = compare_first_best(ours, reference, true_score, 99 if beam == 1 else 95)
    if beam == 1:
        same = [(a[0], b[0], len(b[1])) for a, b in zip(ours, reference) if a[1] == b[1]]
        assert len(same) == identical
        for score, expected, length in same:
            assert abs(score - expected) <= cumulative_score_tolerance(expected, length + 1)


def test_trained_model_score_batch_matches_teacher_forcing(trained, test_files):
    _, model, assets, translator = trained
    read = lambda side: test_files[side].read_text(encoding="utf-8").splitlines()  # noqa: E731
    sources = assets.source_tokenizer.tokenize_batch(read("en"))
    targets = assets.target_tokenizer.tokenize_batch(read("de"))
    assert_same_log_probs(model, assets, translator, sources, targets)


# -- every option, random weights ----------------------------------------------------------------

# Each sharing level with each (activation, bias, norm) variant, and every position scheme
# with each of both.
VARIANTS = (("relu", True, True), ("gelu", False, False), ("swish", True, False))
POSITIONS = ((4, "auto"), (None, "sinusoidal"), (None, "none"))
OPTIONS = [
    dict(share_embeddings=share, ffn_activation=activation, output_layer_bias=bias,
         pre_norm=pre_norm, maximum_relative_position=POSITIONS[(i + j) % 3][0],
         position_encoding=POSITIONS[(i + j) % 3][1])
    for i, share in enumerate(("none", "source_target_input", "target", "all"))
    for j, (activation, bias, pre_norm) in enumerate(VARIANTS)
]


def random_model_parity(tmp_path, vocabulary, model_options, sources, targets):
    """Exports a random-weight model of `model_options` (one vocabulary file for both sides) and
    compares score_batch with teacher forcing."""
    user = {"model_dir": str(tmp_path), "auto_config": False,
            "data": {"source_vocabulary": str(vocabulary), "target_vocabulary": str(vocabulary)},
            "model": {"num_layers": 2, "num_units": 16, "num_heads": 2, "ffn_inner_dim": 32,
                      **{key: value for key, value in model_options.items() if value is not None}}}
    config = build_config(user)
    assets = build.assets(config.data)
    model = build.model(config.model, assets)
    directory = tmp_path / "ct2"
    ct2_export.export_model(model, assets, build.decoding_options(config.params, config.infer),
                            config.data, str(directory))
    translator = ct2_infer.load_translator(str(directory), assets, threads=1)
    assert_same_log_probs(model, assets, translator, sources, targets)
    return directory


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_every_option_exports_exactly(options, tmp_path):
    # Target-side sentences on both sides (one vocabulary, so every sharing level works), the
    # sources doubled to reach positions beyond the relative window.
    lines = [line.split() for line in onmt_lines("test.first100.tok.de")[:8]]
    random_model_parity(tmp_path, ONMT_FIXTURE / "tgt-vocab.txt", options,
                        [tokens + tokens for tokens in lines], lines[::-1])


def test_sinusoidal_with_relative_positions_is_refused_by_name(tmp_path):
    vocabulary = Vocabulary.from_file(ONMT_FIXTURE / "tgt-vocab.txt")
    model = Transformer(ModelHyperparameters(num_layers=1, num_units=8, num_heads=2, ffn_inner_dim=8,
                                             maximum_relative_position=2, position_encoding="sinusoidal"),
                        vocabulary.num_ids, vocabulary.num_ids)
    model.build()
    assets = build.Assets(vocabulary, vocabulary, None, None)
    with pytest.raises(ct2_export.ExportError, match="model.position_encoding"):
        ct2_export.export_model(model, assets, {}, None, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_unk_line_in_the_vocabulary_keeps_unknowns_on_the_last_id(tmp_path):
    # "<unk>" as an ordinary line: the literal token takes that line's id, unknown tokens the id
    # after the last line; CTranslate2's unknown token is then given another name.
    tokens = Vocabulary.from_file(ONMT_FIXTURE / "tgt-vocab.txt").tokens
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("\n".join(tokens[:10] + ["<unk>"] + tokens[10:]) + "\n", encoding="utf-8")
    sentences = [["<unk>", "never-seen", tokens[20]], [tokens[30], "<unk>"]]
    directory = random_model_parity(tmp_path, vocabulary, {}, sentences, sentences[::-1])
    assert json.loads((directory / "config.json").read_text())["unk_token"] == "<unk_oov>"


def test_translate_options_carry_every_decoding_option():
    from opennmt_lite.inference.decoding import DecodingOptions

    options = DecodingOptions(beam_width=4, n_best=2, length_penalty=0.6, coverage_penalty=0.2,
                              maximum_decoding_length=50, minimum_decoding_length=2,
                              sampling_topk=0, sampling_temperature=0.8, seed=5)
    arguments = ct2_infer.translate_options(options)
    assert arguments == {"beam_size": 4, "num_hypotheses": 2, "length_penalty": 0.6,
                         "max_decoding_length": 50, "min_decoding_length": 2,
                         "coverage_penalty": 0.2, "sampling_topk": 0,
                         "sampling_temperature": 0.8, "replace_unknowns": False, "max_input_length": 0,
                         "return_scores": True}
    # Greedy search applies neither penalty (OpenNMT-tf's GreedySearch).
    greedy = ct2_infer.translate_options(DecodingOptions(length_penalty=0.6, coverage_penalty=0.2))
    assert greedy["length_penalty"] == greedy["coverage_penalty"] == 0.0


# -- threads (`run.py infer --ctranslate2`) ------------------------------------------------------

def test_thread_settings_give_each_batch_one_thread_and_sampling_one_batch():
    import os

    from opennmt_lite.inference.decoding import DecodingOptions

    one_each = {"inter_threads": 2, "intra_threads": 1}
    assert ct2_infer.thread_settings(DecodingOptions(beam_width=4), cores=2) == one_each
    assert ct2_infer.thread_settings(DecodingOptions(), cores=8) == {"inter_threads": 8,
                                                                     "intra_threads": 1}
    sampling = DecodingOptions(sampling_topk=0, seed=3)
    assert ct2_infer.thread_settings(sampling, cores=8) == {"inter_threads": 1, "intra_threads": 1}
    assert ct2_infer.thread_settings(DecodingOptions()) == {
        "inter_threads": len(os.sched_getaffinity(0)), "intra_threads": 1}


def test_batches_translated_in_parallel_are_those_of_one_thread(onmt):
    """7 batches of 16 through 3 translators (6 submitted ahead): the same texts and scores, in
    file order, as one thread translating them one after the other."""
    config, _, assets, _, directory = onmt
    options = build.decoding_options(config.params, config.infer, 4, 1)
    data = build.inference_input(str(ONMT_FIXTURE / "test.first100.tok.en"), config.infer, assets)
    assert len(data.batches) == 7
    results = {}
    for inter in (1, 3):
        translator = ct2_infer.load_translator(
            str(directory), assets, threads={"inter_threads": inter, "intra_threads": 1})
        assert translator.num_translators == inter
        results[inter] = ct2_infer.translate_file(translator, assets, data, options, progress=False)
    assert results[3] == results[1]
    expected = onmt_lines("pred.first100.beam4.tok.de")
    assert sum(text == line for ((text, _),), line in zip(results[3], expected)) >= 95


def test_seeded_sampling_is_reproducible(onmt):
    """Sampling decodes one batch at a time (thread_settings): the same seed, the same draws."""
    config, _, assets, _, directory = onmt
    options = build.decoding_options(config.params, config.infer, 1, 1)
    options = dataclasses.replace(options, sampling_topk=0, seed=7)
    data = build.inference_input(str(ONMT_FIXTURE / "test.first100.tok.en"), config.infer, assets)
    runs = []
    for _ in range(2):
        translator = ct2_infer.load_translator(str(directory), assets,
                                               threads=ct2_infer.thread_settings(options))
        runs.append(ct2_infer.translate_file(translator, assets, data, options, progress=False))
    assert runs[0] == runs[1]
    greedy = onmt_lines("pred.first100.beam1.tok.de")
    assert sum(text != line for ((text, _),), line in zip(runs[0], greedy)) >= 20
