"""Run configuration: OpenNMT-tf's YAML layout and keys, plus a `model` section.

`load_config(paths)` reads one or more YAML files (merged left to right), checks every key and
type, fills the defaults (OpenNMT-tf's fallback values, then its Transformer `auto_config`, then
the user's values, as OpenNMT-tf merges them), expands the model preset, resolves relative data
paths, runs every cross-field check, and returns a frozen `Config` of typed sections: `model`,
`data`, `params`, `train`, `eval`, `infer`, `score`, `serve`.

This module is the only place that reads configuration by key, holds a default or validates a
value. Each section is a frozen dataclass whose fields carry their YAML kind, choices and range
(`key(...)`): the schema used to check the YAML is derived from these declarations, so a key,
its default and its check are written once. (Dataclasses rather than pydantic: no dependency,
and the messages stay ours, naming the file and the key path the way OpenNMT-tf users read them.)
"""

import copy
import dataclasses
import difflib
import logging
import math
import os
import types
import typing

import yaml

from opennmt_lite.errors import UserError
from opennmt_lite.hyperparameters import (
    ARCHITECTURE, FFN_ACTIVATIONS, LANGUAGE_MODEL_PRESETS, POSITION_ENCODINGS, PRESETS,
    SHARE_EMBEDDINGS, SHARE_EMBEDDINGS_AUTO, ModelHyperparameters)

# model.preset's values: the catalog's Transformers and its language model.
ALL_PRESETS = {**PRESETS, **LANGUAGE_MODEL_PRESETS}

logger = logging.getLogger("opennmt_lite")


class ConfigError(UserError, ValueError):
    """A configuration problem, with the file and the key path in its message."""


REQUIRED = object()
LARGEST_INT = 2**31 - 1  # the largest integer a config value or command-line number may be
# The int keys that take any integer (the coverage test of tests/test_hostile_battery.py checks
# that every other one declares its lower bound), and why.
UNBOUNDED_INT_KEYS = {
    "train.sample_buffer_size": "0 or below shuffles the whole data (OpenNMT-tf's -1)",
    "train.prefetch_buffer_size": "accepted without effect (INEFFECTIVE_ONMT_KEYS)",
    "train.num_threads": "accepted without effect (INEFFECTIVE_ONMT_KEYS)",
    "eval.prefetch_buffer_size": "accepted without effect (INEFFECTIVE_ONMT_KEYS)",
    "infer.prefetch_buffer_size": "accepted without effect (INEFFECTIVE_ONMT_KEYS)",
    "score.prefetch_buffer_size": "accepted without effect (INEFFECTIVE_ONMT_KEYS)",
}


@dataclasses.dataclass(frozen=True)
class Key:
    """A leaf of the schema: its YAML kind, default, allowed values and lower bound."""

    kind: str  # "int", "float", "bool", "str", "path", "paths", "dict", "list"
    default: typing.Any = None
    choices: tuple = None
    minimum: float = None
    nullable: bool = True


def key(kind, default=None, choices=None, minimum=None, nullable=True):
    """A section field declared with its schema leaf (see `Key`)."""
    leaf = Key(kind, default, choices, minimum, nullable)
    return dataclasses.field(default=None, metadata={"key": leaf})


def section(cls, optional=False):
    """A nested section field; `optional` ones stay None unless the user writes them."""
    return dataclasses.field(default=None, metadata={"section": cls, "optional": optional})


def _frozen(value):
    if isinstance(value, dict):
        return types.MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


# ----------------------------------------------------------------------------------------------
# The sections. Field defaults live in `key(...)`; auto_config's overrides in AUTO_CONFIG below.


# Tokenizer `type` spellings: OpenNMT-tf's class names and this project's own -> the type used
# everywhere else ("sentencepiece", "space", "opennmt", "character").
TOKENIZER_TYPES = {
    "sentencepiece": "sentencepiece", "SentencePieceTokenizer": "sentencepiece",
    "space": "space", "SpaceTokenizer": "space",
    "opennmt": "opennmt", "OpenNMTTokenizer": "opennmt",
    "character": "character", "CharacterTokenizer": "character",
}
# OpenNMT Tokenizer options that sample (subword regularization): OpenNMT-tf applies them to
# the training data at each epoch; here the training data is tokenized once, so they are
# refused rather than silently ignored (0 = no sampling is accepted).
SAMPLING_OPTIONS = ("bpe_dropout", "sp_nbest_size")


@dataclasses.dataclass(frozen=True)
class Tokenization:
    """A `data.*_tokenization` section: inline, or a path to a YAML (or a JSON string) holding
    it, as in OpenNMT-tf. `type` and `params` are OpenNMT-tf's (`params` of OpenNMTTokenizer
    are passed to pyonmttok); a mapping without `type` whose keys are not ours is OpenNMT-tf's
    shorthand for OpenNMTTokenizer params."""

    type: str = key("str", "sentencepiece", choices=tuple(TOKENIZER_TYPES), nullable=False)
    params: typing.Mapping = key("dict")
    model: str = key("path")
    # Used by `build-vocab` to train the SentencePiece model:
    vocabulary_size: int = key("int", 8000, minimum=1)
    model_type: str = key("str", "unigram", choices=("unigram", "bpe"))
    character_coverage: float = key("float", 1.0)


@dataclasses.dataclass(frozen=True)
class Embedding:
    """A `data.*_embedding` section: OpenNMT-tf's pretrained word vectors (a text file, one
    `word v1 ... vN` per line, after a `count N` header line unless `with_header: false`), read
    into the embedding table when training starts from scratch (opennmt_lite/data/embeddings.py).
    `trainable: false` keeps the table at the file's values."""

    path: str = key("path", nullable=False)
    with_header: bool = key("bool", True, nullable=False)
    case_insensitive: bool = key("bool", True, nullable=False)
    trainable: bool = key("bool", True, nullable=False)


@dataclasses.dataclass(frozen=True)
class SequenceControls:
    """`data.{source_,target_,}sequence_controls`: whether `<s>` (start) and `</s>` (end) are
    added to the sequences. As in OpenNMT-tf, a key left out of a given mapping (or null) is
    false; after loading, the source and target sections always hold the resolved values."""

    start: bool = key("bool", False)
    end: bool = key("bool", False)


# OpenNMT-tf's sequence controls when a side sets none: the source as it is, the target with both
# (what the decoder reads starts with <s>; what it predicts ends with </s>).
DEFAULT_SEQUENCE_CONTROLS = {"source": {"start": False, "end": False},
                             "target": {"start": True, "end": True}}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # A path, or a list of paths (tuples once loaded): several training files, concatenated, or
    # sampled with `train_files_weights` (see opennmt_lite/data/weighted.py).
    train_features_file: str = key("paths")
    train_labels_file: str = key("paths")
    train_files_weights: tuple = key("list")
    example_weights: str = key("paths")  # one float per training line (per training file)
    # Pharaoh `i-j` lines, one per training example (guided alignment; data/alignments.py);
    # a list: one file per training file.
    train_alignments: str = key("paths")
    eval_features_file: str = key("path")
    eval_labels_file: str = key("path")
    source_vocabulary: str = key("path")
    target_vocabulary: str = key("path")
    source_tokenization: Tokenization = section(Tokenization, optional=True)
    target_tokenization: Tokenization = section(Tokenization, optional=True)
    source_embedding: Embedding = section(Embedding, optional=True)
    target_embedding: Embedding = section(Embedding, optional=True)
    export_vocabulary_assets: bool = key("bool")  # accepted, without effect (INEFFECTIVE_ONMT_KEYS)
    source_sequence_controls: SequenceControls = section(SequenceControls, optional=True)
    target_sequence_controls: SequenceControls = section(SequenceControls, optional=True)
    # OpenNMT-tf's older key: read for a side whose own key is unset (see _resolve_controls);
    # a language model's own key (its one sequence).
    sequence_controls: SequenceControls = section(SequenceControls, optional=True)
    # A language model's (model.type: language_model) vocabulary and tokenization: OpenNMT-tf's
    # keys of its one inputter (see _finalize_language_model).
    vocabulary: str = key("path")
    tokenization: Tokenization = section(Tokenization, optional=True)
    # A sequence tagger's tag scheme (OpenNMT-tf's, any case): bioes adds chunk precision,
    # recall and F1 to its evaluation; for any other model, accepted without effect
    # (INEFFECTIVE_ONMT_KEYS).
    tagging_scheme: str = key("str")


# The model types (model.type): OpenNMT-tf's Transformer, its SequenceTagger and
# SequenceClassifier on the self-attention encoder, and its LanguageModel. Dispatched on in
# build.py (`model`, `assets`) and the commands.
MODEL_TYPES = ("transformer", "sequence_tagger", "sequence_classifier", "language_model")
SEQUENCE_TAGGER, SEQUENCE_CLASSIFIER = "sequence_tagger", "sequence_classifier"
ENCODER_MODEL_TYPES = (SEQUENCE_TAGGER, SEQUENCE_CLASSIFIER)
# The model section's keys that are not a ModelHyperparameters field.
NOT_HYPERPARAMETERS = ("preset", "type", "crf_decoding", "maximum_position", "gelu_approximation")


