"""A TensorFlow SavedModel (`run.py export`) that serves without opennmt-lite installed.

Signatures (Keras 3 `ExportArchive` endpoints, all visible to TF Serving):
  encode(tokens: string [batch, time], length: int32 [batch])
      -> {"outputs": float32 [batch, time, num_units], "length": int32 [batch]}
  translate(tokens: string [batch, time], length: int32 [batch])
      -> {"tokens": string [batch, n_best, time'], "length": int32 [batch, n_best],
          "log_probs": float32 [batch, n_best]}
`tokens` are source pieces (what the source tokenizer produces), padded with any string beyond
`length`. Pieces are mapped to ids in the graph with the vocabulary file saved as an asset
(unknown pieces -> the out-of-vocabulary id, as in training); output ids are mapped back to
pieces (`<unk>` for the OOV id), without `</s>`, padded with "". Beam width, length penalty,
n_best and maximum decoding length are fixed at export from the config's `params`/`infer`.
The directory also holds copies of the vocabularies and SentencePiece models under `assets.extra/`
so a client can tokenize and detokenize.
"""

import logging
import os
import shutil

import keras
import tensorflow as tf

from opennmt_lite.inference.decoding import translate

logger = logging.getLogger("opennmt_lite")


def vocabulary_tables(path, num_lines):
    """(token -> id table with one OOV bucket, id -> token table with default `<unk>`)."""
    to_id = tf.lookup.StaticVocabularyTable(
        tf.lookup.TextFileInitializer(
            path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, vocab_size=num_lines,
        ),
        num_oov_buckets=1,
    )
    to_token = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(
            path, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
            tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, vocab_size=num_lines,
        ),
        default_value="<unk>",
    )
    return to_id, to_token


def export_model(model, assets, options, data, output_dir):
    """Writes the SavedModel of `model` (built, weights loaded) to `output_dir`.

    `options`: the decoding options fixed in the graph (build.decoding_options); `data`: the
    config's `data` section (tokenizer model files copied beside the vocabularies).
    """
    source_to_id, _ = vocabulary_tables(assets.source_vocabulary.path, assets.source_vocabulary.size)
    _, target_to_token = vocabulary_tables(assets.target_vocabulary.path, assets.target_vocabulary.size)
    signature = [
        tf.TensorSpec([None, None], tf.string, name="tokens"),
        tf.TensorSpec([None], tf.int32, name="length"),
    ]

    def source_ids(tokens, length):
        length = tf.clip_by_value(length, 0, tf.shape(tokens)[1])
        ids = tf.cast(source_to_id.lookup(tokens), tf.int32)
        mask = tf.sequence_mask(length, maxlen=tf.shape(tokens)[1])
        return tf.where(mask, ids, tf.zeros_like(ids)), length

    def encode(tokens, length):
        ids, length = source_ids(tokens, length)
        outputs = model.encode(ids, length, training=False)
        return {"outputs": tf.cast(outputs, tf.float32), "length": length}

    def translate_tokens(tokens, length):
        ids, length = source_ids(tokens, length)
        result = translate(model, ids, length, **options)
        pieces = target_to_token.lookup(tf.cast(result.ids, tf.int64))
        mask = tf.sequence_mask(result.lengths, maxlen=tf.shape(result.ids)[2])
        pieces = tf.where(mask, pieces, tf.constant("", tf.string))
        return {"tokens": pieces, "length": result.lengths, "log_probs": result.log_probs}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(source_to_id)
    archive.track(target_to_token)
    archive.add_endpoint("encode", encode, input_signature=signature)
    archive.add_endpoint("translate", translate_tokens, input_signature=signature)
    archive.write_out(output_dir, verbose=False)

    extra = os.path.join(output_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    shutil.copy(assets.source_vocabulary.path, os.path.join(extra, "source_vocabulary.txt"))
    shutil.copy(assets.target_vocabulary.path, os.path.join(extra, "target_vocabulary.txt"))
    for side, tokenization in (("source", data.source_tokenization), ("target", data.target_tokenization)):
        if tokenization and tokenization.type == "sentencepiece":
            shutil.copy(tokenization.model, os.path.join(extra, f"{side}.model"))
    logger.info("exported SavedModel to %s (signatures: encode, translate; %s)", output_dir, options)
    return output_dir
