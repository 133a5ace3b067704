"""Runs the JAX side of a test module in a subprocess with KERAS_BACKEND=jax (Keras picks its
backend once, at import, so the suite's TensorFlow processes cannot switch), and returns
everything that module compares as arrays: one subprocess per module, not per test.

    KERAS_BACKEND=jax python tests/jax_worker.py JOB OUT_DIR

writes OUT_DIR/arrays.npz (and OUT_DIR/results.json for the `layers` job). `run(job, directory)`
does that from a test and loads the results. The jobs:
- `layers`: `run_layer_test` for every case of tests/test_layers.py (results.json: "ok" or the
  failure, per case), and each case's float32 outputs and gradients with the weights of
  `case_values` (arrays `<case>/outputs/<i>`, `<case>/gradients/<i>`);
- `parity`: OpenNMT-tf's fixture model (tests/fixtures/onmt_tf_relative) on the fixture's
  batch: `fixture_values` (encoder outputs per layer, logits, alignment, incremental steps);
- `decoding`: the fixture's 100 test sentences translated by the portable loop under `jax.jit`
  with the settings of `DECODINGS` (results.json: {name: [[score, pieces, length], ...]}, n_best
  lines per sentence);
- `training`: tests/jax_training_case.py's updates by the JAX train step (arrays `loss` [updates],
  `learning_rate` [updates], the trained weights `weight/<name>`);
- `devices` (with XLA_FLAGS making 2 CPU devices): tests/test_jax_devices.py's runs on the 2
  devices of keras.distribution's DataParallel (see `devices_values`), and its command lines
  (OUT_DIR/commands.json) run as the `commands` job's, TensorFlow unimportable;
- `training_options`: tests/jax_training_case.py's `OPTIONS` by the JAX train step (arrays
  `<option>/<name>` of `run_option`), and the JAX trainer `build.trainer` makes of the config
  in OUT_DIR/contrastive.json (`training_option_values`);
- `other_models`: tests/jax_other_models_case.py's updates of a tagger (with and without CRF),
  a classifier and a language model by the JAX train step (arrays `<kind>/loss`,
  `<kind>/weight/<name>`), then the `run.py` command lines of OUT_DIR/commands.json (results.json,
  as `commands`) and the evaluator's metrics of each config of OUT_DIR/evaluations.json
  ({name: [config paths]}; results.json's "evaluations"), with TensorFlow unimportable;
- `commands`: the `run.py` command lines of OUT_DIR/commands.json ({name: argv}) run in this
  process (results.json: {name: {"status", "stdout", "stderr"}}), and `sampling_draws`, with
  TensorFlow made unimportable (as in an install without it).
"""

import json
import os
import pathlib
import subprocess
import sys
import traceback

import numpy as np

TESTS = pathlib.Path(__file__).parent
ROOT = TESTS.parent


