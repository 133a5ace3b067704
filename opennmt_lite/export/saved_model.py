"""A TensorFlow SavedModel (`run.py export`) that serves without opennmt-lite installed.

Signatures (Keras 3 `ExportArchive` endpoints, all visible to TF Serving):
  encode(tokens: string [batch, time], length: int32 [batch])
      -> {"outputs": float32 [batch, time, num_units], "length": int32 [batch]}
  translate(tokens: string [batch, time], length: int32 [batch])
      -> {"tokens": string [batch, n_best, time'], "length": int32 [batch, n_best],
          "log_probs": float32 [batch, n_best]}
  serving_default(tokens: string [batch, time], length: int32 [batch])
      -> translate's outputs and "alignment": float32 [batch, n_best, time', time]
OpenNMT-tf 2.32's `serving_default` for a Transformer with a tokenizer outside the graph: its
inputs and outputs, so TensorFlow Serving clients written for OpenNMT-tf work unchanged. The
alignment is OpenNMT-tf's: the first head of the last decoder layer's attention over the source,
for each output token (zeros after the end). (OpenNMT-tf's signature takes raw `text` instead
when its tokenizer runs in the graph; here the text signatures below do that.)
`tokens` are source pieces (what the source tokenizer produces), padded with any string beyond
`length`; the graph adds the source `<s>`/`</s>` of `data.source_sequence_controls` (then the
encoder's `outputs`, `length` and the alignment's source axis count them, as in OpenNMT-tf). Pieces are mapped to ids in the graph with the vocabulary file saved as an asset
(unknown pieces -> the out-of-vocabulary id, as in training); output ids are mapped back to
pieces (`<unk>` for the OOV id), without `</s>`, padded with "". Beam width, length penalty,
n_best and maximum decoding length are fixed at export from the config's `params`/`infer`.
The directory also holds copies of the vocabularies and SentencePiece models under `assets.extra/`
so a client can tokenize and detokenize.

When both sides are tokenized by SentencePiece, two more signatures take raw text, the
SentencePiece models running inside the graph (TensorFlow Text's SentencepieceOp; the op takes the
model as an attribute, so each model's bytes are embedded in the graph):
  encode_text(text: string [batch])
      -> {"outputs": float32 [batch, time, num_units], "length": int32 [batch],
          "tokens": string [batch, time] (the source pieces, padded with "")}
  translate_text(text: string [batch])
      -> {"translations": string [batch, n_best] (detokenized), "log_probs": float32 [batch, n_best]}
A serving process needs `import tensorflow_text` (it registers the op) before loading. Each
sentence gives what `run.py infer` writes for it as one line of a file, with these defined
results for bad input: invalid UTF-8 bytes are replaced by U+FFFD first (as Python's
decode(errors="replace")); a sentence of more than `infer.maximum_features_length` pieces is cut
to its first ones (as infer does); an empty or whitespace-only sentence (no source piece) gets ""
and log-probability 0 for each hypothesis (infer decodes an empty line from fully masked
attention: a guess that depends on the batch's padding); an empty batch gives [0, n_best] outputs.
"""

import hashlib
import logging
import os
import shutil

import keras
import tensorflow as tf

from opennmt_lite.data.vocab import BOS_ID, EOS_ID
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


def add_sequence_controls(ids, length, controls):
    """(ids, length) of a padded batch [batch, time] with the source sequence controls of the
    config (`data.source_sequence_controls`: `<s>` before, `</s>` after each sequence, counted in
    its length), as the training batches have them."""
    if controls is not None and controls.start:
        ids = tf.concat([tf.fill([tf.shape(ids)[0], 1], BOS_ID), ids], axis=1)
        length = length + 1
    if controls is not None and controls.end:
        ids = tf.pad(ids, [[0, 0], [0, 1]])
        at_end = tf.equal(tf.range(tf.shape(ids)[1])[tf.newaxis, :], length[:, tf.newaxis])
        ids = tf.where(at_end, EOS_ID, ids)
        length = length + 1
    return ids, length


def sentencepiece_text_models(data):
    """(source, target) SentencePiece model paths when both sides use SentencePiece, else None."""
    tokenizations = (data.source_tokenization, data.target_tokenization)
    if all(t and t.type == "sentencepiece" for t in tokenizations):
        return tuple(t.model for t in tokenizations)
    return None


def sentencepiece_tokenizer(path):
    """TensorFlow Text's in-graph SentencePiece tokenizer (pieces as strings, no sampling, no
    BOS/EOS: what opennmt_lite.data.tokenizers.SentencePieceTokenizer does)."""
    import tensorflow_text

    with open(path, "rb") as f:
        model = f.read()
    tokenizer = tensorflow_text.SentencepieceTokenizer(model=model, out_type=tf.string)
    # TensorFlow Text creates the model resource with an empty shared_name; in a loaded
    # SavedModel holding two models (source and target), both ops then resolved to one of them
    # (target pieces unknown to the source model came out undetokenized). A name made from the
    # model's bytes keeps them apart, and lets two loaded SavedModels share only identical models.
    tokenizer._model_resource = _SentencePieceModel(model)
    return tokenizer


class _SentencePieceModel(tf.saved_model.experimental.TrackableResource):
    def __init__(self, model):
        super().__init__()
        self._model = model
        self._shared_name = "sentencepiece_" + hashlib.sha256(model).hexdigest()[:24]
        _ = self.resource_handle  # created now

    def _create_resource(self):
        from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

        return gen_sentencepiece_tokenizer.sentencepiece_op(model=self._model,
                                                            shared_name=self._shared_name)


