"""A TensorFlow Lite model of the whole translation (`run.py export --format tflite`,
`tflite_float16`, `tflite_dynamic_range`): OpenNMT-tf 2.32's TFLite export, for every model
opennmt-lite trains or imports, relative positions included (which OpenNMT-tf cannot export).

`opennmt.tflite` (OpenNMT-tf's file name) holds one function, signature `serving_default`:
    ids: int32 [source_length]  the source tokens' ids: line numbers in the source vocabulary
                                (0-based), the number of lines for a token not in it; trailing
                                0s are padding (a fixed-size input buffer may be used)
 -> output_0: int32 [tflite_output_size]  the translation's target ids, then `</s>` (2) when it
                                ended within the size, then 0s
Inside: the encoder and the decoding loop of `run.py infer` (inference/decoding.py, traced for
one sentence): greedy or beam search with the config's beam width, length and coverage
penalties and decoding lengths, at most min(maximum_decoding_length, tflite_output_size) steps
(OpenNMT-tf's bound); a source is cut to its first `infer.maximum_features_length` ids, as infer
cuts it, then gets the `<s>`/`</s>` of `data.source_sequence_controls`; an input without a
non-zero id gives an output of 0s. Tokenization and vocabulary lookup stay outside:
`translate.py`, written beside the model, does them for SentencePiece and pre-tokenized
(space-separated) text (opennmt_lite/export/tflite_translate.py: ai-edge-litert and NumPy, no
TensorFlow or opennmt-lite).

How it is made: the function's variables are frozen into constants, then converted with TFLite's
builtin ops only (the pip runtime, ai-edge-litert, has no Select-TF ops), the layers' fast paths
off (their fused ops have no TFLite kernel). Embedding rows are read with gather_nd, as in
OpenNMT-tf's TFLite mode (the converter's dynamic-range quantization would give a Gather's table
one int8 scale for the whole table: greedy 94/100 identical to infer's on the fixture below).

Quantization: float16 stores the weights in float16 (computed in float32). dynamic_range stores
the encoder's weights in 8 bits, as OpenNMT-tf's does every matrix: the source embeddings and the
encoder's Dense kernels as int8 values with one scale per 8 values along each output channel's
inputs (int8_weights; 1.25 bytes a weight with the scales in float16), computed in float32 once
per sentence (weight-only: activations stay float32); the decoder's weights, run at every step
of every beam, where rounding errors add up and flip the near-ties of a beam's choices, in
float16 as `tflite_float16` (the converter stores every float constant left in float16; the
int8 values are read with gather_nd on indices it cannot fold, so that it keeps them). Measured
on OpenNMT-tf's relative-position fixture (tests/test_tflite.py: 100 test sentences, then 199
cut and spliced from them), identical to infer's, beam 4 / greedy, and the size (float32
1.50 MB; * weight-only, in TensorFlow with the rounded weights, the same float32 arithmetic):

    converter's dynamic range (int8 kernels, activations    94 / 98, 186 / 178   0.88 MB
      int8 on the fly, embeddings float32; the export before)
    every matrix int8, one scale per output channel (*)     95 / 94, 190 / 179
    every matrix int8, one scale per 8 values               97 / 94, 194 / 191   0.72 MB
    the same, scales in float16, per 4 values               95 / 96, 196 / 191   0.72 MB
    embeddings and output layer float16, the rest per 8     95 / 99, 195 / 194   0.75 MB
    encoder int8 per 8, decoder float16 (kept)              99 / 99, 197 / 197   0.77 MB
    float16                                                 99 / 100, 198 / 197  0.85 MB

The weights' rounding, not the activations', moves the translations: this 64-unit model has 6
of its 100 greedy translations within 0.005 of log-probability of another choice at some step,
and no 8-bit rounding of the decoder tried (per channel, per 16, 8 or 4 values, GPTQ's
output-error rounding on sampled inputs) stayed clear of them. In the interpreter it translates
at float16's speed, about 1.3 times the time of the converter's dynamic range (whose int8 matrix
products are faster) on this model.

Not exportable (ExportError, checked before anything is built or written): random sampling
(`params.sampling_topk` != 1: its stateless random ops have no TFLite kernel), `infer.n_best` > 1
(one output), `params.replace_unknown_target` (needs the source tokens, outside the model),
`params.decoding_noise` (drawn on the words, outside the model).
"""

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile

