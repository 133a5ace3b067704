"""`run.py inspect --html`: the page of the worked example rendered in headless Chromium, its
values (in the page's data and in the cells the browser drew) against the NumPy reference."""

import base64
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

import numpy_reference
import run
from encoder_helpers import WORKED_IDS, WORKED_LENGTHS, weights_by_name

REPO = Path(__file__).resolve().parents[1]
WORKED_ARGUMENT = "5 12 7, 3 25, 8 1 19"  # encoder_helpers.WORKED_IDS, row 1 padded
LONG_IDS = " ".join(str(3 + i % 22) for i in range(70))


def chromium(*arguments):
    """Runs headless Chromium; fails (never skips) when it is missing: CI installs it."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("chromium is not installed: run `sudo apt-get install -y chromium` (Debian, Ubuntu; "
                    "the README's quick start), or put a Chromium binary named chromium on the PATH")
    result = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             *arguments], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def page_data(path):
    text = Path(path).read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="inspect-data">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def values_of(tensor):
    return np.array(tensor["values"], np.float64).reshape(tensor["shape"])


def scaled_error(ours, reference):
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    return np.abs(ours - reference).max() / max(1.0, np.abs(reference).max())


class DrawnPage(HTMLParser):
    """What the browser drew: body status, script errors, {step: {index: value}} of the table
    cells, and the figures of each class."""

    def __init__(self, text):
        super().__init__()
        self.status, self.errors, self.cells, self.figures = None, "", {}, {}
        self._step = self._in_errors = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.status = attrs.get("data-status")
        if tag == "pre" and attrs.get("id") == "script-errors":
            self._in_errors = True
        if tag == "section" and "data-step" in attrs:
            self._step = attrs["data-step"]
            self.cells.setdefault(self._step, {})
        if tag == "td" and self._step and attrs.get("data-index") not in (None, "null"):
            self.cells[self._step][int(attrs["data-index"])] = float(attrs["data-v"])
        if tag == "figure":
            for name in attrs.get("class", "").split():
                self.figures[name] = self.figures.get(name, 0) + 1

    def handle_endtag(self, tag):
        if tag == "section":
            self._step = None
        if tag == "pre":
            self._in_errors = False

    def handle_data(self, data):
        if self._in_errors:
            self.errors += data


@pytest.fixture(scope="module")
def worked(tmp_path_factory):
    """The worked example with every weight drawn at random (biases and norms included, as in
    test_encoder_reference), saved as a checkpoint; the page of its 3-sentence batch."""
    from opennmt_lite import build
    from opennmt_lite.checkpointing.store import Checkpoint
    from opennmt_lite.config import load_config
    from opennmt_lite.checkpointing.names import named_variables

    directory = tmp_path_factory.mktemp("inspect_html")
    config = yaml.safe_load((REPO / "configs/walkthrough.yml").read_text())
    config["model_dir"] = str(directory / "model")
    for side in ("source_vocabulary", "target_vocabulary"):
        config["data"][side] = str(REPO / config["data"][side])
    config_path = directory / "walkthrough.yml"
    config_path.write_text(yaml.safe_dump(config))
    model, assets, _ = build.inference_model(load_config(str(config_path)), required=False)
    rng = np.random.default_rng(0)
    for variable in named_variables(model, include_seeds=False).values():
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype(np.float32))
    checkpoint = Checkpoint(model, save_dir=str(directory / "checkpoint")).save(1)
    page = directory / "worked.html"
    assert run.main(["inspect", "--config", str(config_path), "--checkpoint", checkpoint,
                     "--ids", WORKED_ARGUMENT, "--html", str(page),
                     "--attention_png", str(directory / "png")]) == 0
    reference = numpy_reference.encoder(
        WORKED_IDS, WORKED_LENGTHS, weights_by_name(model.source_inputter, model.encoder),
        num_layers=2, num_heads=2, max_rel=8, pre_norm=True)
    # The logits as the softmax receives them (the page derives this step from logits and mask).
    mask = reference["mask"][:, None, None, :]
    for layer in (0, 1):
        logits = reference[f"layers/{layer}/self_attention/logits"]
        reference[f"layers/{layer}/self_attention/masked_logits"] = (
            logits * mask + (1 - mask) * numpy_reference.F32_MIN)
    names = {name: "source_embedded" if name == "embedded" else f"encoder/{name}" for name in reference}
    return dict(directory=directory, config=str(config_path), checkpoint=checkpoint, model=model,
                page=page, reference={names[name]: value for name, value in reference.items()})


def test_page_data_matches_the_numpy_reference_at_every_step(worked):
    data = page_data(worked["page"])
    steps = {step["name"]: step for step in data["steps"] if step["tensor"] is not None}
    encoder_steps = [name for name in steps if not name.startswith("decoder/")]
    # Every step of the reference is on the page, and nothing else but the notes and alignments.
    assert sorted(encoder_steps) == sorted(worked["reference"])
    errors = {name: scaled_error(values_of(steps[name]["tensor"]), ref)
              for name, ref in worked["reference"].items()}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-6, (worst, errors[worst])
    # Titled, with an equation, in the order of the computation.
    assert all(step["title"] and step["equation"] for step in data["steps"])
    order = [step["name"] for step in data["steps"]]
    assert order.index("source_embedded") < order.index("encoder/dropout") < order.index("encoder/mask") \
        < order.index("encoder/layers/0/self_attention/queries") < order.index("encoder/layers/1/ffn/inner") \
        < order.index("encoder/output")
    positions = steps["encoder/layers/0/self_attention/relative_positions"]["tensor"]
    assert positions["values"] == [8, 9, 10, 7, 8, 9, 6, 7, 8]  # clip(j - i, -8, 8) + 8
    assert [s["tokens"] for s in data["sources"]] == [["c", "j", "e"], ["a", "<unk>"], ["f", "<s>", "q"]]
    # --html alongside --attention_png: one PNG per layer and head as before.
    assert sorted(p.name for p in (worked["directory"] / "png").iterdir()) == [
        f"encoder_layer{layer}_head{head}.png" for layer in (0, 1) for head in (0, 1)]
    # The mask's effect: the padded key gets exactly zero attention.
    attention = values_of(steps["encoder/layers/0/self_attention/attention"]["tensor"])
    assert np.all(attention[1, :, :, 2] == 0.0) and np.all(attention[0, :, :, 2] > 0.0)


def test_page_loads_in_chromium_and_draws_every_value(worked):
    drawn = DrawnPage(chromium("--dump-dom", worked["page"].as_uri()))
    assert drawn.errors == "" and drawn.status == "ok", drawn.errors
    # layers x heads maps, self-attention and cross-attention, for the sentence shown (sentence 0)
    assert drawn.figures["attention-map"] == 2 * 2
    assert drawn.figures["alignment-map"] == 2 * 2
    for name, reference in worked["reference"].items():
        cells = drawn.cells[name]
        assert sorted(cells) == list(range(reference.size)), name  # every value drawn once
        ours = np.array([cells[i] for i in range(reference.size)])
        assert scaled_error(ours, reference.reshape(-1)) <= 1e-6, name


def test_screenshot_is_not_blank(worked):
    from PIL import Image

    shot = worked["directory"] / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,1600", worked["page"].as_uri())
    pixels = np.asarray(Image.open(shot).convert("RGB"), np.float64)
    assert pixels.shape[:2] == (1600, 1280)
    assert pixels.std() > 20.0
    colours = pixels.astype(np.int64) @ np.array([1 << 16, 1 << 8, 1])
    assert len(np.unique(colours)) > 100  # heat-map colours, not one fill


def test_given_target_shows_the_decoders_cross_attention(worked):
    from opennmt_lite.recorder import recording

    page = worked["directory"] / "target.html"
    assert run.main(["inspect", "--config", worked["config"], "--checkpoint", worked["checkpoint"],
                     "--ids", "5 12 7", "--target", "a b c", "--html", str(page)]) == 0
    data = page_data(page)
    assert data["targets"] == [{"tokens": ["a", "b", "c", "</s>"], "ids": [1, 3, 4, 5], "finished": True}]
    alignments = [s for s in data["steps"] if s["kind"] == "alignment"]
    assert [s["name"] for s in alignments] == ["decoder/layers/0/attention/attention",
                                               "decoder/layers/1/attention/attention"]
    model = worked["model"]
    memory = model.encode(np.array([[5, 12, 7]]), np.array([3]), training=False)
    with recording() as tensors:
        model.decode(np.array([[1, 3, 4, 5]]), np.array([4]), memory, np.array([3]), training=False)
    for step in alignments:
        ours = values_of(step["tensor"])
        assert ours.shape == (1, 2, 4, 3)
        np.testing.assert_allclose(ours, tensors[step["name"]].numpy(), atol=1e-6)
        np.testing.assert_allclose(ours.sum(-1), 1.0, atol=1e-6)
    drawn = DrawnPage(chromium("--dump-dom", page.as_uri()))
    assert drawn.status == "ok" and drawn.figures["alignment-map"] == 2 * 2


def test_large_tensors_are_summarised_and_drawn_on_canvases(worked):
    from opennmt_lite.inspection import html

    page = worked["directory"] / "long.html"
    assert run.main(["inspect", "--config", worked["config"], "--checkpoint", worked["checkpoint"],
                     "--ids", LONG_IDS, "--html", str(page)]) == 0
    data = page_data(page)
    steps = {step["name"]: step["tensor"] for step in data["steps"] if step["tensor"]}
    attention = steps["encoder/layers/0/self_attention/attention"]
    assert attention["shape"] == [1, 2, 70, 70] and 70 * 70 * 2 > html.EXACT_LIMIT
    preview = attention["preview"]  # summarised, but attention maps are kept whole
    assert (preview["panels"], preview["rows"], preview["cols"]) == (2, 70, 70)
    codes = np.frombuffer(base64.b64decode(preview["bytes"]), np.uint8).reshape(2, 70, 70)
    decoded = preview["lo"] + codes * (preview["hi"] - preview["lo"]) / 254
    model = worked["model"]
    from opennmt_lite.inspection.text import trace_encoder

    ids = np.array([[int(i) for i in LONG_IDS.split()]])
    expected = trace_encoder(model, ids, [70])["encoder/layers/0/self_attention/attention"][0]
    assert np.abs(decoded - expected).max() <= (preview["hi"] - preview["lo"]) / 254 / 2 + 1e-7
    assert np.isclose(attention["stats"]["mean"], expected.mean(), atol=1e-6)
    drawn = DrawnPage(chromium("--dump-dom", page.as_uri()))
    assert drawn.errors == "" and drawn.status == "ok", drawn.errors
    assert drawn.figures["attention-map"] == 2 * 2


@pytest.mark.parametrize("arguments, message", [
    (["--ids", "5 26 7"], "error: --ids: 26 is outside the source vocabulary (ids 0 to 25)"),
    (["--ids", "5 12, 3 -1"], "error: --ids, sentence 2: -1 is outside the source vocabulary"),
    (["--sentence", "  "], "error: --sentence: the source is empty after tokenization"),
    (["--ids", "5 12,"], "error: --ids, sentence 2: the source is empty"),
    (["--sentence", "a b c d e f g h i j k l"], "error: --sentence: 12 tokens, more than the model is "
                                                "run on (infer.maximum_features_length: 10)"),
    (["--ids", "5", "--html", "missing/dir/page.html"], "error: --html missing/dir/page.html: "
                                                        "directory missing/dir does not exist"),
    (["--ids", "5 12, 3", "--target", "a", "--html", "{tmp}/t.html"], "error: --target is the translation "
                                                                        "of one source sentence"),
    (["--batch", "{tmp}/batch.txt"], "error: --batch {tmp}/batch.txt, line 2: the source is empty after "
                                       "tokenization"),
    (["--batch", "{tmp}/none.txt"], "error: --batch file not found: {tmp}/none.txt"),
], ids=["id-out-of-range", "negative-id", "empty-sentence", "empty-ids", "too-long", "missing-dir",
        "target-with-batch", "batch-empty-line", "batch-missing"])
def test_bad_input_is_one_line_with_exit_code_2(worked, capsys, arguments, message):
    limit = worked["directory"] / "limit.yml"
    limit.write_text("infer:\n  maximum_features_length: 10\n")
    (worked["directory"] / "batch.txt").write_text("a b\n \nc\n")
    arguments = [a.replace("{tmp}", str(worked["directory"])) for a in arguments]
    message = message.replace("{tmp}", str(worked["directory"]))
    code = run.main(["inspect", "--config", worked["config"], str(limit), "--checkpoint",
                     worked["checkpoint"], *arguments])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(message) and "\n" not in err and "Traceback" not in err, err


def test_batch_file_is_one_padded_batch(worked, capsys):
    batch = worked["directory"] / "two.txt"
    batch.write_text("c j e\na zz\n")  # "zz" is not in the vocabulary: <unk>, id 25
    assert run.main(["inspect", "--config", worked["config"], "--checkpoint", worked["checkpoint"],
                     "--batch", str(batch)]) == 0
    out = capsys.readouterr().out
    assert "[0] ids:    5 12 7" in out and "[1] tokens: a zz" in out and "[1] ids:    3 25" in out
    assert re.search(r"^encoder/mask\s+\[2, 3\]", out, re.M)
