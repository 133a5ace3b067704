"""Several training files sampled with `data.train_files_weights`, and `data.example_weights`:
the shares of the files, exact resume of the stream, sharding, and the errors of bad input."""

import os

import numpy as np
import pytest
import yaml

from opennmt_lite.config import ConfigError, build_config
from opennmt_lite.data.pipeline import TrainingInput
from opennmt_lite.data.text import DataError
from opennmt_lite.data.weighted import (
    WeightedTrainingInput, read_example_weights, sampling_probabilities, with_example_weights)

# Pre-tokenized files: file k holds words of the letter LETTERS[k] (so a batch's source ids tell
# which file each example came from), lines of 1 to 6 words.
LETTERS = "abc"


def write_files(directory, sizes, long_every=0):
    """{"features": [...], "labels": [...], "vocabulary": path}; with `long_every` = n, every
    n-th line of the first file has 30 words (dropped by a length filter of 20)."""
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("<blank>\n<s>\n</s>\n" + "".join(f"{c}\n" for c in LETTERS))
    features, labels = [], []
    for letter, size in zip(LETTERS, sizes):
        lines = []
        for i in range(size):
            words = 30 if long_every and letter == "a" and i % long_every == 0 else 1 + i % 6
            lines.append(" ".join([letter] * words) + "\n")
        for side, paths in (("src", features), ("tgt", labels)):
            path = directory / f"{letter}.{side}"
            path.write_text("".join(lines))
            paths.append(str(path))
    return {"features": features, "labels": labels, "vocabulary": str(vocabulary)}


def weighted_input(files, weights, **kwargs):
    options = dict(batch_size=64, batch_type="tokens", length_bucket_width=1, seed=11,
                   sample_buffer_size=1000)
    options.update(kwargs)
    return WeightedTrainingInput(
        files["features"], files["labels"], weights, source_vocabulary=files["vocabulary"],
        target_vocabulary=files["vocabulary"], **options)


def file_of_examples(training_input, batches):
    """The file index (0, 1, 2) of each example of `batches` (lists of example indices)."""
    first_ids = training_input.corpus.source.flat[
        training_input.corpus.source.offsets[np.concatenate(batches)]]
    return first_ids - 3  # ids of a, b, c


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("weighted"), (300, 300, 300))


@pytest.mark.parametrize("scheme", ["sorted", "opennmt"])
def test_each_file_is_drawn_in_proportion_to_its_weight(files, scheme):
    weights = [0.6, 0.3, 0.1]
    training_input = weighted_input(files, weights, scheme=scheme)
    stream = training_input.index_batches()
    batches = [next(stream) for _ in range(600)]
    origin = file_of_examples(training_input, batches)
    assert len(origin) >= 5000
    shares = np.bincount(origin, minlength=3) / len(origin)
    np.testing.assert_allclose(shares, weights, atol=0.02)
    # every file was read in a new order at each pass, all its lines (300 each, ~2 passes of c)
    seen = training_input.corpus.line_index[np.concatenate(batches)][origin == 2]
    assert len(set(seen.tolist())) == 300


def test_opennmt_probabilities_scale_weights_by_file_sizes(tmp_path):
    """OpenNMT-tf's normalize_weights: p_i is proportional to weight_i * lines_i; the length
    filter applies after the draw, so a file with dropped lines gives fewer examples."""
    # (the values of OpenNMT-tf 2.32's opennmt.data.normalize_weights for these arguments)
    np.testing.assert_allclose(sampling_probabilities([1, 1, 2], [100, 300, 100]),
                               [0.16666666666666666, 0.4999999999999999, 0.3333333333333333])
    np.testing.assert_allclose(sampling_probabilities([0.6, 0.3, 0.1], [300] * 3), [0.6, 0.3, 0.1])
    files = write_files(tmp_path, (200, 600, 200), long_every=4)  # a quarter of file a dropped
    training_input = weighted_input(files, [1, 1, 2], maximum_features_length=20,
                                    maximum_labels_length=20)
    np.testing.assert_allclose(training_input.probabilities, [1 / 6, 1 / 2, 1 / 3])
    stream = training_input.index_batches()
    origin = file_of_examples(training_input, [next(stream) for _ in range(500)])
    assert len(origin) >= 5000
    kept = np.array([1 / 6 * 3 / 4, 1 / 2, 1 / 3])
    np.testing.assert_allclose(np.bincount(origin) / len(origin), kept / kept.sum(), atol=0.02)
    assert training_input.stats.dropped["source_too_long"] == 50
    assert training_input.corpus.source_lengths.max() <= 20