import tensorflow as tf

from opennmt_lite.errors import UserError
from opennmt_lite.export import int8_weights
from opennmt_lite.export.saved_model import add_sequence_controls
from opennmt_lite.inference.decoding import END_ID, translate
from opennmt_lite.layers import fast_paths
from opennmt_lite.layers.common import Dense

logger = logging.getLogger("opennmt_lite")

# `run.py export --format` (OpenNMT-tf's names) -> quantization.
FORMATS = {"tflite": None, "tflite_float16": "float16", "tflite_dynamic_range": "dynamic_range"}
MODEL_FILE = "opennmt.tflite"
RUNNER_FILE = "translate.py"
DEFAULT_OUTPUT_SIZE = 250  # params.tflite_output_size, OpenNMT-tf's default


class ExportError(UserError, ValueError):
    """A decoding option a TFLite model cannot run (names the key)."""


def check_options(options, output_size=DEFAULT_OUTPUT_SIZE):
    """ExportError naming the first option of `options` (a DecodingOptions) TFLite cannot run,
    or an `output_size` (params.tflite_output_size) that is no int32 length."""
    if not 1 <= output_size < 2**31:
        raise ExportError(f"params.tflite_output_size {output_size}: the model's output length "
                          "must lie in [1, 2**31)")
    if options.sampling_topk != 1:
        raise ExportError(f"params.sampling_topk {options.sampling_topk}: random sampling cannot "
                          "be exported to TFLite (its random ops have no TFLite kernel); set it "
                          "to 1 to export")
    if options.n_best != 1:
        raise ExportError(f"infer.n_best {options.n_best}: a TFLite model returns one "
                          "translation (the best, as OpenNMT-tf's); set it to 1 to export")
    if options.replace_unknown_target:
        raise ExportError("params.replace_unknown_target: a TFLite model returns target ids "
                          "only (replacing unknown targets needs the source tokens, outside "
                          "the model); unset it to export")
    if options.decoding_noise:
        raise ExportError("params.decoding_noise: a TFLite model returns the decoded ids (the "
                          "noise is drawn on the words, outside the model); unset it to export")


def export_model(model, assets, options, data, output_dir, quantization=None,
                 output_size=DEFAULT_OUTPUT_SIZE, maximum_source_length=None):
    """Writes `opennmt.tflite`, the vocabularies, the SentencePiece models and `translate.py`
    into `output_dir` (created if missing; the command stages it); returns `output_dir`.

    `model`: a built float32 Transformer with its weights (build.inference_model); `options`:
    build.decoding_options (checked by `check_options`); `data`: the config's `data` section;
    `quantization`: None, "float16" or "dynamic_range"; `output_size`: params.tflite_output_size;
    `maximum_source_length`: infer.maximum_features_length (None: no cut).
    """
    if quantization not in FORMATS.values():
        raise ValueError(f"quantization must be one of {list(FORMATS.values())}, got {quantization!r}")
    check_options(options, output_size)
    # (`data.source_sequence_controls` where the config has the key: `<s>`/`</s>` the batches
    # of `infer` give the source)
    controls = getattr(data, "source_sequence_controls", None)
    content = convert(translation_function(model, options, output_size, maximum_source_length,
                                           controls, int8_encoder=quantization == "dynamic_range"),
                      quantization)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, MODEL_FILE), "wb") as f:
        f.write(content)
    shutil.copy(assets.source_vocabulary.path, os.path.join(output_dir, "source_vocabulary.txt"))
    shutil.copy(assets.target_vocabulary.path, os.path.join(output_dir, "target_vocabulary.txt"))
    for side, tokenization in (("source", data.source_tokenization),
                               ("target", data.target_tokenization)):
        if tokenization and tokenization.type == "sentencepiece":
            shutil.copy(tokenization.model, os.path.join(output_dir, f"{side}.model"))
        elif tokenization and tokenization.type != "space":
            logger.warning("data.%s_tokenization: %s tokenization is not in %s, which reads and "
                           "writes tokens separated by spaces: tokenize and detokenize outside",
                           side, tokenization.type, RUNNER_FILE)
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tflite_translate.py")
    shutil.copy(runner, os.path.join(output_dir, RUNNER_FILE))
    logger.info("exported TFLite model to %s (%.1f MB, weights %s, output size %d; %s)",
                output_dir, len(content) / 1e6, quantization or "float32", output_size, options)
    return output_dir


