"""TFLite export (`run.py export --format tflite|tflite_float16|tflite_dynamic_range`): the whole
translation runs in LiteRT's interpreter (`ai-edge-litert`, pinned in requirements.txt) in a
process without opennmt-lite or TensorFlow, through the `translate.py` each export carries, and
translates as `run.py infer` does.

* OpenNMT-tf's relative-position model (tests/fixtures/onmt_tf_relative, which OpenNMT-tf cannot
  export to TFLite): its 100 test sentences, greedy and beam 4, against `run.py infer`: float32
  >= 99/100 identical, float16 and dynamic range >= 95/100 (MINIMUM_IDENTICAL). The
  interpreter runs every op, so a model holding an op it lacks fails here.
* The same model with length and coverage penalties (beam 4): OpenNMT-tf 2.32's translations.
* Two models trained by opennmt-lite (tests/fixtures/ct2_models: post-norm + GELU; sinusoidal +
  shared embeddings + swish, no output bias), SentencePiece text in and out: `translate.py`'s
  lines equal `run.py infer`'s.
* The model's output (ids, `</s>`, 0s; trailing 0s of the input ignored; empty input; an id out
  of range), `params.tflite_output_size`, and the options refused (exit 2, nothing written).
Measured (2026-11-26, 2 cores shared with other jobs): identical to infer, greedy / beam 4:
float32 100 / 100, float16 100 / 99, dynamic range 99 / 99 (MINIMUM_IDENTICAL); each export
5-17 s, 100 sentences in the interpreter 0.6-1.3 s; the module about 2 minutes.
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest

import run
from conftest import FIXTURES, ONMT_FIXTURE
from opennmt_lite import build
from opennmt_lite.config import load_config
from opennmt_lite.export import int8_weights, tflite
from opennmt_lite.inference.decoding import translation_function

CONFIG = FIXTURES / "onmt_fixture.yml"  # params.beam_width: 4
SOURCE = ONMT_FIXTURE / "test.first100.tok.en"
VARIANTS = [(quantization, beam) for quantization in (None, "float16", "dynamic_range")
            for beam in (1, 4)]
# The bars: float32 99/100, quantized 95/100.
MINIMUM_IDENTICAL = {(None, 1): 99, (None, 4): 99, ("float16", 1): 95, ("float16", 4): 95,
                     ("dynamic_range", 1): 95, ("dynamic_range", 4): 95}

# Run by a fresh Python: each export's own translate.py translates the file; then the raw
# outputs of a few inputs from the first export.
RUNNER = textwrap.dedent("""
    import importlib.util, json, sys, time
    import numpy as np
    directories, source, result_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    results = {}
    for name, directory in directories.items():
        spec = importlib.util.spec_from_file_location("runner", directory + "/translate.py")
        runner = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runner)
        translator = runner.Translator(directory)
        start = time.perf_counter()
        lines = [translator.translate(line) for line in runner.read_lines(source)]
        results[name] = {"lines": lines, "seconds": time.perf_counter() - start}
    probes = {}
    for name, ids in json.loads(sys.argv[4]).items():
        try:
            probes[name] = translator.run(ids=np.array(ids, np.int32))["output_0"].tolist()
        except RuntimeError as error:
            probes[name] = str(error)
    results["probes"] = probes
    results["imported"] = sorted({m.split(".")[0] for m in sys.modules} & {"opennmt_lite", "tensorflow"})
    json.dump(results, open(result_path, "w"))
""")


def variant_name(quantization, beam):
    return f"{quantization or 'float32'}_beam{beam}"


def run_exports(directories, source, tmp_path, probes=None):
    """The RUNNER's results for {name: export directory}; the last one answers `probes`."""
    result_path = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH="")  # the repository is not importable from there
    subprocess.run([sys.executable, "-c", RUNNER, json.dumps({k: str(v) for k, v in directories.items()}),
                    str(source), str(result_path), json.dumps(probes or {})],
                   check=True, cwd=str(tmp_path), env=env, timeout=600)
    results = json.loads(result_path.read_text())
    assert results["imported"] == []
    return results


