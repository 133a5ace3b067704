"""A CTranslate2 model directory (`run.py export --format ctranslate2`) from a Transformer's weights.

CTranslate2's Python API describes a model as a `TransformerSpec` filled with NumPy arrays; a
`Converter` subclass returning that spec writes `model.bin`, `config.json` and the vocabularies,
quantized as asked. Neither TensorFlow graphs nor OpenNMT-tf are involved, so the same code serves
opennmt-lite checkpoints and imported OpenNMT-tf ones.

What must be set explicitly for the output to equal opennmt-lite's (and OpenNMT-tf's):
* the layer norm epsilon, 1e-3 (Keras'); CTranslate2 uses 1e-5 when it is not in config.json;
* the source `<s>`/`</s>` of the sequence controls (`add_source_bos`, `add_source_eos`);
* an explicit `<unk>` after the vocabulary file's lines: there, an unknown token gets the id just
  past the last line, which CTranslate2 can only express as a token of the vocabulary;
* `position_encoding: none` without relative positions has no CTranslate2 flag: it becomes
  relative-position tables of one zero row (no position information, whatever the length).
Everything else (sqrt(depth) embedding scaling, sinusoidal encodings from position 1 as
`[sin | cos]`, queries scaled by depth_per_head^-0.5, `<s>` as decoder start) is CTranslate2's
default for OpenNMT-tf models.

The directory also holds the SentencePiece models (`source.model`, `target.model`), `decoding.json`
(the `translate_batch` arguments that reproduce `run.py infer`) and a README.md.
"""

import dataclasses
import json
import logging
import os
import shutil
import tempfile

import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec
from ctranslate2.specs import transformer_spec as ts

from opennmt_lite.data.vocab import UNK_TOKEN
from opennmt_lite.errors import OutputError, UserError
from opennmt_lite.inference.ctranslate2 import translate_options

logger = logging.getLogger("opennmt_lite")

# CTranslate2's weight types that make sense here (int8_float16/int8_bfloat16 need a GPU/bf16 CPU;
# they can still be picked at load time with compute_type).
QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")
MODEL_FILES = ("model.bin", "saved_model.pb")  # what makes a directory "hold a model"


class ExportError(UserError, ValueError):
    """A model option CTranslate2 cannot express (names the option)."""


