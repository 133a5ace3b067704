"""The builder: config sections -> the runtime objects every command uses.

Like OpenNMT-tf's runner, this module turns the configuration into vocabularies and tokenizers,
the model, the optimizer and its schedule, the input datasets, the distribution strategy, the
train step, the evaluator and the trainer; the trainer then only trains, and the commands only
wire these objects together. Nothing else reads a whole `Config`.

Order matters when training: thread pools and logical devices must be set before TensorFlow
starts, and the dtype policy before the model is built (see `trainer`).
"""

import collections
import contextlib
import dataclasses
import functools
import logging
import os

import keras
import numpy as np

from opennmt_lite import cpu
from opennmt_lite.config import SEQUENCE_CLASSIFIER, SEQUENCE_TAGGER, ConfigError
from opennmt_lite.data import Controls, EvaluationInput, InferenceInput, TrainingInput, accum_steps
from opennmt_lite.data import fingerprints
from opennmt_lite.data.embeddings import load_pretrained_embeddings
from opennmt_lite.data.labels import LabelVocabulary, load_labeled_corpus
from opennmt_lite.data.tokenizers import make_tokenizer
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.layers import fast_paths
from opennmt_lite.models import Transformer
from opennmt_lite.models.freezing import freeze_layers

logger = logging.getLogger("opennmt_lite")

Assets = collections.namedtuple(
    "Assets", ["source_vocabulary", "target_vocabulary", "source_tokenizer", "target_tokenizer"]
)


def set_precision(policy):
    """Sets the global Keras dtype policy (e.g. `config.train.dtype_policy`); returns it. Also
    chooses the layers' fast paths for the process (reading the CPU and OPENNMT_LITE_BF16_MATMUL
    once), before any model is traced."""
    fast_paths.configure()
    keras.config.set_dtype_policy(policy)
    return policy


def tokenizer(tokenization, name="tokenizer"):
    """The tokenizer of a `Tokenization` section (None: pre-tokenized, split on spaces); `name`
    is its config key, named in the OpenNMT Tokenizer's errors."""
    if tokenization is None:
        return make_tokenizer(None)
    if tokenization.type == "sentencepiece":
        return make_tokenizer({"type": "sentencepiece", "model": tokenization.model})
    if tokenization.type == "opennmt":
        params = {key: list(value) if isinstance(value, tuple) else value
                  for key, value in tokenization.params.items()}  # (frozen lists are tuples)
        return make_tokenizer({"type": "opennmt", "params": params}, name=name)
    return make_tokenizer({"type": tokenization.type})


def label_kind(model_config):
    """What a sequence tagger's or classifier's data.target_vocabulary and train / eval labels
    files hold: "tags" or "labels"; None for the other model types."""
    return {SEQUENCE_TAGGER: "tags", SEQUENCE_CLASSIFIER: "labels"}.get(
        getattr(model_config, "type", None))


def assets(data, model_config=None):
    """Vocabularies and tokenizers named in the `data` section (clear errors when missing). For a
    sequence tagger or classifier (`model_config`), the target vocabulary is its tags or labels
    (a `LabelVocabulary`) and there is no target tokenizer."""
    kind = label_kind(model_config)
    for name in ("source_vocabulary", "target_vocabulary"):
        path = getattr(data, name)
        if not path:
            raise ConfigError(f"data.{name} must be set (run `python run.py build-vocab` to create it)")
        if not os.path.exists(path):
            raise ConfigError(
                f"data.{name}: {path} not found (run `python run.py build-vocab --config ...` "
                f"to create the vocabularies)"
            )
    for side in ("source", "target"):
        tokenization = getattr(data, f"{side}_tokenization")
        if tokenization and tokenization.type == "sentencepiece":
            if not os.path.exists(tokenization.model):
                raise ConfigError(f"data.{side}_tokenization.model: {tokenization.model} not found "
                                  f"(run `python run.py build-vocab`)")
            # the vocabulary must have been built from this very model (see data/fingerprints.py)
            fingerprints.check(getattr(data, f"{side}_vocabulary"), tokenization.model,
                               name=f"data.{side}_vocabulary")
    if kind is not None:
        return Assets(Vocabulary.from_file(data.source_vocabulary),
                      LabelVocabulary.from_file(data.target_vocabulary, kind),
                      tokenizer(data.source_tokenization, "data.source_tokenization"), None)
    return Assets(
        Vocabulary.from_file(data.source_vocabulary),
        Vocabulary.from_file(data.target_vocabulary),
        tokenizer(data.source_tokenization, "data.source_tokenization"),
        tokenizer(data.target_tokenization, "data.target_tokenization"),
    )