@pytest.mark.parametrize("scheme", ["sorted", "opennmt"])
def test_the_stream_resumes_exactly_where_it_stopped(files, scheme):
    """A resumed input (skip_batches = what the checkpoint's data position says) yields the
    batches the uninterrupted one yields next, from every file's position."""
    straight = weighted_input(files, [0.5, 0.25, 0.25], sample_buffer_size=700, scheme=scheme)
    stream = straight.index_batches()
    reference = [next(stream) for _ in range(400)]  # about 8 windows
    for stop in (0, 1, 57, 133, 290):
        resumed = weighted_input(files, [0.5, 0.25, 0.25], sample_buffer_size=700,
                                 scheme=scheme)
        after = resumed.index_batches(skip_batches=stop)
        for expected in reference[stop:stop + 40]:
            np.testing.assert_array_equal(next(after), expected)
    # the file positions are the sum of the windows' draws, whatever order they are asked in
    window_5 = weighted_input(files, [0.5, 0.25, 0.25], sample_buffer_size=700).sampler.positions(5)
    np.testing.assert_array_equal(window_5, straight.sampler.positions(5))
    assert window_5.sum() == 5 * 700
    # padded NumPy batches (what the train step receives) too
    a = list(zip(range(3), straight.numpy_batches(skip_batches=10)))
    b = list(zip(range(3), weighted_input(files, [0.5, 0.25, 0.25], sample_buffer_size=700,
                                          scheme=scheme).numpy_batches(skip_batches=10)))
    for (_, x), (_, y) in zip(a, b):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_array_equal(x[name], y[name])


def test_shards_split_each_file_by_line(files):
    shards = [weighted_input(files, [1, 1, 1], num_shards=2, shard_index=k) for k in range(2)]
    for k, shard in enumerate(shards):
        lines = shard.corpus.line_index
        assert set((lines % 2).tolist()) == {k} and len(lines) == 450
        stream = shard.index_batches()
        origin = file_of_examples(shard, [next(stream) for _ in range(100)])
        assert set(origin.tolist()) == {0, 1, 2}
    # different shards, different examples
    first = [shards[k].corpus.line_index[next(shards[k].index_batches())] for k in range(2)]
    assert not set(first[0].tolist()) & set(first[1].tolist())


def test_example_weights_follow_their_examples(files, tmp_path):
    weights_files = []
    for k in range(3):
        path = tmp_path / f"w{k}.txt"
        path.write_text("".join(f"{k + 1}.{i % 10}\n" for i in range(300)))
        weights_files.append(str(path))
    training_input = weighted_input(files, [1, 1, 1], example_weights_files=weights_files)
    batch = next(iter(training_input.numpy_batches()))
    assert batch["example_weight"].dtype == np.float32
    # (file k: weight k + 1 + (line % 10) / 10; its words: letter k, 1 + line % 6 of them)
    indices = next(training_input.index_batches())
    lines = training_input.corpus.line_index[indices]
    origin = file_of_examples(training_input, [indices])
    np.testing.assert_allclose(batch["example_weight"], origin + 1 + (lines % 10) / 10, rtol=1e-6)
    np.testing.assert_array_equal(batch["source_length"], 1 + lines % 6)
    # without weighted files: the concatenation, each line's weight
    plain = TrainingInput(files["features"], files["labels"], batch_size=64, batch_type="tokens",
                          source_vocabulary=files["vocabulary"],
                          target_vocabulary=files["vocabulary"], seed=3)
    with_example_weights(plain.corpus, weights_files, files["features"])
    np.testing.assert_allclose(plain.corpus.weights[[0, 305, 899]], [1.0, 2.5, 3.9], rtol=1e-6)
    assert "example_weight" in plain.element_spec[0]


