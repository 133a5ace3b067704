"""Translations of the OpenNMT-tf fixture model against `onmt-main infer`'s own output.

The fixture's `pred.first{8,100}.*` files were written by OpenNMT-tf 2.32 with infer batches of
16 sentences in file order, maximum_decoding_length 250, no length penalty. Sentences are
decoded here in the same batches. Tokens must match on at least 99 of 100 lines. Scores must
match within 1e-4 on lines that end with `</s>` (the files print 6 decimals); lines stopped at
250 pieces are compared too, more loosely, since they sum 250 log-probabilities. Measured:
100/100 (beam 1), 100/100 (beam 4), 400/400 (beam 4, n_best 4); largest score difference 3.1e-5
on finished lines.
"""

import numpy as np
import pytest
import tensorflow as tf

from conftest import ONMT_FIXTURE
from opennmt_lite.inference.decoding import DecodingOptions, translation_function
from test_inference import greedy_search
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.checkpointing.onmt_names import load_onmt_model
from opennmt_lite.data.vocab import Vocabulary

INFER_BATCH_SIZE = 16
MAXIMUM_DECODING_LENGTH = 250
SCORE_TOLERANCE = 1e-4
TRUNCATED_SCORE_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def fixture():
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128,
                                             maximum_relative_position=8), 801, 801)
    load_onmt_model(str(ONMT_FIXTURE), model)
    source_vocab = Vocabulary.from_file(ONMT_FIXTURE / "src-vocab.txt")
    target_vocab = Vocabulary.from_file(ONMT_FIXTURE / "tgt-vocab.txt")
    assert source_vocab.oov_id == target_vocab.oov_id == 800
    return model, source_vocab, target_vocab


def read_lines(name):
    return (ONMT_FIXTURE / name).read_text(encoding="utf-8").splitlines()


def batches(source_vocab, name):
    """(ids [b, time] 0-padded, lengths [b]) for consecutive batches of 16 source lines."""
    sentences = [line.split() for line in read_lines(name)]
    for start in range(0, len(sentences), INFER_BATCH_SIZE):
        chunk = sentences[start : start + INFER_BATCH_SIZE]
        lengths = np.array([len(tokens) for tokens in chunk], np.int32)
        ids = np.zeros([len(chunk), max(lengths)], np.int32)
        for row, tokens in enumerate(chunk):
            ids[row, : len(tokens)] = source_vocab.lookup(tokens)
        yield ids, lengths


def translate_file(fixture, source_name, **options):
    """[(score, "pieces", length)] in OpenNMT-tf's output order (n_best lines per source)."""
    model, source_vocab, target_vocab = fixture
    translate = translation_function(
        model, DecodingOptions(maximum_decoding_length=MAXIMUM_DECODING_LENGTH, **options))
    lines = []
    for ids, lengths in batches(source_vocab, source_name):
        result = translate(ids, lengths)
        for tokens, hyp_lengths, scores in zip(result.ids.numpy(), result.lengths.numpy(),
                                               result.log_probs.numpy()):
            for hyp, length, score in zip(tokens, hyp_lengths, scores):
                pieces = " ".join(target_vocab.to_tokens(hyp[:length]))
                lines.append((float(score), pieces, int(length)))
    return lines


def compare(lines, expected_name, with_scores=True):
    """Counts, prints and returns (matching lines, total, largest score difference)."""
    expected = read_lines(expected_name)
    assert len(lines) == len(expected)
    matching, largest = 0, 0.0
    for number, ((score, pieces, length), reference) in enumerate(zip(lines, expected), 1):
        reference_score, reference_pieces = (
            reference.split(" ||| ", 1) if with_scores else (None, reference)
        )
        if pieces != reference_pieces:
            print(f"{expected_name}:{number} differs\n  ours: {pieces}\n  onmt: {reference_pieces}")
            continue
        matching += 1
        if with_scores:
            difference = abs(score - float(reference_score))
            truncated = length == MAXIMUM_DECODING_LENGTH
            if truncated:
                assert difference <= TRUNCATED_SCORE_TOLERANCE, (number, score, reference_score)
            else:
                largest = max(largest, difference)
                assert difference <= SCORE_TOLERANCE, (number, score, reference_score)
    print(f"{expected_name}: {matching}/{len(expected)} lines equal, "
          f"largest score difference {largest:.2e} (finished lines)")
    return matching, len(expected), largest