LANGUAGE_MODEL = "language_model"
# The keys only a language model reads.
LANGUAGE_MODEL_KEYS = ("maximum_position", "gelu_approximation")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The model's hyper-parameters as the YAML writes them. Their defaults and choices are the
    carrier's (opennmt_lite.hyperparameters): a key left unset (or null) takes the preset's
    value, else the carrier's default, except the ARCHITECTURE sizes, which must be set."""

    preset: str = key("str", None, choices=tuple(ALL_PRESETS))
    # What the layers make (null: the preset's, else transformer): see MODEL_TYPES.
    type: str = key("str", None, choices=MODEL_TYPES)
    # A sequence tagger's CRF (OpenNMT-tf's SequenceTagger(crf_decoding=...)): the loss is the
    # CRF's log-likelihood and the tags its Viterbi path; without, the per-token argmax.
    crf_decoding: bool = key("bool")
    # A language model's learned position table (OpenNMT-tf's PositionEmbedder(maximum_position));
    # null: the position_encoding (sinusoidal). GPT2Small: 1024.
    maximum_position: int = key("int", minimum=1)
    # A language model's ffn_activation gelu as OpenNMT-tf's `opennmt.layers.gelu` (the tanh
    # approximation; GPT2Small's) rather than the exact one.
    gelu_approximation: bool = key("bool")
    num_layers: int = key("int", minimum=1)
    num_units: int = key("int", minimum=1)
    num_heads: int = key("int", minimum=1)
    ffn_inner_dim: int = key("int", minimum=1)
    dropout: float = key("float")
    attention_dropout: float = key("float")
    ffn_dropout: float = key("float")
    ffn_activation: str = key("str", choices=FFN_ACTIVATIONS)
    maximum_relative_position: int = key("int", minimum=1)
    pre_norm: bool = key("bool")
    position_encoding: str = key("str", choices=POSITION_ENCODINGS)
    share_embeddings: str = key("str", choices=SHARE_EMBEDDINGS + (SHARE_EMBEDDINGS_AUTO,))
    output_layer_bias: bool = key("bool")
    # OpenNMT-tf's WordEmbedder dropout and its layer wrappers' input dropout: 0 in its
    # Transformer, reached only by params.dropout (which sets every rate of the model).
    embedding_dropout: float = key("float")
    layer_input_dropout: float = key("float")

    @property
    def is_encoder_model(self):
        """A sequence tagger or classifier: the encoder alone (models/encoder_models.py)."""
        return self.type in ENCODER_MODEL_TYPES

    @property
    def is_language_model(self):
        return self.type == LANGUAGE_MODEL

    @property
    def hyperparameters(self):
        """The `ModelHyperparameters` of this section (what the builder hands to the model)."""
        return ModelHyperparameters.from_dict(_model_values(dataclasses.asdict(self)))


def _model_values(model):
    """The hyper-parameters among a `model` section's keys (all but NOT_HYPERPARAMETERS)."""
    return {name: value for name, value in model.items() if name not in NOT_HYPERPARAMETERS}


# Model values when neither the user nor the preset sets them: the carrier's defaults, but for
# the sizes (see _finalize_model). maximum_relative_position's is None, which the loop skips.
MODEL_DEFAULTS = {name: value for name, value in ModelHyperparameters().to_dict().items()
                  if name in ModelConfig.__dataclass_fields__ and name not in ARCHITECTURE}
# optimizer_params accepted by each optimizer (Keras' names).
OPTIMIZER_KEYS = {
    "Adam": {"beta_1", "beta_2", "epsilon", "amsgrad", "clipnorm", "global_clipnorm", "clipvalue"},
    "SGD": {"momentum", "nesterov", "clipnorm", "global_clipnorm", "clipvalue"},
}
OPTIMIZER_KEYS["LazyAdam"] = OPTIMIZER_KEYS["Adam"]
OPTIMIZER_KEYS["AdamW"] = OPTIMIZER_KEYS["Adam"] | {"weight_decay"}
# decay_params of each schedule: (required keys, optional keys).
DECAY_KEYS = {"NoamDecay": ({"model_dim", "warmup_steps"}, {"scale"}),
              "InvSqrtDecay": ({"warmup_steps"}, {"learning_rate", "initial_learning_rate"})}


SCHEDULED_SAMPLING_TYPES = ("constant", "linear", "exponential", "inverse_sigmoid")


@dataclasses.dataclass(frozen=True)
class ParamsConfig:
    optimizer: str = key("str", "Adam", choices=tuple(OPTIMIZER_KEYS), nullable=False)
    optimizer_params: typing.Mapping = key("dict", {}, nullable=False)
    learning_rate: float = key("float", 1.0, minimum=0)
    decay_type: str = key("str", None, choices=tuple(DECAY_KEYS))
    decay_params: typing.Mapping = key("dict", {}, nullable=False)
    decay_step_duration: int = key("int", 1, minimum=1)
    start_decay_steps: int = key("int", 0, minimum=0)
    minimum_learning_rate: float = key("float", 0.0, minimum=0)
    label_smoothing: float = key("float", 0.0)
    average_loss_in_time: bool = key("bool")
    beam_width: int = key("int", 1, minimum=1, nullable=False)
    length_penalty: float = key("float", 0.0, nullable=False)
    # Beam search's β (Wu et al., 2016): log(min(attention, 1)) is at most 0, so a negative β would
    # reward hypotheses that ignore the source; refused, like the other weights of this kind.
    coverage_penalty: float = key("float", 0.0, minimum=0, nullable=False)
    # 1: no sampling (the best tokens); 0: sample from the whole distribution; K: from the K best.
    sampling_topk: int = key("int", 1, minimum=0, nullable=False)
    sampling_temperature: float = key("float", 1.0, nullable=False)
    replace_unknown_target: bool = key("bool", False, nullable=False)
    maximum_decoding_length: int = key("int", 250, minimum=1, nullable=False)
    minimum_decoding_length: int = key("int", 0, minimum=0, nullable=False)
    num_hypotheses: int = key("int", minimum=1)
    # The length of a TFLite export's output (run.py export --format tflite); also bounds its steps.
    tflite_output_size: int = key("int", 250, minimum=1, nullable=False)
    # Word noise on the translations (back-translation): a list of {dropout: p},
    # {replacement: [p, filler]}, {permutation: k}, over words cut by the subword token below
    # (opennmt_lite.data.noise; checked by _finalize_decoding_noise). The subword token is also
    # what contrastive_learning's omitted words are cut by.
    decoding_noise: tuple = key("list")
    decoding_subword_token: str = key("str", "￭", nullable=False)
    decoding_subword_token_is_spacer: bool = key("bool")
    # Yang et al. (2019) as OpenNMT-tf trains it: the training loss becomes the max-margin loss
    # between each batch's targets and their copies with one word omitted (training/step.py).
    contrastive_learning: bool = key("bool", False, nullable=False)
    max_margin_eta: float = key("float", 0.1, minimum=0, nullable=False)
    # Global-norm clipping of each update's gradient (0: none); see training/step.py.
    clip_gradients: float = key("float", None, minimum=0)
    # OpenNMT-tf's {type: l1 | l2 | l1_l2, scale: s, or [l1, l2] for l1_l2}; normalised to
    # {"type": ..., "scale": (l1, l2)} by _finalize_regularization. See training/regularization.py.
    regularization: typing.Mapping = key("dict")
    # Guided alignment (OpenNMT-tf's): the first head of the last decoder layer's attention is
    # pulled towards data.train_alignments, with this cost and weight.
    guided_alignment_type: str = key("str", None, choices=("ce", "mse"))
    guided_alignment_weight: float = key("float", 1.0, minimum=0, nullable=False)
    # OpenNMT-tf's override of every dropout rate of the model (model.dropout, attention_dropout,
    # ffn_dropout, embedding_dropout, layer_input_dropout are set to it by _finalize).
    dropout: float = key("float")
    # OpenNMT-tf's layer paths (`encoder/layers/0`, `examples_inputter/features_inputter`...):
    # those layers are not trained and drop nothing (opennmt_lite/models/freezing.py).
    freeze_layers: tuple = key("list")
    # OpenNMT-tf's: examples whose mean token loss is an outlier of their batch (above
    # Q3 + 1.5 IQR) are left out of the training loss (training/losses.py, `outlier_mask`).
    mask_loss_outliers: bool = key("bool", False, nullable=False)
    # Scheduled sampling: checked here, refused to train (Config.check_training), as OpenNMT-tf's
    # Transformer decoder refuses it; k alone does nothing (INEFFECTIVE_ONMT_KEYS).
    scheduled_sampling_type: str = key("str", None, choices=SCHEDULED_SAMPLING_TYPES)
    scheduled_sampling_read_probability: float = key("float")
    scheduled_sampling_k: float = key("float")


