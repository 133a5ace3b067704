"""Guided alignment: `data.train_alignments` (Pharaoh lines), `params.guided_alignment_type` and
`params.guided_alignment_weight`, as OpenNMT-tf 2.32 reads, builds and adds them to the loss.

References: OpenNMT-tf's own `guided_alignment_cost` and `compute_loss`, run once in its virtual
environment (tests/fixtures/onmt_tf_guided/make_fixture.py: guided_alignment_cost.npz and
losses.json), and an independent NumPy formula.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

import run
from conftest import FIXTURES
from opennmt_lite.config import ConfigError, build_config
from opennmt_lite.data import TrainingInput
from opennmt_lite.data.alignments import read_alignments
from opennmt_lite.data.text import DataError
from opennmt_lite.training.losses import (
    cross_entropy_sequence_loss, guided_alignment_scale, guided_alignment_sum)
from opennmt_lite.training.step import GuidedAlignment, batch_gradients

GUIDED = FIXTURES / "onmt_tf_guided"


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# -- gold matrices ---------------------------------------------------------------------------


def test_matrices_are_opennmt_alignment_matrix_from_pharaoh(tmp_path):
    """OpenNMT-tf's docstring example ("0-0 1-2 1-3 2-1", 3 source and 4 target words), an empty
    line (no link), a repeated pair (still 1) and extra whitespace; padded to the batch's time."""
    features = write(tmp_path / "src", ["a b c", "a", "a b c"])
    alignments = read_alignments(write(tmp_path / "align", ["0-0 1-2 1-3 2-1", "", " 2-0  0-1 0-1\t"]),
                                 features)
    matrices = alignments.matrices(np.array([0, 1, 2]), 5, 4)
    assert matrices.shape == (3, 5, 4) and matrices.dtype == np.float32
    expected = np.zeros((3, 5, 4), np.float32)
    expected[0, :4, :3] = [[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 0]]
    expected[2, 0, 2] = expected[2, 1, 0] = 1
    np.testing.assert_array_equal(matrices, expected)
    # another order of lines (a shuffled batch): the same rows follow their lines
    np.testing.assert_array_equal(alignments.matrices(np.array([2, 0]), 5, 4), expected[[2, 0]])


# -- the cost --------------------------------------------------------------------------------


def numpy_cost(attention, gold, word_length, cost_type, weight):
    """OpenNMT-tf's guided_alignment_cost written out: Keras' categorical cross-entropy (rows
    renormalised, clipped to [1e-7, 1 - 1e-7]) or its mean squared error (mean over the source
    time), summed over the rows below each length, divided by the summed lengths, times weight."""
    total = 0.0
    for b in range(attention.shape[0]):
        for t in range(word_length[b]):
            row, target = attention[b, t].astype(np.float64), gold[b, t].astype(np.float64)
            if cost_type == "ce":
                p = np.clip(row / row.sum(), 1e-7, 1 - 1e-7)
                total += -(target * np.log(p)).sum()
            else:
                total += ((row - target) ** 2).mean()
    return weight * total / word_length.sum()


@pytest.mark.parametrize("cost_type", ["ce", "mse"])
@pytest.mark.parametrize("weight", [1.0, 0.3])
def test_cost_equals_opennmt_guided_alignment_cost(cost_type, weight):
    """Within 1e-6 of OpenNMT-tf's function on the same inputs, and of the NumPy formula; also
    when the batch is padded further (pad_to_multiple: more rows, more zero columns)."""
    data = np.load(GUIDED / "guided_alignment_cost.npz")
    attention, gold = data["attention"], data["gold"]
    word_length, source_length = data["word_length"], data["source_length"]
    expected = float(data[f"{cost_type}_{weight}"])

    def ours(attention, gold):
        return float(guided_alignment_scale(word_length, source_length, cost_type, weight)
                     * guided_alignment_sum(attention, gold, word_length, cost_type))

    assert abs(ours(attention, gold) - expected) <= 1e-6
    assert abs(numpy_cost(attention, gold, word_length, cost_type, weight) - expected) <= 1e-6
    padded_attention = np.pad(attention, [(0, 0), (0, 2), (0, 3)])
    padded_attention[:, -2:, :] = 1.0 / attention.shape[-1]  # rows past every length
    assert abs(ours(padded_attention, np.pad(gold, [(0, 0), (0, 2), (0, 3)])) - expected) <= 1e-6
    assert expected > 0.01  # (the inputs are not trivially aligned)