def model(model_config, assets):
    """The model of the `model` section, built (variables created): the one place that
    dispatches on model.type (a Transformer, a sequence tagger or classifier, or a LanguageModel
    reading the target side)."""
    if model_config.is_encoder_model:
        return encoder_model(model_config, assets)
    if model_config.is_language_model:
        return language_model(model_config, assets)
    hyperparameters = model_config.hyperparameters
    sizes = (assets.source_vocabulary.num_ids, assets.target_vocabulary.num_ids)
    if hyperparameters.shares_input_embeddings and sizes[0] != sizes[1]:
        raise ConfigError(
            f"model.share_embeddings: {hyperparameters.share_embeddings} needs one vocabulary for "
            f"source and target, but data.source_vocabulary has {sizes[0] - 1} lines and "
            f"data.target_vocabulary {sizes[1] - 1}")
    transformer = Transformer(hyperparameters, *sizes)
    transformer.build()
    return transformer


def encoder_model(model_config, assets):
    """The SequenceTagger or SequenceClassifier of the `model` section, built: the source
    vocabulary's ids in, one output per tag or label (data.target_vocabulary)."""
    from opennmt_lite.models.encoder_models import SequenceClassifier, SequenceTagger

    sizes = (assets.source_vocabulary.num_ids, assets.target_vocabulary.num_ids)
    if model_config.type == SEQUENCE_TAGGER:
        result = SequenceTagger(model_config.hyperparameters, *sizes,
                                crf_decoding=model_config.crf_decoding)
    else:
        result = SequenceClassifier(model_config.hyperparameters, *sizes)
    result.build()
    return result


def language_model(model_config, assets):
    """The LanguageModel of a `model` section of type language_model, built; its vocabulary is
    data.vocabulary (the target vocabulary of the inputs)."""
    from opennmt_lite.models.language_model import LanguageModel

    result = LanguageModel(model_config.hyperparameters, assets.target_vocabulary.num_ids,
                           maximum_position=model_config.maximum_position,
                           gelu_approximation=model_config.gelu_approximation)
    result.build()
    return result


def _pretrained_tables(transformer, data):
    """[(config key, `Embedding` section, WordEmbedder, its Vocabulary side)] of the tables that
    take pretrained vectors. With shared input tables the one table is the source's, as in
    OpenNMT-tf (which never reads data.target_embedding then). None for a tagger or classifier
    (the config refuses their embedding files)."""
    if not hasattr(transformer, "source_inputter"):
        return []
    tables = [("data.source_embedding", data.source_embedding, transformer.source_inputter, "source")]
    if not transformer.hyperparameters.shares_input_embeddings:
        tables.append(("data.target_embedding", data.target_embedding, transformer.target_inputter,
                       "target"))
    return [table for table in tables if table[1] is not None]


def freeze_embeddings(transformer, data):
    """Marks the tables of `trainable: false` embedding sections non-trainable, before the
    optimizer is built (it then keeps no slots for them), as OpenNMT-tf creates them. A table
    that is also the output projection (share_embeddings: target or all) is frozen with it."""
    for _, settings, inputter, _ in _pretrained_tables(transformer, data):
        if not settings.trainable:
            inputter.embedding.trainable = False


def freeze(transformer, params):
    """`params.freeze_layers`: the layers its OpenNMT-tf paths name are frozen (no dropout, no
    update: opennmt_lite/models/freezing.py), before the optimizer is built. A path naming
    nothing is a ConfigError."""
    if params.freeze_layers:
        frozen = freeze_layers(transformer, params.freeze_layers)
        logger.info("params.freeze_layers: %s frozen (%d weights not trained)",
                    ", ".join(layer.name for layer in frozen),
                    sum(1 for v in transformer.weights if not v.trainable))


def load_embeddings(transformer, data, assets, seed):
    """Fills the embedding tables from the pretrained vector files (training from scratch only:
    a restored checkpoint holds the tables, as in OpenNMT-tf where the checkpoint overwrites
    them). Rows of words absent from a file are drawn from N(0, 1), seeded by `seed`."""
    if (data.target_embedding is not None and transformer.hyperparameters.shares_input_embeddings
            and data.target_embedding != data.source_embedding):
        logger.warning("data.target_embedding is not read: with model.share_embeddings: %s the "
                       "source and target share one table, which takes data.source_embedding "
                       "(as in OpenNMT-tf)", transformer.hyperparameters.share_embeddings)
    for number, (key, settings, inputter, side) in enumerate(_pretrained_tables(transformer, data)):
        vocabulary = getattr(assets, f"{side}_vocabulary")
        table, found = load_pretrained_embeddings(
            settings.path, vocabulary, inputter.embedding_size, with_header=settings.with_header,
            case_insensitive=settings.case_insensitive, rng=np.random.default_rng([seed, number]),
            key=key)
        inputter.embedding.assign(table)
        logger.info("%s: %d of the %d rows of the %s embeddings from %s (the others drawn from "
                    "N(0, 1), as in OpenNMT-tf)%s", key, found, len(table), side, settings.path,
                    "" if settings.trainable else "; frozen (trainable: false)")