MIXED_PRECISION_POLICIES = {"false": "float32", "true": "mixed_float16", "float16": "mixed_float16",
                            "bfloat16": "mixed_bfloat16"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    batch_type: str = key("str", "examples", choices=("examples", "tokens"))
    batch_size: int = key("int", minimum=1)  # required to train (check_training)
    effective_batch_size: int = key("int", minimum=1)
    batch_size_multiple: int = key("int", minimum=1)
    length_bucket_width: int = key("int", 2, minimum=0)
    batching: str = key("str", "sorted", choices=("sorted", "opennmt"))
    pad_to_multiple: int = key("int", 1, minimum=1)
    # OpenNMT-tf's: both sides of a batch padded to the length bucket's upper bound.
    pad_to_bucket_boundary: bool = key("bool", False, nullable=False)
    maximum_features_length: int = key("int", minimum=1)
    maximum_labels_length: int = key("int", minimum=1)
    sample_buffer_size: int = key("int", 500000)
    max_step: int = key("int", minimum=1)
    save_checkpoints_steps: int = key("int", 5000, minimum=1)
    keep_checkpoint_max: int = key("int", 8, minimum=1)
    # At the end of training, the newest N checkpoints averaged into <model_dir>/avg (0: none).
    average_last_checkpoints: int = key("int", 0, minimum=0)
    save_summary_steps: int = key("int", 100, minimum=1)
    mixed_precision: str = key("str", "false", choices=tuple(MIXED_PRECISION_POLICIES))
    jit_compile: bool = key("bool", False)
    # With jit_compile and the sorted scheme: the most (source length, target length) batch
    # shapes, hence XLA compilations (data/batching.py, ShapePlan).
    xla_shapes: int = key("int", 16, minimum=1)
    # None: chosen for the CPU at start-up (opennmt_lite.cpu.default_sub_batches).
    sub_batches: int = key("int", None, minimum=1)
    # Seeds Python, NumPy and Keras (keras.utils.set_random_seed takes 0 to 2**32 - 1), the data
    # order, sampling and SentencePiece training.
    seed: int = key("int", 1234, minimum=0)
    num_devices: int = key("int", 1, minimum=1)
    single_pass: bool = key("bool", False)
    # Accepted, without effect (INEFFECTIVE_ONMT_KEYS):
    prefetch_buffer_size: int = key("int")
    num_threads: int = key("int")
    batch_autotune_mode: bool = key("bool")
    # The exponential moving average of the weights (training/moving_average.py); null: none.
    moving_average_decay: float = key("float", None, minimum=0)

    @property
    def dtype_policy(self):
        """The Keras dtype policy name of `mixed_precision`."""
        return MIXED_PRECISION_POLICIES[self.mixed_precision]

    @property
    def batch_size_multiple_or_default(self):
        """batch_size_multiple, else 8 for token batches in half precision or under XLA (Tensor
        Core shapes, as OpenNMT-tf does with mixed precision or jit_compile), else 1."""
        if self.batch_size_multiple:
            return self.batch_size_multiple
        half = self.dtype_policy != "float32"
        return 8 if self.batch_type == "tokens" and (half or self.jit_compile) else 1


LOWER_IS_BETTER = ("loss", "perplexity")
SCORERS = ("bleu", "chrf")
# eval.export_format: OpenNMT-tf's exporter names.
EXPORT_FORMATS = ("saved_model", "checkpoint", "ctranslate2", "ctranslate2_int8",
                  "ctranslate2_int16", "ctranslate2_float16", "ctranslate2_int8_float16",
                  "tflite", "tflite_float16", "tflite_dynamic_range")


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    metric: str = key("str", "loss")
    min_improvement: float = key("float", 0.0, minimum=0)
    steps: int = key("int", minimum=1)

    @property
    def higher_is_better(self):
        return self.metric not in LOWER_IS_BETTER


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    steps: int = key("int", 5000, minimum=0)
    batch_size: int = key("int", 32, minimum=1)
    batch_type: str = key("str", "examples", choices=("examples", "tokens"))
    length_bucket_width: int = key("int", minimum=0)
    scorers: tuple = key("list", [], nullable=False)
    # OpenNMT-tf's older name of `scorers` (moved there by _finalize_scorers).
    external_evaluators: tuple = key("list")
    early_stopping: EarlyStopping = section(EarlyStopping, optional=True)
    save_eval_predictions: bool = key("bool", False)
    prefetch_buffer_size: int = key("int")  # accepted, without effect (INEFFECTIVE_ONMT_KEYS)
    # Export model_dir/export/<step> when this metric is the best so far (inference/evaluation.py).
    export_on_best: str = key("str")
    export_format: str = key("str", "saved_model", choices=EXPORT_FORMATS, nullable=False)
    max_exports_to_keep: int = key("int", 5, minimum=1)  # null: keep every export


@dataclasses.dataclass(frozen=True)
class InferConfig:
    batch_size: int = key("int", 16, minimum=1)
    batch_type: str = key("str", "examples", choices=("examples", "tokens"))
    length_bucket_width: int = key("int", minimum=0)
    n_best: int = key("int", 1, minimum=1, nullable=False)
    with_scores: bool = key("bool", False)
    with_alignments: str = key("str", None, choices=("hard", "soft"))
    # Not an OpenNMT-tf key (it translates every line whole): a longer line is translated from its
    # first maximum_features_length tokens, with a warning naming it, rather than exhausting the
    # memory (self-attention grows with the square of the length). null: no limit.
    maximum_features_length: int = key("int", 1024, minimum=1)
    prefetch_buffer_size: int = key("int")  # accepted, without effect (INEFFECTIVE_ONMT_KEYS)


@dataclasses.dataclass(frozen=True)
class ScoreConfig:
    batch_size: int = key("int", 64, minimum=1)
    batch_type: str = key("str", "examples", choices=("examples", "tokens"))
    length_bucket_width: int = key("int", minimum=0)
    # OpenNMT-tf's score options (see opennmt_lite.inference.score): each token's cross-entropy,
    # the decoder's alignment of each token.
    with_token_level: bool = key("bool", False)
    with_alignments: str = key("str", None, choices=("hard", "soft"))
    prefetch_buffer_size: int = key("int")  # accepted, without effect (INEFFECTIVE_ONMT_KEYS)


SERVE_BACKENDS = ("checkpoint", "ctranslate2", "saved_model")
# The keys of one `serve.models` entry (checked by _finalize_serve).
SERVE_MODEL_KEYS = ("id", "config", "backend", "path")


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """`run.py serve` (opennmt_lite/serving/): where it listens, how it batches, its bounds, and
    the models it serves (`models`: a list of {id, config, backend, path}; none: this config's
    newest checkpoint as model 0)."""

    host: str = key("str", "127.0.0.1", nullable=False)
    port: int = key("int", 5000, minimum=0, nullable=False)
    url_root: str = key("str", "/translator", nullable=False)
    # A batch: at most this many sentences and source tokens (rows x longest), gathered for at
    # most batch_timeout_ms after its first sentence arrived (0: it leaves as soon as a worker is
    # free; sentences still gather while every worker is busy).
    max_batch_size: int = key("int", 32, minimum=1, nullable=False)
    max_batch_tokens: int = key("int", None, minimum=1)
    batch_timeout_ms: float = key("float", 0.0, minimum=0, nullable=False)
    # Batches translated at once (null: every core for CTranslate2, 1 for TensorFlow).
    batch_workers: int = key("int", None, minimum=1)
    # Sentences waiting for a batch, per model: past it, 503 with Retry-After.
    queue_limit: int = key("int", 1024, minimum=1, nullable=False)
    max_request_sentences: int = key("int", 256, minimum=1, nullable=False)
    max_sentence_characters: int = key("int", 10000, minimum=1, nullable=False)
    max_request_bytes: int = key("int", 1048576, minimum=1, nullable=False)
    request_timeout: float = key("float", 60.0, minimum=0.001, nullable=False)
    max_beam_size: int = key("int", 16, minimum=1, nullable=False)
    # Open connections (and requests under way): past it uvicorn answers 503 itself.
    max_connections: int = key("int", 2048, minimum=1, nullable=False)
    log_every: float = key("float", 60.0, minimum=0, nullable=False)  # seconds; 0: never
    models: tuple = key("list")


@dataclasses.dataclass(frozen=True)
class Config:
    model_dir: str = key("path", REQUIRED, nullable=False)
    auto_config: bool = key("bool", True, nullable=False)
    data: DataConfig = section(DataConfig)
    model: ModelConfig = section(ModelConfig)
    params: ParamsConfig = section(ParamsConfig)
    train: TrainConfig = section(TrainConfig)
    eval: EvalConfig = section(EvalConfig)
    infer: InferConfig = section(InferConfig)
    score: ScoreConfig = section(ScoreConfig)
    serve: ServeConfig = section(ServeConfig)

    def replace(self, **sections):
        """A copy with some sections (or fields) replaced: `config.replace(params=...)`."""
        return dataclasses.replace(self, **sections)

    def check_training(self):
        """What `train` needs beyond a valid config (other commands do without it)."""
        for name in ("train_features_file", "train_labels_file"):
            if not getattr(self.data, name):
                raise ConfigError(f"data.{name} must be set to train")
        if not self.train.batch_size:
            raise ConfigError("train.batch_size must be set to train")
        # OpenNMT-tf computes a sampling probability whenever either key is set (0 for a constant
        # read probability of 1) and its Transformer decoder then refuses to train.
        for name in ("scheduled_sampling_type", "scheduled_sampling_read_probability"):
            if getattr(self.params, name) is not None:
                raise ConfigError(
                    f"params.{name}: scheduled sampling is not supported by the Transformer's "
                    f"decoder (OpenNMT-tf 2.32 refuses it too: \"Scheduled sampling is not "
                    f"supported by this decoder\"); remove params.{name}")
        if self.train.jit_compile and (self.train.sub_batches or 1) > 1:
            raise ConfigError(
                f"train.sub_batches={self.train.sub_batches} with train.jit_compile: XLA compiles "
                f"fixed batch shapes, which sub-batches (each trimmed to its own longest "
                f"sentences) do not have; remove train.sub_batches or train.jit_compile")
        # OpenNMT-tf trains without guided alignment, silently, when only one of the two is set.
        if self.data.train_alignments and not self.params.guided_alignment_type:
            raise ConfigError("data.train_alignments is set but params.guided_alignment_type is "
                              "not: set it to ce or mse to train with guided alignment, or remove "
                              "data.train_alignments")
        if self.params.guided_alignment_type and not self.data.train_alignments:
            raise ConfigError(f"params.guided_alignment_type is {self.params.guided_alignment_type}"
                              f" but data.train_alignments is not set: guided alignment needs the "
                              f"alignment file (Pharaoh `i-j` lines, one per training example)")

    @property
    def with_evaluation(self):
        return bool(self.data.eval_features_file and self.data.eval_labels_file)


def _schema(cls):
    """{name: Key or nested schema} derived from a section's declaration."""
    result = {}
    for f in dataclasses.fields(cls):
        result[f.name] = _schema(f.metadata["section"]) if "section" in f.metadata else f.metadata["key"]
    return result


SCHEMA = _schema(Config)

# OpenNMT-tf's `Transformer.auto_config()` (applied unless `auto_config: false`).
# `num_units` of decay_params.model_dim is filled from the model section.
AUTO_CONFIG = {
    "params": {
        "optimizer": "LazyAdam",
        "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998},
        "learning_rate": 2.0,
        "decay_type": "NoamDecay",
        "decay_params": {"warmup_steps": 8000},
        "label_smoothing": 0.1,
        "average_loss_in_time": True,
        "beam_width": 4,
    },
    "train": {
        "sample_buffer_size": -1,
        "max_step": 500000,
        "effective_batch_size": 25000,
        "batch_size": 3072,
        "batch_type": "tokens",
        "maximum_features_length": 100,
        "maximum_labels_length": 100,
        "keep_checkpoint_max": 8,
        "average_last_checkpoints": 8,
    },
    "eval": {"length_bucket_width": 5},
    "score": {"length_bucket_width": 5},
    "infer": {"batch_size": 32, "length_bucket_width": 5},
}
# The catalog models with an auto_config of their own (opennmt/models/catalog.py), merged over
# AUTO_CONFIG when `model.preset` names them. Not taken from OpenNMT-tf: its `train.batch_size: 0`
# (search for the largest batch that fits the GPU; here the Transformer's 3072 tokens stay, and
# effective_batch_size sets the accumulation) and its `save_checkpoint_steps: 1000` (a misspelt
# key that OpenNMT-tf itself ignores).
PRESET_AUTO_CONFIG = {
    "ScalingNmtEnDe": {
        "data": {"source_sequence_controls": {"end": True}},
        "params": {
            "optimizer": "Adam",
            "optimizer_params": {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-8},
            "learning_rate": 0.001,
            "decay_type": "InvSqrtDecay",
            "decay_params": {"warmup_steps": 4000, "initial_learning_rate": 1e-7},
        },
        "train": {
            "effective_batch_size": 458752,
            "maximum_features_length": 175,
            "maximum_labels_length": 175,
            "keep_checkpoint_max": 10,
            "average_last_checkpoints": 10,
        },
    },
}
PRESET_AUTO_CONFIG["ScalingNmtEnFr"] = {
    "data": PRESET_AUTO_CONFIG["ScalingNmtEnDe"]["data"],
    "params": dict(PRESET_AUTO_CONFIG["ScalingNmtEnDe"]["params"], learning_rate=0.0007),
    "train": dict(PRESET_AUTO_CONFIG["ScalingNmtEnDe"]["train"], effective_batch_size=655360),
}


# OpenNMT-tf's LanguageModel.auto_config(): one prefix length per inference batch (opennmt-lite
# accepts mixed lengths; the width only groups them).
LANGUAGE_MODEL_AUTO_CONFIG = {"infer": {"length_bucket_width": 1}}


def model_type(model):
    """The type of a (user's, unchecked) model section: its `type`, else its preset's, else
    transformer."""
    model = model if isinstance(model, dict) else {}
    preset = ALL_PRESETS.get(model.get("preset")) or {}
    return model.get("type") or preset.get("type") or "transformer"


def auto_config(preset=None, type="transformer"):
    """OpenNMT-tf's auto_config of a model: the Transformer's, and its preset's own if it has one;
    a language model's own; none for a sequence tagger or classifier (OpenNMT-tf's
    `Model.auto_config()` is empty)."""
    if type in ENCODER_MODEL_TYPES:
        return {}
    if type == LANGUAGE_MODEL:
        return copy.deepcopy(LANGUAGE_MODEL_AUTO_CONFIG)
    return merge(AUTO_CONFIG, PRESET_AUTO_CONFIG.get(preset, {}))

# Keys replaced as a whole rather than merged key by key (as OpenNMT-tf does).
REPLACED_WHOLE = ("optimizer_params", "decay_params")
PATH_KEYS = (
    "train_features_file", "train_labels_file", "eval_features_file", "eval_labels_file",
    "source_vocabulary", "target_vocabulary", "example_weights", "train_alignments", "vocabulary",
)


def merge(base, update):
    """Recursive dict merge, `update` winning; REPLACED_WHOLE keys are replaced."""
    result = copy.deepcopy(base)
    for name, value in update.items():
        if isinstance(value, dict) and isinstance(result.get(name), dict) and name not in REPLACED_WHOLE:
            result[name] = merge(result[name], value)
        else:
            result[name] = copy.deepcopy(value)
    return result


def _check(value, leaf, where):
    """Validates one leaf value; returns it normalised."""
    if where.endswith("model.position_encoding") and (value is None or value is False):
        return "none"  # (OpenNMT-tf's `position_encoder_class: null`: no position encoding)
    if value is None:
        if leaf.nullable:
            return None
        raise ConfigError(f"{where}: must be set")
    kind = leaf.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if abs(value) > LARGEST_INT:  # (sizes, steps and lengths reach TensorFlow as int32)
            raise ConfigError(f"{where} must be at most {LARGEST_INT}, got {value}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float
            raise ConfigError(f"{where}: {str(value)[:20]}... is too large a number") from None
        if not math.isfinite(value):  # (.nan, .inf: every float key is a finite quantity)
            raise ConfigError(f"{where}: expected a finite number, got {value}")
    elif kind == "paths":
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a path or a non-empty list of paths, got {value!r}")
    elif kind in ("str", "path"):
        if kind == "str" and where.endswith("mixed_precision") and isinstance(value, bool):
            value = str(value).lower()
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
    elif kind == "dict":
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    elif kind == "list":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
    if leaf.choices is not None and value not in leaf.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, leaf.choices))}; got {value!r}")
    if leaf.minimum is not None and value < leaf.minimum:
        # (where = "file: section.key": the message reads "file: section.key must be ...")
        raise ConfigError(f"{where} must be at least {leaf.minimum}, got {value}")
    return value


