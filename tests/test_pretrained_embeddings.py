"""data.source_embedding / data.target_embedding: the tables OpenNMT-tf 2.32 loads
(tests/fixtures/onmt_embeddings), loaded when training starts from scratch, frozen by
`trainable: false` through the real trainer, and one clear error for a bad file."""

import json
import os

import numpy as np
import pytest

from conftest import FIXTURES
from opennmt_lite import build
from opennmt_lite.checkpointing.store import contents
from opennmt_lite.cli import main
from opennmt_lite.config import build_config
from opennmt_lite.data.embeddings import EmbeddingFileError, load_pretrained_embeddings
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.errors import MissingFileError

FIXTURE = FIXTURES / "onmt_embeddings"
with open(FIXTURE / "tables.json", encoding="utf-8") as stream:
    ONMT_TABLES = json.load(stream)


def file_vectors(path):
    """The float32 vectors of a fixture file (header skipped)."""
    with open(path, encoding="utf-8") as stream:
        rows = [line.split() for line in stream]
    return np.array([row[1:] for row in rows if len(row) > 2], dtype=np.float64).astype(np.float32)


@pytest.mark.parametrize("case", sorted(ONMT_TABLES))
def test_tables_equal_opennmt_tf_s(case):
    """The rows OpenNMT-tf takes from the file are ours, value for value; every other row is a
    N(0, 1) draw (OpenNMT-tf's unseeded, ours seeded)."""
    reference = ONMT_TABLES[case]
    expected = np.array(reference["table"], dtype=np.float32)
    vectors = file_vectors(FIXTURE / reference["path"])
    from_file = np.array([any((row == v).all() for v in vectors) for row in expected])
    assert from_file.sum() == (5 if reference["case_insensitive"] else 4)  # the/The/THE, or Dog
    table, found = load_pretrained_embeddings(
        FIXTURE / reference["path"], Vocabulary.from_file(FIXTURE / "vocab.txt"), 4,
        with_header=reference["with_header"], case_insensitive=reference["case_insensitive"],
        rng=np.random.default_rng(3))
    assert table.dtype == np.float32 and table.shape == expected.shape == (11, 4)
    assert found == from_file.sum()
    np.testing.assert_array_equal(table[from_file], expected[from_file])
    draws = np.random.default_rng(3).normal(size=(11, 4)).astype(np.float32)
    np.testing.assert_array_equal(table[~from_file], draws[~from_file])


def bad_file(tmp_path, text, name="vectors.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, with_header, message", [
    ("2 4\nthe 1 2 3 4\ncat 1 2 3\n", True,
     "line 3: a vector of 3 values, but the model's embedding size (model.num_units) is 4"),
    ("2 5\nthe 1 2 3 4 5\n", True,
     "line 1: the header gives vectors of 5 values, but the model's embedding size (model.num_units) is 4"),
    ("the 1 2 3 4\n", True, "line 1: not a header line 'count size'"),
    ("2 4\nthe 1 2 3 4\n", False, "line 1: a vector of 1 values, but the model's embedding size "
                                  "(model.num_units) is 4 (a header line? set data.source_embedding.with_header: true)"),
    ("cat 1 2 3 4\nthe 1 2 x 4\n", False, "line 2: 'x' is not a number"),
    ("the 1 2 nan 4\n", False, "line 1: the vector of 'the' holds nan (values must be finite)"),
    ("2 4\n\n", True, "holds no vectors"),
])
def test_bad_files_name_the_file_and_line(tmp_path, text, with_header, message):
    path = bad_file(tmp_path, text)
    with pytest.raises(EmbeddingFileError) as error:
        load_pretrained_embeddings(path, Vocabulary.from_file(FIXTURE / "vocab.txt"), 4,
                                   with_header=with_header)
    assert str(error.value).startswith(f"data.source_embedding: {path}")
    assert message in str(error.value)
    with pytest.raises(MissingFileError, match="data.source_embedding.path: embedding file not found"):
        load_pretrained_embeddings(tmp_path / "absent.txt", Vocabulary.from_file(FIXTURE / "vocab.txt"), 4)


# -- through the trainer ----------------------------------------------------------------------

def embedding_file(path, vocabulary_path, size, every=3, seed=0):
    """A vector file with a header for every `every`-th token of a vocabulary; returns
    {token: float32 vector}."""
    tokens = Vocabulary.from_file(vocabulary_path).tokens[3::every]
    vectors = np.random.default_rng(seed).uniform(-1, 1, size=(len(tokens), size)).round(4)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(f"{len(tokens)} {size}\n")
        for token, vector in zip(tokens, vectors):
            stream.write(" ".join([token, *map(str, vector)]) + "\n")
    return {token: vector.astype(np.float32) for token, vector in zip(tokens, vectors)}