def export_model(model, assets, options, data, output_dir, quantization=None, force=False):
    """Writes the CTranslate2 model of `model` (a built Transformer with its weights) to
    `output_dir`; returns it. `options`: build.decoding_options (recorded in decoding.json);
    `data`: the config's `data` section (SentencePiece models copied). The directory is written
    beside the destination and moved into place at the end, so a failure leaves no half model."""
    check_destination(output_dir, force)
    spec = transformer_spec(model, assets, getattr(data, "source_sequence_controls", None))
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ctranslate2-", dir=parent)
    try:
        _SpecConverter(spec).convert(os.path.join(staging, "model"), quantization=quantization)
        written = os.path.join(staging, "model")
        copied = _copy_tokenizers(data, written)
        _write_decoding_files(written, os.path.basename(os.path.abspath(output_dir)), options,
                              quantization, copied, spec.config.unk_token)
        _move_into_place(written, output_dir, os.path.join(staging, "previous"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("exported CTranslate2 model to %s (weights %s)", output_dir, quantization or "float32")
    return output_dir


def check_destination(output_dir, force):
    if not os.path.exists(output_dir):
        return
    if not os.path.isdir(output_dir):
        raise OutputError(f"--output {output_dir} exists and is not a directory")
    entries = os.listdir(output_dir)
    if not entries:
        return
    if not any(name in entries for name in MODEL_FILES):
        # Never delete a directory that is not a model, even with --force.
        raise OutputError(f"--output {output_dir} is not empty and holds no model: choose "
                              "another directory")
    if not force:
        raise OutputError(f"--output {output_dir} already holds a model: pass --force to "
                              "replace it")


def _move_into_place(written, output_dir, previous):
    """Replaces output_dir by written; an existing model is moved to `previous` (deleted by the
    caller) and put back if the replacement fails."""
    if os.path.exists(output_dir):
        os.replace(output_dir, previous)
    try:
        os.replace(written, output_dir)
    except OSError:
        if os.path.exists(previous):
            os.replace(previous, output_dir)
        raise


class _SpecConverter(Converter):
    """CTranslate2's conversion (validation, quantization, writing) of a ready spec."""

    def __init__(self, spec):
        self._spec = spec

    def _load(self):
        return self._spec


def transformer_spec(model, assets, source_controls=None):
    """The `ctranslate2.specs.TransformerSpec` of an opennmt-lite `Transformer` (weights copied).
    `source_controls`: `data.source_sequence_controls`, CTranslate2's add_source_bos/eos (it then
    adds the source `<s>`/`</s>` itself, as CTranslate2's own OpenNMT-tf converter sets them)."""
    encoder, decoder, hyper = model.encoder, model.decoder, model.hyperparameters
    activation = _activation(hyper.ffn_activation)
    relative = hyper.maximum_relative_position is not None
    absolute = hyper.absolute_position_encoding != "none"
    if relative and absolute:
        raise ExportError("model.position_encoding: sinusoidal with maximum_relative_position "
                          "cannot be exported to CTranslate2 (it uses one or the other)")
    # No position information at all: relative tables of one zero row (see the module doc).
    no_positions = not relative and not absolute
    layers = dict(pre_norm=hyper.pre_norm, activation=activation,
                  relative_position=relative or no_positions)
    spec = ts.TransformerSpec(
        ts.TransformerEncoderSpec(hyper.num_layers, hyper.num_heads, **layers),
        ts.TransformerDecoderSpec(hyper.num_layers, hyper.num_heads, **layers),
    )
    # Every LayerNorm of the model is built with the same (default) epsilon.
    spec.config.layer_norm_epsilon = float(_wrapper_norm(encoder.layers[0].self_attention).epsilon)
    unk = _unknown_token(assets)
    spec.config.unk_token = unk
    if source_controls is not None:
        spec.config.add_source_bos = bool(source_controls.start)
        spec.config.add_source_eos = bool(source_controls.end)
    spec.register_source_vocabulary(assets.source_vocabulary.tokens + [unk])
    spec.register_target_vocabulary(assets.target_vocabulary.tokens + [unk])

    spec.encoder.embeddings[0].weight = _numpy(model.source_inputter.embedding)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, True, no_positions)
        _set_ffn(layer_spec.ffn, layer.ffn)
    if encoder.layer_norm is not None:
        _set_layer_norm(spec.encoder.layer_norm, encoder.layer_norm)

    spec.decoder.embeddings.weight = _numpy(model.target_inputter.embedding)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, True, no_positions)
        _set_attention(layer_spec.attention, layer.attention[0], False, False)
        _set_ffn(layer_spec.ffn, layer.ffn)
    if decoder.layer_norm is not None:
        _set_layer_norm(spec.decoder.layer_norm, decoder.layer_norm)
    _set_linear(spec.decoder.projection, decoder.output_layer)
    return spec


def _activation(name):
    # Keras' "gelu" is the exact (erf) GELU, CTranslate2's GELU; "swish" is x * sigmoid(x).
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "swish": common_spec.Activation.SWISH}
    if name not in activations:
        raise ExportError(f"model.ffn_activation: {name!r} cannot be exported to CTranslate2 "
                          f"(supported: {', '.join(activations)})")
    return activations[name]


def _unknown_token(assets):
    """The token CTranslate2 maps unknown tokens to: `<unk>`, unless a vocabulary file holds that
    string as an ordinary line (then unknowns would take that line's id instead of the id after
    the last line), in which case a name found in neither vocabulary."""
    taken = set(assets.source_vocabulary.tokens) | set(assets.target_vocabulary.tokens)
    name = UNK_TOKEN
    while name in taken:
        name = name[:-1] + "_oov>"
    return name


def _numpy(variable):
    return np.array(variable.numpy(), dtype=np.float32)


def _set_linear(spec, dense):
    # CTranslate2 stores [out, in]; a Dense kernel is [in, out], a shared one already [out, in].
    kernel = _numpy(dense.kernel)
    spec.weight = kernel if dense.transpose else np.ascontiguousarray(kernel.T)
    if dense.bias is not None:
        spec.bias = _numpy(dense.bias)


def _set_layer_norm(spec, layer_norm):
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _wrapper_norm(wrapper):
    # Pre-norm normalizes the sub-layer's input, post-norm its residual output: CTranslate2 has
    # one layer norm per sub-layer and places it according to the spec's pre_norm.
    return wrapper.input_layer_norm if wrapper.input_layer_norm is not None else wrapper.output_layer_norm