def leaf(dotted):
    """The schema leaf (`Key`) of a dotted key path such as "train.seed"."""
    node = SCHEMA
    for name in dotted.split("."):
        node = node[name]
    return node


def integer_option(minimum=None, key_path=None):
    """An argparse type: a command-line integer checked here, as config values are, against the
    leaf of the key it sets (`key_path`, e.g. "train.seed" for --seed) or at least `minimum`; at
    most LARGEST_INT either way (none reaches a library that raises, none is silently replaced).
    argparse prints a refusal as one line naming the option."""
    import argparse

    checked = leaf(key_path) if key_path else Key("int", minimum=minimum, nullable=False)

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        try:
            return _check(value, dataclasses.replace(checked, nullable=False), "")
        except ConfigError as error:  # ("<where> must be at least ...": the option is named by argparse)
            raise argparse.ArgumentTypeError(str(error).strip()) from None

    parse.__name__ = "integer"
    parse.minimum, parse.maximum = checked.minimum, LARGEST_INT  # (read by the hostile battery)
    return parse


# OpenNMT-tf 2.32 keys opennmt-lite does not support: refused with the reason (an unknown key
# gets "unknown key", with a close match); listed in the README.
UNSUPPORTED_ONMT_KEYS = {
}


# OpenNMT-tf 2.32 keys that only tune its own tf.data input pipeline or SavedModel layout:
# accepted, each with one warning line at load (`ineffective_keys`) saying why it does nothing.
PREFETCH = "it sizes OpenNMT-tf's tf.data prefetch buffer; "
INEFFECTIVE_ONMT_KEYS = {
    "data.export_vocabulary_assets": (
        "the SavedModel export always holds its vocabularies as asset files (OpenNMT-tf's default, "
        "true) and copies them under assets.extra/; its signatures are the same either way"),
    "train.prefetch_buffer_size": PREFETCH + "training batches are prefetched automatically",
    "train.num_threads": ("it sets OpenNMT-tf's per-example tf.data threads; here the data is "
                          "tokenized once, in batches, before training"),
    "train.batch_autotune_mode": (
        "it is OpenNMT-tf's internal mode for searching the largest batch size that fits in "
        "memory (batch_size: 0), which opennmt-lite does not do"),
    "eval.prefetch_buffer_size": PREFETCH + "eval batches are prepared as they are used",
    "infer.prefetch_buffer_size": PREFETCH + "infer batches are prepared as they are used",
    "score.prefetch_buffer_size": PREFETCH + "score batches are prepared as they are used",
    "data.tagging_scheme": ("OpenNMT-tf reads it only in its sequence taggers (BIOES tags for "
                            "their evaluation), and this model is not one (model.type)"),
    "params.scheduled_sampling_k": (
        "it is the constant of a scheduled sampling schedule, which needs "
        "params.scheduled_sampling_type, refused for the Transformer as in OpenNMT-tf"),
}


def ineffective_keys(config):
    """[(key, reason)] of the INEFFECTIVE_ONMT_KEYS that `config` sets (to a non-null value)."""
    found = []
    for name, reason in INEFFECTIVE_ONMT_KEYS.items():
        if name == "data.tagging_scheme" and config.model.type == SEQUENCE_TAGGER:
            continue
        section, field = name.split(".")
        if getattr(getattr(config, section), field) is not None:
            found.append((name, reason))
    return found