def run(job, directory, **environment):
    """Runs `job` under JAX in a subprocess (`environment`: more variables); returns (arrays
    {name: array}, results or None)."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]), **environment)
    completed = subprocess.run([sys.executable, str(TESTS / "jax_worker.py"), job, str(directory)],
                               env=env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-4000:]
    with np.load(pathlib.Path(directory) / "arrays.npz") as stored:
        arrays = dict(stored)
    results_path = pathlib.Path(directory) / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    return arrays, results


def case_values(name):
    """A float32 layer of tests/test_layers.py's case `name`, built, its weights drawn from a
    fixed generator: {"outputs": [...], "gradients": [...]} as NumPy (inference call; gradients
    of `layer_test_case.layer_gradients`). The same on either backend, up to float rounding."""
    import keras

    from layer_test_case import layer_gradients
    from test_layers import CASES

    cls, init_kwargs, input_data, call_kwargs = CASES[name]
    keras.utils.set_random_seed(1234)
    kwargs = init_kwargs("float32") if callable(init_kwargs) else dict(init_kwargs)
    layer = cls(**kwargs, dtype="float32")
    layer(input_data, **call_kwargs)
    rng = np.random.default_rng(0)
    for weight in layer.weights:
        if "float" in weight.dtype:  # (not the dropout seeds)
            weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(np.float32))
    outputs = keras.tree.flatten(layer(input_data, **call_kwargs))
    return {"outputs": [keras.ops.convert_to_numpy(o) for o in outputs],
            "gradients": layer_gradients(layer, input_data, call_kwargs)}


def fixture_values():
    """OpenNMT-tf's fixture Transformer on the fixture batch ({name: array}): the recorded
    encoder layers' and final outputs, the decoder layers' outputs, the teacher-forced logits and
    alignment, and the logits of incremental decoding, step by step, [batch, time, vocab]."""
    import keras

    from opennmt_lite.checkpointing.onmt_names import load_onmt_model
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer
    from opennmt_lite.recorder import recording

    fixture = TESTS / "fixtures" / "onmt_tf_relative"
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2,
                                             ffn_inner_dim=128, maximum_relative_position=8),
                        801, 801)
    load_onmt_model(str(fixture), model)
    expected = np.load(fixture / "expected.npz")
    features = {k: expected[k] for k in ("source_ids", "source_length", "target_ids_in",
                                         "target_length")}
    with recording() as tensors:
        logits, attention = model(features)
    recorded = tensors.numpy()
    values = {"logits": logits, "attention": attention,
              "encoder_output": recorded["encoder/output"],
              "decoder_output": recorded["decoder/output"]}
    for i in range(2):
        values[f"encoder_layer_{i}"] = recorded[f"encoder/layers/{i}/output"]
        values[f"decoder_layer_{i}"] = recorded[f"decoder/layers/{i}/output"]
    memory = model.encode(features["source_ids"], features["source_length"])
    state = model.decoder.initial_state(memory, features["source_length"])
    steps = []
    for t in range(features["target_ids_in"].shape[1]):
        step_logits, state, _ = model.decoder.step(
            model.target_inputter(features["target_ids_in"][:, t]), t, state)
        steps.append(keras.ops.convert_to_numpy(step_logits))
    values["step_logits"] = np.stack(steps, 1)
    return {k: keras.ops.convert_to_numpy(v) for k, v in values.items()}


def fixture_model():
    from opennmt_lite.checkpointing.onmt_names import load_onmt_model
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.models import Transformer

    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2,
                                             ffn_inner_dim=128, maximum_relative_position=8),
                        801, 801)
    load_onmt_model(str(TESTS / "fixtures" / "onmt_tf_relative"), model)
    return model


# The fixture's OpenNMT-tf translations that the `decoding` job reproduces: the file's tag
# (tests/fixtures/onmt_tf_relative/pred.first100.<tag>.tok.de) -> the decoding options.
DECODINGS = {
    "beam1.scores": dict(beam_width=1),
    "beam4.nbest4.scores": dict(beam_width=4, n_best=4),  # (its first lines: beam4.scores)
    "beam4.coverage0.2.length0.6.scores": dict(beam_width=4, coverage_penalty=0.2,
                                               length_penalty=0.6),
}


def fixture_translations(batch_size=16, maximum_length=250):
    """{tag: [(score, pieces, length)]} of the fixture's 100 test sentences for each of
    `DECODINGS`, translated by `portable_decoding` in batches of `batch_size` in file order (as
    OpenNMT-tf's files were made), each batch padded to the longest source of the file and to
    `batch_size` rows (padded rows and positions are masked), so that `jax.jit` compiles once
    per setting."""
    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.inference import portable_decoding
    from opennmt_lite.inference.decoding import DecodingOptions

    fixture = TESTS / "fixtures" / "onmt_tf_relative"
    model = fixture_model()
    source_vocab = Vocabulary.from_file(fixture / "src-vocab.txt")
    target_vocab = Vocabulary.from_file(fixture / "tgt-vocab.txt")
    sentences = [line.split() for line in
                 (fixture / "test.first100.tok.en").read_text(encoding="utf-8").splitlines()]
    width = max(len(tokens) for tokens in sentences)
    results = {}
    for tag, options in DECODINGS.items():
        translate = portable_decoding.translation_function(model, DecodingOptions(
            maximum_decoding_length=maximum_length, **options))
        lines = []
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start:start + batch_size]
            ids = np.zeros([batch_size, width], np.int32)
            lengths = np.ones([batch_size], np.int32)
            for row, tokens in enumerate(chunk):
                ids[row, :len(tokens)] = source_vocab.lookup(tokens)
                lengths[row] = len(tokens)
            result = translate(ids, lengths)
            tokens, hyp_lengths, scores = result.ids, result.lengths, result.log_probs
            for row in range(len(chunk)):
                for hypothesis in range(tokens.shape[1]):
                    length = int(hyp_lengths[row, hypothesis])
                    pieces = " ".join(target_vocab.to_tokens(tokens[row, hypothesis, :length]))
                    lines.append((float(scores[row, hypothesis]), pieces, length))
        results[tag] = lines
    return results


def training_values():
    """{name: array} of tests/jax_training_case.py's run by `JaxTrainStep`."""
    import jax_training_case as case
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.training.jax_step import JaxTrainStep

    model = case.make_model()
    optimizer = case.make_optimizer(model)
    step = JaxTrainStep(model, optimizer, case.ACCUM_STEPS, label_smoothing=case.LABEL_SMOOTHING,
                        clip_gradients=case.CLIP_GRADIENTS)
    losses, rates = [], []
    for group in case.groups():
        rates.append(float(np.asarray(optimizer.learning_rate)))
        losses.append(float(step((group,))["loss"]))
    values = {"loss": np.array(losses, np.float32), "learning_rate": np.array(rates, np.float32)}
    for name, variable in named_trainable(model).items():
        values[f"weight/{name}"] = np.asarray(variable.value)
    return values


# The options of the `devices` job's run (tests/test_jax_devices.py): outlier masking, whose
# quartiles must leave out the rows of padding, and normalisation by examples, which must not
# count them.
DEVICE_OPTIONS = {"mask_outliers": True, "average_loss_in_time": False}


def devices_values():
    """{name: array} of tests/jax_training_case.py's updates on 2 devices (each update's two
    batches, of different shapes, one per device; accumulation 1; DEVICE_OPTIONS), `JaxTrainStep`
    over the mesh of `jax_data_parallel(2)`: `loss`, `learning_rate`, the trained weights
    `weight/<name>`."""
    import jax_training_case as case
    from opennmt_lite.checkpointing.names import named_trainable
    from opennmt_lite.training.distribute import jax_data_parallel
    from opennmt_lite.training.jax_step import JaxTrainStep

    mesh = jax_data_parallel(2)
    model = case.make_model()
    optimizer = case.make_optimizer(model)
    step = JaxTrainStep(model, optimizer, 1, label_smoothing=case.LABEL_SMOOTHING,
                        clip_gradients=case.CLIP_GRADIENTS, mesh=mesh, **DEVICE_OPTIONS)
    losses, rates = [], []
    for group in case.groups():
        rates.append(float(np.asarray(optimizer.learning_rate)))
        losses.append(float(step(tuple((batch,) for batch in group))["loss"]))
    values = {"devices": np.array(mesh.size), "loss": np.array(losses, np.float32),
              "learning_rate": np.array(rates, np.float32)}
    for name, variable in named_trainable(model).items():
        values[f"weight/{name}"] = np.asarray(variable.value)
    return values


def training_option_values(directory):
    """{<option>/<name>: array} of tests/jax_training_case.py's `OPTIONS`, each run by
    `JaxTrainStep` (`run_option`); and, if directory/contrastive.json holds a user config, what
    `build.trainer` makes of it on JAX: `contrastive_trainer/eta` (its train step's
    max_margin_eta) and `contrastive_trainer/batch/<key>` (its first training batch)."""
    if "tensorflow" not in sys.modules:  # (none of it needs TensorFlow: its import costs seconds)
        sys.modules["tensorflow"] = None
    import jax_training_case as case
    from opennmt_lite import build
    from opennmt_lite.config import build_config
    from opennmt_lite.training.jax_step import JaxTrainStep

    def make_step(model, optimizer, options):
        return JaxTrainStep(model, optimizer, case.ACCUM_STEPS, **options)

    values = {}
    for name in case.OPTIONS:
        values.update({f"{name}/{key}": value
                       for key, value in case.run_option(name, make_step).items()})
    config_path = pathlib.Path(directory) / "contrastive.json"
    if config_path.exists():
        trainer = build.trainer(build_config(json.loads(config_path.read_text())))
        values["contrastive_trainer/eta"] = np.array(trainer.train_step.max_margin_eta)
        first = next(iter(trainer.training_input.groups()))[0]
        values.update({f"contrastive_trainer/batch/{key}": v for key, v in first.items()})
    return values


def run_commands(commands):
    """{name: {"status": exit status, "stdout": ..., "stderr": ...}} of `run.main(argv)` for each
    of `commands` ({name: argv}), in order, in this process."""
    import contextlib
    import io

    import run as run_py

    results = {}
    for name, argv in commands.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = run_py.main(argv)
        results[name] = {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}
    return results


# Random sampling's draws checked against their distribution (tests/test_jax_commands.py): the
# fixture's first test sentence, copied, decoded one step with these options.
SAMPLING_DRAWS = {
    "greedy": (2048, dict(beam_width=1, sampling_topk=5, sampling_temperature=0.7, seed=11)),
    "beam4": (512, dict(beam_width=4, n_best=4, sampling_topk=5, sampling_temperature=0.7,
                        seed=11)),
}


def sampling_draws(translation_function, options_class):
    """{name/tokens: [copies, n_best] the first token drawn (`</s>` included), name/scores: their
    log-probabilities, log_probs: [vocab] the model's first step over the sentence}, with the
    backend's `translation_function` and `SAMPLING_DRAWS`' options, maximum_decoding_length 1."""
    import keras

    from opennmt_lite.data.vocab import Vocabulary
    from opennmt_lite.inference.options import END_ID, START_ID

    fixture = TESTS / "fixtures" / "onmt_tf_relative"
    model = fixture_model()
    sentence = (fixture / "test.first8.tok.en").read_text(encoding="utf-8").split("\n")[0].split()
    ids = np.asarray(Vocabulary.from_file(fixture / "src-vocab.txt").lookup(sentence), np.int32)
    memory = model.encode(ids[None], np.array([len(ids)], np.int32))
    state = model.decoder.initial_state(memory, np.array([len(ids)], np.int32))
    logits, _, _ = model.decoder.step(model.target_inputter(np.array([START_ID], np.int32)), 0,
                                      state)
    values = {"log_probs": keras.ops.convert_to_numpy(keras.ops.log_softmax(logits[0]))}
    for name, (copies, options) in SAMPLING_DRAWS.items():
        translate = translation_function(model, options_class(maximum_decoding_length=1,
                                                              **options))
        result = translate(np.tile(ids, (copies, 1)), np.full([copies], len(ids), np.int32))
        lengths = np.asarray(result.lengths)
        first = np.asarray(result.ids)[:, :, :1]
        first = first[..., 0] if first.shape[-1] else np.zeros(lengths.shape, np.int32)
        values[f"{name}/tokens"] = np.where(lengths > 0, first, END_ID)
        values[f"{name}/scores"] = np.asarray(result.log_probs)
    return values


def other_models_values():
    """{<kind>/<name>: array} of tests/jax_other_models_case.py's runs by `JaxTrainStep`."""
    import jax_other_models_case as case
    from opennmt_lite.training.jax_step import JaxTrainStep

    return {f"{kind}/{name}": value for kind in case.KINDS
            for name, value in case.train(kind, JaxTrainStep).items()}


def evaluation(config_paths):
    """The metrics of the config's evaluator on its newest checkpoint (`Evaluator.compute`)."""
    from opennmt_lite import build
    from opennmt_lite.config import load_config

    config = load_config(config_paths)
    model, assets, _ = build.inference_model(config)
    return build.evaluator(config, model, assets).compute(0)


def main(job, directory):
    if job in ("commands", "devices", "other_models"):  # (as where TensorFlow is not installed)
        sys.modules["tensorflow"] = None
    import keras

    assert keras.backend.backend() == "jax", keras.backend.backend()
    directory = pathlib.Path(directory)
    arrays = {}
    if job == "layers":
        from layer_test_case import run_layer_test
        from test_layers import CASES

        results = {}
        for name, (cls, init_kwargs, input_data, call_kwargs) in CASES.items():
            keras.config.set_dtype_policy("float32")
            keras.utils.set_random_seed(1234)
            try:
                run_layer_test(cls, init_kwargs, input_data, call_kwargs)
                results[name] = "ok"
            except Exception:  # reported to the test, which fails with it
                results[name] = traceback.format_exc()[-3000:]
            values = case_values(name)
            for kind in ("outputs", "gradients"):
                for i, value in enumerate(values[kind]):
                    arrays[f"{name}/{kind}/{i}"] = value
        (directory / "results.json").write_text(json.dumps(results))
    elif job == "parity":
        arrays = fixture_values()
    elif job == "training":
        arrays = training_values()
    elif job == "devices":
        arrays = devices_values()
        commands = json.loads((directory / "commands.json").read_text())
        (directory / "results.json").write_text(json.dumps(run_commands(commands)))
    elif job == "training_options":
        arrays = training_option_values(directory)
    elif job == "other_models":
        arrays = other_models_values()
        commands = json.loads((directory / "commands.json").read_text())
        results = run_commands(commands)
        results["evaluations"] = {name: evaluation(config_paths) for name, config_paths in
                                  json.loads((directory / "evaluations.json").read_text()).items()}
        (directory / "results.json").write_text(json.dumps(results))
    elif job == "decoding":
        (directory / "results.json").write_text(json.dumps(fixture_translations()))
    elif job == "commands":
        from opennmt_lite.inference import portable_decoding
        from opennmt_lite.inference.options import DecodingOptions

        commands = json.loads((directory / "commands.json").read_text())
        arrays = sampling_draws(portable_decoding.translation_function, DecodingOptions)
        # (still None: nothing put a TensorFlow module in its place)
        arrays["tensorflow_unimportable"] = np.array("tensorflow" in sys.modules
                                                     and sys.modules["tensorflow"] is None)
        (directory / "results.json").write_text(json.dumps(run_commands(commands)))
    else:
        raise SystemExit(f"unknown job {job!r}")
    np.savez(directory / "arrays.npz", **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:])