def learning_rate(params):
    """The learning rate of the `params` section: a float, or OpenNMT-tf's wrapped schedule."""
    from opennmt_lite.training import schedules

    if params.decay_type is None:
        return params.learning_rate
    # decay_params are the schedule's own arguments (checked by the config); the scale of
    # NoamDecay and the rate of InvSqrtDecay default to params.learning_rate, as in OpenNMT-tf.
    if params.decay_type == "NoamDecay":
        schedule = schedules.NoamDecay(**{"scale": params.learning_rate, **params.decay_params})
    else:
        schedule = schedules.InvSqrtDecay(**{"learning_rate": params.learning_rate, **params.decay_params})
    return schedules.ScheduleWrapper(
        schedule,
        start_decay_steps=params.start_decay_steps,
        decay_step_duration=params.decay_step_duration,
        minimum_learning_rate=params.minimum_learning_rate,
    )


def optimizer(params, dtype_policy="float32"):
    """The Keras optimizer of the `params` section; a dynamic LossScaleOptimizer in float16.

    OpenNMT-tf's Transformer recipe uses LazyAdam (TensorFlow Addons), which Keras 3 lacks.
    LazyAdam differs from Adam only for sparse gradients, and OpenNMT-tf accumulated gradients
    densely before applying them, so its LazyAdam always computed exactly Adam: Adam it is, with
    Keras 2's epsilon 1e-7.
    """
    from opennmt_lite.training import adam

    kwargs = dict(params.optimizer_params)  # keys checked by the config
    rate = learning_rate(params)
    if params.optimizer in ("Adam", "LazyAdam"):
        kwargs.setdefault("epsilon", 1e-7)
        result = adam.Adam(learning_rate=rate, **kwargs)  # Keras' Adam, the fused kernel's update
    elif params.optimizer == "AdamW":
        kwargs.setdefault("epsilon", 1e-7)
        result = keras.optimizers.AdamW(learning_rate=rate, **kwargs)
    else:
        result = keras.optimizers.SGD(learning_rate=rate, **kwargs)
    if dtype_policy == "mixed_float16":
        # Initial scale 2**15 and growth every 2000 finite steps, like TensorFlow's default.
        result = keras.optimizers.LossScaleOptimizer(result, initial_scale=2.0**15, dynamic_growth_steps=2000)
    return result


def sequence_controls(data, sides=("source", "target")):
    """{"source_controls": ..., "target_controls": ...}: the `Controls` of each of `sides` (the
    `data` section's resolved `*_sequence_controls`; no section: OpenNMT-tf's defaults), as the
    inputs take them."""
    if data is None:
        return {}
    return {f"{side}_controls": Controls(getattr(data, f"{side}_sequence_controls").start,
                                         getattr(data, f"{side}_sequence_controls").end)
            for side in sides}


def xla_compiles(train, strategy):
    """Whether the train step is compiled with XLA: always on Keras' JAX backend (jax.jit);
    on TensorFlow, train.jit_compile on one device (TrainStep leaves cross-device steps to
    TensorFlow's graphs)."""
    if not fast_paths.TENSORFLOW:
        return True
    return bool(train.jit_compile) and (strategy is None or strategy.num_replicas_in_sync == 1)


def bucket_padding(train, xla):
    """(length_bucket_width, pad_to_bucket_boundary) of the training batches. Under XLA with
    `train.batching: opennmt`, OpenNMT-tf's XLA mode: the width widened to the batch size
    multiple (8 for tokens) and batches padded to the bucket boundary, so that the shapes are
    fixed per bucket; with the sorted scheme, no bucket padding (the `ShapePlan` pads)."""
    if xla and train.batching == "opennmt":
        return max(train.length_bucket_width or 0, train.batch_size_multiple_or_default), True
    if xla:  # (the sorted scheme's shapes are the ShapePlan's)
        return train.length_bucket_width, False
    return train.length_bucket_width, train.pad_to_bucket_boundary