def _validate(user, schema, prefix, source):
    """Checks `user` against `schema`: unknown keys and wrong types raise ConfigError."""
    if not isinstance(user, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'the file'} must be a mapping, got {user!r}")
    for name, value in user.items():
        where = f"{source}: {prefix}{name}"
        if name not in schema:
            if f"{prefix}{name}" in UNSUPPORTED_ONMT_KEYS:
                raise ConfigError(f"{where}: an OpenNMT-tf key that opennmt-lite does not support "
                                  f"({UNSUPPORTED_ONMT_KEYS[prefix + name]})")
            close = difflib.get_close_matches(str(name), list(schema), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"{where}: unknown key{hint}")
        spec = schema[name]
        if isinstance(spec, dict):
            if value is None:
                continue
            if prefix == "data." and name in TOKENIZATION_KEYS + ("tokenization",):
                value = user[name] = _tokenization_shorthand(value)
                if isinstance(value, str):  # a YAML file or a JSON string: read in _finalize
                    continue
            _validate(value, spec, f"{prefix}{name}.", source)
        else:
            user[name] = _check(value, spec, where)


def _defaults(cls):
    """The default values of a section (and of its non-optional sub-sections), as a dict."""
    result = {}
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            result[f.name] = None if f.metadata["optional"] else _defaults(f.metadata["section"])
        elif f.metadata["key"].default is not REQUIRED:
            result[f.name] = copy.deepcopy(f.metadata["key"].default)
    return result


def _typed(cls, values):
    """The frozen section `cls` from a complete dict (dicts and lists frozen too)."""
    fields = {}
    for f in dataclasses.fields(cls):
        value = values.get(f.name)
        if "section" in f.metadata:
            fields[f.name] = None if value is None else _typed(f.metadata["section"], value)
        else:
            fields[f.name] = _frozen(value)
    return cls(**fields)


def _resolve_path(path, model_dir):
    """Like OpenNMT-tf: a relative path that does not exist as given but exists under model_dir
    is taken from model_dir."""
    if path is None or os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(model_dir, path)
    return candidate if os.path.exists(candidate) else path


def _finalize_model(model, source):
    preset = model.get("preset")
    for name, value in (ALL_PRESETS[preset] if preset else {}).items():
        if model.get(name) is None:
            model[name] = value
    missing = [k for k in ARCHITECTURE if model.get(k) is None]
    if missing:
        raise ConfigError(
            f"{source}: model.{missing[0]} is not set (set it, or choose a model.preset among "
            f"{', '.join(ALL_PRESETS)})"
        )
    for name, value in MODEL_DEFAULTS.items():
        if model.get(name) is None:
            model[name] = value
    if model["num_units"] % model["num_heads"] != 0:
        raise ConfigError(
            f"{source}: model.num_units ({model['num_units']}) must be divisible by "
            f"model.num_heads ({model['num_heads']})"
        )


# OpenNMT-tf's tagging schemes: bioes adds chunk precision / recall / F1 to the evaluation; with
# any other (bio included) OpenNMT-tf prints the accuracy alone, and so does opennmt-lite.
TAGGING_SCHEMES = ("bioes", "bio")
# What a sequence tagger or classifier cannot use, and why (one line each): the Transformer's
# decoder, target side and multi-file training.
ENCODER_MODEL_REFUSED = {
    "data.train_alignments": "guided alignment needs a decoder",
    "data.train_files_weights": "weighted training files are implemented for the Transformer only",
    "data.example_weights": "example weights are implemented for the Transformer only",
    "data.source_embedding": "pretrained embeddings are implemented for the Transformer only",
    "data.target_embedding": "its tags or labels have no embeddings",
    "data.target_tokenization": "its tags or labels are read as they are, one per token or line",
    "data.source_sequence_controls": "a tag is read for each token, and <s> / </s> have none",
    "data.target_sequence_controls": "its tags or labels have no <s> / </s>",
    "data.sequence_controls": "a tag is read for each token, and <s> / </s> have none",
    "params.guided_alignment_type": "guided alignment needs a decoder",
    "params.contrastive_learning": "contrastive learning is the Transformer's",
    "params.replace_unknown_target": "it copies source words into translations",
    "params.decoding_noise": "it is the Transformer's back-translation noise",
    "params.freeze_layers": "its OpenNMT-tf layer paths are the Transformer's here",
    "params.mask_loss_outliers": "it is implemented for the Transformer's loss only",
    "infer.with_alignments": "it has no decoder attention to align with",
    "infer.with_scores": "OpenNMT-tf's tagger and classifier write no scores",
    "eval.save_eval_predictions": "it is implemented for the Transformer's translations only",
    "eval.external_evaluators": "its evaluation is OpenNMT-tf's accuracy (and tagging metrics)",
    "eval.scorers": "its evaluation is OpenNMT-tf's accuracy (and tagging metrics)",
    "train.moving_average_decay": "it is implemented for the Transformer only",
}


def model_metrics(type, tagging_scheme=None):
    """The evaluation metrics a model type adds to loss and perplexity (higher is better):
    OpenNMT-tf's tagger and classifier accuracy, and a bioes tagger's chunk scores."""
    if type == SEQUENCE_TAGGER:
        return ["accuracy"] + (["f1", "precision", "recall"] if tagging_scheme == "bioes" else [])
    return ["accuracy"] if type == SEQUENCE_CLASSIFIER else []


def _refuse_keys(config, source, refused, what):
    """ConfigError naming the first key of `refused` ({"section.key": why}) that `config` sets
    (to anything but an empty or zero value): the keys a model type has no use for."""
    for name, reason in refused.items():
        section, field = name.split(".")
        if config[section].get(field) not in (None, False, 0, 0.0, [], ()):
            raise ConfigError(f"{source}: {name}: not for {what} ({reason})")


def _finalize_encoder_model(config, source):
    """model.type resolved (transformer when unset); a sequence tagger's or classifier's keys
    checked: crf_decoding only for a tagger, tagging_scheme among TAGGING_SCHEMES (lowercased, as
    OpenNMT-tf), no shared embeddings, nothing of ENCODER_MODEL_REFUSED."""
    model, data = config["model"], config["data"]
    model["type"] = model.get("type") or "transformer"
    kind = model["type"]
    if model.get("crf_decoding") is not None and kind != SEQUENCE_TAGGER:
        raise ConfigError(f"{source}: model.crf_decoding is a sequence tagger's key (model.type: "
                          f"{SEQUENCE_TAGGER}); this model is a {kind}")
    if kind not in ENCODER_MODEL_TYPES:
        return
    model["crf_decoding"] = bool(model.get("crf_decoding"))
    if model.get("preset"):
        raise ConfigError(f"{source}: model.preset {model['preset']} is a Transformer; a {kind} "
                          f"takes the encoder's keys (num_layers, num_units, num_heads, "
                          f"ffn_inner_dim, ...)")
    if model["share_embeddings"] not in (None, "none", SHARE_EMBEDDINGS_AUTO):
        raise ConfigError(f"{source}: model.share_embeddings: {model['share_embeddings']}: a {kind} "
                          f"has one embedding table and nothing to share it with")
    model["share_embeddings"] = "none"
    scheme = data.get("tagging_scheme")
    if scheme is not None:
        if kind != SEQUENCE_TAGGER:
            raise ConfigError(f"{source}: data.tagging_scheme is a sequence tagger's key; this "
                              f"model is a {kind}")
        if str(scheme).lower() not in TAGGING_SCHEMES:
            raise ConfigError(f"{source}: data.tagging_scheme: {scheme!r}: choose bioes (adds "
                              f"precision, recall and F1 to the evaluation) or bio")
        data["tagging_scheme"] = str(scheme).lower()
    export_format = config["eval"].get("export_format")
    if config["eval"].get("export_on_best") and export_format not in (None, "saved_model",
                                                                      "checkpoint"):
        raise ConfigError(f"{source}: eval.export_format: {export_format}: a {kind} exports as "
                          f"saved_model or checkpoint (CTranslate2 and TFLite have no such model)")
    _refuse_keys(config, source, ENCODER_MODEL_REFUSED, f"a {kind}")
    for name in ("train_features_file", "train_labels_file"):
        value = data.get(name)
        if isinstance(value, list) and len(value) > 1:
            raise ConfigError(f"{source}: data.{name}: a {kind} trains on one file (a list of "
                              f"{len(value)} files is implemented for the Transformer only)")
        if isinstance(value, list):
            data[name] = value[0] if value else None
# A language model's data keys -> the Transformer keys it fills (one sequence: the file is read
# as the target of the decoder, and as a source nobody reads, so that the training, evaluation
# and scoring inputs are the Transformer's).
LANGUAGE_MODEL_DATA = {
    "vocabulary": ("source_vocabulary", "target_vocabulary"),
    "tokenization": ("source_tokenization", "target_tokenization"),
    "train_features_file": ("train_labels_file",),
    "eval_features_file": ("eval_labels_file",),
}
# OpenNMT-tf's LanguageModelInputter when data.sequence_controls is unset: no `<s>`, a `</s>`.
LANGUAGE_MODEL_CONTROLS = {"start": False, "end": True}
# What a language model cannot use, and why (one line each).
LANGUAGE_MODEL_REFUSED = {
    "data.train_alignments": "guided alignment needs a source",
    "data.source_embedding": "a language model's pretrained embeddings are not implemented",
    "data.target_embedding": "a language model's pretrained embeddings are not implemented",
    "params.guided_alignment_type": "guided alignment needs a source",
    "params.contrastive_learning": "contrastive learning is the Transformer's",
    "params.replace_unknown_target": "it copies source words, and a language model has no source",
    "params.coverage_penalty": "it weighs the attention to a source, and a language model has none",
    "params.decoding_noise": "it is the Transformer's back-translation noise",
    "params.freeze_layers": "its OpenNMT-tf layer paths are the Transformer's here",
    "infer.with_alignments": "a language model has no source to align to",
    "eval.save_eval_predictions": "its evaluation is its loss and perplexity, with no predictions",
    "score.with_alignments": "a language model has no source to align to",
}


