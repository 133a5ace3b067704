"""checkpointing/bundle.py, TensorFlow's checkpoint format read and written without TensorFlow,
checked against TensorFlow itself: every fixture checkpoint read identically, what it writes
read by TensorFlow (byte for byte what TensorFlow's SaveV2 writes), TensorFlow's checkpoints
round-tripped, damage found with one clear message, and no TensorFlow imported."""

import os
import pathlib
import subprocess
import sys

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from opennmt_lite.checkpointing import bundle, crc32c
from opennmt_lite.checkpointing.store import Checkpoint

ROOT = pathlib.Path(__file__).parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PREFIXES = sorted(str(p)[: -len(".index")] for p in FIXTURES.rglob("*.index"))


def assert_same_as_tensorflow(prefix):
    """Every tensor of `prefix` as bundle.py reads it equals tf.train.load_checkpoint's: the
    names, dtypes, shapes and bytes (strings item by item)."""
    reader = tf.train.load_checkpoint(prefix)
    dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
    ours, names = bundle.read_bundle(prefix), bundle.bundle_names(prefix)
    assert set(ours) == set(names) == set(shapes)
    for name, value in ours.items():
        theirs = np.asarray(reader.get_tensor(name))
        assert value.shape == names[name][1] == tuple(shapes[name]) == theirs.shape, name
        if dtypes[name] == tf.string:
            assert value.dtype == names[name][0] == object
            assert value.tolist() == theirs.astype(object).tolist(), name
        else:
            assert value.dtype == names[name][0] == dtypes[name].as_numpy_dtype, name
            assert value.tobytes() == theirs.tobytes(), name
    return ours


def test_reads_every_fixture_checkpoint_as_tensorflow_does():
    kinds = set()
    assert len(PREFIXES) >= 16
    for prefix in PREFIXES:
        kinds |= {value.dtype.name for value in assert_same_as_tensorflow(prefix).values()}
    assert {"float32", "int64", "object"} <= kinds  # (weights, the step, the object graph)


def test_crc32c_matches_a_bitwise_reference():
    def reference(data):
        register = 0xFFFFFFFF
        for byte in data:
            register ^= byte
            for _ in range(8):
                register = (register >> 1) ^ (0x82F63B78 if register & 1 else 0)
        return register ^ 0xFFFFFFFF

    assert crc32c.value(b"123456789") == 0xE3069283  # the standard check value
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 4096, 32768 + 5, 70001, 300007):  # the short path and the lanes
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert crc32c.value(data) == reference(data), size
        cut = size // 3
        assert crc32c.value(data[cut:], crc32c.value(data[:cut])) == reference(data), size
    for crc in (0, 1, 0xE3069283, 0xFFFFFFFF):
        assert crc32c.unmask(crc32c.mask(crc)) == crc


def all_dtypes():
    rng = np.random.default_rng(0)
    tensors = {
        "weights/float32": rng.standard_normal((3, 5)).astype(np.float32),
        "weights/float16": rng.standard_normal((7,)).astype(np.float16),
        "weights/bfloat16": rng.standard_normal((2, 2, 3)).astype(ml_dtypes.bfloat16),
        "weights/float64": rng.standard_normal((2,)),
        "counts/int32": rng.integers(-9, 9, (4,), dtype=np.int32),
        "counts/int64": np.array(123456789012, dtype=np.int64),
        "counts/uint8": np.arange(5, dtype=np.uint8),
        "flags/bool": np.array([True, False, True]),
        "text/scalar": np.array(b"one \x00 two", dtype=object),
        "text/matrix": np.array([[b"", b"x" * 300], [b"abc", "\u00e9".encode()]], dtype=object),
        "weights/empty": np.zeros((0, 3), np.float32),
    }
    for i in range(3000):  # enough index entries for several table blocks
        tensors[f"many/{i:05d}/.ATTRIBUTES/VARIABLE_VALUE"] = np.full((2,), i, np.float32)
    return tensors


def test_written_bundle_is_read_by_tensorflow_and_is_what_save_v2_writes(tmp_path):
    tensors = all_dtypes()
    bundle.write_bundle(str(tmp_path / "ours"), tensors)
    assert sorted(os.listdir(tmp_path)) == ["ours.data-00000-of-00001", "ours.index"]
    reader = tf.train.load_checkpoint(str(tmp_path / "ours"))  # (checks sizes and checksums)
    for name, value in tensors.items():
        theirs = np.asarray(reader.get_tensor(name))
        if value.dtype == object:
            assert theirs.astype(object).tolist() == value.tolist(), name
        else:
            assert (theirs.dtype, theirs.shape) == (value.dtype, value.shape), name
            assert theirs.tobytes() == value.tobytes(), name
    names = sorted(tensors)  # (SaveV2 writes the data in the order given; ours: name order)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "tf"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n].astype(bytes) if tensors[n].dtype == object
                                           else tensors[n]) for n in names])
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"tf{suffix}").read_bytes()