def training_inputs(data, train, assets, strategy, negatives=None, devices=1):
    """One `TrainingInput` per replica this process drives, each reading its own shard: several
    files with `data.train_files_weights` are sampled (data/weighted.py), else concatenated.
    `negatives`: contrastive learning's (`contrastive_negatives`). Under XLA (`xla_compiles`),
    the batches take few fixed shapes (`bucket_padding`; `train.xla_shapes` for the sorted
    scheme). `devices`: of this process without a strategy (Keras' JAX backend), one shard
    each."""
    from opennmt_lite.data import weighted
    from opennmt_lite.data.alignments import read_alignments
    from opennmt_lite.training.distribute import replica_shards

    files = data.train_features_file
    sampled = data.train_files_weights is not None and not isinstance(files, str) and len(files) > 1
    alignments = None
    if data.train_alignments:
        alignments = read_alignments(data.train_alignments, files)
    xla = xla_compiles(train, strategy)
    width, to_boundary = bucket_padding(train, xla)
    inputs = []
    for num_shards, shard_index in replica_shards(strategy, devices):
        if sampled:
            make = functools.partial(weighted.WeightedTrainingInput, files, data.train_labels_file,
                                     data.train_files_weights,
                                     example_weights_files=data.example_weights)
        else:
            make = functools.partial(TrainingInput, files, data.train_labels_file)
        inputs.append(make(
            source_vocabulary=assets.source_vocabulary, target_vocabulary=assets.target_vocabulary,
            source_tokenizer=assets.source_tokenizer, target_tokenizer=assets.target_tokenizer,
            batch_size=train.batch_size, batch_type=train.batch_type,
            batch_size_multiple=train.batch_size_multiple_or_default, scheme=train.batching,
            length_bucket_width=width,
            sample_buffer_size=train.sample_buffer_size,
            maximum_features_length=train.maximum_features_length,
            maximum_labels_length=train.maximum_labels_length,
            shuffle=True, seed=train.seed, repeat=not train.single_pass,
            pad_to_multiple=train.pad_to_multiple, pad_to_bucket_boundary=to_boundary,
            max_shapes=train.xla_shapes if xla else None,
            accum_steps=accum_steps(train.effective_batch_size, train.batch_size, num_shards),
            num_shards=num_shards, shard_index=shard_index, negatives=negatives,
            **sequence_controls(data),
            alignments=alignments,
        ))
        if not sampled:
            weighted.with_example_weights(inputs[-1].corpus, data.example_weights, files)
    return inputs


def encoder_training_inputs(data, train, assets, strategy, kind, devices=1):
    """A sequence tagger's or classifier's `TrainingInput`s (`kind`: "tags" or "labels"), one per
    replica shard, as `training_inputs`: its files read by data/labels.py (every mistake one
    line naming file and line), batched as the Transformer's batches (target = the tags or
    label)."""
    from opennmt_lite.training.distribute import replica_shards

    xla = xla_compiles(train, strategy)
    width, to_boundary = bucket_padding(train, xla)
    inputs = []
    for num_shards, shard_index in replica_shards(strategy, devices):
        corpus = load_labeled_corpus(
            data.train_features_file, data.train_labels_file, kind,
            source_vocabulary=assets.source_vocabulary, labels=assets.target_vocabulary,
            source_tokenizer=assets.source_tokenizer,
            maximum_features_length=train.maximum_features_length,
            num_shards=num_shards, shard_index=shard_index)
        inputs.append(TrainingInput(
            corpus=corpus, batch_size=train.batch_size, batch_type=train.batch_type,
            batch_size_multiple=train.batch_size_multiple_or_default, scheme=train.batching,
            length_bucket_width=width, sample_buffer_size=train.sample_buffer_size,
            shuffle=True, seed=train.seed, repeat=not train.single_pass,
            pad_to_multiple=train.pad_to_multiple, pad_to_bucket_boundary=to_boundary,
            max_shapes=train.xla_shapes if xla else None,
            accum_steps=accum_steps(train.effective_batch_size, train.batch_size, num_shards),
            num_shards=num_shards, shard_index=shard_index))
    return inputs


def guided_alignment(params, train, xla=False):
    """The `GuidedAlignment` of the `params` section (with the training batches' bucket padding,
    `bucket_padding`), or None (check_training has made sure that data.train_alignments comes
    with it)."""
    from opennmt_lite.training.objective import GuidedAlignment

    if not params.guided_alignment_type:
        return None
    width, to_boundary = bucket_padding(train, xla)
    return GuidedAlignment(params.guided_alignment_type, params.guided_alignment_weight,
                           (to_boundary and width) or None)