def translation_function(model, options, output_size=DEFAULT_OUTPUT_SIZE,
                         maximum_source_length=None, source_controls=None, int8_encoder=False):
    """The exported function, traced with the layers' plain formulas: a concrete function
    ids int32 [source_length] -> int32 [output_size] (see the module docstring).
    `source_controls`: with `start` / `end` true, `<s>` / `</s>` are added to the source in the
    graph (after the cut to `maximum_source_length`), as infer's batches have them.
    `int8_encoder`: the encoder's Dense kernels and the source embeddings stored in int8
    (int8_weights), computed in float32."""
    steps = min(options.maximum_decoding_length, output_size)
    options = dataclasses.replace(options, maximum_decoding_length=steps)
    embedded = _GatherNdEmbeddings(model, int8_encoder)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
    def translate_ids(ids):
        if maximum_source_length:
            ids = ids[:maximum_source_length]
        length = tf.math.count_nonzero(ids, dtype=tf.int32)
        if source_controls is not None:  # (`</s>` over the first padding 0, or one more position)
            ids = add_sequence_controls(ids[tf.newaxis], length[tf.newaxis], source_controls)[0][0]
        # No id: one padding id (0 source positions would leave TFLite's ops empty tensors);
        # the output is then 0s, below.
        ids = tf.pad(ids, [[0, tf.maximum(1 - tf.size(ids), 0)]])
        # A batch of one sentence whose batch size is not a constant: the decoding loop's
        # tensors must keep the shapes it gives them (rows of unknown number).
        batch = tf.reshape(ids, tf.stack([-1, tf.size(ids)]))
        lengths = tf.math.count_nonzero(batch, axis=1, dtype=tf.int32)
        result = translate(embedded, batch, lengths, options)
        tokens = tf.reshape(result.ids, [-1])  # the tokens before `</s>`
        produced = tf.reshape(result.lengths, [])
        padded = tf.concat([tokens, tf.zeros([output_size], tf.int32)], 0)[:output_size]
        # `</s>` after the tokens when the hypothesis ended (fewer tokens than steps).
        end = tf.logical_and(tf.equal(tf.range(output_size), produced), produced < steps)
        translation = tf.where(end, END_ID, padded)
        # Without source tokens the model would decode from fully masked attention: a guess.
        return tf.where(length > 0, translation, tf.zeros_like(translation))

    with _plain_formulas(), embedded.tracing():
        return translate_ids.get_concrete_function()