@pytest.mark.parametrize("coverage_penalty, length_penalty, tag", [
    (0.2, 0.0, "coverage0.2"), (1.0, 0.0, "coverage1.0"), (0.2, 0.6, "coverage0.2.length0.6")])
def test_coverage_penalty_matches_opennmt(fixture, coverage_penalty, length_penalty, tag):
    """Beam search with OpenNMT-tf's coverage penalty (and with a length penalty): the same
    translations and scores as OpenNMT-tf's (tests/fixtures/onmt_tf_relative/decoding_options.README.md;
    there the penalty changes 42 to 78 of the 100 beam-4 translations, so this discriminates)."""
    lines = translate_file(fixture, "test.first100.tok.en", beam_width=4,
                           coverage_penalty=coverage_penalty, length_penalty=length_penalty)
    matching, total, _ = compare(lines, f"pred.first100.beam4.{tag}.scores.tok.de")
    assert matching >= total - total // 100


@pytest.mark.parametrize("subset", ["first100", "first8"])
@pytest.mark.parametrize(
    "beam_width, n_best, tag",
    [(1, 1, "beam1.scores"), (4, 1, "beam4.scores"), (4, 4, "beam4.nbest4.scores")],
)
def test_translations_match_opennmt(fixture, subset, beam_width, n_best, tag, record_property):
    lines = translate_file(fixture, f"test.{subset}.tok.en", beam_width=beam_width, n_best=n_best)
    matching, total, largest = compare(lines, f"pred.{subset}.{tag}.tok.de")
    record_property("matching_lines", f"{matching}/{total}")
    record_property("largest_score_difference", largest)
    if n_best > 1:
        assert matching == total  # n-best lists: every line, in OpenNMT-tf's slot order
    else:
        assert matching >= total - total // 100
    # The files without scores hold the same pieces.
    if n_best == 1:
        plain = read_lines(f"pred.{subset}.beam{beam_width}.tok.de")
        assert sum(pieces == line for (_, pieces, _), line in zip(lines, plain)) == matching


def test_greedy_in_tf_function_equals_eager(fixture):
    model, source_vocab, _ = fixture
    ids, lengths = next(batches(source_vocab, "test.first8.tok.en"))
    traced = translation_function(model, DecodingOptions(beam_width=1))(ids, lengths)
    eager = greedy_search(model, ids, lengths)
    np.testing.assert_array_equal(traced.ids.numpy(), eager.ids.numpy())
    np.testing.assert_array_equal(traced.lengths.numpy(), eager.lengths.numpy())
    # Graph and eager kernels round differently (measured: 4e-6 on scores of -5 to -16).
    np.testing.assert_allclose(traced.log_probs.numpy(), eager.log_probs.numpy(), rtol=0, atol=2e-5)


def test_beam_attention_and_scores_match_teacher_forcing(fixture):
    """Each returned hypothesis, re-run through the decoder with teacher forcing, gives back the
    attention that produced its tokens and OpenNMT-tf's rescored log-likelihood. The reported
    score differs from it exactly on the lines where OpenNMT-tf's beam-slot quirk gave a
    finished hypothesis another slot's score."""
    model, source_vocab, _ = fixture
    ids, lengths = next(batches(source_vocab, "test.first100.tok.en"))
    result = translation_function(model, DecodingOptions(beam_width=4, n_best=4),
                                  return_attention=True)(ids, lengths)
    batch, n_best, time = result.ids.shape
    flat_ids = tf.reshape(result.ids, [batch * n_best, time]).numpy()
    flat_lengths = tf.reshape(result.lengths, [-1]).numpy()
    # Decoder input <s> + tokens; output tokens + </s>.
    inputs = np.concatenate([np.ones([batch * n_best, 1], np.int32), flat_ids], axis=1)
    outputs = np.concatenate([flat_ids, np.zeros([batch * n_best, 1], np.int32)], axis=1)
    outputs[np.arange(batch * n_best), flat_lengths] = 2
    memory = model.encode(np.repeat(ids, n_best, 0), np.repeat(lengths, n_best, 0))
    logits, attention = model.decode(inputs, flat_lengths + 1, memory, np.repeat(lengths, n_best, 0))
    attention = attention.numpy()[:, :time]
    inside = np.arange(time)[None, :] < flat_lengths[:, None]
    expected = np.where(inside[..., None], attention, 0.0).reshape(batch, n_best, time, -1)
    np.testing.assert_allclose(result.attention.numpy(), expected, rtol=0, atol=1e-5)

    log_probs = tf.nn.log_softmax(logits).numpy()
    steps = np.take_along_axis(log_probs, outputs[..., None], axis=-1)[..., 0]
    true_scores = np.where(np.arange(time + 1)[None, :] <= flat_lengths[:, None], steps, 0).sum(1)
    reported = result.log_probs.numpy().reshape(-1)
    np.testing.assert_allclose(true_scores, -rescored_nll(len(reported)), rtol=0, atol=SCORE_TOLERANCE)
    # Where OpenNMT-tf's printed score is not the hypothesis' log-probability (the quirk), ours
    # is not either, on the same lines.
    printed = np.array([float(line.split(" ||| ")[0])
                        for line in read_lines("pred.first100.beam4.nbest4.scores.tok.de")[: len(reported)]])
    quirk = np.abs(printed + rescored_nll(len(reported))) > SCORE_TOLERANCE
    assert 0 < quirk.sum() < len(quirk)
    np.testing.assert_array_equal(np.abs(reported - true_scores) > SCORE_TOLERANCE, quirk)