class Affine(keras.layers.Layer):
    """A layer whose weights are public attributes (as names.named_variables walks them)."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 3), initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(3,), initializer="ones")


def test_tensorflow_checkpoints_round_trip(tmp_path):
    """This project's Checkpoint (model, optimizer, data position) and a plain
    tf.train.Checkpoint, read by bundle.py and written again: TensorFlow reads the copy with the
    same values, and restores the plain one from it object by object (the object graph is one
    of its string tensors)."""
    layer = Affine()
    layer.build((None, 4))
    optimizer = keras.optimizers.Adam()
    optimizer.build(layer.trainable_variables)
    checkpoint = Checkpoint(layer, optimizer, save_dir=str(tmp_path / "store"),
                            extra={"data/groups_done": keras.Variable(7, dtype="int64")})
    stored = checkpoint.save(12)
    values = assert_same_as_tensorflow(stored)
    assert values["data/groups_done/.ATTRIBUTES/VARIABLE_VALUE"] == 7
    copy = str(tmp_path / "copy" / "ckpt-12")
    bundle.write_bundle(copy, values)
    assert assert_same_as_tensorflow(copy).keys() == values.keys()

    weights = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    step = tf.Variable(5, dtype=tf.int64)
    written = tf.train.Checkpoint(weights=weights, step=step).write(str(tmp_path / "plain" / "ckpt"))
    copy = str(tmp_path / "plain_copy" / "ckpt")
    bundle.write_bundle(copy, bundle.read_bundle(written))
    restored_weights, restored_step = tf.Variable(tf.zeros((2, 3))), tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(weights=restored_weights, step=restored_step).read(copy).assert_consumed()
    np.testing.assert_array_equal(restored_weights.numpy(), weights.numpy())
    assert int(restored_step.numpy()) == 5


def damaged_copy(tmp_path, change):
    prefix = str(tmp_path / "ckpt")
    bundle.write_bundle(prefix, {"a": np.arange(1000, dtype=np.float32),
                                 "b": np.ones((10, 10), np.float32)})
    change(prefix)
    return prefix


def flip(path, position):
    data = bytearray(pathlib.Path(path).read_bytes())
    data[position] ^= 0x10
    pathlib.Path(path).write_bytes(bytes(data))


def truncate(path, size):
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[:size] if size >= 0 else data[:len(data) + size])


DAMAGES = {  # name: (change to the files, what the one error line says)
    "flipped data byte": (lambda p: flip(p + ".data-00000-of-00001", 3000),
                          r"ckpt\.data-00000-of-00001 is damaged: a \(bytes \[0, 4000\)\) fails its checksum"),
    "truncated data": (lambda p: truncate(p + ".data-00000-of-00001", -10),
                       r"ckpt\.data-00000-of-00001 is truncated: b needs bytes \[4000, 4400\)"),
    "missing data": (lambda p: os.remove(p + ".data-00000-of-00001"),
                     r"its data file .*ckpt\.data-00000-of-00001 is missing"),
    "flipped index byte": (lambda p: flip(p + ".index", 20),
                           r"ckpt\.index is damaged \(block checksum mismatch at byte 0\)"),
    "truncated index": (lambda p: truncate(p + ".index", -30),
                        r"ckpt\.index is not a checkpoint index or is truncated \(bad magic number\)"),
    "empty index": (lambda p: truncate(p + ".index", 0),
                    r"ckpt\.index is truncated \(0 bytes"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damage_is_one_clear_error_naming_the_file(tmp_path, damage):
    change, message = DAMAGES[damage]
    prefix = damaged_copy(tmp_path, change)
    with pytest.raises(bundle.BundleError, match=message) as raised:
        bundle.read_bundle(prefix)
    assert "\n" not in str(raised.value)
    with pytest.raises(Exception):  # TensorFlow finds it damaged too
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    if damage == "flipped data byte":  # found by the checksum only: not read without `verify`
        assert bundle.read_bundle(prefix, verify=False)["a"][750] != 750


def test_names_not_stored_are_named(tmp_path):
    prefix = str(tmp_path / "ckpt")
    bundle.write_bundle(prefix, {"a": np.zeros(2, np.float32)})
    assert bundle.read_bundle(prefix, names=["a"])["a"].tolist() == [0, 0]
    with pytest.raises(KeyError, match="has no tensor named b, c"):
        bundle.read_bundle(prefix, names=["a", "b", "c"])
    with pytest.raises(TypeError, match="tensor c: dtype complex64"):
        bundle.write_bundle(prefix, {"c": np.zeros(2, np.complex64)})
    assert bundle.read_bundle(prefix)["a"].tolist() == [0, 0]  # (the failed write left it whole)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.data-00000-of-00001", "ckpt.index"]


def test_imports_no_tensorflow(tmp_path):
    """Reading a fixture and writing a bundle, with TensorFlow made unimportable."""
    script = f"""
import sys
sys.modules["tensorflow"] = None  # any import of it now fails
from opennmt_lite.checkpointing import bundle
values = bundle.read_bundle({PREFIXES[0]!r})
bundle.write_bundle({str(tmp_path / "ckpt")!r}, values)
assert bundle.read_bundle({str(tmp_path / "ckpt")!r}).keys() == values.keys()
assert sys.modules["tensorflow"] is None and "keras" not in sys.modules
print(len(values))
"""
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert int(completed.stdout) == len(bundle.bundle_names(PREFIXES[0]))
