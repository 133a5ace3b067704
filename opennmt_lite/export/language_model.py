"""A language model's exports (`run.py export` of a `model.type: language_model`).

SavedModel signatures (Keras 3 `ExportArchive` endpoints, in the style of the Transformer's):
  score(tokens: string [batch, time], length: int32 [batch])
      -> {"score": float32 [batch]}: OpenNMT-tf's `score` of each line (-sum log p of its tokens
         and `</s>`, with the data.sequence_controls the model was trained with; `run.py score`)
  continue / serving_default(tokens: string [batch, time], length: int32 [batch])
      -> {"tokens": string [batch, 1, time'] (the prefix and its greedy continuation, without
          `<s>` and `</s>`, padded with ""), "length": int32 [batch, 1],
          "log_probs": float32 [batch, 1] (of the generated tokens and `</s>`)}
`tokens` are pieces padded with any string beyond `length`; prefixes may differ in length. The
continuation is greedy (`run.py infer` with beam_width 1 and sampling_topk 1), bounded by
params.maximum_decoding_length / minimum_decoding_length fixed at export; each step recomputes
the whole sequence (no cache: one graph for every batch). The vocabulary is an asset; copies of
it (and the SentencePiece model) are under assets.extra/.

CTranslate2 (`--format ctranslate2`): a `TransformerDecoderModelSpec` for `ctranslate2.Generator`
(the tanh gelu as GELUTanh, the learned position table from its second row, as CTranslate2's own
OpenNMT-tf converter reads PositionEmbedder; layer norm epsilon and `<unk>` as for the
Transformer, opennmt_lite/export/ctranslate2.py). `run.py infer --ctranslate2 DIR` continues with
it (opennmt_lite/inference/ctranslate2_generator.py).
"""

import logging
import os
import shutil
import tempfile

logger = logging.getLogger("opennmt_lite")


def _check_decoding(options):
    if options.beam_width != 1 or options.sampling_topk != 1:
        logger.warning("the SavedModel's continue signature decodes greedily: params.beam_width "
                       "(%d) and params.sampling_topk (%d) are not part of it (run.py infer "
                       "applies them)", options.beam_width, options.sampling_topk)