def rescored_nll(count):
    """`onmt-main score` of the n-best lines: their true negative log-likelihood."""
    lines = read_lines("rescore.first100.beam4.nbest4.scores.txt")[:count]
    return np.array([float(line.split(" ||| ")[0]) for line in lines])


# infer's output options, through the command's own path (config, batches, formatting).

def infer_lines(tmp_path, params, infer):
    """The lines `run.py infer` writes for the fixture's 100 test sentences with these `params`
    and `infer` settings (OpenNMT-tf's checkpoint imported)."""
    import yaml

    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.inference.translate import format_lines, translate_file

    base = yaml.safe_load((ONMT_FIXTURE.parent / "onmt_fixture.yml").read_text())
    base["params"].update(params)
    base["infer"].update(infer)
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(base))
    config = load_config(str(path))
    model, assets, _ = build.inference_model(config)
    data = build.inference_input(str(ONMT_FIXTURE / "test.first100.tok.en"), config.infer, assets)
    options = build.decoding_options(config.params, config.infer)
    results = translate_file(model, assets, data, options, progress=False,
                             alignments=config.infer.with_alignments)
    return list(format_lines(results, config.infer.with_scores, config.infer.with_alignments))


def compare_fields(ours, theirs, alignment):
    """Lines `SCORE ||| text ||| alignment` (or `text ||| alignment`): the texts and the hard
    alignments equal, scores within 1e-4, soft values within 1e-5. Returns the lines equal."""
    equal = 0
    for mine, reference in zip(ours, theirs):
        a, b = mine.split(" ||| "), reference.split(" ||| ")
        assert len(a) == len(b)
        if a[-2] != b[-2]:
            print(f"differs:\n  ours: {mine[:200]}\n  onmt: {reference[:200]}")
            continue
        equal += 1
        if len(a) == 3:  # (beyond |score| ~ 400, 1e-4 is under two float32 steps: 4 steps then)
            bound = max(SCORE_TOLERANCE, 4 * float(np.finfo(np.float32).eps) * abs(float(b[0])))
            assert abs(float(a[0]) - float(b[0])) <= bound, (mine, reference)
        if alignment == "hard":
            assert a[-1] == b[-1], (mine, reference)
        else:
            vectors = [[float(x) for x in v.split()] for v in a[-1].split(" ; ")]
            expected = [[float(x) for x in v.split()] for v in b[-1].split(" ; ")]
            np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    return equal


@pytest.mark.parametrize("beam_width, replace, alignment, with_scores, tag", [
    (4, True, "hard", True, "beam4.replace.hard"),
    (1, True, "soft", True, "beam1.replace.soft"),
    (4, False, "soft", False, "beam4.soft"),
])
def test_alignments_and_unknown_replacement_match_opennmt(tmp_path, beam_width, replace, alignment,
                                                         with_scores, tag):
    """`infer.with_alignments` (hard and soft) and `params.replace_unknown_target` print what
    OpenNMT-tf prints (its <unk> appears in 87 of the 100 plain beam-4 translations, so the
    replacement is exercised)."""
    ours = infer_lines(tmp_path, {"beam_width": beam_width, "replace_unknown_target": replace},
                       {"with_alignments": alignment, "with_scores": with_scores})
    theirs = read_lines(f"pred.first100.{tag}.tok.de")
    assert len(ours) == len(theirs) == 100
    assert compare_fields(ours, theirs, alignment) >= 99
    if replace:
        assert not any("<unk>" in line.split(" ||| ")[-2] for line in ours)