def contrastive_negatives(params, assets):
    """The negative targets of `params.contrastive_learning` (one word omitted, words cut by
    params.decoding_subword_token), or None without it."""
    from opennmt_lite.data.noise import contrastive_negatives as negatives

    if not params.contrastive_learning:
        return None
    return negatives(assets.target_vocabulary, params.decoding_subword_token,
                     params.decoding_subword_token_is_spacer)


def evaluation_input(data, eval_config, assets):
    return EvaluationInput(
        data.eval_features_file, data.eval_labels_file,
        source_vocabulary=assets.source_vocabulary, target_vocabulary=assets.target_vocabulary,
        source_tokenizer=assets.source_tokenizer, target_tokenizer=assets.target_tokenizer,
        batch_size=eval_config.batch_size, batch_type=eval_config.batch_type,
        length_bucket_width=eval_config.length_bucket_width, **sequence_controls(data),
    )


def scoring_input(features_file, labels_file, score_config, assets, data=None):
    """The pairs `run.py score` scores (every pair, no length filter, as OpenNMT-tf), with the
    `data` section's sequence controls."""
    return EvaluationInput(
        features_file, labels_file,
        source_vocabulary=assets.source_vocabulary, target_vocabulary=assets.target_vocabulary,
        source_tokenizer=assets.source_tokenizer, target_tokenizer=assets.target_tokenizer,
        batch_size=score_config.batch_size, batch_type=score_config.batch_type,
        length_bucket_width=score_config.length_bucket_width, **sequence_controls(data),
    )


def inference_input(features_file, infer_config, assets, data=None):
    """The lines `infer` translates, with the `data` section's source sequence controls."""
    return InferenceInput(
        features_file, source_vocabulary=assets.source_vocabulary,
        source_tokenizer=assets.source_tokenizer, batch_size=infer_config.batch_size,
        batch_type=infer_config.batch_type, length_bucket_width=infer_config.length_bucket_width or None,
        maximum_features_length=infer_config.maximum_features_length,
        **sequence_controls(data, sides=("source",)),
    )


def prefix_input(features_file, infer_config, assets, data):
    """The prefixes a language model continues (`infer`): its vocabulary and tokenizer, `<s>`
    first when data.sequence_controls has `start: true`, never a `</s>` (OpenNMT-tf's
    LanguageModelInputter in inference)."""
    return InferenceInput(
        features_file, source_vocabulary=assets.target_vocabulary,
        source_tokenizer=assets.target_tokenizer, batch_size=infer_config.batch_size,
        batch_type=infer_config.batch_type, length_bucket_width=infer_config.length_bucket_width or None,
        maximum_features_length=infer_config.maximum_features_length,
        source_controls=Controls(data.target_sequence_controls.start, False))


def evaluator(config, transformer, assets, current_step=0):
    """The periodic evaluator of a training run (validation loss, scorers, early stopping);
    its translations are greedy (beam 1), bounded by params.maximum_decoding_length. A sequence
    tagger's or classifier's: loss and OpenNMT-tf's metrics (inference/encoder_evaluation.py)."""
    from opennmt_lite.inference.options import DecodingOptions
    from opennmt_lite.inference.evaluation import Evaluator

    if config.model.is_encoder_model:
        from opennmt_lite.inference.encoder_evaluation import EncoderModelEvaluator

        return EncoderModelEvaluator(
            transformer, assets, config.data.eval_features_file, config.data.eval_labels_file,
            label_kind(config.model), config.eval, os.path.join(config.model_dir, "eval"),
            tagging_scheme=config.data.tagging_scheme, current_step=current_step,
            exporter=(best_model_exporter(config, transformer, assets)
                      if config.eval.export_on_best else None),
            export_directory=os.path.join(config.model_dir, "export"))

    return Evaluator(
        transformer, assets, evaluation_input(config.data, config.eval, assets),
        references_file=config.data.eval_labels_file, eval_config=config.eval,
        directory=os.path.join(config.model_dir, "eval"),
        options=DecodingOptions(beam_width=1,
                                maximum_decoding_length=config.params.maximum_decoding_length,
                                decoding_noise=config.params.decoding_noise,
                                decoding_subword_token=config.params.decoding_subword_token,
                                decoding_subword_token_is_spacer=(
                                    config.params.decoding_subword_token_is_spacer),
                                seed=config.train.seed),
        current_step=current_step,
        exporter=(best_model_exporter(config, transformer, assets)
                  if config.eval.export_on_best else None),
        export_directory=os.path.join(config.model_dir, "export"),
    )


