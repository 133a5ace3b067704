"""The training case that tests/test_jax_training.py runs on both Keras backends: a tiny
Transformer (dropout 0: the backends draw different dropout masks) with weights drawn from a
fixed NumPy generator, OpenNMT-tf's Adam and Noam schedule, and a fixed list of NumPy batches in
two shapes (so that `jax.jit` compiles the batch function twice), with example weights.
Imports no backend-specific module: the TensorFlow test and the JAX worker both build it."""

import numpy as np

VOCAB = 41
UPDATES = 30
ACCUM_STEPS = 2
LABEL_SMOOTHING = 0.1
CLIP_GRADIENTS = 1.0
# (examples, source time, target time) of the batches, alternating
SHAPES = ((6, 7, 8), (4, 10, 11))
PARAMS = {"optimizer": "Adam", "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
          "learning_rate": 0.25, "decay_type": "NoamDecay",
          "decay_params": {"model_dim": 32, "warmup_steps": 16}}


def hyperparameters():
    from opennmt_lite.hyperparameters import ModelHyperparameters

    return ModelHyperparameters(num_layers=2, num_units=32, num_heads=4, ffn_inner_dim=64,
                                dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0,
                                maximum_relative_position=4)


def make_model():
    """The built model with its drawn weights (assigned by checkpoint name, in name order)."""
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.models import Transformer

    model = Transformer(hyperparameters(), VOCAB, VOCAB)
    model.build()
    rng = np.random.default_rng(11)
    for name, variable in sorted(named_trainable(model).items()):
        scale = 1.0 if "layer_norm" in name and name.endswith("gamma") else 0.2
        value = rng.normal(0.0, scale, variable.shape).astype(np.float32)
        if "layer_norm" in name and name.endswith("gamma"):
            value = 1.0 + 0.1 * value
        variable.assign(value)
    return model


def make_optimizer(model):
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    user = {"model_dir": "unused", "auto_config": False,
            "model": {"num_layers": 2, "num_units": 32, "num_heads": 4, "ffn_inner_dim": 64},
            "params": PARAMS}
    optimizer = build.optimizer(build_config(user).params)
    optimizer.build(model.trainable_variables)
    return optimizer


def make_batch(rng, examples, source_time, target_time):
    """A padded training batch (NumPy) with random ids, lengths and example weights."""
    source_length = rng.integers(1, source_time + 1, examples).astype(np.int32)
    source_length[0] = source_time
    target_length = rng.integers(2, target_time + 1, examples).astype(np.int32)
    target_length[-1] = target_time
    positions = np.arange(target_time)[None]
    words = rng.integers(3, VOCAB, (examples, target_time))
    target_out = np.where(positions < target_length[:, None] - 1, words, 0)
    target_out[np.arange(examples), target_length - 1] = 2  # </s>
    target_in = np.concatenate([np.ones((examples, 1), np.int64), target_out[:, :-1]], 1)
    target_in = np.where(positions < target_length[:, None], target_in, 0)
    source = np.where(np.arange(source_time)[None] < source_length[:, None],
                      rng.integers(3, VOCAB, (examples, source_time)), 0)
    return {"source_ids": source.astype(np.int32), "source_length": source_length,
            "target_ids_in": target_in.astype(np.int32),
            "target_ids_out": target_out.astype(np.int32), "target_length": target_length,
            "example_weight": rng.uniform(0.5, 1.5, examples).astype(np.float32)}


def groups():
    """UPDATES groups of ACCUM_STEPS batches, the same in every process."""
    rng = np.random.default_rng(5)
    return [tuple(make_batch(rng, *SHAPES[(u * ACCUM_STEPS + k) % len(SHAPES)])
                  for k in range(ACCUM_STEPS)) for u in range(UPDATES)]


def tensorflow_run(updates=UPDATES, **options):
    """The first `updates` of `groups()` by the TensorFlow backend's TrainStep (call it in a
    TensorFlow process), accumulating each group's batches, with label smoothing, example
    weights, clipping and `options` (more TrainStep arguments). -> (losses [updates], the
    learning rate of each update [updates], the trained weights {name: array})."""
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.training.step import TrainStep

    model = make_model()
    optimizer = make_optimizer(model)
    step = TrainStep(model, optimizer, ACCUM_STEPS, label_smoothing=LABEL_SMOOTHING,
                     example_weights=True, clip_gradients=CLIP_GRADIENTS, **options)
    losses, rates = [], []
    for group in groups()[:updates]:
        rates.append(float(optimizer.learning_rate))
        losses.append(float(step((group,))["loss"]))
    weights = {name: np.asarray(v.numpy()) for name, v in named_trainable(model).items()}
    return np.array(losses, np.float32), np.array(rates, np.float32), weights