def infer_lines(config_path, source, tmp_path, *options):
    predictions = tmp_path / "predictions.txt"
    assert run.main(["infer", "--config", str(config_path), "--features_file", str(source),
                     "--predictions_file", str(predictions), *options]) == 0
    return predictions.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def onmt(tmp_path_factory):
    """The six exports of OpenNMT-tf's model (float32 beam 4 by the command line), the
    interpreter's translations of the 100 sentences and `run.py infer`'s."""
    root = tmp_path_factory.mktemp("tflite")
    config = load_config(str(CONFIG))
    directories, seconds = {}, {}
    start = time.perf_counter()
    directories[variant_name(None, 4)] = root / variant_name(None, 4)
    assert run.main(["export", "--config", str(CONFIG), "--output",
                     str(directories[variant_name(None, 4)]), "--format", "tflite"]) == 0
    seconds[variant_name(None, 4)] = time.perf_counter() - start
    model, assets, _ = build.inference_model(config)
    for quantization, beam in VARIANTS:
        name = variant_name(quantization, beam)
        if name in directories:
            continue
        start = time.perf_counter()
        options = build.decoding_options(config.params, config.infer, beam, 1)
        directories[name] = root / name
        tflite.export_model(model, assets, options, config.data, str(directories[name]),
                            quantization=quantization)
        seconds[name] = time.perf_counter() - start
    sentence = assets.source_vocabulary.lookup(SOURCE.read_text().splitlines()[0].split()).tolist()
    probes = {"sentence": sentence, "padded": sentence + [0, 0, 0], "zeros": [0, 0],
              "empty": [], "out_of_range": [5, assets.source_vocabulary.size + 1]}
    # (the probes go to the last export: float32 beam 4)
    directories[variant_name(None, 4)] = directories.pop(variant_name(None, 4))
    results = run_exports(directories, SOURCE, root, probes)
    references = {beam: infer_lines(CONFIG, SOURCE, root, "--beam_width", str(beam)) for beam in (1, 4)}
    for name in directories:
        print(f"{name}: export {seconds[name]:.1f} s, 100 sentences in the interpreter "
              f"{results[name]['seconds']:.2f} s, {os.path.getsize(directories[name] / tflite.MODEL_FILE) / 1e6:.2f} MB")
    return config, assets, directories, results, references


@pytest.mark.parametrize("quantization,beam", VARIANTS)
def test_interpreter_translations_equal_infer(onmt, quantization, beam):
    *_, results, references = onmt
    lines = results[variant_name(quantization, beam)]["lines"]
    identical = sum(a == b for a, b in zip(lines, references[beam]))
    print(f"{variant_name(quantization, beam)}: {identical}/100 identical to run.py infer")
    assert len(lines) == 100 and sum(len(line.split()) for line in lines) > 500
    assert identical >= MINIMUM_IDENTICAL[quantization, beam]


def test_dynamic_range_is_the_smallest(onmt):
    """The encoder's weights in int8 (measured 0.77 MB), the rest in float16 (0.85 MB)."""
    _, _, directories, *_ = onmt
    size = {name: os.path.getsize(directory / tflite.MODEL_FILE) for name, directory in directories.items()}
    assert size["dynamic_range_beam4"] < 0.95 * size["float16_beam4"] < 0.6 * size["float32_beam4"]


def test_int8_weights_round_each_group_to_its_own_scale():
    """Scales: each group's largest |value| / 127 (a last group shorter, a group of zeros)."""
    matrix = np.array([[0.504, -1.27, 0.0, 2.54, -0.3], [0, 0, 3.81, -0.01, 0]], np.float32)
    values, scales = int8_weights.quantize(matrix, group=2)
    assert values.dtype == np.int8 and scales.dtype == np.float32
    assert values.tolist() == [[50, -127, 0, 127, -127], [0, 0, 127, 0, 0]]
    np.testing.assert_allclose(scales, [[0.01, 0.02, 0.3 / 127], [1, 0.03, 1]], rtol=1e-6)
    restored = int8_weights.dequantize(values, scales, group=2).numpy()
    np.testing.assert_allclose(restored, [[0.5, -1.27, 0, 2.54, -0.3], [0, 0, 3.81, 0, 0]],
                               rtol=1e-6, atol=1e-7)
    rows = int8_weights.dequantize(values[[1, 0, 1]][None], scales[[1, 0, 1]][None], 2).numpy()
    np.testing.assert_array_equal(rows[0], restored[[1, 0, 1]])  # (rows gathered by ids)
    row = np.linspace(-1, 1, 20, dtype=np.float32)[None]  # groups of 8, 8 and 4 (GROUP 8)
    values, scales = int8_weights.quantize(row)
    assert scales.shape == (1, 3)
    np.testing.assert_allclose(int8_weights.dequantize(values, scales).numpy(), row,
                               atol=scales.max() / 2)


def test_model_output_is_ids_end_then_zeros(onmt):
    config, assets, _, results, references = onmt
    probes = results["probes"]  # float32, beam 4
    expected = assets.target_vocabulary.lookup(references[4][0].split()).tolist()
    assert probes["sentence"] == expected + [2] + [0] * (250 - len(expected) - 1)
    assert probes["padded"] == probes["sentence"]  # trailing 0s are padding
    assert probes["zeros"] == probes["empty"] == [0] * 250
    assert "gather_nd index out of bounds" in probes["out_of_range"]


def test_translate_script_from_the_command_line(onmt, tmp_path):
    _, _, directories, results, _ = onmt
    directory = directories[variant_name(None, 4)]
    source = (ONMT_FIXTURE / "test.first8.tok.en").read_bytes()
    done = subprocess.run([sys.executable, str(directory / "translate.py")], input=source,
                          capture_output=True, check=True, cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=""), timeout=300)
    assert done.stdout.decode("utf-8").splitlines() == results[variant_name(None, 4)]["lines"][:8]
    assert sorted(os.listdir(directory)) == ["opennmt.tflite", "source_vocabulary.txt",
                                             "target_vocabulary.txt", "translate.py"]


