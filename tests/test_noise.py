"""Word noise (opennmt_lite/data/noise.py) against OpenNMT-tf 2.32's noise modules: words cut as
its tokens_to_words cuts them, and each module's outcome distribution against 20 000 draws of
OpenNMT-tf's own module (tests/fixtures/onmt_noise/make_reference.py), plus the properties of
each definition: dropout rate, replacement rate, permutation distance, pieces kept together.
Then `params.decoding_noise` through the config and `run.py infer`."""

import collections
import json

import numpy as np
import pytest
import yaml
from scipy.stats import chi2_contingency

import run
from conftest import FIXTURES, ONMT_FIXTURE
from opennmt_lite.data.noise import (WordDropout, WordNoiser, WordOmission, WordPermutation,
                                     WordReplacement, tokens_to_words)

REFERENCE = json.loads((FIXTURES / "onmt_noise" / "reference.json").read_text(encoding="utf-8"))
MODULES = {"dropout": WordDropout, "replacement": lambda p: WordReplacement(p, "X"),
           "permutation": WordPermutation, "omission": WordOmission}
DRAWS = 20000


@pytest.mark.parametrize("tokens, subword_token, is_spacer, expected", REFERENCE["tokens_to_words"])
def test_tokens_to_words_as_opennmt(tokens, subword_token, is_spacer, expected):
    assert tokens_to_words(tokens, subword_token, is_spacer) == expected


@pytest.mark.parametrize("case", sorted(REFERENCE["counts"]))
def test_outcomes_distributed_as_opennmt_draws(case):
    """Same outcomes, same frequencies: a chi-square test of homogeneity between our 20 000
    draws and OpenNMT-tf's (p > 0.01; fixed seed)."""
    name, argument, size = case.split()
    module = MODULES[name](float(argument) if "." in argument else int(argument))
    words = [[str(i)] for i in range(int(size[1:]))]
    rng = np.random.default_rng(7)
    ours = collections.Counter(" ".join(t for w in module(words, rng) for t in w) for _ in range(DRAWS))
    theirs = REFERENCE["counts"][case]
    assert set(ours) == set(theirs), (case, ours, theirs)
    outcomes = sorted(theirs)
    table = [[ours[o] for o in outcomes], [theirs[o] for o in outcomes]]
    assert chi2_contingency(table).pvalue > 0.01, (case, table)


# Words of several pieces (joiner mode), so that "pieces stay together" can fail.
SENTENCE = "The qu￭ ick brown fo￭ x ￭, jum￭ ps over the la￭ zy dog ￭.".split()
SENTENCE_WORDS = tokens_to_words(SENTENCE)


def draws(module, count=3000, seed=3):
    rng = np.random.default_rng(seed)
    return [module(SENTENCE_WORDS, rng) for _ in range(count)]


def test_sentence_words():
    assert [" ".join(w) for w in SENTENCE_WORDS] == [
        "The", "qu￭ ick", "brown", "fo￭ x ￭,", "jum￭ ps", "over", "the", "la￭ zy", "dog ￭."]


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_drops_whole_words_at_rate_p(p):
    outputs = draws(WordDropout(p))
    dropped = sum(len(SENTENCE_WORDS) - len(words) for words in outputs)
    assert abs(dropped / (len(outputs) * len(SENTENCE_WORDS)) - p) < 0.01
    for words in outputs:  # whole words, in their order
        positions = [SENTENCE_WORDS.index(w) for w in words]
        assert positions == sorted(positions) and len(words) >= 1
    assert all(len(words) == 1 for words in draws(WordDropout(1.0), 50))  # one always kept


def test_replacement_replaces_whole_words_by_one_filler():
    outputs = draws(WordReplacement(0.2, "⦅unk⦆"))
    replaced = 0
    for words in outputs:
        assert len(words) == len(SENTENCE_WORDS)
        for word, original in zip(words, SENTENCE_WORDS):
            assert word == original or word == ["⦅unk⦆"]
            replaced += word != original
    assert abs(replaced / (len(outputs) * len(SENTENCE_WORDS)) - 0.2) < 0.01
    assert WordReplacement(0.5).filler == "<unk>"  # OpenNMT-tf's default filler


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_permutation_moves_words_less_than_k(k):
    """A word's key i + floor(U * (k + 1)) ties with word i + k's at most, and ties keep the
    order (as TensorFlow's argsort does): no word moves k positions or more, so k = 1 moves
    nothing, as in OpenNMT-tf."""
    largest = 0
    for words in draws(WordPermutation(k)):
        assert sorted(map(tuple, words)) == sorted(map(tuple, SENTENCE_WORDS))  # whole words
        moves = [abs(words.index(w) - i) for i, w in enumerate(SENTENCE_WORDS)]
        largest = max(largest, max(moves))
    assert largest == max(k - 1, 0)


def test_omission_and_spacer_mode():
    for words in draws(WordOmission(2), 200):
        assert len(words) == len(SENTENCE_WORDS) - 2
    assert len(WordOmission(20)(SENTENCE_WORDS, np.random.default_rng(0))) == 1
    noiser = WordNoiser([WordPermutation(3), WordDropout(0.2)], subword_token="▁")
    tokens = "▁Das ▁Ha us ▁ist ▁sehr ▁schön ▁gewor den .".split()
    words = {"▁Das", "▁Ha us", "▁ist", "▁sehr", "▁schön", "▁gewor den ."}
    rng = np.random.default_rng(0)
    changed = 0
    for _ in range(200):
        noisy = noiser(tokens, rng)
        assert {" ".join(w) for w in tokens_to_words(noisy, "▁")} <= words
        changed += noisy != tokens
    assert changed > 150