def rows_of(vocabulary_path, vectors):
    """{row: vector} of the vocabulary rows a case-insensitive load gives a file vector."""
    rows = {}
    for index, token in enumerate(Vocabulary.from_file(vocabulary_path).tokens):
        if token.lower() in vectors:
            rows[index] = vectors[token.lower()]
    return rows


@pytest.fixture(scope="module")
def run_user(tmp_path_factory):
    """A tiny model (num_units 32) on a small pre-tokenized corpus, with a frozen source table
    and a trainable target table from files (vectors for every third vocabulary token)."""
    tmp_path = tmp_path_factory.mktemp("embeddings")
    corpus = FIXTURES / "onmt_bucket_boundary"
    data = {"train_features_file": str(corpus / "train.src"),
            "train_labels_file": str(corpus / "train.tgt")}
    sides = {}
    for side, trainable in (("source", False), ("target", True)):
        vocabulary = tmp_path / f"{side}-vocab.txt"
        vocabulary.write_text((corpus / "vocab.txt").read_text())
        path = str(tmp_path / f"{side}.vec")
        vectors = embedding_file(path, vocabulary, 32, seed=len(side))
        data[f"{side}_vocabulary"] = str(vocabulary)
        data[f"{side}_embedding"] = {"path": path, "trainable": trainable}
        sides[side] = rows_of(vocabulary, vectors)
    user = {"model_dir": str(tmp_path / "run"), "auto_config": False, "data": data,
            "model": {"num_layers": 1, "num_units": 32, "num_heads": 2, "ffn_inner_dim": 32},
            "params": {"optimizer": "Adam", "learning_rate": 0.01},
            "train": {"batch_type": "tokens", "batch_size": 512, "max_step": 2,
                      "save_checkpoints_steps": 1, "sub_batches": 1, "seed": 7}}
    return user, sides


@pytest.fixture(scope="module")
def trained(run_user):
    """(trainer after 2 steps, {side: its table as loaded})."""
    user, sides = run_user
    trainer = build.trainer(build_config(user))
    loaded = {side: getattr(trainer.model, f"{side}_inputter").embedding.numpy().copy()
              for side in sides}
    assert trainer.run()["step"] == 2
    return trainer, loaded


def test_frozen_table_does_not_move_the_trainable_one_does(run_user, trained):
    user, sides = run_user
    trainer, loaded = trained
    tables = {side: getattr(trainer.model, f"{side}_inputter").embedding for side in sides}
    for side, rows in sides.items():  # the file's vectors, in the rows of their tokens
        assert len(rows) == 10
        for row, vector in rows.items():
            np.testing.assert_array_equal(loaded[side][row], vector)
    assert not tables["source"].trainable and tables["target"].trainable
    np.testing.assert_array_equal(tables["source"].numpy(), loaded["source"])
    moved = np.abs(tables["target"].numpy() - loaded["target"]).max(axis=1) > 0
    assert moved[list(sides["target"])].sum() >= 8
    # the checkpoint holds both tables, Adam moments only for the trainable one
    stored = contents(trainer.checkpoint.latest)
    assert "model/source_inputter/embedding" in stored and "model/target_inputter/embedding" in stored
    assert "optimizer/m/target_inputter/embedding" in stored
    assert not any(name.endswith("/source_inputter/embedding") for name in stored
                   if name.startswith("optimizer/"))

    # A resumed run restores the tables from the checkpoint; the files are not read again.
    os.remove(user["data"]["target_embedding"]["path"])
    resumed = build.trainer(build_config(dict(user, train=dict(user["train"], max_step=3))))
    np.testing.assert_array_equal(resumed.model.target_inputter.embedding.numpy(),
                                  tables["target"].numpy())
    assert not resumed.model.source_inputter.embedding.trainable


def test_shared_tables_take_the_source_file(run_user, tmp_path, caplog):
    user, sides = run_user
    model = dict(user["model"], share_embeddings="all")
    data = dict(user["data"], target_vocabulary=user["data"]["source_vocabulary"])
    data["target_embedding"] = dict(data["source_embedding"], path=str(tmp_path / "unused.vec"))
    config = build_config(dict(user, model=model, data=data, model_dir=str(tmp_path / "run")))
    transformer = build.model(config.model, build.assets(config.data))
    build.freeze_embeddings(transformer, config.data)
    build.load_embeddings(transformer, config.data, build.assets(config.data), seed=1)
    table = transformer.source_inputter.embedding
    assert transformer.target_inputter.embedding is table and not table.trainable
    # (the output projection is this table too: frozen with it)
    assert all(v is not table for v in transformer.trainable_variables)
    for row, vector in sides["source"].items():
        np.testing.assert_array_equal(table.numpy()[row], vector)
    assert "data.target_embedding is not read" in caplog.text


