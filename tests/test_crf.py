"""The CRF of opennmt_lite/layers/crf.py against TensorFlow Addons' numbers (the functions
OpenNMT-tf's tagger calls, recorded in the onmt_tf_tagger_crf fixture's crf.npz by
bench/onmt_model_fixtures.py) and against tests/numpy_crf_reference.py."""

import os

import numpy as np
import pytest

import numpy_crf_reference as reference

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "onmt_tf_tagger_crf")
CASES = (0, 1, 2)


@pytest.fixture(scope="module")
def addons():
    return dict(np.load(os.path.join(FIXTURE, "crf.npz")))


def _case(addons, case):
    return {key[len(f"case{case}_"):]: value for key, value in addons.items()
            if key.startswith(f"case{case}_")}


@pytest.mark.parametrize("case", CASES)
def test_log_likelihood_equals_addons(addons, case):
    from opennmt_lite.layers import crf

    c = _case(addons, case)
    args = (c["potentials"], c["gold"], c["lengths"], c["transitions"])
    np.testing.assert_allclose(np.asarray(crf.crf_log_likelihood(*args)), c["log_likelihood"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(crf.crf_sequence_score(*args)), c["sequence_score"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(crf.crf_log_norm(c["potentials"], c["lengths"], c["transitions"])),
        c["log_norm"], rtol=1e-5, atol=1e-5)
    # The case is not trivial: the likelihoods differ from each other and from 0.
    real = c["lengths"] > 0
    assert np.all(c["log_likelihood"][real] < -0.1)


@pytest.mark.parametrize("case", CASES)
def test_viterbi_equals_addons(addons, case):
    from opennmt_lite.layers import crf

    c = _case(addons, case)
    tags, best = crf.crf_decode(c["potentials"], c["transitions"], c["lengths"])
    tags, best = np.asarray(tags), np.asarray(best)
    for b, length in enumerate(c["lengths"]):
        assert tags[b, :length].tolist() == c["decoded"][b, :length].tolist()
    np.testing.assert_allclose(best, c["best_score"], rtol=1e-5, atol=1e-5)
    # The path is not the per-token argmax everywhere (the transitions matter).
    argmax = c["potentials"].argmax(-1)
    assert any(tags[b, :n].tolist() != argmax[b, :n].tolist()
               for b, n in enumerate(c["lengths"])) or case == 1


@pytest.mark.parametrize("case", (0, 1))
def test_equals_numpy_enumeration(addons, case):
    """Every tag sequence enumerated in float64 (case 2, 9 tags over 12 positions, is too many)."""
    from opennmt_lite.layers import crf

    c = _case(addons, case)
    likelihood = np.asarray(crf.crf_log_likelihood(
        c["potentials"], c["gold"], c["lengths"], c["transitions"]))
    tags, best = crf.crf_decode(c["potentials"], c["transitions"], c["lengths"])
    tags, best = np.asarray(tags), np.asarray(best)
    for b, length in enumerate(c["lengths"]):
        expected = reference.log_likelihood(c["potentials"][b], c["gold"][b], length,
                                            c["transitions"])
        np.testing.assert_allclose(likelihood[b], expected, rtol=1e-5, atol=1e-5)
        if length:
            path, score = reference.viterbi(c["potentials"][b], length, c["transitions"])
            assert tuple(tags[b, :length].tolist()) == path
            np.testing.assert_allclose(best[b], score, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_the_result(addons):
    """The same sequences padded with 5 more (random) positions give the same numbers."""
    from opennmt_lite.layers import crf

    c = _case(addons, 0)
    rng = np.random.default_rng(3)
    batch, time, tags = c["potentials"].shape
    potentials = np.concatenate(
        [c["potentials"], rng.normal(size=(batch, 5, tags)).astype(np.float32) * 9], axis=1)
    gold = np.concatenate([c["gold"], rng.integers(0, tags, size=(batch, 5))], axis=1)
    np.testing.assert_allclose(
        np.asarray(crf.crf_log_likelihood(potentials, gold, c["lengths"], c["transitions"])),
        c["log_likelihood"], rtol=1e-5, atol=1e-5)
    decoded, best = crf.crf_decode(potentials, c["transitions"], c["lengths"])
    decoded = np.asarray(decoded)
    for b, length in enumerate(c["lengths"]):
        assert decoded[b, :length].tolist() == c["decoded"][b, :length].tolist()
    np.testing.assert_allclose(np.asarray(best), c["best_score"], rtol=1e-5, atol=1e-5)


def test_gradient_of_the_log_likelihood_is_the_marginals(addons):
    """d log-likelihood / d potentials = one-hot(gold) - marginal probabilities: each real
    position's gradient sums to 0, padded positions get none."""
    import tensorflow as tf

    from opennmt_lite.layers import crf

    c = _case(addons, 0)
    potentials = tf.constant(c["potentials"])
    with tf.GradientTape() as tape:
        tape.watch(potentials)
        loss = tf.reduce_sum(crf.crf_log_likelihood(potentials, c["gold"], c["lengths"],
                                                    c["transitions"]))
    gradient = tape.gradient(loss, potentials).numpy()
    mask = np.arange(c["potentials"].shape[1])[None, :] < c["lengths"][:, None]
    np.testing.assert_allclose(gradient.sum(-1)[mask], 0.0, atol=1e-5)
    assert np.all(gradient[~mask] == 0)
    assert np.abs(gradient[mask]).max() > 0.1


def test_same_numbers_on_the_jax_backend():
    """The CRF is keras.ops only: under KERAS_BACKEND=jax it gives Addons' numbers too."""
    import subprocess
    import sys

    script = (
        "import numpy as np, keras\n"
        "assert keras.backend.backend() == 'jax'\n"
        # (loaded by path: the package's __init__ files would import TensorFlow)
        "import importlib.util\n"
        "spec = importlib.util.spec_from_file_location('crf', 'opennmt_lite/layers/crf.py')\n"
        "crf = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(crf)\n"
        f"d = np.load({os.path.join(FIXTURE, 'crf.npz')!r})\n"
        "p, g, n, t = (d['case0_' + k] for k in ('potentials', 'gold', 'lengths', 'transitions'))\n"
        "ll = np.asarray(crf.crf_log_likelihood(p, g, n, t))\n"
        "tags, best = (np.asarray(x) for x in crf.crf_decode(p, t, n))\n"
        "assert np.allclose(ll, d['case0_log_likelihood'], rtol=1e-5, atol=1e-5), ll\n"
        "assert np.allclose(best, d['case0_best_score'], rtol=1e-5, atol=1e-5), best\n"
        "for b, k in enumerate(n):\n"
        "    assert tags[b, :k].tolist() == d['case0_decoded'][b, :k].tolist()\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