@pytest.mark.parametrize("content, message", [
    ("1\n2\n", "2 lines, but"),
    ("1\nx\n" + "1\n" * 298, "line 2: 'x' is not a finite number"),
    ("1\n\n" + "1\n" * 298, "line 2: '' is not a finite number"),
    ("1\nnan\n" + "1\n" * 298, "line 2: 'nan' is not a finite number"),
    ("1\n-0.5\n" + "1\n" * 298, "line 2: negative weight -0.5"),
])
def test_bad_example_weights_name_the_file_and_line(tmp_path, files, content, message):
    path = tmp_path / "weights.txt"
    path.write_text(content)
    with pytest.raises(DataError, match=message) as error:
        read_example_weights(str(path), 300, files["features"][0])
    assert str(path) in str(error.value)


def config_with(tmp_path, **data):
    user = {"model_dir": str(tmp_path / "run"),
            "model": {"num_layers": 1, "num_units": 8, "num_heads": 2, "ffn_inner_dim": 8},
            "data": {"train_features_file": ["a.src", "b.src"],
                     "train_labels_file": ["a.tgt", "b.tgt"], **data},
            "train": {"sample_buffer_size": 1000}}
    return build_config(user)


@pytest.mark.parametrize("data, message", [
    ({"train_files_weights": [1]}, r"1 weight\(s\) for 2 training file\(s\)"),
    ({"train_files_weights": [1, -1]}, "weights cannot be negative, got -1"),
    ({"train_files_weights": [0, 0.0]}, "all weights are zero"),
    ({"train_files_weights": [1, "x"]}, "expected a list of numbers, got 'x'"),
    ({"train_labels_file": ["a.tgt"]}, r"lists 2 file\(s\) but data.train_labels_file 1"),
    ({"example_weights": "w.txt"}, r"data.example_weights lists 1 file\(s\) for 2"),
    ({"train_features_file": []}, "expected a path or a non-empty list of paths"),
])
def test_bad_weights_in_the_config_are_one_line(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        config_with(tmp_path, **data)


def test_weighted_files_in_the_config(tmp_path):
    config = config_with(tmp_path, train_files_weights=[3, 1], example_weights=["w1", "w2"])
    assert config.data.train_files_weights == (3.0, 1.0)
    assert config.data.train_features_file == ("a.src", "b.src")
    with pytest.raises(ConfigError, match="single_pass cannot be used"):
        build_config(yaml.safe_load(yaml.safe_dump({
            "model_dir": str(tmp_path), "train": {"single_pass": True},
            "model": {"num_layers": 1, "num_units": 8, "num_heads": 2, "ffn_inner_dim": 8},
            "data": {"train_features_file": ["a", "b"], "train_labels_file": ["c", "d"],
                     "train_files_weights": [1, 1]}})))


def training_config(tmp_path, files, name, max_step):
    """A `run.py train` config file: files a and b drawn 3:1, with example weights, a 1-layer
    model, windows of 50 draws (6 steps cross about 3 of them)."""
    from training_helpers import TINY_MODEL

    weights_files = []
    for k in range(2):
        path = tmp_path / f"weights{k}.txt"
        path.write_text("".join(f"{0.5 + (i % 3) / 2}\n" for i in range(300)))
        weights_files.append(str(path))
    user = {
        "model_dir": str(tmp_path / name),
        "data": {"train_features_file": files["features"][:2],
                 "train_labels_file": files["labels"][:2], "train_files_weights": [3, 1],
                 "example_weights": weights_files, "source_vocabulary": files["vocabulary"],
                 "target_vocabulary": files["vocabulary"]},
        "model": {**TINY_MODEL, "num_layers": 1},
        "params": {"optimizer": "Adam", "learning_rate": 2.0, "decay_type": "NoamDecay",
                   "decay_params": {"model_dim": 64, "warmup_steps": 4}, "label_smoothing": 0.1},
        "train": {"batch_type": "tokens", "batch_size": 64, "effective_batch_size": 128,
                  "length_bucket_width": 1, "sample_buffer_size": 50, "max_step": max_step,
                  "save_checkpoints_steps": 2, "save_summary_steps": 1, "seed": 5,
                  "average_last_checkpoints": 0, "sub_batches": 1},
        "eval": {"steps": 0},
    }
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(user))
    return str(path), user["model_dir"]