def _finalize_model_type(config, source):
    """model.type resolved (transformer when neither it nor the preset sets it); the language
    model's keys checked, and its data keys copied to the Transformer keys the inputs read
    (LANGUAGE_MODEL_DATA); a Transformer's use of the language model's keys refused."""
    model, data = config["model"], config["data"]
    model["type"] = model["type"] or "transformer"
    if model["type"] != LANGUAGE_MODEL:
        for name in LANGUAGE_MODEL_KEYS:
            if model.get(name) is not None:
                raise ConfigError(f"{source}: model.{name} is a language model's key (model.type: "
                                  f"{LANGUAGE_MODEL}); this model is a {model['type']}")
        for name in ("vocabulary", "tokenization"):
            if data.get(name) is not None:
                raise ConfigError(f"{source}: data.{name} is a language model's key (model.type: "
                                  f"{LANGUAGE_MODEL}); a Transformer reads data.source_{name} "
                                  f"and data.target_{name}")
        return
    model["gelu_approximation"] = bool(model.get("gelu_approximation"))
    if model["gelu_approximation"] and model["ffn_activation"] != "gelu":
        raise ConfigError(f"{source}: model.gelu_approximation needs model.ffn_activation: gelu, "
                          f"got {model['ffn_activation']}")
    _refuse_keys(config, source, LANGUAGE_MODEL_REFUSED, "a language model")
    if config["eval"]["scorers"] or config["eval"]["external_evaluators"]:
        raise ConfigError(f"{source}: eval.scorers: a language model is evaluated by its loss and "
                          f"perplexity only (remove eval.scorers)")
    for name, targets in LANGUAGE_MODEL_DATA.items():
        for target in targets:
            if data.get(target) is not None:
                raise ConfigError(f"{source}: data.{target} is not a language model's key: it "
                                  f"reads data.{name} (one text file, one vocabulary)")
            data[target] = copy.deepcopy(data.get(name))
    for side in ("source", "target"):
        if data.get(f"{side}_sequence_controls") is not None:
            raise ConfigError(f"{source}: data.{side}_sequence_controls is not a language model's "
                              f"key: it reads data.sequence_controls")
    # (OpenNMT-tf's LanguageModelInputter: a flag the mapping leaves out, or null, keeps the
    # language model's default, not false as for a Transformer's sides)
    given = data.get("sequence_controls") or {}
    data["target_sequence_controls"] = {
        flag: default if given.get(flag) is None else bool(given[flag])
        for flag, default in LANGUAGE_MODEL_CONTROLS.items()}
    data["source_sequence_controls"] = {"start": False, "end": False}


def _automatic_sharing(data, model_dir):
    """OpenNMT-tf's EmbeddingsSharingLevel.AUTO: every embedding shared when both sides name the
    same vocabulary file (the paths compared as written, after the model_dir lookup), else the
    target input and output only."""
    source, target = (_resolve_path(data.get(name), model_dir)
                      for name in ("source_vocabulary", "target_vocabulary"))
    return "all" if source is not None and source == target else "target"


def _finalize_params(params, model, train, source):
    optimizer_params = params["optimizer_params"]
    unknown = sorted(set(optimizer_params) - OPTIMIZER_KEYS[params["optimizer"]])
    if unknown:
        raise ConfigError(f"{source}: params.optimizer_params: unknown keys for {params['optimizer']}: {unknown}")
    decay_type, decay_params = params["decay_type"], params["decay_params"]
    if decay_type is not None:
        if decay_type == "NoamDecay":
            decay_params.setdefault("model_dim", model["num_units"])
            decay_params.setdefault("warmup_steps", 8000)
        required, optional = DECAY_KEYS[decay_type]
        unknown = sorted(set(decay_params) - required - optional)
        if unknown:
            raise ConfigError(f"{source}: params.decay_params: unknown keys for {decay_type}: {unknown}")
        for name in sorted(required):
            value = decay_params.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{source}: params.decay_params.{name} must be a positive integer for "
                    f"{decay_type}, got {value!r}")
        for name in sorted(optional & set(decay_params)):
            value = decay_params[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"{source}: params.decay_params.{name} must be a non-negative "
                                  f"number for {decay_type}, got {value!r}")
    if params["average_loss_in_time"] is None:
        params["average_loss_in_time"] = train["batch_type"] == "tokens"
    clipping = sorted({"clipnorm", "global_clipnorm", "clipvalue"} & set(optimizer_params))
    if params["clip_gradients"] and clipping:
        raise ConfigError(f"{source}: params.clip_gradients and params.optimizer_params.{clipping[0]} "
                          "both clip the gradients: set one of them")
    if params["regularization"] is not None:
        params["regularization"] = _finalize_regularization(params["regularization"], source)


REGULARIZATION_TYPES = ("l1", "l2", "l1_l2")