def best_model_exporter(config, transformer, assets):
    """The function(directory, step) writing `transformer` (as it is when called) into an empty
    directory in the format eval.export_format names (OpenNMT-tf's exporter names), for export
    on best. A decoding option the format cannot run is refused now, before training."""
    from opennmt_lite import keras_backend

    export_format = config.eval.export_format
    if export_format == "saved_model" or export_format.startswith("tflite"):
        keras_backend.require_tensorflow(f"eval.export_format {export_format}")
    if config.model.is_encoder_model and export_format == "saved_model":
        from opennmt_lite.export.encoder_models import export_encoder_model

        return lambda directory, step: export_encoder_model(transformer, assets, directory)
    options = decoding_options(config.params, config.infer, seed=config.train.seed)
    if config.model.is_language_model and export_format != "checkpoint":
        from opennmt_lite.export import language_model

        if export_format == "saved_model":
            return lambda directory, step: language_model.export_saved_model(
                transformer, assets, options, config.data, directory)
        if export_format.startswith("ctranslate2"):
            quantization = export_format[len("ctranslate2_"):] or None
            return lambda directory, step: language_model.export_ctranslate2(
                transformer, assets, options, config.data, directory, quantization, force=True)
        raise ConfigError(f"eval.export_format: {export_format}: a language model exports to "
                          "saved_model, ctranslate2* or checkpoint")
    if export_format == "saved_model":
        from opennmt_lite.export.saved_model import export_model

        return lambda directory, step: export_model(
            transformer, assets, options, config.data, directory,
            maximum_source_length=config.infer.maximum_features_length)
    if export_format == "checkpoint":  # the weights, as an opennmt-lite checkpoint
        from opennmt_lite.checkpointing.store import Checkpoint

        return lambda directory, step: Checkpoint(transformer, save_dir=directory).save(step)
    if export_format.startswith("ctranslate2"):
        from opennmt_lite.export import ctranslate2

        quantization = export_format[len("ctranslate2_"):] or None
        return lambda directory, step: ctranslate2.export_model(
            transformer, assets, options, config.data, directory, quantization=quantization,
            force=True)
    from opennmt_lite.export import tflite  # tflite, tflite_float16, tflite_dynamic_range

    # (a decoding option TFLite cannot run: refused now, before training)
    tflite.check_options(options, config.params.tflite_output_size)
    return lambda directory, step: tflite.export_model(
        transformer, assets, options, config.data, directory,
        quantization=tflite.FORMATS[export_format], output_size=config.params.tflite_output_size,
        maximum_source_length=config.infer.maximum_features_length)


def regularization_scales(params):
    """(l1, l2) of `params.regularization`, or None."""
    return None if params.regularization is None else tuple(params.regularization["scale"])


def warn_surprises(train, num_replicas=1):
    """Logs, once, the settings that are legal but do not do what they seem to."""
    per_step = train.batch_size * num_replicas
    if train.effective_batch_size is not None and train.effective_batch_size < per_step:
        logger.warning(
            "train.effective_batch_size (%d) is smaller than train.batch_size (%d%s): each step "
            "uses one batch per replica, %d %s in all, more than asked", train.effective_batch_size,
            train.batch_size, f" x {num_replicas} replicas" if num_replicas > 1 else "", per_step,
            train.batch_type)
    if train.pad_to_bucket_boundary and not train.length_bucket_width:
        logger.warning("train.pad_to_bucket_boundary has no effect without train.length_bucket_width "
                       "(no length buckets; as in OpenNMT-tf, batches are padded to their longest "
                       "sequence)")
    if train.jit_compile and cpu.cpu_features().avx512 and not cpu.gpu_present():
        logger.warning(
            "train.jit_compile on an AVX-512 CPU (%s): XLA's train step ran at 0.45x (mean 10 "
            "pieces) and 0.63x (25 pieces) the plain step's speed on compiled shapes here, before "
            "its compilations (docs/performance.md, 2026-11-26); jit_compile: false is faster",
            cpu.cpu_features().describe())
    if train.dtype_policy == "mixed_bfloat16":
        features = cpu.cpu_features()
        if not features.native_bfloat16 and not cpu.gpu_present():
            logger.warning(
                "train.mixed_precision: bfloat16 on a CPU without bfloat16 instructions (%s): "
                "expect it to be slower than float32 (0.66x measured on an AVX2 CPU); "
                "mixed_precision: false is faster here", features.describe())