def test_embedding_size_mismatch_is_one_line_exit_2(run_user, tmp_path, capsys):
    import yaml

    user, _ = run_user
    path = tmp_path / "wide.vec"
    embedding_file(str(path), user["data"]["source_vocabulary"], 33)
    data = dict(user["data"], source_embedding={"path": str(path)})
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(dict(user, data=data, model_dir=str(tmp_path / "run"))))
    assert main(["train", "--config", str(config)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[-1] == (f"error: data.source_embedding: {path}, line 1: the header gives vectors "
                          "of 33 values, but the model's embedding size (model.num_units) is 32")


def test_update_vocab_remaps_a_frozen_table(run_user, trained, tmp_path):
    """The frozen table is a weight like the others: update_vocab moves its rows (it has no
    Adam moments to move)."""
    from opennmt_lite.checkpointing import store
    from opennmt_lite.training.vocab_update import update_vocab, vocabulary_mapping

    user, _ = run_user
    config = build_config(user)
    old = Vocabulary.from_file(user["data"]["source_vocabulary"])
    new = Vocabulary(old.tokens[:3] + old.tokens[:2:-1][5:] + ["zzz_new"])
    new_path = tmp_path / "new-src-vocab.txt"
    new.save(new_path)
    frozen = store.read(store.latest(config.model_dir), ["model/source_inputter/embedding"])
    written = update_vocab(config, str(tmp_path / "updated"), str(new_path), None,
                           build.training_checkpoint)
    (table,) = store.read(written, ["model/source_inputter/embedding"]).values()
    mapping = np.array(vocabulary_mapping(old, new))
    assert table.shape == (new.num_ids, 32) and (mapping == -1).sum() == 1
    np.testing.assert_array_equal(table[mapping >= 0],
                                  frozen["model/source_inputter/embedding"][mapping[mapping >= 0]])
    assert not table[mapping == -1].any()  # (a new token: a zero row, as OpenNMT-tf)


def test_a_run_resumed_with_the_table_unfrozen_trains_it(run_user, trained, tmp_path):
    """trainable: false, then true on resume: the checkpoint has no Adam moments for the table,
    which start at zero (as in OpenNMT-tf); everything else is restored."""
    import shutil

    from opennmt_lite.checkpointing.names import named_trainable, optimizer_state

    user, _ = run_user
    trainer, _ = trained
    model_dir = str(tmp_path / "run")
    shutil.copytree(user["model_dir"], model_dir)
    data = dict(user["data"], source_embedding=dict(user["data"]["source_embedding"], trainable=True))
    train = dict(user["train"], max_step=3, save_checkpoints_steps=100)
    resumed = build.trainer(build_config(dict(user, model_dir=model_dir, data=data, train=train)))
    assert resumed.step == 2
    table = resumed.model.source_inputter.embedding
    before = table.numpy().copy()
    np.testing.assert_array_equal(before, trainer.model.source_inputter.embedding.numpy())
    state = optimizer_state(resumed.optimizer, named_trainable(resumed.model))
    assert not state["m/source_inputter/embedding"].numpy().any()
    np.testing.assert_array_equal(state["m/target_inputter/embedding"].numpy(),
                                  optimizer_state(trainer.optimizer, named_trainable(trainer.model))
                                  ["m/target_inputter/embedding"].numpy())
    resumed.run()
    assert (table.numpy() != before).any()


def test_average_of_a_frozen_run_keeps_the_table(run_user, trained, tmp_path):
    """average_checkpoints builds the run's optimizer state (no moments for a frozen table) and
    averages the weights: the frozen table, equal in every checkpoint, stays as it was."""
    from opennmt_lite.checkpointing import store
    from opennmt_lite.commands.average_checkpoints import average

    user, _ = run_user
    trainer, loaded = trained
    written = average(build_config(user), str(tmp_path / "avg"), 2)
    assert os.path.basename(written) == "ckpt-2"
    (table,) = store.read(written, ["model/source_inputter/embedding"]).values()
    np.testing.assert_array_equal(table, loaded["source"])