class _GatherNdEmbeddings:
    """The model as `translate` uses it (encode, target_inputter, decoder), its embedding rows
    read with gather_nd (see the module docstring); the rest is the model's own layers.

    With `int8_encoder`, while `tracing`: the encoder's Dense kernels and the source embedding
    table are int8 constants and their scales (int8_weights, quantized once); `encode` computes
    the kernels in float32 from int8 values read with gather_nd on indices that depend on the
    input, so that the converter can fold nothing back into a float constant (which it would
    store in float16)."""

    def __init__(self, model, int8_encoder=False):
        self._model = model
        self.decoder = model.decoder
        # (a source table the target shares is read at every step: not the encoder's alone)
        decoder_tables = {id(model.target_inputter.embedding)}
        self._dense = [layer for layer in model.encoder._flatten_layers(include_self=False)
                       if isinstance(layer, Dense)] if int8_encoder else []
        self._tables = [model.source_inputter] if int8_encoder and id(
            model.source_inputter.embedding) not in decoder_tables else []
        self._kernels = {}  # Dense layer -> its own kernel (a variable), while tracing
        self._stored = {}  # id(variable) -> (int8 values, scales) [channels, inputs]
        self._constants = {}  # id(variable) -> their constants in the graph being traced

    @contextlib.contextmanager
    def tracing(self):
        """Quantizes the weights (eagerly, before the trace); puts the layers' own kernels back
        after it."""
        self._kernels = {layer: layer.kernel for layer in self._dense}
        matrices = [(layer.kernel, layer.transpose) for layer in self._dense] + [
            (inputter.embedding, True) for inputter in self._tables]
        for variable, channels_first in matrices:
            if id(variable) not in self._stored:
                matrix = variable.numpy()
                self._stored[id(variable)] = int8_weights.quantize(
                    matrix if channels_first else matrix.T)
        self._constants = {}
        try:
            yield
        finally:
            for layer, kernel in self._kernels.items():
                object.__setattr__(layer, "kernel", kernel)
            self._constants = {}

    def encode(self, ids, length, training=None):
        no_offset = tf.minimum(tf.size(ids), 0)  # (0, which the converter cannot know)
        for layer, variable in self._kernels.items():
            # A kernel [inputs, outputs] has its output channels as columns; a transposed one
            # (a table [vocab, depth] shared as a kernel) as rows.
            values, scales = self._int8_constants(variable)
            channels = tf.range(values.shape[0]) + no_offset
            kernel = int8_weights.dequantize(tf.gather_nd(values, channels[:, None]), scales)
            object.__setattr__(layer, "kernel", kernel if layer.transpose else tf.transpose(kernel))
        embedded = self._rows(self._model.source_inputter, ids)
        return self._model.encoder(embedded, sequence_length=length, training=False)

    def target_inputter(self, ids):
        return self._rows(self._model.target_inputter, ids)

    def _rows(self, embedder, ids):
        indices = tf.expand_dims(ids, -1)
        if embedder in self._tables:
            values, scales = self._int8_constants(embedder.embedding)
            rows = int8_weights.dequantize(tf.gather_nd(values, indices),
                                           tf.gather_nd(scales, indices))
        else:
            rows = tf.gather_nd(embedder.embedding, indices)
        return tf.cast(rows, embedder.compute_dtype)

    def _int8_constants(self, variable):
        """The int8 values and scales of `variable` [channels, inputs] as constants of the graph
        being traced."""
        key = id(variable)
        if key not in self._constants:
            self._constants[key] = tuple(tf.constant(array) for array in self._stored[key])
        return self._constants[key]


def convert(concrete, quantization=None):
    """The TFLite flatbuffer (bytes) of `concrete` (a concrete function)."""
    # (The converter keeps the variables read inside a while loop as resource variables that
    # nothing initializes: frozen first, the loop kept functional so its shapes may vary.)
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=False)
    signature = concrete.structured_input_signature[0]

    # Saved as the `serving_default` signature of a module, whose SavedModel the converter
    # reads (which gives the TFLite model that signature). Without the custom gradients
    # (swish's, for one): they would fail the SavedModel, and inference has no use for them.
    @tf.function(input_signature=signature)
    def serving_default(*args):
        (translation,) = frozen(*args)
        return translation

    module = tf.Module()
    module.serving_default = serving_default
    with tempfile.TemporaryDirectory(prefix="opennmt-lite-tflite-") as saved_model:
        tf.saved_model.save(module, saved_model, signatures=serving_default.get_concrete_function(),
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantization:  # (dynamic_range: the float weights int8_encoder left)
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        return converter.convert()


@contextlib.contextmanager
def _plain_formulas():
    """The layers' plain formulas while tracing (fast paths off), then the setting before."""
    previous = fast_paths.setting()
    fast_paths.configure(enabled=False)
    try:
        yield
    finally:
        fast_paths.restore(previous)
