"""The JAX side of tests/test_checkpoints_across_backends.py, run in a subprocess (Keras picks its
backend once, at import):

    KERAS_BACKEND=jax python tests/checkpoint_worker.py TF_CHECKPOINTS OUT_DIR

restores the training checkpoint that the TensorFlow side wrote in TF_CHECKPOINTS into a fresh
model and optimizer (OUT_DIR/restored.npz: {checkpoint name: value}), fills them with other
values and saves them to OUT_DIR/checkpoints (OUT_DIR/saved.npz), loads OpenNMT-tf's fixture
checkpoint into its model (OUT_DIR/onmt.npz: {attribute path: value}), averages OpenNMT-tf's
project checkpoints (OUT_DIR/average.npz), rotates and damages checkpoints, and writes
OUT_DIR/results.json: the backend, the TensorFlow modules imported, what rotation kept and what
a restore did with a damaged checkpoint.
"""

import json
import pathlib
import sys

import numpy as np

TESTS = pathlib.Path(__file__).parent
ONMT_FIXTURE = TESTS / "fixtures" / "onmt_tf_relative"
ONMT_RUN = TESTS / "fixtures" / "onmt_project" / "run"  # 3 checkpoints: ckpt-200, 300, 400


def average_of_onmt_run():
    """store.average_values of the weights of OpenNMT-tf's project checkpoints."""
    from opennmt_lite.checkpointing import store

    prefixes = store.to_average(str(ONMT_RUN), 8)
    names = [name for name in store.contents(prefixes[-1])
             if name.startswith("model/") and "/.OPTIMIZER_SLOT/" not in name]
    return store.average_values(prefixes, names)


def rotate_and_damage(directory):
    """Saves steps 1-3 keeping 2, flips a byte of the newest, restores: {"kept": [checkpoint
    files left after the saves], "restored": prefix, "damaged": [files moved to damaged/]}."""
    import os

    checkpoint = tiny_training_checkpoint(save_dir=str(directory))
    checkpoint.max_to_keep = 2
    for step in (1, 2, 3):
        checkpoint.save(step)
    kept = sorted(name for name in os.listdir(directory) if name.startswith("ckpt-"))
    data = directory / "ckpt-3.data-00000-of-00001"
    damaged = bytearray(data.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    data.write_bytes(bytes(damaged))
    restored = tiny_training_checkpoint(save_dir=str(directory)).restore()
    return {"kept": kept, "restored": os.path.basename(restored),
            "damaged": sorted(os.listdir(directory / "damaged"))}


def tiny_training_checkpoint(save_dir=None, restore_dir=None):
    """A small Transformer (dropout seeds included), a built Adam and the data position, as a
    training checkpoint (training_checkpoint.py) saving to `save_dir`, restoring from
    `restore_dir`."""
    import keras

    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.checkpointing.training_checkpoint import training_checkpoint
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer

    model = Transformer(ModelHyperparameters(num_layers=1, num_units=16, num_heads=2,
                                             ffn_inner_dim=32, dropout=0.1,
                                             maximum_relative_position=4), 23, 29)
    model.build()
    optimizer = keras.optimizers.Adam(learning_rate=0.001)
    optimizer.build(list(named_trainable(model).values()))
    return training_checkpoint(model, optimizer, save_dir=save_dir, restore_dir=restore_dir)


def fill(checkpoint, seed):
    """Assigns every variable of `checkpoint` values drawn from `seed`; returns them by name."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, variable in sorted(checkpoint.variables.items()):
        dtype = np.dtype(variable.dtype)
        if dtype.kind == "f":
            value = rng.normal(size=variable.shape).astype(dtype)
        else:  # the step, the data position, the dropout seed states
            value = rng.integers(0, 1000, size=variable.shape).astype(dtype)
        variable.assign(value)
        values[name] = value
    return values


def values_of(variables):
    from opennmt_lite.checkpointing.store import variable_values

    return variable_values(variables)


def onmt_model():
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer

    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2,
                                             ffn_inner_dim=128, maximum_relative_position=8),
                        801, 801)
    model.build()
    return model


def main(tf_checkpoints, out):
    import keras

    from opennmt_lite.checkpointing import formats
    from opennmt_lite.checkpointing.names import named_variables

    out = pathlib.Path(out)
    checkpoint = tiny_training_checkpoint(restore_dir=tf_checkpoints)
    restored = checkpoint.restore()
    assert restored is not None and restored.endswith("ckpt-5"), restored
    np.savez(out / "restored.npz", **values_of(checkpoint.variables))

    checkpoint = tiny_training_checkpoint(save_dir=str(out / "checkpoints"))
    np.savez(out / "saved.npz", **fill(checkpoint, seed=2))
    checkpoint.save(9)

    model = onmt_model()
    formats.restore_weights(model, str(ONMT_FIXTURE))
    np.savez(out / "onmt.npz", **values_of(named_variables(model, include_seeds=False)))
    np.savez(out / "average.npz", **average_of_onmt_run())
    rotation = rotate_and_damage(out / "rotation")
    (out / "results.json").write_text(json.dumps({
        "rotation": rotation,
        "backend": keras.backend.backend(),
        "tensorflow_imported": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:])
