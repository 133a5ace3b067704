"""The training case that tests/test_jax_training.py runs on both Keras backends: a tiny
Transformer (dropout 0: the backends draw different dropout masks) with weights drawn from a
fixed NumPy generator, OpenNMT-tf's Adam and Noam schedule, and a fixed list of NumPy batches in
two shapes (so that `jax.jit` compiles the batch function twice), with example weights.
Imports no backend-specific module: the TensorFlow test and the JAX worker both build it.

`OPTIONS` (tests/test_jax_training_options.py): a few updates of the same model with one more
option of the train step each, in batches of one shape, run by `run_option` with either
backend's train step."""

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


def hyperparameters(num_layers=2):
    from opennmt_lite.hyperparameters import ModelHyperparameters

    return ModelHyperparameters(num_layers=num_layers, num_units=32, num_heads=4, ffn_inner_dim=64,
                                dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0,
                                maximum_relative_position=4)


def make_model(num_layers=2):
    """The built model with its drawn weights (assigned by checkpoint name, in name order)."""
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.models import Transformer

    model = Transformer(hyperparameters(num_layers), VOCAB, VOCAB)
    model.build()
    rng = np.random.default_rng(11)
    for name, variable in sorted(named_trainable(model).items()):
        scale = 1.0 if "layer_norm" in name and name.endswith("gamma") else 0.2
        value = rng.normal(0.0, scale, variable.shape).astype(np.float32)
        if "layer_norm" in name and name.endswith("gamma"):
            value = 1.0 + 0.1 * value
        variable.assign(value)
    return model


def make_optimizer(model, dtype_policy="float32"):
    """The builder's optimizer of PARAMS (a LossScaleOptimizer in mixed_float16), built."""
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    user = {"model_dir": "unused", "auto_config": False,
            "model": {"num_layers": 2, "num_units": 32, "num_heads": 4, "ffn_inner_dim": 64},
            "params": PARAMS}
    optimizer = build.optimizer(build_config(user).params, dtype_policy)
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


# -- the options compared (tests/test_jax_training_options.py) --------------------------------

OPTION_UPDATES = 5
OPTION_LAYERS = 1  # (half the compilation time of the 2 layers above)
# float16's loss scale at the start: the summed token losses of these batches times 256 stay
# far inside float16's range (65 504) in the backward pass (2**15, the builder's, may not)
INITIAL_LOSS_SCALE = 256.0
# the example weight that makes the float16 update OVERFLOW_UPDATE overflow: its gradient at the
# float16 logits is about 1e8 * 256
OVERFLOW_WEIGHT = 1e8
OVERFLOW_UPDATE = 2
# the masking of outliers: example OUTLIER of every batch (the last: its target is the longest)
# says only these words, which the model finds unlikely (their output biases lowered by 12): its
# mean token loss is an outlier
UNLIKELY_WORDS = (3, 4, 5)
OUTLIER = -1
# name -> what the run adds to the case (accumulation, label smoothing, example weights,
# clipping, Adam and Noam): "step", the train step's keyword arguments (both backends' steps;
# made concrete by `step_options`); "policy", the dtype policy; "moving_average", its decay (the
# averages compared too). Options share runs, so that fewer functions are compiled; each still
# weighs in the loss far beyond the run's tolerance (test_the_options_weigh_in_the_first_loss).
OPTIONS = {
    "float16_mse": {"policy": "mixed_float16", "step": {"guided_alignment": ("mse", 10.0)}},
    "bfloat16": {"policy": "mixed_bfloat16"},
    "ce_outliers_examples": {"step": {"guided_alignment": ("ce", 0.5), "mask_outliers": True,
                                      "average_loss_in_time": False},
                             "moving_average": 0.9},
    "contrastive_regularization": {"step": {"max_margin_eta": 0.5,
                                            "regularization": (1e-5, 1e-4)}},
}


def step_options(name):
    """The train step's keyword arguments of option run `name` (both backends' steps)."""
    from opennmt_lite.training.objective import GuidedAlignment

    options = {"label_smoothing": LABEL_SMOOTHING, "clip_gradients": CLIP_GRADIENTS}
    options.update(OPTIONS[name].get("step", {}))
    if "guided_alignment" in options:
        options["guided_alignment"] = GuidedAlignment(*options["guided_alignment"])
    return options


def option_model(name):
    """make_model's weights (OPTION_LAYERS), with UNLIKELY_WORDS' output biases lowered by 12
    where the run masks outliers."""
    import keras

    model = make_model(OPTION_LAYERS)
    if OPTIONS[name].get("step", {}).get("mask_outliers"):
        bias = model.decoder.output_layer.bias
        value = np.array(keras.ops.convert_to_numpy(bias.value))
        value[list(UNLIKELY_WORDS)] -= 12.0
        bias.assign(value)
    return model


def with_alignment(rng, batch):
    """The batch with gold alignments [batch, target_time, source_time]: each target word (not
    `</s>`) aligned to one random source position, one word in four to none."""
    examples, target_time = batch["target_ids_out"].shape
    alignment = np.zeros((examples, target_time, batch["source_ids"].shape[1]), np.float32)
    for e in range(examples):
        for t in range(batch["target_length"][e] - 1):
            if rng.uniform() < 0.75:
                alignment[e, t, rng.integers(batch["source_length"][e])] = 1.0
    return dict(batch, alignment=alignment)


