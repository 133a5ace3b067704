"""The training case of tests/test_jax_other_models.py, run on both Keras backends: for each of
the other model types (a sequence tagger with and without CRF, a sequence classifier, a language
model), a tiny model (dropout 0: the backends draw different dropout masks) with weights drawn
from a fixed NumPy generator, Adam, label smoothing, and the same group of two NumPy batches of
one shape (`jax.jit` compiles once per type) accumulated into each of UPDATES updates (so that
the loss must fall). Imports no
backend-specific module: the TensorFlow test and the JAX worker both build it."""

import numpy as np

KINDS = ("tagger", "tagger_crf", "classifier", "language_model")
VOCAB = 23
OUTPUTS = {"tagger": 5, "tagger_crf": 5, "classifier": 3}
UPDATES = 4
ACCUM_STEPS = 2
LABEL_SMOOTHING = 0.1
# (examples, time) of the group's batches (their lengths drawn up to time)
SHAPES = ((5, 8),)


def hyperparameters():
    from opennmt_lite.hyperparameters import ModelHyperparameters

    return ModelHyperparameters(num_layers=1, num_units=16, num_heads=2, ffn_inner_dim=32,
                                dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0)


def make_model(kind):
    """The built model of `kind` with its drawn weights (assigned by checkpoint name, in name
    order; the CRF's transitions too)."""
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.models.encoder_models import SequenceClassifier, SequenceTagger
    from opennmt_lite.models.language_model import LanguageModel

    if kind == "language_model":
        model = LanguageModel(hyperparameters(), VOCAB)
    elif kind == "classifier":
        model = SequenceClassifier(hyperparameters(), VOCAB, OUTPUTS[kind])
    else:
        model = SequenceTagger(hyperparameters(), VOCAB, OUTPUTS[kind],
                               crf_decoding=kind == "tagger_crf")
    model.build()
    rng = np.random.default_rng(11)
    for name, variable in sorted(named_trainable(model).items()):
        gamma = "layer_norm" in name and name.endswith("gamma")
        value = rng.normal(0.0, 0.3, variable.shape).astype(np.float32)
        variable.assign(1.0 + 0.1 * value if gamma else value)
    return model


def make_optimizer(model):
    from opennmt_lite import build
    from opennmt_lite.config import build_config

    user = {"model_dir": "unused", "auto_config": False,
            "model": {"num_layers": 1, "num_units": 16, "num_heads": 2, "ffn_inner_dim": 32},
            "params": {"optimizer": "Adam", "learning_rate": 0.01}}
    optimizer = build.optimizer(build_config(user).params)
    optimizer.build(model.trainable_variables)
    return optimizer


def make_batch(rng, kind, examples, time):
    """A padded training batch (NumPy) as the model type's inputs make it: the tokens as the
    source and the tags (one per token) or the label as the target of a tagger or classifier;
    for a language model, the line as `target_ids_in` and the line shifted by one, then `</s>`,
    as `target_ids_out` (the source keys copy it: the train step's signature has them)."""
    length = rng.integers(1, time + 1, examples).astype(np.int32)
    length[0] = time
    real = np.arange(time)[None] < length[:, None]
    ids = np.where(real, rng.integers(3, VOCAB, (examples, time)), 0).astype(np.int32)
    if kind == "language_model":
        shifted = np.concatenate([ids[:, 1:], np.zeros((examples, 1), np.int32)], 1)
        out = np.where(np.arange(time)[None] == length[:, None] - 1, 2, shifted).astype(np.int32)
        return {"source_ids": ids, "source_length": length, "target_ids_in": ids,
                "target_ids_out": out, "target_length": length}
    if kind == "classifier":
        labels = rng.integers(0, OUTPUTS[kind], (examples, 1)).astype(np.int32)
        return {"source_ids": ids, "source_length": length, "target_ids_in": labels,
                "target_ids_out": labels, "target_length": np.ones(examples, np.int32)}
    tags = np.where(real, rng.integers(0, OUTPUTS[kind], (examples, time)), 0).astype(np.int32)
    return {"source_ids": ids, "source_length": length, "target_ids_in": tags,
            "target_ids_out": tags, "target_length": length}


def group(kind):
    """The ACCUM_STEPS batches of every update of `kind`, the same in every process."""
    rng = np.random.default_rng(5)
    return tuple(make_batch(rng, kind, *SHAPES[k % len(SHAPES)]) for k in range(ACCUM_STEPS))


def train(kind, step_class, **options):
    """{"loss": [UPDATES] float32, "weight/<name>": trained weights} of `kind` trained by
    `step_class` (TrainStep or JaxTrainStep, with `options`)."""
    import keras
    from keras import ops

    from opennmt_lite.checkpointing.names import named_trainable

    keras.config.set_dtype_policy("float32")  # (whatever an earlier test of the process set)
    model = make_model(kind)
    optimizer = make_optimizer(model)
    step = step_class(model, optimizer, ACCUM_STEPS, label_smoothing=LABEL_SMOOTHING, **options)
    batches = group(kind)
    losses = [float(ops.convert_to_numpy(step((batches,))["loss"])) for _ in range(UPDATES)]
    values = {"loss": np.array(losses, np.float32)}
    for name, variable in named_trainable(model).items():
        values[f"weight/{name}"] = np.asarray(ops.convert_to_numpy(variable.value))
    return values