def trainer(config, with_evaluation=None):
    """The `Trainer` of a config, with everything it needs built in the right order, restored
    from the latest checkpoint of model_dir (`Trainer.restore`). `with_evaluation` defaults to
    whether the config names evaluation files."""
    from opennmt_lite.training.lock import prepare_model_dir
    from opennmt_lite.training.trainer import Trainer

    config.check_training()
    train = config.train
    if not fast_paths.TENSORFLOW:
        return _jax_trainer(config, with_evaluation)
    from opennmt_lite.training.distribute import make_strategy
    from opennmt_lite.training.step import TrainStep, configure_threads

    sub_batches = train.sub_batches or cpu.default_sub_batches(train.num_devices,
                                                               train.jit_compile)
    # First, before TensorFlow starts: XLA's cache directory (read with XLA's flags, once), thread
    # pools for sub-batches, and the CPU may have to be split into logical devices.
    if train.jit_compile and train.num_devices == 1:
        cpu.use_xla_cache(config.model_dir)
    configure_threads(sub_batches)
    strategy = make_strategy(train.num_devices)
    prepare_model_dir(config.model_dir)
    warn_surprises(train, strategy.num_replicas_in_sync if strategy else 1)
    set_precision(train.dtype_policy)
    keras.utils.set_random_seed(train.seed)
    built_assets = assets(config.data, config.model)
    with strategy.scope() if strategy else contextlib.nullcontext():
        transformer, built_optimizer, moving_average = _trained_objects(config, built_assets)
    if config.model.is_encoder_model:
        inputs = encoder_training_inputs(config.data, train, built_assets, strategy,
                                         label_kind(config.model))
    else:
        inputs = training_inputs(config.data, train, built_assets, strategy,
                                 negatives=contrastive_negatives(config.params, built_assets))
    step = TrainStep(
        transformer, built_optimizer, inputs[0].accum_steps,
        label_smoothing=config.params.label_smoothing,
        average_loss_in_time=config.params.average_loss_in_time,
        jit_compile=train.jit_compile, strategy=strategy, sub_batches=sub_batches,
        max_margin_eta=config.params.max_margin_eta if config.params.contrastive_learning else None,
        example_weights=config.data.example_weights is not None,
        regularization=regularization_scales(config.params),
        clip_gradients=config.params.clip_gradients or None,
        guided_alignment=guided_alignment(config.params, train, xla_compiles(train, strategy)),
        mask_outliers=config.params.mask_loss_outliers,
    )
    result = Trainer(config.model_dir, train, transformer, built_optimizer, inputs, step, strategy,
                     moving_average=moving_average)
    if result.restore() is None:  # (before the evaluator, which starts from the step restored)
        load_embeddings(transformer, config.data, built_assets, train.seed)
    if config.with_evaluation if with_evaluation is None else with_evaluation:
        if result.chief:
            result.evaluator = evaluator(config, transformer, built_assets, result.step)
    return result


def _trained_objects(config, built_assets):
    """(model, optimizer, moving average or None) of a training run, built (in the strategy's
    scope when there is one: the caller's)."""
    from opennmt_lite.training.moving_average import MovingAverage

    train = config.train
    transformer = model(config.model, built_assets)
    freeze_embeddings(transformer, config.data)
    freeze(transformer, config.params)
    built_optimizer = optimizer(config.params, train.dtype_policy)
    built_optimizer.build(transformer.trainable_variables)
    moving_average = (MovingAverage(transformer, train.moving_average_decay)
                      if train.moving_average_decay is not None else None)
    return transformer, built_optimizer, moving_average


def _check_jax_training(config):
    """The training options that Keras' JAX backend does not run yet: one line each
    (ConfigError, exit 2), before anything is built."""
    train = config.train
    if os.environ.get("TF_CONFIG"):
        raise ConfigError("TF_CONFIG (multi-worker training) needs TensorFlow: unset it or run "
                          "with KERAS_BACKEND=tensorflow")
    if config.params.contrastive_learning and train.num_devices > 1:
        raise ConfigError(f"params.contrastive_learning on {train.num_devices} devices "
                          "(train.num_devices) is not supported on the JAX backend: train on 1 "
                          "device or run with KERAS_BACKEND=tensorflow")
    if train.sub_batches and train.sub_batches > 1:
        logger.warning("train.sub_batches=%d is not used on the JAX backend (XLA runs one pass "
                       "over all threads)", train.sub_batches)


