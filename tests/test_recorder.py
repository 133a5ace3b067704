"""The context-scoped recorder: names and order of what layers record, no-ops outside a
recording and inside tf.function, and the fused feed-forward path running either way."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import opennmt_lite.layers as layers_module
import opennmt_lite.layers.fast_paths as fast_paths_module
import opennmt_lite.models as models_module
from opennmt_lite.inspection.text import trace_encoder
from opennmt_lite.layers import FeedForwardNetwork
from opennmt_lite.hyperparameters import ModelHyperparameters
from opennmt_lite.models import Transformer
from opennmt_lite.recorder import is_recording, record, recording, recording_scope

IDS = np.array([[5, 9, 22, 3], [7, 1, 0, 0]], np.int32)
LENGTHS = np.array([4, 2], np.int32)


def encoder_names(num_layers, relative=True, pre_norm=True):
    """inspection/text.py's documented order of `trace_encoder`'s tensors."""
    attention = ["queries", "keys", "values"]
    if relative:
        attention += ["relative_positions", "relative_keys", "relative_values", "content_logits",
                      "relative_logits"]
    attention += ["logits", "attention", "heads", "combined_heads", "output"]
    norm = "normalized_input" if pre_norm else "normalized_output"

    def wrapped(inner):
        return [norm] + inner + ["residual_output"] if pre_norm else inner + ["residual_output", norm]

    names = ["source_embedded", "encoder/scaled_inputs"]
    names += [] if relative else ["encoder/position_encoded_inputs"]
    names += ["encoder/mask"]
    for i in range(num_layers):
        names += [f"encoder/layers/{i}/self_attention/{n}" for n in wrapped(attention)]
        names += [f"encoder/layers/{i}/ffn/{n}" for n in wrapped(["inner", "output"])]
        names += [f"encoder/layers/{i}/output"]
    return names + ["encoder/output"]


def small_model(**kwargs):
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=8, num_heads=2, ffn_inner_dim=16, **kwargs),
                        30, 30)
    model.build()
    return model


@pytest.mark.parametrize("relative, pre_norm", [(True, True), (True, False), (False, True)])
def test_trace_encoder_records_every_documented_tensor_in_order(relative, pre_norm):
    model = small_model(maximum_relative_position=4 if relative else None, pre_norm=pre_norm)
    tensors = trace_encoder(model, IDS, LENGTHS)
    assert list(tensors) == encoder_names(2, relative, pre_norm)
    np.testing.assert_array_equal(tensors["encoder/output"], model.encode(IDS, LENGTHS).numpy())


def test_recording_is_a_no_op_outside_a_block_and_scopes_nest():
    computed = []
    record("lost", lambda: computed.append(1))  # nothing records: not even computed
    assert not computed and not is_recording()
    with recording_scope("outer"):
        with recording() as outer:
            record("a", tf.constant(1))
            with recording_scope("x"), recording_scope("y/z"):
                record("b", tf.constant(2))
                with recording() as inner:  # the innermost block receives the records
                    record("c", lambda: tf.constant(3))
            record("a", tf.constant(4))  # a name recorded again keeps its last value
    assert list(outer) == ["a", "x/y/z/b"] and int(outer["a"]) == 4
    assert list(inner) == ["c"] and int(inner["c"]) == 3
    assert not is_recording()


def test_nothing_is_recorded_inside_tf_function():
    model = small_model(maximum_relative_position=4)
    encode = tf.function(lambda ids, lengths: model.encode(ids, lengths))
    with recording() as tensors:
        graph_output = encode(tf.constant(IDS), tf.constant(LENGTHS))
        assert tensors == {}
        eager_output = model.encode(IDS, LENGTHS)
    assert "encoder/output" in tensors
    np.testing.assert_allclose(graph_output.numpy(), eager_output.numpy(), rtol=1e-5, atol=1e-5)


def test_fused_feed_forward_runs_whether_or_not_something_records(monkeypatch):
    """In training, Dense + ReLU + dropout is one op with or without a recording; it records
    the FFN's `output` (there is no pre-dropout `inner` to record)."""
    calls = []
    fused = fast_paths_module.dense_relu_dropout

    def counting(*args):
        calls.append(1)
        return fused(*args)

    monkeypatch.setattr(fast_paths_module, "dense_relu_dropout", counting)
    ffn = FeedForwardNetwork(16, 8, dropout=0.3)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)
    ffn(x)  # builds
    state = ffn.dropout_seed.state.numpy()
    plain = ffn(x, training=True)
    ffn.dropout_seed.state.assign(state)  # the same dropout mask again
    with recording() as tensors:
        recorded = ffn(x, training=True)
    assert len(calls) == 2
    np.testing.assert_array_equal(recorded.numpy(), plain.numpy())
    assert list(tensors) == ["output"]
    with recording() as tensors:
        ffn(x)  # inference: the unfused path, which has the activation before dropout
    assert list(tensors) == ["inner", "output"] and len(calls) == 2


def test_no_layer_takes_a_recording_argument():
    classes = {value for module in (layers_module, models_module) for value in vars(module).values()
               if isinstance(value, type) and issubclass(value, keras.layers.Layer)}
    assert len(classes) >= 13  # not vacuous
    for cls in classes:
        for method in ("call", "encode", "decode", "step", "_run"):
            if hasattr(cls, method):
                assert "trace" not in inspect.signature(getattr(cls, method)).parameters, (cls, method)