def export_model(model, assets, options, data, output_dir, maximum_source_length=None):
    """Writes the SavedModel of `model` (built, weights loaded) to `output_dir`.

    `options`: the decoding options fixed in the graph (build.decoding_options); `data`: the
    config's `data` section (tokenizer model files copied beside the vocabularies; SentencePiece
    on both sides adds the text signatures); `maximum_source_length`: the text signatures cut
    longer sources to their first pieces (`infer.maximum_features_length`; None: no limit).
    """
    source_to_id, _ = vocabulary_tables(assets.source_vocabulary.path, assets.source_vocabulary.size)
    _, target_to_token = vocabulary_tables(assets.target_vocabulary.path, assets.target_vocabulary.size)
    signature = [
        tf.TensorSpec([None, None], tf.string, name="tokens"),
        tf.TensorSpec([None], tf.int32, name="length"),
    ]

    controls = getattr(data, "source_sequence_controls", None)

    def source_ids(tokens, length):
        length = tf.clip_by_value(length, 0, tf.shape(tokens)[1])
        ids = tf.cast(source_to_id.lookup(tokens), tf.int32)
        mask = tf.sequence_mask(length, maxlen=tf.shape(tokens)[1])
        ids = tf.where(mask, ids, tf.zeros_like(ids))
        return add_sequence_controls(ids, length, controls)

    def encode(tokens, length):
        ids, length = source_ids(tokens, length)
        outputs = model.encode(ids, length, training=False)
        return {"outputs": tf.cast(outputs, tf.float32), "length": length}

    def translated(result):
        pieces = target_to_token.lookup(tf.cast(result.ids, tf.int64))
        mask = tf.sequence_mask(result.lengths, maxlen=tf.shape(result.ids)[2])
        pieces = tf.where(mask, pieces, tf.constant("", tf.string))
        return {"tokens": pieces, "length": result.lengths, "log_probs": result.log_probs}

    def translate_tokens(tokens, length):
        ids, length = source_ids(tokens, length)
        return translated(translate(model, ids, length, options))

    def serving_default(tokens, length):
        # OpenNMT-tf's signature: translate's outputs and the alignment of each output token.
        ids, length = source_ids(tokens, length)
        result = translate(model, ids, length, options, return_attention=True)
        return dict(translated(result), alignment=result.onmt_attention)  # (as OpenNMT-tf gathers it)

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(source_to_id)
    archive.track(target_to_token)
    archive.add_endpoint("encode", encode, input_signature=signature)
    archive.add_endpoint("translate", translate_tokens, input_signature=signature)
    archive.add_endpoint("serving_default", serving_default, input_signature=signature)
    names = ["encode", "translate", "serving_default"]
    text_models = sentencepiece_text_models(data)
    if text_models:
        _add_text_endpoints(archive, text_models, encode, translate_tokens, maximum_source_length)
        names += ["encode_text", "translate_text"]
    else:
        logger.info("no text signatures: translate_text and encode_text need SentencePiece "
                    "tokenization on both sides")
    archive.write_out(output_dir, verbose=False)

    extra = os.path.join(output_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    shutil.copy(assets.source_vocabulary.path, os.path.join(extra, "source_vocabulary.txt"))
    shutil.copy(assets.target_vocabulary.path, os.path.join(extra, "target_vocabulary.txt"))
    for side, tokenization in (("source", data.source_tokenization), ("target", data.target_tokenization)):
        if tokenization and tokenization.type == "sentencepiece":
            shutil.copy(tokenization.model, os.path.join(extra, f"{side}.model"))
    logger.info("exported SavedModel to %s (signatures: %s; %s)", output_dir, ", ".join(names),
                options)
    return output_dir


def _add_text_endpoints(archive, text_models, encode, translate_tokens, maximum_source_length):
    source_tokenizer = sentencepiece_tokenizer(text_models[0])
    target_tokenizer = sentencepiece_tokenizer(text_models[1])
    archive.track(source_tokenizer)
    archive.track(target_tokenizer)
    signature = [tf.TensorSpec([None], tf.string, name="text")]

    def source_pieces(text):
        # Invalid UTF-8 would make the tokenizer fail the whole batch: replace it, as Python's
        # bytes.decode(errors="replace") does.
        text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)
        pieces = source_tokenizer.tokenize(text)
        if maximum_source_length:
            pieces = pieces[:, :maximum_source_length]
        return pieces.to_tensor(""), tf.cast(pieces.row_lengths(), tf.int32)

    def encode_text(text):
        tokens, length = source_pieces(text)
        return dict(encode(tokens, length), tokens=tokens)

    def translate_text(text):
        tokens, length = source_pieces(text)
        result = translate_tokens(tokens, length)
        pieces, lengths = result["tokens"], result["length"]
        batch, n_best = tf.shape(pieces)[0], tf.shape(pieces)[1]
        flat = tf.RaggedTensor.from_tensor(tf.reshape(pieces, [batch * n_best, -1]),
                                           lengths=tf.reshape(lengths, [-1]))
        text = tf.reshape(target_tokenizer.detokenize(flat), [batch, n_best])
        # No source piece: nothing to translate. (The model would still decode something from
        # fully masked attention, and what depends on the batch's padding.)
        empty = tf.equal(length, 0)[:, None]
        return {"translations": tf.where(empty, tf.constant("", tf.string), text),
                "log_probs": tf.where(empty, tf.zeros_like(result["log_probs"]), result["log_probs"])}

    archive.add_endpoint("encode_text", encode_text, input_signature=signature)
    archive.add_endpoint("translate_text", translate_text, input_signature=signature)