def test_output_size_bounds_the_steps(onmt):
    """tflite_output_size 6: at most 6 steps, as infer with maximum_decoding_length 6 (traced
    and run by TensorFlow: the size changes nothing else)."""
    config, assets, *_ = onmt
    model, _, _ = build.inference_model(config)
    options = build.decoding_options(config.params, config.infer)
    exported = tflite.translation_function(model, options, output_size=6)
    bounded = translation_function(model, dataclasses.replace(options, maximum_decoding_length=6))
    for line in SOURCE.read_text().splitlines()[:4]:
        ids = assets.source_vocabulary.lookup(line.split())
        output = exported(ids).numpy().tolist()
        result = bounded(ids[None], np.array([len(ids)], np.int32))
        tokens = result.ids[0, 0, :int(result.lengths[0, 0])].numpy().tolist()
        assert len(output) == 6 and output[:len(tokens)] == tokens
        assert output[len(tokens):] == ([2] + [0] * (5 - len(tokens)) if len(tokens) < 6 else [])


def test_length_and_coverage_penalties_as_opennmt_tf(tmp_path):
    """Beam 4 with length_penalty 0.6 and coverage_penalty 0.2 in the TFLite model: OpenNMT-tf
    2.32's own translations of the 100 sentences (measured 100/100)."""
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    config["model_dir"] = str(ONMT_FIXTURE)
    config["params"].update(length_penalty=0.6, coverage_penalty=0.2)
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    directory = tmp_path / "export"
    assert run.main(["export", "--config", str(path), "--output", str(directory), "--format", "tflite"]) == 0
    lines = run_exports({"penalties": directory}, SOURCE, tmp_path)["penalties"]["lines"]
    reference = [line.split(" ||| ")[1] for line in
                 (ONMT_FIXTURE / "pred.first100.beam4.coverage0.2.length0.6.scores.tok.de").read_text().splitlines()]
    assert sum(a == b for a, b in zip(lines, reference)) >= 99


def test_source_sequence_controls_are_added_in_the_graph(onmt):
    """With `data.source_sequence_controls`, `<s>` and `</s>` are added to the ids given (trailing
    0s staying padding): the same output as the ids with them, without (traced and run by
    TensorFlow)."""
    config, assets, *_ = onmt
    model, _, _ = build.inference_model(config)
    options = build.decoding_options(config.params, config.infer, 1, 1)
    plain = tflite.translation_function(model, options)
    controls = types.SimpleNamespace(start=True, end=True)
    with_controls = tflite.translation_function(model, options, source_controls=controls)
    changed = []
    for line in SOURCE.read_text().splitlines()[:4]:
        ids = assets.source_vocabulary.lookup(line.split())
        expected = plain(np.concatenate([[1], ids, [2]]).astype(np.int32)).numpy()
        assert (with_controls(np.concatenate([ids, [0, 0]]).astype(np.int32)).numpy() == expected).all()
        changed.append((expected != plain(ids).numpy()).any())
    assert any(changed)  # (the controls change some translations: the check can fail)


@pytest.mark.parametrize("name", ["postnorm", "shared"])
def test_sentencepiece_models_translate_text_as_infer(name, tmp_path):
    """Raw text in, detokenized text out, with the export's SentencePiece models (beam 4)."""
    config_path = FIXTURES / "ct2_models" / name / "config.yml"
    source = tmp_path / "test.en"
    lines = (FIXTURES.parents[1] / "data" / "test.en").read_text(encoding="utf-8").splitlines()[:20]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    directory = tmp_path / "export"
    assert run.main(["export", "--config", str(config_path), "--output", str(directory),
                     "--format", "tflite"]) == 0
    assert {"source.model", "target.model"} <= set(os.listdir(directory))
    results = run_exports({name: directory}, source, tmp_path)
    reference = infer_lines(config_path, source, tmp_path)
    assert results[name]["lines"] == reference


@pytest.mark.parametrize("key,value", [("params.sampling_topk", 5), ("infer.n_best", 2),
                                       ("params.replace_unknown_target", True),
                                       ("params.tflite_output_size", 2**31)])
def test_options_a_tflite_model_cannot_run_are_refused(key, value, tmp_path, capsys):
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    config["model_dir"] = str(ONMT_FIXTURE)
    section, name = key.split(".")
    config.setdefault(section, {})[name] = value
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    output = tmp_path / "export"
    assert run.main(["export", "--config", str(path), "--output", str(output),
                     "--format", "tflite_dynamic_range"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: ") and key in error
    assert not output.exists() and os.listdir(tmp_path) == ["config.yml"]


def test_decoding_noise_is_refused():
    options = types.SimpleNamespace(sampling_topk=1, n_best=1, replace_unknown_target=False,
                                    decoding_noise=(("dropout", (0.1,)),))
    with pytest.raises(tflite.ExportError, match=r"^params\.decoding_noise: "):
        tflite.check_options(options)


def test_quantization_option_is_for_ctranslate2(tmp_path, capsys):
    output = tmp_path / "export"
    assert run.main(["export", "--config", str(CONFIG), "--output", str(output), "--format",
                     "tflite", "--quantization", "float16"]) == 2
    assert "tflite_float16" in capsys.readouterr().err
    assert not output.exists()