def test_training_killed_then_resumed_equals_an_uninterrupted_run(tmp_path, files):
    """Weighted files and example weights through `run.py train`: SIGKILLed after step 4 (its
    checkpoints hold the data position), run again to step 7, the weights equal a straight
    run's, bit for bit (as tests/test_interruption.py checks for one file)."""
    import subprocess

    from test_interruption import ENV, RUN, final_weights, wait_for_step

    straight_config, straight_dir = training_config(tmp_path, files, "straight", 7)
    subprocess.run(RUN + [straight_config], env=ENV, check=True, capture_output=True, timeout=300)
    config, model_dir = training_config(tmp_path, files, "killed", 7)
    process = subprocess.Popen(RUN + [config], env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for_step(model_dir, 5, process)
    finally:
        process.kill()
        process.wait(timeout=60)
    result = subprocess.run(RUN + [config], env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "step 7" in result.stderr and "step 1 " not in result.stderr  # resumed, not restarted
    straight, _ = final_weights(straight_dir)
    resumed, reader = final_weights(model_dir)
    assert reader.get_tensor("data/groups_done/.ATTRIBUTES/VARIABLE_VALUE") == 7
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    # (and the steps move the weights well above float32 rounding: the equality means something)
    import tensorflow as tf

    early = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", "ckpt-2"))
    assert max(np.abs(early.get_tensor(name) - straight[name]).max() for name in straight) > 1e-2


def cli_config(tmp_path, files, **data):
    user = {"model_dir": str(tmp_path / "run"),
            "model": {"num_layers": 1, "num_units": 8, "num_heads": 2, "ffn_inner_dim": 8},
            "data": {"train_features_file": files["features"][:2],
                     "train_labels_file": files["labels"][:2], "train_files_weights": [1, 2],
                     "source_vocabulary": str(tmp_path / "src.txt"),
                     "target_vocabulary": str(tmp_path / "tgt.txt"), **data},
            "train": {"batch_size": 64, "max_step": 1, "sample_buffer_size": 100}}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(user))
    return str(path)


def test_build_vocab_reads_every_training_file_and_bad_weights_exit_2(tmp_path, files, capsys):
    import run

    weights = [tmp_path / "w0.txt", tmp_path / "w1.txt"]
    weights[0].write_text("1\n" * 300)
    weights[1].write_text("1\n" * 150 + "one\n" + "1\n" * 149)
    config = cli_config(tmp_path, files, example_weights=[str(w) for w in weights])
    assert run.main(["build-vocab", "--config", config]) == 0
    assert (tmp_path / "src.txt").read_text().split("\n")[3:5] == ["a", "b"]  # both files
    capsys.readouterr()
    assert run.main(["train", "--config", config]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert err == [f"error: data.example_weights {weights[1]}, line 151: 'one' is not a finite "
                   "number"]


def test_weighted_batches_carry_the_sequence_controls(files):
    """Weighted files with sequence controls (a source `<s>` and `</s>`; a target without `<s>`)
    and contrastive negatives: each batch's sides hold the controls, as the plain input's."""
    from opennmt_lite.data.corpus import Controls
    from opennmt_lite.data.vocab import BOS_ID, EOS_ID

    def negatives(ids, rng):  # (the target itself, with its controls: the same padding)
        return ids

    training_input = weighted_input(files, [1, 1, 1], source_controls=Controls(True, True),
                                    target_controls=Controls(False, True), negatives=negatives)
    batch = next(iter(training_input.numpy_batches()))
    indices = next(training_input.index_batches())
    pieces = training_input.corpus.source.lengths[indices]  # (the same words on both sides)
    rows = np.arange(len(indices))
    np.testing.assert_array_equal(batch["source_length"], pieces + 2)
    assert (batch["source_ids"][:, 0] == BOS_ID).all()
    assert (batch["source_ids"][rows, pieces + 1] == EOS_ID).all()
    np.testing.assert_array_equal(batch["target_length"], pieces)  # (pieces + 1 controls - 1)
    assert (batch["target_ids_in"][:, 0] > EOS_ID).all()  # (a word: no `<s>`)
    assert (batch["target_ids_out"][rows, pieces - 1] == EOS_ID).all()
    for name in ("ids_in", "ids_out", "length"):
        np.testing.assert_array_equal(batch[f"noisy_target_{name}"], batch[f"target_{name}"])