def _finalize_regularization(value, source):
    """OpenNMT-tf's `params.regularization` -> {"type": "l1" | "l2" | "l1_l2", "scale": (l1, l2)}:
    the type case-insensitive, one scale for l1 or l2, a list of two for l1_l2 (as OpenNMT-tf)."""
    where = f"{source}: params.regularization"
    unknown = sorted(set(value) - {"type", "scale"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (type and scale only)")
    kind = value.get("type")
    if not isinstance(kind, str) or kind.lower() not in REGULARIZATION_TYPES:
        raise ConfigError(f"{where}.type: must be one of {', '.join(REGULARIZATION_TYPES)}; "
                          f"got {kind!r}")
    kind, scale = kind.lower(), value.get("scale")
    if kind == "l1_l2":
        if not isinstance(scale, list) or len(scale) != 2:
            raise ConfigError(f"{where}.scale: l1_l2 takes a list of 2 scales [l1, l2], got {scale!r}")
        scales = tuple(_check(_number(s), Key("float", minimum=0, nullable=False), f"{where}.scale")
                       for s in scale)
    else:
        scales = [0.0, 0.0]
        scales[kind == "l2"] = _check(_number(scale), Key("float", minimum=0, nullable=False),
                                      f"{where}.scale")
        scales = tuple(scales)
    return {"type": kind, "scale": scales}


def _number(value):
    """A string Python's float() reads, as a float (OpenNMT-tf calls float() on the regularization
    scales: YAML reads `1e-4`, without a dot, as a string); anything else unchanged."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


# params.decoding_noise: each module's name -> (minimum, maximum) number of arguments.
NOISE_ARGUMENTS = {"dropout": (1, 1), "replacement": (1, 2), "permutation": (1, 1)}
NOISE_EXAMPLE = "[{dropout: 0.1}, {replacement: [0.1, ⦅unk⦆]}, {permutation: 3}]"


def _finalize_freeze_layers(value, source):
    """OpenNMT-tf's `params.freeze_layers`: a path or a list of paths -> a tuple of paths (their
    layers are found when the model is built: opennmt_lite/models/freezing.py)."""
    if not value:
        return ()
    for path in value:
        if not isinstance(path, str) or not path.strip("/"):
            raise ConfigError(f"{source}: params.freeze_layers: expected a layer path (such as "
                              f"encoder/layers/0) or a list of them, got {path!r}")
    return tuple(value)


def _finalize_decoding_noise(params, infer, source):
    """OpenNMT-tf's list of single-key mappings -> ((name, (arguments...)), ...), names in lower
    case (as OpenNMT-tf reads them); probabilities in [0, 1], distances integers >= 0."""
    if not params["decoding_subword_token"]:
        raise ConfigError(f"{source}: params.decoding_subword_token must not be empty")
    modules = params["decoding_noise"]
    if not modules:
        params["decoding_noise"] = ()
        return
    result = []
    for i, module in enumerate(modules):
        where = f"{source}: params.decoding_noise[{i}]"
        if not isinstance(module, dict) or len(module) != 1:
            raise ConfigError(f"{where}: expected one {{module: arguments}} mapping, e.g. "
                              f"{NOISE_EXAMPLE}; got {module!r}")
        name, arguments = next(iter(module.items()))
        name = str(name).lower()
        arguments = arguments if isinstance(arguments, list) else [arguments]
        if name not in NOISE_ARGUMENTS:
            raise ConfigError(f"{where}: unknown noise module {name!r} (one of "
                              f"{', '.join(NOISE_ARGUMENTS)})")
        low, high = NOISE_ARGUMENTS[name]
        if not low <= len(arguments) <= high:
            raise ConfigError(f"{where}: {name} takes {low if low == high else f'{low} or {high}'} "
                              f"argument(s), got {arguments!r}")
        first = arguments[0]
        if name == "permutation":
            if isinstance(first, bool) or not isinstance(first, int) or first < 0:
                raise ConfigError(f"{where}: permutation's maximum distance must be an integer "
                                  f">= 0, got {first!r}")
        elif isinstance(first, bool) or not isinstance(first, (int, float)) or not 0 <= first <= 1:
            raise ConfigError(f"{where}: {name}'s probability must be a number in [0, 1], got {first!r}")
        if len(arguments) == 2 and not (isinstance(arguments[1], str) and arguments[1]):
            raise ConfigError(f"{where}: replacement's filler must be a token (a non-empty "
                              f"string), got {arguments[1]!r}")
        result.append((name, tuple(arguments)))
    if infer["with_alignments"]:
        raise ConfigError(f"{source}: infer.with_alignments cannot be used with "
                          "params.decoding_noise (noisy translations have no alignment, as in OpenNMT-tf)")
    params["decoding_noise"] = tuple(result)


DROPOUT_RATES = ("dropout", "attention_dropout", "ffn_dropout", "embedding_dropout",
                 "layer_input_dropout")


def _finalize(config, source):
    model, params, train, evaluation = config["model"], config["params"], config["train"], config["eval"]
    if params["dropout"] is not None:
        if not 0.0 <= params["dropout"] < 1.0:
            raise ConfigError(f"{source}: params.dropout must be in [0, 1), got {params['dropout']}")
        # (OpenNMT-tf's set_dropout: every dropout attribute of the model, whatever the preset)
        for name in DROPOUT_RATES:
            model[name] = params["dropout"]
    params["freeze_layers"] = _finalize_freeze_layers(params["freeze_layers"], source)
    _finalize_model(model, source)
    _finalize_model_type(config, source)
    _finalize_encoder_model(config, source)
    if model["share_embeddings"] == SHARE_EMBEDDINGS_AUTO:
        model["share_embeddings"] = _automatic_sharing(config["data"], config["model_dir"])
    # (a rate of 1 or more would divide by zero in dropout's 1 / (1 - rate) scaling; a negative
    # one would keep every unit and scale it down)
    for section_name, name in ([("model", rate) for rate in DROPOUT_RATES]
                               + [("params", "label_smoothing")]):
        value = config[section_name].get(name)
        if value is not None and not 0.0 <= value < 1.0:
            raise ConfigError(f"{source}: {section_name}.{name} must be in [0, 1), got {value}")
    if not params["sampling_temperature"] > 0:
        raise ConfigError(f"{source}: params.sampling_temperature must be positive, got "
                          f"{params['sampling_temperature']}")
    try:  # the carrier's own checks (those above give the messages naming the keys)
        ModelHyperparameters.from_dict(_model_values(model))
    except ValueError as error:
        raise ConfigError(f"{source}: model: {error}") from None
    _finalize_params(params, model, train, source)
    _finalize_decoding_noise(params, config["infer"], source)
    if params["num_hypotheses"] is None:
        params["num_hypotheses"] = config["infer"]["n_best"]
    if config["infer"]["n_best"] > params["beam_width"]:
        raise ConfigError(
            f"{source}: infer.n_best ({config['infer']['n_best']}) cannot exceed params.beam_width "
            f"({params['beam_width']})"
        )
    if train["batch_type"] == "tokens" and not train.get("length_bucket_width"):
        raise ConfigError(f"{source}: train.length_bucket_width must be set with batch_type: tokens")
    metrics = (list(LOWER_IS_BETTER) + _finalize_scorers(evaluation, source)
               + model_metrics(model["type"], config["data"].get("tagging_scheme")))

    def check_metric(key, metric):
        if metric not in metrics:
            raise ConfigError(
                f"{source}: {key}: {metric!r} is never computed; choose one of "
                f"{', '.join(metrics)} (a scorer must also be listed in eval.scorers)")

    stopping = evaluation["early_stopping"]
    if stopping is not None:
        evaluation["early_stopping"] = stopping = merge(_defaults(EarlyStopping), stopping)
        if stopping["steps"] is None or stopping["steps"] <= 0:
            raise ConfigError(f"{source}: eval.early_stopping.steps must be a positive integer")
        check_metric("eval.early_stopping.metric", stopping["metric"])
    if evaluation["export_on_best"] is not None:
        check_metric("eval.export_on_best", evaluation["export_on_best"])
    decay = train["moving_average_decay"]
    if decay is not None and decay > 1:
        raise ConfigError(f"{source}: train.moving_average_decay must be at most 1, got {decay}")
    model_dir = config["model_dir"]
    data = config["data"]
    for name in PATH_KEYS:
        value = data.get(name)
        data[name] = ([_resolve_path(v, model_dir) for v in value] if isinstance(value, list)
                      else _resolve_path(value, model_dir))
    _finalize_training_files(data, train, source)
    for side in TOKENIZATION_KEYS:
        if data[side] is not None:
            where = "data.tokenization" if model["type"] == LANGUAGE_MODEL else f"data.{side}"
            data[side] = _finalize_tokenization(data[side], where, source, model_dir)
    if model["type"] == LANGUAGE_MODEL:
        data["tokenization"] = data["source_tokenization"]
    for side in EMBEDDING_KEYS:
        if data[side] is not None:
            data[side] = embedding = merge(_defaults(Embedding), data[side])
            if not embedding["path"]:
                raise ConfigError(f"{source}: data.{side}.path must name the embedding file")
            embedding["path"] = _resolve_path(embedding["path"], model_dir)
    _resolve_controls(data)
    _finalize_serve(config["serve"], source)
    return config


def _finalize_serve(serve, source):
    """The cross-field checks of the `serve` section and the entries of `serve.models`."""
    if serve["port"] > 65535:
        raise ConfigError(f"{source}: serve.port must be at most 65535, got {serve['port']}")
    root = serve["url_root"]
    if not root.startswith("/") or root.endswith("/") and root != "/" or any(
            c.isspace() or c in "?#%" for c in root):
        raise ConfigError(f"{source}: serve.url_root must be a path such as /translator (a leading "
                          f"/, no trailing /, no spaces, ?, # or %), got {root[:80]!r}")
    if root == "/":
        serve["url_root"] = ""
    models = serve["models"]
    if models is None:
        return
    if not models:
        raise ConfigError(f"{source}: serve.models is an empty list: list the models to serve, or "
                          "remove it to serve this config's newest checkpoint")
    seen = {}
    for index, entry in enumerate(models):
        where = f"{source}: serve.models[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with keys {', '.join(SERVE_MODEL_KEYS)}, "
                              f"got {str(entry)[:60]!r}")
        for name in entry:
            if name not in SERVE_MODEL_KEYS:
                close = difflib.get_close_matches(str(name), SERVE_MODEL_KEYS, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(f"{where}.{str(name)[:60]}: unknown key{hint}")
        entry = models[index] = {"id": entry.get("id"), "config": entry.get("config"),
                                 "backend": entry.get("backend", "checkpoint"), "path": entry.get("path")}
        model_id = entry["id"]
        if model_id is None:
            raise ConfigError(f"{where}.id: must be set (the integer a request names in its \"id\")")
        _check(model_id, Key("int", minimum=0), f"{where}.id")
        if model_id in seen:
            raise ConfigError(f"{where}.id: {model_id} is already the id of serve.models[{seen[model_id]}]")
        seen[model_id] = index
        _check(entry["backend"], Key("str", choices=SERVE_BACKENDS, nullable=False), f"{where}.backend")
        for name in ("config", "path"):
            _check(entry[name], Key("path"), f"{where}.{name}")
            if entry[name] is not None and (not entry[name] or "\x00" in entry[name]):
                raise ConfigError(f"{where}.{name}: expected a path, got {entry[name][:60]!r}")
        if entry["backend"] != "checkpoint" and entry["path"] is None:
            raise ConfigError(f"{where}.path: must name the exported model directory of backend "
                              f"{entry['backend']} (run.py export)")


def _files(value):
    return value if isinstance(value, list) else [value]


def _finalize_training_files(data, train, source):
    """The cross-field checks of several training files, their weights and example weights
    (the counts of lines are checked when the files are read: opennmt_lite/data/weighted.py)."""
    features, labels = data["train_features_file"], data["train_labels_file"]
    if features is not None and labels is not None and len(_files(features)) != len(_files(labels)):
        raise ConfigError(
            f"{source}: data.train_features_file lists {len(_files(features))} file(s) but "
            f"data.train_labels_file {len(_files(labels))}: they must pair up")
    count = len(_files(features)) if features is not None else None
    weights = data["train_files_weights"]
    if weights is not None:
        where = f"{source}: data.train_files_weights"
        for weight in weights:
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ConfigError(f"{where}: expected a list of numbers, got {weight!r}")
            if weight < 0:
                raise ConfigError(f"{where}: weights cannot be negative, got {weight}")
        if count is not None and len(weights) != count:
            raise ConfigError(f"{where}: {len(weights)} weight(s) for {count} training file(s) "
                              f"(data.train_features_file): give one weight per file")
        if not any(weights):
            raise ConfigError(f"{where}: all weights are zero: no file would be read")
        if train["single_pass"] and count and count > 1:
            raise ConfigError(f"{source}: train.single_pass cannot be used with "
                              "data.train_files_weights (weighted files are sampled endlessly, "
                              "as in OpenNMT-tf)")
        data["train_files_weights"] = [float(w) for w in weights]
    example_weights = data["example_weights"]
    if example_weights is not None and count is not None and len(_files(example_weights)) != count:
        raise ConfigError(
            f"{source}: data.example_weights lists {len(_files(example_weights))} file(s) for "
            f"{count} training file(s): give one example weights file per training file")


EMBEDDING_KEYS = ("source_embedding", "target_embedding")


def _finalize_scorers(evaluation, source):
    """eval.scorers as lowercase names (OpenNMT-tf's spellings: a name or a list, any case),
    taken from eval.external_evaluators, OpenNMT-tf's older name, when that is the one set."""
    name = "scorers"
    if evaluation["external_evaluators"] is not None:
        if evaluation["scorers"]:
            raise ConfigError(f"{source}: eval.scorers and eval.external_evaluators (OpenNMT-tf's "
                              "older name of scorers) are both set: keep one")
        name = "external_evaluators"
        evaluation["scorers"], evaluation["external_evaluators"] = evaluation[name], None
    evaluation["scorers"] = scorers = [str(s).lower() for s in evaluation["scorers"]]
    unknown = [s for s in scorers if s not in SCORERS]
    if unknown:
        raise ConfigError(f"{source}: eval.{name}: unknown scorer(s) {unknown}; available: {sorted(SCORERS)}")
    return scorers


def _resolve_controls(data):
    """OpenNMT-tf's reading of the sequence controls: a side's own key, else (unset or null) the
    unprefixed `sequence_controls`; a non-empty mapping sets both flags (a missing one is false),
    an empty one or none leaves the side's default."""
    for side, default in DEFAULT_SEQUENCE_CONTROLS.items():
        name = f"{side}_sequence_controls"
        given = data.get(name) if data.get(name) is not None else data.get("sequence_controls")
        data[name] = ({flag: bool(given.get(flag)) for flag in default} if given
                      else dict(default))


TOKENIZATION_KEYS = ("source_tokenization", "target_tokenization")


def _tokenization_shorthand(value):
    """OpenNMT-tf's shorthand: a mapping without `type` whose keys are not this section's is
    the params of an OpenNMTTokenizer."""
    if isinstance(value, dict) and "type" not in value and set(value) - set(SCHEMA["data"][TOKENIZATION_KEYS[0]]):
        return {"type": "OpenNMTTokenizer", "params": value}
    return value


def _read_tokenization(value, where, source, model_dir):
    """The mapping a `data.*_tokenization` string names (a YAML file, resolved like the data
    paths, or a JSON string), validated; returns (mapping, its file or None)."""
    import json

    if value.lstrip().startswith("{"):
        try:
            content, path = json.loads(value), None
        except json.JSONDecodeError as error:
            raise ConfigError(f"{source}: {where}: neither an existing YAML file nor valid JSON "
                              f"({error.msg})") from None
    else:
        path = _resolve_path(value, model_dir)
        if not os.path.isfile(path):
            raise ConfigError(f"{source}: {where}: tokenizer configuration file {value} not found"
                              + (" (it is a directory)" if os.path.isdir(path) else ""))
        try:
            with open(path, encoding="utf-8") as stream:
                content = yaml.load(stream, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except (UnicodeDecodeError, yaml.YAMLError) as error:
            raise ConfigError(f"{source}: {where}: {path} is not a valid YAML file "
                              f"({str(error).splitlines()[0]})") from None
    if not isinstance(content, dict):
        raise ConfigError(f"{path or source}: {'' if path else where + ': '}a tokenizer "
                          f"configuration must be a mapping, got {content!r}")
    content = _tokenization_shorthand(content)
    _validate(content, SCHEMA["data"][TOKENIZATION_KEYS[0]], "" if path else f"{where}.",
              path or source)
    return content, path


def _finalize_tokenization(value, where, source, model_dir):
    """The complete tokenization dict of one side, its `type` among "sentencepiece", "space",
    "opennmt", "character" (see TOKENIZER_TYPES); every key a type does not use is refused."""
    path = None
    if isinstance(value, str):
        value, path = _read_tokenization(value, where, source, model_dir)

    def at(name):  # "file.yml: name" for a tokenizer file, else "config: data.x.name"
        return f"{path}: {name}" if path else f"{source}: {where}.{name}"

    given = set(value)
    tokenization = merge(_defaults(Tokenization), value)
    name = tokenization["type"]
    kind = TOKENIZER_TYPES[name]
    params = tokenization["params"]
    if name == kind:  # this project's spellings: no params
        if "params" in given:
            raise ConfigError(f"{at('params')}: only for OpenNMT-tf's tokenizer types "
                              f"({', '.join(t for t in TOKENIZER_TYPES if t.endswith('Tokenizer'))})")
        if kind == "sentencepiece" and not tokenization["model"]:
            raise ConfigError(f"{at('model')} must name the SentencePiece model file")
    else:  # OpenNMT-tf's: everything under params
        extra = sorted(given - {"type", "params"})
        if extra:
            raise ConfigError(f"{at(extra[0])}: not an option of {name} (its options go under params)")
        params = dict(params or {})
        if kind == "sentencepiece":
            if not isinstance(params.get("model"), str):
                raise ConfigError(f"{at('params.model')} must name the SentencePiece model file")
            unknown = sorted(set(params) - {"model", "nbest_size", "alpha"})
            if unknown:
                raise ConfigError(f"{at('params.' + unknown[0])}: unknown option of "
                                  "SentencePieceTokenizer (model, nbest_size, alpha)")
            if params.get("nbest_size", 0) != 0:
                raise ConfigError(f"{at('params.nbest_size')}: subword sampling is not supported "
                                  "(the training data is tokenized once); set it to 0")
            tokenization["model"] = params["model"]
        elif kind == "opennmt":
            for option in SAMPLING_OPTIONS:
                if params.get(option, 0) not in (0, None):
                    raise ConfigError(f"{at('params.' + option)}: subword sampling is not "
                                      "supported (the training data is tokenized once); set it to 0")
            for option, value in params.items():
                if option.endswith("_path") and isinstance(value, str):
                    params[option] = _resolve_path(value, model_dir)
        elif params:
            raise ConfigError(f"{at('params.' + sorted(params)[0])}: {name} takes no parameters")
        tokenization["params"] = params
    tokenization["type"] = kind
    tokenization["model"] = _resolve_path(tokenization["model"], model_dir)
    return tokenization


def command_line_tokenization(value, option="--tokenizer_config"):
    """The `Tokenization` of a tokenizer configuration given on a command line, as OpenNMT-tf's
    commands take it (a YAML file, relative to the working directory, or a JSON string), checked
    as `data.*_tokenization` is; `option` names it in the errors."""
    return _typed(Tokenization, _finalize_tokenization(value, option, "command line", os.curdir))


def _duplicate_keys(node, prefix="", seen_nodes=None):
    """Raises ConfigError at the first key written twice in one mapping of a YAML node tree,
    naming the file, the key path and both lines."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias of a node already checked
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are meant to be overridden
            name, line = key_node.value, key_node.start_mark.line + 1
            if name in lines:
                raise ConfigError(f"{key_node.start_mark.name}, line {line}: duplicate key "
                                  f"{prefix}{name} (first set on line {lines[name]})")
            lines[name] = line
            _duplicate_keys(value_node, f"{prefix}{name}.", seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicate_keys(item, prefix, seen_nodes)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key written twice in one mapping is an error: PyYAML keeps
    the last value silently, so one of the two settings would be ignored without a word."""

    def construct_document(self, node):
        _duplicate_keys(node)
        return super().construct_document(node)


def load_config(paths, overrides=None):
    """Reads, merges and validates YAML config files; returns the complete, frozen `Config`.

    `overrides` is an optional dict (e.g. from the command line) merged last. Logs one warning
    for each INEFFECTIVE_ONMT_KEYS key set.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    user = {}
    names = []
    for path in paths:
        path = os.fspath(path)
        names.append(path)
        try:
            with open(path, encoding="utf-8") as f:
                content = yaml.load(f, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path} is a directory") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"{path}: not UTF-8 text ({error.reason})") from None
        except RecursionError:  # (thousands of nested brackets)
            raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
        except yaml.YAMLError as error:  # (its own text spans several lines)
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
        if content is None:
            content = {}
        _validate(content, SCHEMA, "", path)
        user = merge(user, content)
    if overrides:
        _validate(overrides, SCHEMA, "", "command line")
        user = merge(user, overrides)
    source = " + ".join(names) or "config"
    config = build_config(user, source=source)
    for name, reason in ineffective_keys(config):
        logger.warning("%s: %s has no effect in opennmt-lite (%s)", source, name, reason)
    if config.params.clip_gradients:  # (a v1 key that OpenNMT-tf 2.32 reads no more)
        logger.warning("%s: params.clip_gradients clips each update's global gradient norm, as "
                       "OpenNMT-tf 1.x did; OpenNMT-tf 2.32 ignores the key (it trains without "
                       "clipping): remove it to train as OpenNMT-tf 2.32 does", source)
    return config


def build_config(user, source="config"):
    """The `Config` of an already-parsed config dict (validated here too)."""
    user = copy.deepcopy(user)
    _validate(user, SCHEMA, "", source)
    if "model_dir" not in user:
        raise ConfigError(f"{source}: model_dir must be set")
    config = _defaults(Config)
    if user.get("auto_config", True):
        model = user.get("model") or {}
        if model.get("preset") == "GPT2Small":
            raise ConfigError(
                f"{source}: model.preset GPT2Small with auto_config: OpenNMT-tf's GPT2Small "
                "auto_config trains with the CosineAnnealing schedule, which opennmt-lite does not "
                "implement; set auto_config: false and the params and train keys yourself")
        config = merge(config, auto_config(model.get("preset"), model_type(model)))
    # Sections given as null in YAML mean "defaults".
    config = merge(config, {k: v for k, v in user.items() if v is not None})
    return _typed(Config, _finalize(config, source))