def use_jax_cache(model_dir):
    """JAX's persistent compilation cache in <model_dir>/jax_cache: a resumed run, or a later
    one on the same corpus, loads the compiled train step instead of compiling it again."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    directory = os.path.join(model_dir, "jax_cache")
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    logger.info("JAX: compiled programs cached in %s", directory)


def _jax_trainer(config, with_evaluation):
    """`trainer` on Keras' JAX backend: the same objects, the train step of
    training/jax_step.py, the batches in the few shapes of the XLA planner (`xla_compiles`)."""
    from opennmt_lite.training.distribute import jax_data_parallel
    from opennmt_lite.training.jax_step import JaxTrainStep
    from opennmt_lite.training.lock import prepare_model_dir
    from opennmt_lite.training.trainer import Trainer

    train = config.train
    _check_jax_training(config)
    # (JAX logs at INFO every checkpoint's sharding callback and each platform it probes)
    jax_logger = logging.getLogger("jax")
    jax_logger.setLevel(max(jax_logger.getEffectiveLevel(), logging.WARNING))
    mesh = jax_data_parallel(train.num_devices)  # (before any variable exists)
    prepare_model_dir(config.model_dir)
    use_jax_cache(config.model_dir)
    warn_surprises(train, train.num_devices)
    set_precision(train.dtype_policy)
    keras.utils.set_random_seed(train.seed)
    built_assets = assets(config.data, config.model)
    transformer, built_optimizer, moving_average = _trained_objects(config, built_assets)
    if config.model.is_encoder_model:
        inputs = encoder_training_inputs(config.data, train, built_assets, None,
                                         label_kind(config.model), devices=train.num_devices)
    else:
        inputs = training_inputs(config.data, train, built_assets, None,
                                 devices=train.num_devices,
                                 negatives=contrastive_negatives(config.params, built_assets))
    step = JaxTrainStep(
        transformer, built_optimizer, inputs[0].accum_steps,
        label_smoothing=config.params.label_smoothing,
        average_loss_in_time=config.params.average_loss_in_time,
        regularization=regularization_scales(config.params),
        clip_gradients=config.params.clip_gradients or None,
        guided_alignment=guided_alignment(config.params, train, True),
        mask_outliers=config.params.mask_loss_outliers, mesh=mesh,
        max_margin_eta=config.params.max_margin_eta if config.params.contrastive_learning else None,
    )
    result = Trainer(config.model_dir, train, transformer, built_optimizer, inputs, step, None,
                     moving_average=moving_average)
    if result.restore() is None:
        load_embeddings(transformer, config.data, built_assets, train.seed)
    if config.with_evaluation if with_evaluation is None else with_evaluation:
        result.evaluator = evaluator(config, transformer, built_assets, result.step)
    return result


def training_checkpoint(config, save_dir=None):
    """The training checkpoint of a config (model, optimizer and data position; see
    checkpointing/training_checkpoint.py), built in its training precision as `trainer` builds
    them, saving to `save_dir`, not restored: for checkpoint averaging and vocabulary updates."""
    from opennmt_lite.checkpointing.training_checkpoint import training_checkpoint as new_training_checkpoint

    policy = set_precision(config.train.dtype_policy)
    transformer = model(config.model, assets(config.data, config.model))
    freeze_embeddings(transformer, config.data)  # (the optimizer state of the run's checkpoints)
    freeze(transformer, config.params)
    built_optimizer = optimizer(config.params, policy)
    built_optimizer.build(transformer.trainable_variables)
    return new_training_checkpoint(transformer, built_optimizer, save_dir=save_dir)


def decoding_options(params, infer_config, beam_width=None, n_best=None, seed=0):
    """The `DecodingOptions` of the `params` and `infer` sections (each option is the key of the
    same name, `n_best` in `infer`, the others in `params`); `beam_width` / `n_best` (command-line
    values) override them. `seed`: of random sampling (the commands pass train.seed or --seed)."""
    from opennmt_lite.inference.options import DecodingOptions

    overrides = {"beam_width": beam_width, "n_best": n_best}
    values = {"seed": seed}
    for field in dataclasses.fields(DecodingOptions):
        if field.name in values:
            continue
        section = infer_config if field.name == "n_best" else params
        given = overrides.get(field.name)
        values[field.name] = getattr(section, field.name) if given is None else given
    if values["n_best"] > values["beam_width"]:
        raise ConfigError(f"n_best ({values['n_best']}) cannot exceed the beam width "
                          f"({values['beam_width']})")
    return DecodingOptions(**values)


def inference_model(config, checkpoint=None, required=True):
    """(model in float32 with its weights restored, assets, checkpoint path) for the commands
    that use a trained model: infer, export, evaluate, score, inspect. With `required` False and
    no checkpoint anywhere, the weights stay random and the path is None (inspect)."""
    from opennmt_lite.checkpointing import formats

    set_precision("float32")
    built_assets = assets(config.data, config.model)
    transformer = model(config.model, built_assets)
    try:
        path = formats.restore_weights(transformer, config.model_dir, checkpoint)
    except FileNotFoundError:
        if required or checkpoint is not None:
            raise
        path = None
    return transformer, built_assets, path