def export_saved_model(model, assets, options, data, output_dir):
    """Writes the SavedModel of a built LanguageModel (weights loaded) to `output_dir`."""
    import keras
    import tensorflow as tf

    from opennmt_lite.data.vocab import BOS_ID, EOS_ID
    from opennmt_lite.export.saved_model import add_sequence_controls, vocabulary_tables

    _check_decoding(options)
    vocabulary = assets.target_vocabulary
    to_id, to_token = vocabulary_tables(vocabulary.path, vocabulary.size)
    controls = data.target_sequence_controls
    start = int(bool(controls.start))
    signature = [tf.TensorSpec([None, None], tf.string, name="tokens"),
                 tf.TensorSpec([None], tf.int32, name="length")]

    def ids_of(tokens, length):
        length = tf.clip_by_value(length, 0, tf.shape(tokens)[1])
        ids = tf.cast(to_id.lookup(tokens), tf.int32)
        ids = tf.where(tf.sequence_mask(length, tf.shape(tokens)[1]), ids, tf.zeros_like(ids))
        return ids, length

    def score(tokens, length):
        ids, length = ids_of(tokens, length)
        full, full_length = add_sequence_controls(ids, length, controls)
        inputs, outputs, steps = full[:, :-1], full[:, 1:], full_length - 1
        inputs = tf.where(tf.sequence_mask(steps, tf.shape(inputs)[1]), inputs, 0)
        logits = tf.cast(model(inputs, steps, training=False), tf.float32)
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(outputs, logits)
        mask = tf.sequence_mask(steps, tf.shape(cross_entropy)[1], tf.float32)
        return {"score": tf.reduce_sum(cross_entropy * mask, axis=1)}

    maximum, minimum = options.maximum_decoding_length, options.minimum_decoding_length

    def continue_prefixes(tokens, length):
        ids, length = ids_of(tokens, length)
        if start:
            ids = tf.concat([tf.fill([tf.shape(ids)[0], 1], BOS_ID), ids], axis=1)
            length = length + 1
        batch = tf.shape(ids)[0]
        buffer = tf.pad(ids, [[0, 0], [0, maximum]])
        rows = tf.range(batch)

        def step(index, buffer, current, done, log_probs):
            width = tf.maximum(tf.reduce_max(current), 1)
            logits = model(buffer[:, :width], current, training=False)
            last = tf.gather_nd(tf.cast(logits, tf.float32),
                                tf.stack([rows, tf.maximum(current - 1, 0)], axis=1))
            scores = tf.nn.log_softmax(last)
            if minimum:
                forbid = tf.one_hot(EOS_ID, tf.shape(scores)[1], on_value=-float("inf"),
                                    off_value=0.0)
                scores += tf.where(index < minimum, forbid, tf.zeros_like(forbid))
            next_ids = tf.cast(tf.argmax(scores, axis=-1), tf.int32)
            picked = tf.gather_nd(scores, tf.stack([rows, next_ids], axis=1))
            log_probs += tf.where(done, 0.0, picked)
            ended = done | tf.equal(next_ids, EOS_ID)
            written = tf.where(ended, buffer[:, 0], next_ids)  # (a no-op write for ended rows)
            positions = tf.where(ended, 0, current)
            buffer = tf.tensor_scatter_nd_update(buffer, tf.stack([rows, positions], axis=1),
                                                 written)
            return index + 1, buffer, current + tf.cast(~ended, tf.int32), ended, log_probs

        _, buffer, current, _, log_probs = tf.while_loop(
            lambda index, buffer, current, done, log_probs: (index < maximum)
            & ~tf.reduce_all(done),
            step, (0, buffer, length, tf.zeros([batch], tf.bool), tf.zeros([batch])))
        pieces = to_token.lookup(tf.cast(buffer[:, start:], tf.int64))
        output_length = current - start
        pieces = tf.where(tf.sequence_mask(output_length, tf.shape(pieces)[1]), pieces, "")
        width = tf.reduce_max(output_length)
        return {"tokens": pieces[:, None, :width], "length": output_length[:, None],
                "log_probs": log_probs[:, None]}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(to_id)
    archive.track(to_token)
    archive.add_endpoint("score", score, input_signature=signature)
    archive.add_endpoint("continue", continue_prefixes, input_signature=signature)
    archive.add_endpoint("serving_default", continue_prefixes, input_signature=signature)
    archive.write_out(output_dir, verbose=False)
    extra = os.path.join(output_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    shutil.copy(vocabulary.path, os.path.join(extra, "vocabulary.txt"))
    if data.tokenization is not None and data.tokenization.type == "sentencepiece":
        shutil.copy(data.tokenization.model, os.path.join(extra, "tokenizer.model"))
    logger.info("exported the language model's SavedModel to %s (signatures: score, continue, "
                "serving_default)", output_dir)
    return output_dir


def generator_spec(model, assets):
    """The `ctranslate2.specs.TransformerDecoderModelSpec` of a built LanguageModel."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ts

    from opennmt_lite.export import ctranslate2 as transformer_export

    hyper, decoder = model.hyperparameters, model.decoder
    if model.gelu_approximation and hyper.ffn_activation == "gelu":
        activation = common_spec.Activation.GELUTanh
    else:
        activation = transformer_export._activation(hyper.ffn_activation)
    if hyper.maximum_relative_position is not None:
        raise transformer_export.ExportError(
            "model.maximum_relative_position: a language model with relative positions cannot "
            "be exported to CTranslate2 here")
    if model.maximum_position is None and hyper.absolute_position_encoding == "none":
        raise transformer_export.ExportError(
            "model.position_encoding: none: CTranslate2's decoder needs position encodings")
    spec = ts.TransformerDecoderModelSpec.from_config(hyper.num_layers, hyper.num_heads,
                                                      pre_norm=hyper.pre_norm,
                                                      activation=activation)
    spec.config.layer_norm_epsilon = float(
        transformer_export._wrapper_norm(decoder.layers[0].self_attention).epsilon)
    unknown = transformer_export._unknown_token(assets)
    spec.config.unk_token = unknown
    spec.config.bos_token, spec.config.eos_token = "<s>", "</s>"
    spec.register_vocabulary(assets.target_vocabulary.tokens + [unknown])
    spec.decoder.embeddings.weight = transformer_export._numpy(model.examples_inputter.embedding)
    if model.maximum_position is not None:  # (position p reads row p + 1)
        table = transformer_export._numpy(decoder.position_encoder.position_embedding)
        spec.decoder.position_encodings.encodings = table[1:]
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers):
        transformer_export._set_attention(layer_spec.self_attention, layer.self_attention, True,
                                          False)
        transformer_export._set_ffn(layer_spec.ffn, layer.ffn)
    if decoder.layer_norm is not None:
        transformer_export._set_layer_norm(spec.decoder.layer_norm, decoder.layer_norm)
    transformer_export._set_linear(spec.decoder.projection, decoder.output_layer)
    return spec


def export_ctranslate2(model, assets, options, data, output_dir, quantization=None, force=False):
    """Writes the CTranslate2 Generator model of a built LanguageModel to `output_dir` (replaced
    whole, as the Transformer's export; `decoding.json` records the options)."""
    import dataclasses
    import json

    from opennmt_lite.export import ctranslate2 as transformer_export

    transformer_export.check_destination(output_dir, force)
    spec = generator_spec(model, assets)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ctranslate2-", dir=parent)
    try:
        written = os.path.join(staging, "model")
        transformer_export._SpecConverter(spec).convert(written, quantization=quantization)
        if data.tokenization is not None and data.tokenization.type == "sentencepiece":
            shutil.copy(data.tokenization.model, os.path.join(written, "target.model"))
        with open(os.path.join(written, "decoding.json"), "w", encoding="utf-8") as stream:
            json.dump({"generator": True, "opennmt_lite_options": dataclasses.asdict(options),
                       "start": bool(data.target_sequence_controls.start),
                       "quantization": quantization or "float32"}, stream, indent=2,
                      sort_keys=True)
            stream.write("\n")
        transformer_export._move_into_place(written, output_dir, os.path.join(staging, "previous"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("exported the language model to CTranslate2 (ctranslate2.Generator) in %s "
                "(weights %s)", output_dir, quantization or "float32")
    return output_dir