# -- the loss of a batch of the OpenNMT-tf model ---------------------------------------------


@pytest.fixture(scope="module")
def onmt_model():
    from opennmt_lite.checkpointing.onmt_names import load_onmt_model
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer

    # (dropout 0: training-mode losses are deterministic; inference never drops anything)
    model = Transformer(ModelHyperparameters(
        num_layers=2, num_units=32, num_heads=2, ffn_inner_dim=64, maximum_relative_position=8,
        pre_norm=True, dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0), 801, 801)
    load_onmt_model(str(GUIDED), model)
    return model


def first_examples(count=8, **kwargs):
    """The first `count` training examples of the fixture, in file order, as one batch."""
    data = TrainingInput(
        str(GUIDED / "train.first200.tok.en"), str(GUIDED / "train.first200.tok.de"),
        source_vocabulary=str(GUIDED / "src-vocab.txt"),
        target_vocabulary=str(GUIDED / "tgt-vocab.txt"), batch_size=count,
        batch_type="examples", shuffle=False, repeat=False, scheme="opennmt",
        length_bucket_width=0, alignments=read_alignments(
            str(GUIDED / "train.first200.align"), str(GUIDED / "train.first200.tok.en")),
        **kwargs)
    return next(iter(data.numpy_batches()))


@pytest.mark.parametrize("cost_type", ["ce", "mse"])
def test_loss_of_a_batch_equals_opennmt_compute_loss(onmt_model, cost_type):
    """OpenNMT-tf's checkpoint, its first 8 training examples, dropout off: the summed loss
    (cross-entropy with label smoothing 0.1 + guided alignment) equals OpenNMT-tf's
    `compute_loss` (losses.json), and the guided term alone its `guided_alignment_cost`."""
    expected = json.loads((GUIDED / "losses.json").read_text())
    batch = first_examples()
    assert batch["source_length"].tolist() == expected["source_length"]
    assert batch["target_length"].tolist() == expected["target_length"]
    logits, attention = onmt_model(batch, training=False)
    cross_entropy, tokens = cross_entropy_sequence_loss(
        logits, batch["target_ids_out"], batch["target_length"], label_smoothing=0.1, training=True)
    words = batch["target_length"] - 1
    guided = float(guided_alignment_scale(words, batch["source_length"], cost_type, 1.0)
                   * guided_alignment_sum(attention, batch["alignment"], words, cost_type))
    assert guided == pytest.approx(expected[f"guided_{cost_type}"], rel=1e-5, abs=1e-7)
    assert float(cross_entropy) + guided == pytest.approx(expected[f"loss_{cost_type}"], rel=1e-5)
    assert float(tokens) == expected["tokens"]


@pytest.mark.parametrize("cost_type", ["ce", "mse"])
def test_train_step_loss_is_opennmt_loss_whole_cut_or_padded(onmt_model, cost_type):
    """The summed loss the train step differentiates (`batch_gradients`) equals OpenNMT-tf's
    `compute_loss` on the same batch (dropout is 0 in this copy of the model), whether the batch
    is whole, cut into 3 sub-batches (each slice's guided cost scaled by the whole batch's
    totals) or padded to a multiple of 8."""
    import keras

    expected = json.loads((GUIDED / "losses.json").read_text())[f"loss_{cost_type}"]
    optimizer = keras.optimizers.SGD(0.0)
    guided = GuidedAlignment(cost_type, 1.0)
    for batch, sub_batches in ((first_examples(), 1), (first_examples(), 3),
                               (first_examples(pad_to_multiple=8), 1)):
        batch = {name: tf.constant(value) for name, value in batch.items()}
        loss = batch_gradients(onmt_model, optimizer, batch, 0.1, True, sub_batches=sub_batches,
                               guided_alignment=guided)[1]
        assert float(loss) == pytest.approx(expected, rel=1e-5), sub_batches


