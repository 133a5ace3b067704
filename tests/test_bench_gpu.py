"""bench/gpu.py --backend jax --quick: the GPU benchmark's whole script, run on this CPU with a
tiny model, so that it keeps working between the sessions that have a GPU to run it on."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_jax  # noqa: E402
import harness  # noqa: E402


def test_quick_run_measures_every_side(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu.py", "--backend", "jax", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    record_path = re.search(r"record: (\S+\.json)", done.stdout).group(1)
    record = json.loads(pathlib.Path(record_path).read_text())
    pathlib.Path(record_path).unlink()
    # The peak: both dtypes, the cube and the model's products (3 distinct: d = ffn), rates > 0.
    assert set(record["peak_table"]) == {"float32", "bfloat16"}
    for rates in record["peak_table"].values():
        assert len(rates) >= 3 and all(rate > 0 for rate in rates.values())
    # Training: each dtype trained (the loss of random ids falls from about log(vocabulary)).
    for dtype in ("float32", "bfloat16"):
        (run,) = record["training"][f"TransformerTiny {dtype}"]["opennmt-lite JAX"]
        assert run["tokens_per_sec"] > 0 and run["batch_sentences"] == 512 // (2 * 16)
        assert abs(run["first_loss"] - 6.24) < 0.5, run  # log(512) = 6.24, label smoothing 0.1
        assert run["last_loss"] < run["first_loss"], run
    # Translation: the random model's outputs run to the maximum length, or stop before it.
    for dtype in ("float32", "bfloat16"):
        (run,) = record["translation"][f"TransformerTiny {dtype}"]
        assert run["target_tokens_per_sec"] > 0 and 0 < run["mean_output_length"] <= 8
    # The table: one row per measurement, the MFU a percentage below 100.
    rows = [line for line in done.stdout.splitlines() if line.startswith(("training", "transl"))]
    assert len(rows) == 4
    for row in rows[:2]:
        mfu = float(re.search(r"([\d.]+)%", row).group(1))
        assert 0 < mfu < 100, row
    if "PyTorch is not installed" not in done.stderr:  # (CI keeps PyTorch out)
        for dtype in ("float32", "bfloat16"):
            (run,) = record["training"][f"TransformerTiny {dtype}"]["PyTorch"]
            assert run["tokens_per_sec"] > 0


def test_flops_per_token_counts_the_model_products():
    """TransformerTiny (2 layers, d 64, ffn 64) at sentences of 16, vocabulary 512, by hand:
    forward matmul FLOP per source and per target position, averaged, times 3."""
    args = gpu_jax.parse(["--quick"])
    d, f, layers, length, vocabulary = 64, 64, 2, 16, 512
    attention = 2 * 2 * length * d  # scores and weighted sum over `length` positions
    per_source = layers * (2 * 4 * d * d + attention + 2 * 2 * d * f + 2 * 2 * d * d)
    per_target = layers * (2 * 4 * d * d + attention + 2 * 2 * d * d + attention
                           + 2 * 2 * d * f) + 2 * d * vocabulary
    expected = 3 * (per_source + per_target) / 2
    assert gpu_jax.flops_per_token("TransformerTiny", args) == pytest.approx(expected)


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be >= 1"),
    (["--length", "1"], "--length must be >= 2"),
    (["--batch-tokens", "-5"], "--batch-tokens must be >= 1"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        gpu_jax.parse(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_sentences_per_batch_and_random_batch_keys():
    import numpy as np

    assert gpu_jax.sentences_per_batch(25000, 32) == 390
    batch = gpu_jax.random_batch(np.random.default_rng(0), 3, 5, 100)
    assert (batch["target_ids_in"][:, 0] == 1).all() and (batch["target_ids_out"][:, -1] == 2).all()
    assert (batch["target_ids_in"][:, 1:] == batch["target_ids_out"][:, :-1]).all()
    assert batch["source_ids"].min() >= 3 and batch["source_ids"].max() < 100
    assert harness.shape_name((2, 3, 4)) == "2x3x4"