def with_negatives(rng, batch):
    """The batch with contrastive learning's negatives, as the pipeline lays them out: each
    target with one random word omitted (a one-word target: `</s>` alone), padded to the
    target's time."""
    examples, target_time = batch["target_ids_out"].shape
    ids_in = np.zeros((examples, target_time), np.int32)
    ids_out = np.zeros((examples, target_time), np.int32)
    length = np.zeros(examples, np.int32)
    for e in range(examples):
        words = list(batch["target_ids_out"][e, :batch["target_length"][e] - 1])
        del words[rng.integers(len(words))]
        length[e] = len(words) + 1
        ids_out[e, :length[e]] = words + [2]  # </s>
        ids_in[e, :length[e]] = [1] + words  # <s>
    return dict(batch, noisy_target_ids_in=ids_in, noisy_target_ids_out=ids_out,
                noisy_target_length=length)


def with_outlier(rng, batch):
    """The batch with example OUTLIER's target words drawn from UNLIKELY_WORDS, and the other
    examples' UNLIKELY_WORDS replaced by other words."""
    batch = {key: value.copy() for key, value in batch.items()}
    for key in ("target_ids_in", "target_ids_out"):
        ids = batch[key]
        unlikely = np.isin(ids, UNLIKELY_WORDS)
        ids[unlikely] += len(UNLIKELY_WORDS)
    words = batch["target_length"][OUTLIER] - 1
    drawn = rng.choice(UNLIKELY_WORDS, words)
    batch["target_ids_out"][OUTLIER, :words] = drawn
    batch["target_ids_in"][OUTLIER, 1:words + 1] = drawn
    return batch


def option_groups(name):
    """OPTION_UPDATES groups of ACCUM_STEPS batches of shape SHAPES[0] for option run `name`
    (the same batches for every run, with what its options need added: alignments, negatives,
    outliers, float16's overflowing example weight)."""
    rng = np.random.default_rng(7)
    extras = np.random.default_rng(8)
    step = OPTIONS[name].get("step", {})
    groups = []
    for update in range(OPTION_UPDATES):
        group = []
        for _ in range(ACCUM_STEPS):
            batch = make_batch(rng, *SHAPES[0])
            if "guided_alignment" in step:
                batch = with_alignment(extras, batch)
            if "max_margin_eta" in step:
                batch = with_negatives(extras, batch)
            if step.get("mask_outliers"):
                batch = with_outlier(extras, batch)
            group.append(batch)
        if OPTIONS[name].get("policy") == "mixed_float16" and update == OVERFLOW_UPDATE:
            group[0]["example_weight"] = group[0]["example_weight"].copy()
            group[0]["example_weight"][0] = OVERFLOW_WEIGHT
        groups.append(tuple(group))
    return groups


def run_option(name, make_step):
    """Option run `name` from `option_model`'s weights: `make_step(model, optimizer, options)`
    (the backend's train step with `step_options`) makes OPTION_UPDATES updates of
    `option_groups`. -> {name: array}: per update "loss", "normalizer", "iterations" (after it),
    "changed" (whether any weight changed), "loss_scale" (float16: after it); the weights at the
    end ("weight/<path>") and, with a moving average, the averages ("average/<path>")."""
    import keras

    from opennmt_lite.checkpointing.names import inner_optimizer, named_trainable
    from opennmt_lite.training.moving_average import MovingAverage

    def numpy(value):
        return np.array(keras.ops.convert_to_numpy(value))

    option = OPTIONS[name]
    policy = option.get("policy", "float32")
    keras.config.set_dtype_policy(policy)
    try:
        model = option_model(name)
        optimizer = make_optimizer(model, policy)
        scaled = inner_optimizer(optimizer) is not optimizer
        if scaled:
            optimizer.dynamic_scale.assign(INITIAL_LOSS_SCALE)
        step = make_step(model, optimizer, step_options(name))
        average = (MovingAverage(model, option["moving_average"])
                   if "moving_average" in option else None)
        weights = named_trainable(model)
        records = {key: [] for key in ("loss", "normalizer", "iterations", "changed",
                                       "loss_scale")}
        for group in option_groups(name):
            before = {path: numpy(v.value) for path, v in weights.items()}
            stats = step((group,))
            iterations = int(numpy(inner_optimizer(optimizer).iterations.value))
            if average is not None:
                average.update(iterations)
            records["loss"].append(float(numpy(stats["loss"])))
            records["normalizer"].append(float(numpy(stats["normalizer"])))
            records["iterations"].append(iterations)
            records["changed"].append(any(not np.array_equal(before[path], numpy(v.value))
                                          for path, v in weights.items()))
            if scaled:
                records["loss_scale"].append(float(numpy(optimizer.dynamic_scale.value)))
        values = {key: np.array(value) for key, value in records.items() if value}
        for path, variable in weights.items():
            values[f"weight/{path}"] = numpy(variable.value)
        if average is not None:
            for path, variable in average.averages.items():
                values[f"average/{path}"] = numpy(variable.value)
        return values
    finally:
        keras.config.set_dtype_policy("float32")