def _concat_linears(spec, denses):
    """One CTranslate2 linear computing several Dense layers side by side (fused projections)."""
    spec.weight = np.concatenate([np.ascontiguousarray(_numpy(d.kernel).T) for d in denses])
    if denses[0].bias is not None:
        spec.bias = np.concatenate([_numpy(d.bias) for d in denses])


def _set_attention(spec, wrapper, self_attention, no_positions):
    attention = wrapper.layer
    if self_attention:  # queries, keys and values in one projection
        _concat_linears(spec.linear[0], [attention.linear_queries, attention.linear_keys,
                                         attention.linear_values])
    else:  # queries from the decoder; keys and values from the memory
        _concat_linears(spec.linear[0], [attention.linear_queries])
        _concat_linears(spec.linear[1], [attention.linear_keys, attention.linear_values])
    _set_linear(spec.linear[-1], attention.linear_output)
    if attention.maximum_relative_position is not None:
        spec.relative_position_keys = _numpy(attention.relative_position_keys)
        spec.relative_position_values = _numpy(attention.relative_position_values)
    elif no_positions:
        zeros = np.zeros([1, attention.num_units_per_head], np.float32)
        spec.relative_position_keys = zeros
        spec.relative_position_values = zeros.copy()
    _set_layer_norm(spec.layer_norm, _wrapper_norm(wrapper))


def _set_ffn(spec, wrapper):
    _set_linear(spec.linear_0, wrapper.layer.inner)
    _set_linear(spec.linear_1, wrapper.layer.outer)
    _set_layer_norm(spec.layer_norm, _wrapper_norm(wrapper))


def _copy_tokenizers(data, directory):
    """Copies the SentencePiece models as source.model / target.model; returns {side: file}."""
    copied = {}
    for side in ("source", "target"):
        tokenization = getattr(data, f"{side}_tokenization") if data is not None else None
        if tokenization is not None and tokenization.type == "sentencepiece":
            shutil.copy(tokenization.model, os.path.join(directory, f"{side}.model"))
            copied[side] = f"{side}.model"
    return copied


def _write_decoding_files(directory, name, options, quantization, tokenizers, unk_token):
    arguments = translate_options(options)
    with open(os.path.join(directory, "decoding.json"), "w", encoding="utf-8") as f:
        json.dump({"translate_batch": arguments, "opennmt_lite_options": dataclasses.asdict(options),
                   "quantization": quantization or "float32", "tokenizers": tokenizers},
                  f, indent=2, sort_keys=True)
        f.write("\n")
    tokenize = (
        "import sentencepiece as spm\n"
        "source = spm.SentencePieceProcessor(model_file=f\"{path}/source.model\")\n"
        "target = spm.SentencePieceProcessor(model_file=f\"{path}/target.model\")\n"
        "tokens = [source.encode(line, out_type=str) for line in lines]\n"
        if tokenizers else "tokens = [line.split() for line in lines]  # pre-tokenized text\n"
    )
    detokenize = ("target.decode(r.hypotheses[0])" if "target" in tokenizers
                  else "\" \".join(r.hypotheses[0])")
    arguments_text = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    text = f"""# CTranslate2 model exported by opennmt-lite

Decoding settings that reproduce `run.py infer` (also in `decoding.json`):

```python
import ctranslate2
path = "{name}"  # this directory
lines = ["Cannot open file"]
{tokenize}translator = ctranslate2.Translator(path, device="cpu")
results = translator.translate_batch(tokens, {arguments_text})
print([{detokenize} for r in results])
```

* `score` is the sum of the log-probabilities of the tokens and of `</s>` (OpenNMT-tf's score),
  given `length_penalty=0` (CTranslate2's default is 1, and it also divides greedy scores).
* A non-zero length penalty has no exact CTranslate2 equivalent: OpenNMT-tf ranks beams by
  `score / ((5 + length) / 6) ** alpha` at each step, CTranslate2 divides finished hypotheses by
  `length ** alpha`. The value is passed as is; rankings (and scores) may then differ.
* `max_input_length=0`: CTranslate2 otherwise truncates sources to 1024 tokens.
* Unknown tokens are `{unk_token}`; layer norm epsilon is 1e-3 (`config.json`).
* Or, from opennmt-lite: `python run.py infer --config ... --features_file F --ctranslate2 {name}`.
"""
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write(text)