# params.decoding_noise: config and run.py infer.

def fixture_config(tmp_path, params, infer=None):
    config = yaml.safe_load((FIXTURES / "onmt_fixture.yml").read_text())
    config["params"].update(params)
    config["infer"].update(infer or {})
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return str(path)


def test_infer_with_decoding_noise(tmp_path):
    """The fixture's pieces are SentencePiece's (spacer `▁`): noise changes the translations,
    words stay whole, and the same seed repeats them exactly; another seed differs."""
    noise = {"decoding_noise": [{"dropout": 0.1}, {"Replacement": [0.1, "⦅unk⦆"]}, {"permutation": 3}],
             "decoding_subword_token": "▁", "beam_width": 1}
    source = str(ONMT_FIXTURE / "test.first8.tok.en")

    def infer(name, params, *extra):
        output = tmp_path / name
        assert run.main(["infer", "--config", fixture_config(tmp_path, params), "--features_file",
                         source, "--predictions_file", str(output), *extra]) == 0
        return output.read_text(encoding="utf-8").splitlines()

    plain = (ONMT_FIXTURE / "pred.first8.beam1.tok.de").read_text(encoding="utf-8").splitlines()
    first, again, other = (infer(f"{n}.txt", noise, "--seed", s) for n, s in
                           (("first", "5"), ("again", "5"), ("other", "6")))
    assert first == again and first != other
    assert sum(a != b for a, b in zip(first, plain)) >= 5
    for noisy, line in zip(first, plain):
        # (a filler has no spacer: it joins the word before it, as in OpenNMT-tf)
        kept = [token for token in noisy.split() if token != "⦅unk⦆"]
        words = {" ".join(w) for w in tokens_to_words(line.split(), "▁")}
        assert {" ".join(w) for w in tokens_to_words(kept, "▁")} <= words, (noisy, line)


@pytest.mark.parametrize("params, message", [
    ({"decoding_noise": [{"shuffle": 2}]}, "unknown noise module 'shuffle'"),
    ({"decoding_noise": [{"dropout": 1.5}]}, "dropout's probability must be a number in [0, 1]"),
    ({"decoding_noise": [{"permutation": -1}]}, "permutation's maximum distance"),
    ({"decoding_noise": [{"replacement": [0.1, "a", "b"]}]}, "replacement takes 1 or 2"),
    ({"decoding_noise": [{"dropout": 0.1, "permutation": 2}]}, "expected one {module: arguments}"),
    ({"decoding_noise": {"dropout": 0.1}}, "expected a list"),
    ({"decoding_noise": [{"dropout": 0.1}], "decoding_subword_token": ""}, "must not be empty"),
])
def test_bad_decoding_noise_is_one_line(tmp_path, capsys, params, message):
    output = tmp_path / "out.txt"
    code = run.main(["infer", "--config", fixture_config(tmp_path, params), "--features_file",
                     str(ONMT_FIXTURE / "test.first8.tok.en"), "--predictions_file", str(output)])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(error) == 1 and message in error[0] and "decoding" in error[0], error
    assert not output.exists()


def test_decoding_noise_with_alignments_is_refused(tmp_path, capsys):
    path = fixture_config(tmp_path, {"decoding_noise": [{"dropout": 0.1}]}, {"with_alignments": "hard"})
    assert run.main(["infer", "--config", path, "--features_file",
                     str(ONMT_FIXTURE / "test.first8.tok.en")]) == 2
    assert "infer.with_alignments cannot be used with params.decoding_noise" in capsys.readouterr().err


def test_infer_ctranslate2_noises_its_tokens(tmp_path):
    """`infer --ctranslate2` noises CTranslate2's tokens as `infer` does: the same noiser and
    draws over the same hypotheses (a stand-in translator returns the fixture's translations)."""
    import types

    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.inference import ctranslate2

    plain = (ONMT_FIXTURE / "pred.first8.beam1.tok.de").read_text(encoding="utf-8").splitlines()
    config = load_config(fixture_config(tmp_path, {"beam_width": 1, "decoding_subword_token": "▁",
                                                   "decoding_noise": [{"permutation": 3}, {"dropout": 0.2}]}))
    lines = iter(plain)

    class Translator:
        def translate_batch(self, sources, asynchronous=False, **arguments):
            assert asynchronous  # (results read with .result(), as CTranslate2's)
            return [types.SimpleNamespace(result=lambda line=next(lines): types.SimpleNamespace(
                hypotheses=[line.split()], scores=[-1.0])) for _ in sources]

    assets = build.assets(config.data)
    data = build.inference_input(str(ONMT_FIXTURE / "test.first8.tok.en"), config.infer, assets)
    options = build.decoding_options(config.params, config.infer, seed=11)
    results = ctranslate2.translate_file(Translator(), assets, data, options, progress=False)
    rng, noiser = np.random.default_rng(11), options.noiser()
    assert [r[0][0] for r in results] == [" ".join(noiser(line.split(), rng)) for line in plain]
    assert sum(r[0][0] != line for r, line in zip(results, plain)) >= 4
