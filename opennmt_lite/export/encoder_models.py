"""The SavedModel of a sequence tagger or classifier (`run.py export` with model.type
sequence_tagger / sequence_classifier), in the style of the Transformer's (export/saved_model.py):
token pieces in, the vocabulary lookups in the graph, no opennmt-lite needed to serve it.

Signatures (Keras 3 `ExportArchive` endpoints):
  encode(tokens: string [batch, time], length: int32 [batch])
      -> {"outputs": float32 [batch, time, num_units], "length": int32 [batch]}
  tag (tagger) = serving_default
      -> {"tags": string [batch, time] ("" past each length), "tags_id": int64 [batch, time],
          "length": int32 [batch]}
  classify (classifier) = serving_default
      -> {"classes": string [batch], "classes_id": int64 [batch]}
serving_default has OpenNMT-tf 2.32's prediction keys for these models (its `serve_function`:
`tags` / `tags_id` / `length`, `classes` / `classes_id`), so its TensorFlow Serving clients work
unchanged. `tokens` are the pieces of the source tokenizer, padded with any string beyond
`length`; unknown pieces map to the out-of-vocabulary id, as in training. The tags or labels
vocabulary is written under assets.extra/ beside the source vocabulary.
"""

import logging
import os
import shutil

import keras
import tensorflow as tf

from opennmt_lite.export.saved_model import vocabulary_tables

logger = logging.getLogger("opennmt_lite")


def export_encoder_model(model, assets, output_dir):
    """Writes the SavedModel of a built SequenceTagger or SequenceClassifier to `output_dir`."""
    source_to_id, _ = vocabulary_tables(assets.source_vocabulary.path, assets.source_vocabulary.size)
    labels = list(assets.target_vocabulary)
    id_to_label = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.range(len(labels), dtype=tf.int64),
                                            tf.constant(labels)), default_value="")
    signature = [tf.TensorSpec([None, None], tf.string, name="tokens"),
                 tf.TensorSpec([None], tf.int32, name="length")]
    tagger = hasattr(model, "predict_tags")

    def source_ids(tokens, length):
        length = tf.clip_by_value(length, 0, tf.shape(tokens)[1])
        ids = tf.cast(source_to_id.lookup(tokens), tf.int32)
        mask = tf.sequence_mask(length, maxlen=tf.shape(tokens)[1])
        return tf.where(mask, ids, tf.zeros_like(ids)), length

    def encode(tokens, length):
        ids, length = source_ids(tokens, length)
        outputs = model.encode(ids, length, training=False)
        return {"outputs": tf.cast(outputs, tf.float32), "length": length}

    def tag(tokens, length):
        ids, length = source_ids(tokens, length)
        tags_id = tf.cast(model.predict_tags(ids, length), tf.int64)
        mask = tf.sequence_mask(length, maxlen=tf.shape(ids)[1])
        tags = tf.where(mask, id_to_label.lookup(tags_id), tf.constant("", tf.string))
        return {"tags": tags, "tags_id": tags_id, "length": length}

    def classify(tokens, length):
        ids, length = source_ids(tokens, length)
        classes_id = tf.cast(model.predict_labels(ids, length), tf.int64)
        return {"classes": id_to_label.lookup(classes_id), "classes_id": classes_id}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(source_to_id)
    archive.track(id_to_label)
    archive.add_endpoint("encode", encode, input_signature=signature)
    name, predict = ("tag", tag) if tagger else ("classify", classify)
    archive.add_endpoint(name, predict, input_signature=signature)
    archive.add_endpoint("serving_default", predict, input_signature=signature)
    archive.write_out(output_dir, verbose=False)
    extra = os.path.join(output_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    shutil.copy(assets.source_vocabulary.path, os.path.join(extra, "source_vocabulary.txt"))
    shutil.copy(assets.target_vocabulary.path,
                os.path.join(extra, "tags_vocabulary.txt" if tagger else "labels_vocabulary.txt"))
    logger.info("exported SavedModel to %s (signatures: encode, %s, serving_default)", output_dir,
                name)
    return output_dir