def test_mse_with_pad_to_bucket_boundary_averages_over_the_bucket_s_source(onmt_model):
    """train.pad_to_bucket_boundary pads OpenNMT-tf's batch (attention and gold) to the bucket
    boundary, over which Keras' mean squared error takes its mean: the same 8 examples padded
    to 30 (width 10; longest source 18, target 23) give the guided mse times 18 / 30, the
    cross-entropy unchanged."""
    import keras

    expected = json.loads((GUIDED / "losses.json").read_text())
    data = TrainingInput(
        str(GUIDED / "train.first200.tok.en"), str(GUIDED / "train.first200.tok.de"),
        source_vocabulary=str(GUIDED / "src-vocab.txt"),
        target_vocabulary=str(GUIDED / "tgt-vocab.txt"), batch_size=8, batch_type="examples",
        scheme="opennmt", length_bucket_width=10, pad_to_bucket_boundary=True, alignments=(
            read_alignments(str(GUIDED / "train.first200.align"),
                            str(GUIDED / "train.first200.tok.en"))))
    batch = {name: tf.constant(value) for name, value in data._pad(0, np.arange(8)).items()}
    assert batch["source_ids"].shape[1] == batch["target_ids_in"].shape[1] == 30
    cross_entropy = expected["loss_mse"] - expected["guided_mse"]
    loss = batch_gradients(onmt_model, keras.optimizers.SGD(0.0), batch, 0.1, True,
                           guided_alignment=GuidedAlignment("mse", 1.0, bucket_width=10))[1]
    assert float(loss) == pytest.approx(cross_entropy + expected["guided_mse"] * 18 / 30, rel=1e-5)


# -- bad input: one line, exit 2 -------------------------------------------------------------


def test_bad_alignment_files_name_the_file_and_line(tmp_path):
    features = write(tmp_path / "train.en", ["a b", "c d e"])
    with pytest.raises(DataError, match=r"align has 1 lines but the training file .*train.en has 2"):
        read_alignments(write(tmp_path / "align", ["0-0"]), features)
    for bad in ("0-0 1:1", "0-0 1-", "0-0 -1-0", "0-0-1", "a-b", "0-0,"):
        with pytest.raises(DataError, match=r"alignment file .*align, line 2: .* is not an `i-j` pair"):
            read_alignments(write(tmp_path / "align", ["0-0", bad]), features)
    with pytest.raises(DataError, match="2 alignment file"):
        read_alignments([features, features], features)


def test_indices_past_the_sentence_are_refused_before_training(tmp_path):
    """OpenNMT-tf 2.32 stops with an assertion when it reads such a line; refused up front,
    naming the line and both lengths (after tokenization)."""
    source = write(tmp_path / "train.en", ["a b", "a b c", "b"])
    target = write(tmp_path / "train.de", ["x", "x y", "y"])
    vocab = write(tmp_path / "vocab", ["<blank>", "<s>", "</s>", "a", "b", "c", "x", "y"])

    def training_input(lines):
        return TrainingInput(source, target, source_vocabulary=vocab, target_vocabulary=vocab,
                             batch_size=2, batch_type="examples",
                             alignments=read_alignments(write(tmp_path / "align", lines), source))

    training_input(["1-0", "2-1 0-0", "0-0"])  # in range
    with pytest.raises(DataError, match=r"align, line 2: pair 3-1 is past the sentence \(3 source "
                                        r"and 2 target tokens"):
        training_input(["1-0", "3-1", "0-0"])
    with pytest.raises(DataError, match=r"line 1: pair 0-1 is past the sentence \(2 source and 1 "):
        training_input(["0-1", "0-0", "0-1"])


@pytest.mark.parametrize("data, params, message", [
    ({"train_alignments": "align"}, {},
     "data.train_alignments is set but params.guided_alignment_type is not"),
    ({}, {"guided_alignment_type": "ce"},
     "params.guided_alignment_type is ce but data.train_alignments is not set"),
])
def test_one_key_without_the_other_is_refused_to_train(data, params, message):
    """OpenNMT-tf then trains without guided alignment, saying nothing."""
    config = build_config({"model_dir": "m", "model": {"preset": "Transformer"},
                           "data": {"train_features_file": "s", "train_labels_file": "t", **data},
                           "params": params, "train": {"batch_size": 8}})
    with pytest.raises(ConfigError, match=message):
        config.check_training()


