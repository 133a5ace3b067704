"""The training inputs of tests/test_numpy_pipeline.py, and their NumPy batches written by a
process in which TensorFlow cannot be imported:

    python tests/numpy_pipeline_worker.py DATA_DIR OUT.npz

`write_data(directory)` writes the synthetic corpus (two pre-tokenized file pairs, their word
vocabularies, example weights, gold alignments); `make_input(case, directory)` builds the
`TrainingInput` of one of `CASES`. The worker stores, per case, the first FULL groups of
`prefetched(groups())` and the RESUMED groups of `groups(skip_groups=SKIP)` (arrays named
`<case>/<full|resumed>/<group>/<batch>/<key>`), and fails if any tensorflow module was imported.
"""

import os
import pathlib
import sys

import numpy as np

FULL = 24  # groups read from the start: more than one epoch of every case
SKIP = 9  # the groups a resumed run has done
RESUMED = 8
WORDS = [f"w{i}" for i in range(40)]

# case -> (weighted files, TrainingInput keyword arguments); every case shuffles with its seed.
CASES = {
    "sorted_accumulated": (False, dict(batch_size=200, batch_type="tokens", accum_steps=2,
                                       sample_buffer_size=150, seed=3, pad_to_multiple=2)),
    "opennmt_buckets": (False, dict(batch_size=12, batch_type="examples", scheme="opennmt",
                                    length_bucket_width=3, sample_buffer_size=100,
                                    pad_to_bucket_boundary=True, seed=9)),
    "xla_shapes": (False, dict(batch_size=240, batch_type="tokens", max_shapes=3,
                               pad_to_multiple=4, seed=5, negatives="contrastive")),
    "weighted_files": (True, dict(batch_size=160, batch_type="tokens", accum_steps=3,
                                  sample_buffer_size=120, seed=11, alignments=True)),
}


def write_data(directory):
    """Two parallel files of 180 and 120 lines (1 to 20 words), their vocabularies, one example
    weight per line, and a gold alignment per line."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, lines in (("a", 180), ("b", 120)):
        source, target, alignments = [], [], []
        for _ in range(lines):
            source_words = rng.choice(WORDS, rng.integers(1, 21))
            target_words = rng.choice(WORDS[5:], rng.integers(1, 21))
            source.append(" ".join(source_words))
            target.append(" ".join(target_words))
            pairs = min(len(source_words), len(target_words))
            alignments.append(" ".join(f"{i}-{pairs - 1 - i}" for i in range(pairs)))
        (directory / f"{name}.src").write_text("\n".join(source) + "\n")
        (directory / f"{name}.tgt").write_text("\n".join(target) + "\n")
        (directory / f"{name}.align").write_text("\n".join(alignments) + "\n")
        weights = rng.uniform(0.5, 2.0, lines)
        (directory / f"{name}.weights").write_text("".join(f"{w:.3f}\n" for w in weights))
    vocabulary = "\n".join(["<blank>", "<s>", "</s>", *WORDS[:-4]]) + "\n"  # (4 unknown words)
    (directory / "vocab.txt").write_text(vocabulary)


def make_input(case, directory):
    """The TrainingInput of CASES[case] on the files of `write_data(directory)`."""
    from opennmt_lite.data import TrainingInput
    from opennmt_lite.data.alignments import read_alignments
    from opennmt_lite.data.noise import contrastive_negatives
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.data.weighted import WeightedTrainingInput, with_example_weights

    directory = pathlib.Path(directory)
    weighted, kwargs = CASES[case]
    kwargs = dict(kwargs)
    vocabulary = Vocabulary.from_file(str(directory / "vocab.txt"))
    common = dict(source_vocabulary=vocabulary, target_vocabulary=vocabulary,
                  maximum_features_length=18, maximum_labels_length=18)
    if kwargs.get("negatives") == "contrastive":
        kwargs["negatives"] = contrastive_negatives(vocabulary)
    names = ("a", "b") if weighted else ("a",)
    sources = [str(directory / f"{name}.src") for name in names]
    targets = [str(directory / f"{name}.tgt") for name in names]
    if kwargs.pop("alignments", False):
        kwargs["alignments"] = read_alignments([str(directory / f"{n}.align") for n in names],
                                               sources)
    weights = [str(directory / f"{name}.weights") for name in names]
    if weighted:
        return WeightedTrainingInput(sources, targets, [1.0, 3.0], example_weights_files=weights,
                                     **common, **kwargs)
    training = TrainingInput(sources[0], targets[0], **common, **kwargs)
    with_example_weights(training.corpus, weights[0], sources[0])
    return training


def store(arrays, prefix, groups):
    for g, group in enumerate(groups):
        for b, batch in enumerate(group):
            for key, value in batch.items():
                arrays[f"{prefix}/{g}/{b}/{key}"] = np.asarray(value)


def main(data_dir, out_path):
    sys.modules["tensorflow"] = None  # (`import tensorflow` now raises ImportError)
    import itertools

    from opennmt_lite.data.pipeline import prefetched

    arrays = {}
    for case in CASES:
        with prefetched(make_input(case, data_dir).groups()) as groups:
            store(arrays, f"{case}/full", itertools.islice(groups, FULL))
        resumed = make_input(case, data_dir).groups(skip_groups=SKIP)
        store(arrays, f"{case}/resumed", itertools.islice(resumed, RESUMED))
    loaded = sorted(name for name, module in sys.modules.items()
                    if name.split(".")[0] == "tensorflow" and module is not None)
    if loaded:
        sys.exit(f"TensorFlow modules imported: {loaded}")
    np.savez(out_path, **arrays)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(sys.argv[1], sys.argv[2])
