"""The command line on the OpenNMT-tf fixture: infer, evaluate, inspect, and clean error output."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ONMT_FIXTURE
import run

CONFIG = str(ONMT_FIXTURE.parent / "onmt_fixture.yml")
REPO = ONMT_FIXTURE.parents[2]


@pytest.mark.parametrize("beam", [1, 4])
def test_infer_reproduces_opennmt_infer_output(tmp_path, beam):
    output = tmp_path / "pred.txt"
    assert run.main(["infer", "--config", CONFIG, "--features_file",
                     str(ONMT_FIXTURE / "test.first8.tok.en"), "--predictions_file", str(output),
                     "--beam_width", str(beam), "--with_scores"]) == 0
    ours = [line.split(" ||| ") for line in output.read_text().splitlines()]
    reference = [line.split(" ||| ") for line in
                 (ONMT_FIXTURE / f"pred.first8.beam{beam}.scores.tok.de").read_text().splitlines()]
    assert [text for _, text in ours] == [text for _, text in reference]
    assert max(abs(float(a) - float(b)) for (a, _), (b, _) in zip(ours, reference)) <= 1e-4


def test_evaluate_scores_identical_files_at_100(capsys):
    references = str(ONMT_FIXTURE / "test.first8.tok.de")
    assert run.main(["evaluate", "--predictions_file", references, "--references_file", references]) == 0
    out = capsys.readouterr().out
    assert "BLEU: 100.0" in out and "chrF: 100.0" in out


def test_inspect_prints_every_tensor_and_saves_heat_maps(tmp_path, capsys):
    assert run.main(["inspect", "--config", CONFIG, "--ids", "5 9 22 800 3",
                     "--attention_png", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("source_embedded", "encoder/layers/0/self_attention/relative_positions",
                 "encoder/layers/1/self_attention/attention", "encoder/layers/1/ffn/inner",
                 "encoder/output"):
        assert name in out
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [f"encoder_layer{l}_head{h}.png" for l in (0, 1) for h in (0, 1)]
    assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_trace_encoder_api_matches_fixture():
    from opennmt_lite.config import load_config
    from opennmt_lite.inspection.text import trace_encoder
    from opennmt_lite import build

    config = load_config(CONFIG)
    model, _, _ = build.inference_model(config)
    expected = np.load(ONMT_FIXTURE / "expected.npz")
    tensors = trace_encoder(model, expected["source_ids"], expected["source_length"])
    assert np.abs(tensors["encoder/output"] - expected["encoder_output"]).max() <= 1e-5
    assert np.array_equal(tensors["source_embedded"], expected["embedded"])


def test_user_errors_print_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("model_dir: x\ntrain:\n  batch_sise: 3\n")
    result = subprocess.run([sys.executable, "run.py", "infer", "--config", str(bad), "--features_file", "x"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "error: " in result.stderr and "train.batch_sise: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_commands_use_tensorflow_s_pooling_cpu_allocator_unless_told_otherwise():
    """TF_CPU_ALLOCATOR_USE_BFC is true in a command's process before TensorFlow starts (what
    makes training 1.45x faster where oneDNN is off); a value in the environment is kept."""
    script = ("import os, sys\n"
              "from opennmt_lite import cli\n"
              "print('tensorflow' in sys.modules, os.environ['TF_CPU_ALLOCATOR_USE_BFC'])\n")
    for given, expected in ((None, "False true"), ("false", "False false")):
        env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
        if given is not None:
            env["TF_CPU_ALLOCATOR_USE_BFC"] = given
        result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                                text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected


def test_commands_import_tensorflow_without_unused_modules_which_stay_importable():
    """Keras imports IPython, matplotlib.pyplot and PIL when installed, TensorFlow's legacy
    tf.keras h5py and scipy; a command hides them while TensorFlow imports (73 MB of memory),
    and they import normally afterwards."""
    script = ("import sys\n"
              "from opennmt_lite import cli\n"
              "cli.import_tensorflow_quietly()\n"
              "import keras\n"
              "from keras.src.visualization import plot_image_gallery\n"
              "print(sorted(m for m in ('IPython', 'matplotlib', 'PIL', 'h5py', 'scipy')\n"
              "             if m in sys.modules),\n"
              "      plot_image_gallery.plt is None)\n"
              "import h5py, matplotlib.pyplot, scipy.sparse\n"
              "print(matplotlib.pyplot.__name__, h5py.__name__, scipy.sparse.__name__)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[] True", "matplotlib.pyplot h5py scipy.sparse"]