def test_unknown_type_and_cli_errors_exit_2(tmp_path, capsys):
    with pytest.raises(ConfigError, match="guided_alignment_type: must be one of ce, mse; got 'kl'"):
        build_config({"model_dir": "m", "params": {"guided_alignment_type": "kl"}})
    config = tmp_path / "config.yml"
    config.write_text(f"model_dir: {tmp_path / 'run'}\nparams:\n  guided_alignment_type: kl\n")
    assert run.main(["train", "--config", str(config)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "guided_alignment_type" in error[0], error


@pytest.mark.parametrize("scheme", ["sorted", "opennmt"])
def test_batches_carry_each_example_s_own_alignment(tmp_path, scheme):
    """Shuffled, length-sorted or bucketed, sharded, padded to a multiple of 8, resumed after 3
    batches: every gold link of every batch joins a source word sK to its translation tK (the
    permutation language's links), every target word has its one link, and the resumed stream
    is the tail of the whole one."""
    from opennmt_lite.data.vocab import Vocabulary

    vocabulary = Vocabulary.from_file(permutation_task(tmp_path, 300, seed=2))
    tokens = np.array(vocabulary.tokens + ["<unk>"])
    alignments = read_alignments(str(tmp_path / "train.align"), str(tmp_path / "train.src"))
    for shard in (0, 1):
        data = TrainingInput(
            str(tmp_path / "train.src"), str(tmp_path / "train.tgt"), source_vocabulary=vocabulary,
            target_vocabulary=vocabulary, batch_size=64, batch_type="tokens", scheme=scheme,
            length_bucket_width=1, seed=9, num_shards=2, shard_index=shard, pad_to_multiple=8,
            repeat=False, alignments=alignments)
        batches = list(data.numpy_batches())
        for batch in batches:
            b, j, i = np.nonzero(batch["alignment"])
            source_words = tokens[batch["source_ids"][b, i]]
            target_words = tokens[batch["target_ids_out"][b, j]]
            assert all(t == "t" + s[1:] for s, t in zip(source_words, target_words))
            words = batch["target_length"] - 1
            links = batch["alignment"].sum(axis=-1)
            assert (links == (np.arange(links.shape[1]) < words[:, None])).all()
            assert batch["alignment"].shape[1:] == (batch["target_ids_in"].shape[1],
                                                    batch["source_ids"].shape[1])
        assert sum(len(batch["source_length"]) for batch in batches) == 150
        resumed = list(data.numpy_batches(skip_batches=3))
        assert len(resumed) == len(batches) - 3
        for a, b in zip(resumed, batches[3:]):
            np.testing.assert_array_equal(a["alignment"], b["alignment"])


def test_weighted_files_carry_each_example_s_own_alignment(tmp_path):
    """Two training files drawn with train_files_weights, one alignment file each: every gold
    link of every batch joins sK to tK, every target word has its one link."""
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.data.weighted import WeightedTrainingInput

    vocabulary = Vocabulary.from_file(permutation_task(tmp_path, 300, seed=4))
    tokens = np.array(vocabulary.tokens + ["<unk>"])
    parts = {}
    for name in ("src", "tgt", "align"):
        lines = (tmp_path / f"train.{name}").read_text().splitlines()
        parts[name] = [write(tmp_path / f"a.{name}", lines[:120]), write(tmp_path / f"b.{name}", lines[120:])]
    data = WeightedTrainingInput(
        parts["src"], parts["tgt"], [1, 3], source_vocabulary=vocabulary,
        target_vocabulary=vocabulary, batch_size=64, batch_type="tokens", seed=9,
        alignments=read_alignments(parts["align"], parts["src"]))
    for _, batch in zip(range(20), data.numpy_batches()):
        b, j, i = np.nonzero(batch["alignment"])
        assert all(t == "t" + s[1:] for s, t in zip(tokens[batch["source_ids"][b, i]],
                                                    tokens[batch["target_ids_out"][b, j]]))
        links = batch["alignment"].sum(axis=-1)
        assert (links == (np.arange(links.shape[1]) < batch["target_length"][:, None] - 1)).all()
def test_train_with_a_bad_alignment_line_exits_2_naming_it(tmp_path, capsys):
    vocab = permutation_task(tmp_path, 20, seed=1)
    lines = (tmp_path / "train.align").read_text().splitlines()
    lines[6] += " 3:4"
    write(tmp_path / "train.align", lines)
    config = tmp_path / "config.yml"
    config.write_text(json.dumps({
        "model_dir": str(tmp_path / "run"),
        "data": {"train_features_file": str(tmp_path / "train.src"),
                 "train_labels_file": str(tmp_path / "train.tgt"),
                 "train_alignments": str(tmp_path / "train.align"),
                 "source_vocabulary": vocab, "target_vocabulary": vocab},
        "model": {"num_layers": 1, "num_units": 8, "num_heads": 2, "ffn_inner_dim": 8},
        "params": {"guided_alignment_type": "ce"}, "train": {"batch_size": 64, "max_step": 1}}))
    assert run.main(["train", "--config", str(config)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1, error
    assert f"alignment file {tmp_path / 'train.align'}, line 7: '3:4' is not an `i-j` pair" in error[0]
    assert not (tmp_path / "run" / "checkpoints").exists()


# -- guided alignment teaches the alignment ----------------------------------------------------


def permutation_task(directory, count, seed):
    """A language whose alignment is known by construction: a source of 4 to 7 distinct words
    among s0..s11, its target the translated words (sK -> tK) with each pair of neighbours
    swapped. Writes train.{src,tgt,align} and test.src; returns the vocabulary path."""
    rng = np.random.default_rng(seed)
    sources, targets, links = [], [], []
    for _ in range(count):
        words = rng.choice(12, size=rng.integers(4, 8), replace=False)
        order = np.arange(len(words))
        order[: len(order) // 2 * 2] = order[: len(order) // 2 * 2].reshape(-1, 2)[:, ::-1].ravel()
        sources.append(" ".join(f"s{w}" for w in words))
        targets.append(" ".join(f"t{words[i]}" for i in order))
        links.append(" ".join(f"{i}-{j}" for j, i in enumerate(order)))
    write(directory / "train.src", sources)
    write(directory / "train.tgt", targets)
    write(directory / "train.align", links)
    write(directory / "test.src", sources[:200])
    return write(directory / "vocab", ["<blank>", "<s>", "</s>"]
                 + [f"s{k}" for k in range(12)] + [f"t{k}" for k in range(12)])


def alignment_error_rate(sources, hypotheses):
    """AER (all links sure) of `hard` alignments against the links known by construction: output
    word tK is aligned with the source position of sK."""
    hits = predicted = gold = 0
    for source, (text, _, attention) in zip(sources, hypotheses):
        words = text.split()
        positions = {w: i for i, w in enumerate(source.split())}
        truth = {(positions["s" + w[1:]], j) for j, w in enumerate(words) if "s" + w[1:] in positions}
        found = {(int(i), j) for j, i in enumerate(np.argmax(attention, axis=-1))}
        hits += len(truth & found)
        predicted += len(found)
        gold += len(truth)
    return 1.0 - 2.0 * hits / (predicted + gold)


def train_and_align(directory, vocab, guided, steps=100, layers=2, weight=50.0):
    import keras

    from opennmt_lite.data import InferenceInput
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.inference.decoding import DecodingOptions
    from opennmt_lite.inference.translate import translate_file
    from opennmt_lite.models import Transformer
    from opennmt_lite.training.step import TrainStep

    keras.utils.set_random_seed(3)
    vocabulary = Vocabulary.from_file(vocab)
    model = Transformer(ModelHyperparameters(num_layers=layers, num_units=32, num_heads=2,
                                             ffn_inner_dim=64), vocabulary.num_ids, vocabulary.num_ids)
    model.build()
    optimizer = keras.optimizers.Adam(0.005)
    optimizer.build(model.trainable_variables)
    data = TrainingInput(
        str(directory / "train.src"), str(directory / "train.tgt"), source_vocabulary=vocabulary,
        target_vocabulary=vocabulary, batch_size=64, batch_type="examples", seed=5,
        alignments=read_alignments(str(directory / "train.align"), str(directory / "train.src"))
        if guided else None)
    # (loss per example, as OpenNMT-tf without auto_config: the guided cost, already a mean over
    # the batch's words, is divided again by the batch's examples, hence a weight of 50)
    step = TrainStep(model, optimizer, 1, average_loss_in_time=False,
                     guided_alignment=GuidedAlignment("ce", weight) if guided else None)
    for _, group in zip(range(steps), data.dataset(prefetch=False)):
        stats = step([group])
    assert np.isfinite(float(stats["loss"]))
    assets = build_assets(vocabulary)
    test = InferenceInput(str(directory / "test.src"), source_vocabulary=vocabulary, batch_size=50)
    results = translate_file(model, assets, test, DecodingOptions(beam_width=1), progress=False,
                             alignments="hard")
    return [hypotheses[0] for hypotheses in results]


def build_assets(vocabulary):
    from opennmt_lite.build import Assets
    from opennmt_lite.data.tokenizers import make_tokenizer

    return Assets(vocabulary, vocabulary, make_tokenizer(None), make_tokenizer(None))


def test_guided_alignment_lowers_the_alignment_error_rate(tmp_path):
    """Same seeds, same steps, with and without guided alignment: the alignment head (first head
    of the last of 2 layers) learns the alignment when guided (AER of the hard alignments that
    `infer.with_alignments: hard` prints, on 200 training sentences)."""
    vocab = permutation_task(tmp_path, 1200, seed=11)
    sources = (tmp_path / "test.src").read_text().splitlines()
    plain = alignment_error_rate(sources, train_and_align(tmp_path, vocab, guided=False))
    guided = alignment_error_rate(sources, train_and_align(tmp_path, vocab, guided=True))
    print(f"AER without guided alignment {plain:.3f}, with {guided:.3f}")
    assert guided <= plain - 0.10  # measured: 0.642 without, 0.385 with (2 x 100 steps)


# -- OpenNMT-tf's guided model: its infer lines ----------------------------------------------


def guided_config(tmp_path, params=None, infer=None):
    """An opennmt-lite config for the OpenNMT-tf model directory of the fixture (model.py's
    hyper-parameters, OpenNMT-tf's infer batches: 16 sentences in file order)."""
    import yaml

    from opennmt_lite.config import load_config

    user = {"model_dir": str(GUIDED), "auto_config": False,
            "data": {"source_vocabulary": "src-vocab.txt", "target_vocabulary": "tgt-vocab.txt"},
            "model": {"num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
                      "maximum_relative_position": 8, "pre_norm": True},
            "params": params or {}, "infer": {"batch_size": 16, "length_bucket_width": 0,
                                               **(infer or {})}}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(user))
    return load_config(str(path))


@pytest.mark.parametrize("name", ["beam1.scores.hard", "beam4.scores.hard",
                                  "beam4.replace.scores.hard", "beam1.replace.scores.soft",
                                  "beam4.scores.soft", "beam4.coverage0.2.length0.6.scores.hard"])
def test_infer_prints_opennmt_lines(tmp_path, name):
    """`onmt-main infer` of OpenNMT-tf's guided model with each infer-*.yml of the fixture (hard
    and soft alignments, scores, replace_unknown_target, beam 1 and 4): the same lines (>= 99/100
    texts and hard alignments identical, scores within 1e-4, soft values within 1e-5); also with
    coverage_penalty 0.2 and length_penalty 0.6."""
    import yaml

    from opennmt_lite import build
    from opennmt_lite.inference.translate import format_lines, translate_file
    from test_onmt_parity_decoding import compare_fields

    overrides = yaml.safe_load((GUIDED / f"infer-{name}.yml").read_text())
    config = guided_config(tmp_path, overrides["params"], overrides["infer"])
    model, assets, _ = build.inference_model(config)
    data = build.inference_input(str(GUIDED / "test.first100.tok.en"), config.infer, assets)
    results = translate_file(model, assets, data, build.decoding_options(config.params, config.infer),
                             progress=False, alignments=config.infer.with_alignments)
    ours = list(format_lines(results, config.infer.with_scores, config.infer.with_alignments))
    theirs = (GUIDED / f"pred.first100.{name}.tok.de").read_text(encoding="utf-8").splitlines()
    assert len(ours) == len(theirs) == 100
    equal = compare_fields(ours, theirs, config.infer.with_alignments)
    print(f"{name}: {equal}/100 lines identical")
    assert equal >= 99


@pytest.mark.parametrize("options, alignment", [("token_level.hard", "hard"), ("soft", "soft")])
def test_score_prints_opennmt_lines(tmp_path, monkeypatch, options, alignment):
    """`onmt-main score` of the references with OpenNMT-tf's guided model, with_token_level and
    hard alignments, or soft ones: OpenNMT-tf's lines (>= 99/100 tokens identical, NLL and token
    scores within 1e-4, hard alignments equal, soft values within 1e-5)."""
    import shutil

    from opennmt_lite.onmt import main as onmt_main
    from test_onmt_parity_score import compare, read_lines

    for path in GUIDED.iterdir():  # (onmt-main writes model_description.py beside the model)
        if path.name.startswith(("ckpt-", "checkpoint", "config", "model", "score.", "test.",
                                 "src-", "tgt-")):
            shutil.copyfile(path, tmp_path / path.name)
    monkeypatch.chdir(tmp_path)
    assert onmt_main.main([
        "--model", "model.py", "--config", "config.yml", f"score.{options}.yml",
        "--checkpoint_path", "ckpt-1500", "score", "--features_file", "test.first100.tok.en",
        "--predictions_file", "test.first100.tok.de", "--output_file", "ours.txt"]) == 0
    suffix = ".gz" if alignment == "soft" else ""
    theirs = read_lines(GUIDED / f"score.first100.ref.{options}.txt{suffix}")
    assert compare(read_lines(tmp_path / "ours.txt"), theirs, alignment) >= 99


@pytest.mark.parametrize("mixed_precision, sub_batches", [("false", 1), ("float16", 2)])
def test_training_continues_opennmt_checkpoint_with_guided_alignment(tmp_path, mixed_precision,
                                                                     sub_batches):
    """`train` on OpenNMT-tf's guided model directory (its Adam moments and step imported), with
    its own config's guided alignment, gradient accumulation (2 batches per step), in float32 and
    in mixed float16 with sub-batches: 2 steps, the loss finite and near OpenNMT-tf's own (its
    compute_loss on 8 training examples: 2.42 per token; a fresh model starts at ln(801) = 6.7)."""
    import shutil

    import yaml

    from opennmt_lite import build
    from opennmt_lite.config import load_config

    model_dir = tmp_path / "run"
    shutil.copytree(GUIDED, model_dir)
    user = yaml.safe_load((GUIDED / "config.yml").read_text())
    user.update(model_dir=str(model_dir), auto_config=False, model={
        "num_layers": 2, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 64,
        "maximum_relative_position": 8, "pre_norm": True})
    user["data"].update(train_features_file="train.first200.tok.en",
                        train_labels_file="train.first200.tok.de",
                        train_alignments="train.first200.align")
    user["train"].update(batch_size=512, effective_batch_size=1024, max_step=1502,
                         save_checkpoints_steps=1, mixed_precision=mixed_precision,
                         sub_batches=sub_batches, average_last_checkpoints=0)
    (tmp_path / "config.yml").write_text(yaml.safe_dump(user))
    trainer = build.trainer(load_config(str(tmp_path / "config.yml")), with_evaluation=False)
    assert trainer.step == 1500
    result = trainer.run()
    assert result["step"] == 1502
    expected = json.loads((GUIDED / "losses.json").read_text())
    print(f"loss at step 1502 ({mixed_precision}): {result['loss']:.4f}")
    assert 0.6 < result["loss"] / (expected["loss_ce"] / expected["tokens"]) < 1.6, result
