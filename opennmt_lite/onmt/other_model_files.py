"""OpenNMT-tf model files of the tagger, classifier and language model, read without OpenNMT-tf.

Like opennmt_lite/onmt/model_file.py for Transformers: the file runs with a stand-in `opennmt`
package in `sys.modules` whose classes record their arguments, and its `model()` result becomes a
description of the model to build. The stand-in offers `opennmt.models.SequenceTagger`,
`SequenceClassifier`, `LanguageModel`, the catalog's `GPT2Small`, `opennmt.encoders.
SelfAttentionEncoder`, `opennmt.decoders.SelfAttentionDecoder` (num_sources=0),
`opennmt.inputters.WordEmbedder`, `opennmt.layers.{gelu, PositionEmbedder,
SinusoidalPositionEncoder}`. The catalog models OpenNMT-tf builds from RNN or CNN pieces are
refused by name; anything else the file asks for is refused, one line (ModelFileError).

    read_other_model_file("model.py") -> {"type": "SequenceTagger" | "SequenceClassifier" |
        "LanguageModel", "hyperparameters": {ModelHyperparameters' fields}, "crf_decoding",
        "maximum_position" (learned positions, or None), "gelu_approximation"}
    build_model(description, vocabulary_size, num_outputs=None) -> the Keras model
"""

import contextlib
import importlib.util
import re
import sys
import types

from opennmt_lite.onmt.model_file import ModelFileError

# Catalog models made of RNN or CNN layers, which opennmt-lite does not implement.
REFUSED_CATALOG = ("LstmCnnCrfTagger", "ListenAttendSpell", "LuongAttention", "NMTBigV1",
                   "NMTMediumV1", "NMTSmallV1")
_MODULE_NAME = "opennmt_lite_other_model_file"


class _Refused(Exception):
    pass


def gelu(x):  # the stand-in's opennmt.layers.gelu: recognised by identity
    raise _Refused("opennmt.layers.gelu is only an activation to pass to a layer here")


class SinusoidalPositionEncoder:
    pass


class PositionEmbedder:
    def __init__(self, maximum_position=128):
        self.maximum_position = maximum_position


class WordEmbedder:
    def __init__(self, embedding_size=None, dropout=0.0):
        self.embedding_size = embedding_size
        self.dropout = dropout


def _activation(function):
    if function is gelu:
        return "gelu", True
    name = getattr(function, "__name__", None)
    if name in ("relu", "gelu", "swish", "silu"):
        return ("swish" if name == "silu" else name), False
    raise _Refused(f"ffn_activation={name or function!r}: only relu, gelu (exact, or "
                   "opennmt.layers.gelu) and swish are implemented")


class _Stack:
    """SelfAttentionEncoder / SelfAttentionDecoder: their hyper-parameters."""

    def __init__(self, num_layers, num_units=512, num_heads=8, ffn_inner_dim=2048, dropout=0.1,
                 attention_dropout=0.1, ffn_dropout=0.1, ffn_activation=None, mha_bias=True,
                 position_encoder_class=SinusoidalPositionEncoder, maximum_relative_position=None,
                 pre_norm=True, **extra):
        self.extra = extra
        activation, self.gelu_approximation = ("relu", False) if ffn_activation is None \
            else _activation(ffn_activation)
        self.hyperparameters = dict(
            num_layers=num_layers, num_units=num_units, num_heads=num_heads,
            ffn_inner_dim=ffn_inner_dim, dropout=dropout, attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout, ffn_activation=activation, mha_bias=mha_bias,
            maximum_relative_position=maximum_relative_position, pre_norm=pre_norm)
        self.maximum_position = None
        if position_encoder_class is None:
            self.hyperparameters["position_encoding"] = "none"
        elif position_encoder_class is not SinusoidalPositionEncoder:
            encoder = position_encoder_class()
            if not isinstance(encoder, PositionEmbedder):
                raise _Refused("position_encoder_class: only SinusoidalPositionEncoder, "
                               "PositionEmbedder or None")
            self.maximum_position = encoder.maximum_position


class SelfAttentionEncoder(_Stack):
    def __init__(self, num_layers, **kwargs):
        super().__init__(num_layers, **kwargs)
        if self.extra:
            raise _Refused(f"SelfAttentionEncoder: unknown arguments {sorted(self.extra)}")


class SelfAttentionDecoder(_Stack):
    def __init__(self, num_layers, num_sources=1, **kwargs):
        kwargs.pop("attention_reduction", None)
        super().__init__(num_layers, **kwargs)
        if self.extra:
            raise _Refused(f"SelfAttentionDecoder: unknown arguments {sorted(self.extra)}")
        self.num_sources = num_sources


class _Model:
    kind = None

    def describe(self, stack, inputter_size, crf_decoding=False):
        if self.kind != "LanguageModel" and stack.maximum_position is not None:
            raise _Refused("PositionEmbedder in an encoder is not implemented")
        if inputter_size not in (None, stack.hyperparameters["num_units"]):
            raise _Refused(f"embedding_size={inputter_size} differs from num_units="
                           f"{stack.hyperparameters['num_units']}: the encoder or decoder "
                           "takes the embeddings as they are")
        self.description = {"type": self.kind, "hyperparameters": stack.hyperparameters,
                            "crf_decoding": bool(crf_decoding),
                            "maximum_position": stack.maximum_position,
                            "gelu_approximation": stack.gelu_approximation}


class SequenceTagger(_Model):
    kind = "SequenceTagger"

    def __init__(self, inputter, encoder, crf_decoding=False):
        _check_parts(inputter, encoder, SelfAttentionEncoder)
        self.describe(encoder, inputter.embedding_size, crf_decoding)


class SequenceClassifier(_Model):
    kind = "SequenceClassifier"

    def __init__(self, inputter, encoder):
        _check_parts(inputter, encoder, SelfAttentionEncoder)
        self.describe(encoder, inputter.embedding_size)


class LanguageModel(_Model):
    kind = "LanguageModel"

    def __init__(self, decoder, embedding_size=None, reuse_embedding=True):
        if not isinstance(decoder, SelfAttentionDecoder) or decoder.num_sources != 0:
            raise _Refused("LanguageModel: only SelfAttentionDecoder(num_sources=0)")
        if not reuse_embedding:
            raise _Refused("LanguageModel(reuse_embedding=False) is not implemented")
        self.describe(decoder, embedding_size)


def GPT2Small():  # noqa: N802 (OpenNMT-tf's catalog name)
    return LanguageModel(
        SelfAttentionDecoder(12, num_units=768, num_heads=12, ffn_inner_dim=3072,
                             ffn_activation=gelu,
                             position_encoder_class=lambda: PositionEmbedder(1024),
                             num_sources=0),
        embedding_size=768)


def _check_parts(inputter, encoder, encoder_class):
    if not isinstance(inputter, WordEmbedder):
        raise _Refused(f"{type(inputter).__name__} inputter: only opennmt.inputters.WordEmbedder")
    if not isinstance(encoder, encoder_class):
        raise _Refused(f"{type(encoder).__name__}: only opennmt.encoders.SelfAttentionEncoder")


def _refused_catalog(name):
    def refuse(*args, **kwargs):
        raise _Refused(f"{name} is built from RNN or CNN layers, which opennmt-lite does not "
                       "implement (it has the Transformer, SequenceTagger, SequenceClassifier "
                       "and LanguageModel on self-attention)")
    return refuse


def _stand_in():
    models = dict(SequenceTagger=SequenceTagger, SequenceClassifier=SequenceClassifier,
                  LanguageModel=LanguageModel, GPT2Small=GPT2Small,
                  **{name: _refused_catalog(name) for name in REFUSED_CATALOG})
    content = {
        "opennmt": {"__version__": "2.32.0"},
        "opennmt.models": models,
        "opennmt.encoders": {"SelfAttentionEncoder": SelfAttentionEncoder},
        "opennmt.decoders": {"SelfAttentionDecoder": SelfAttentionDecoder},
        "opennmt.inputters": {"WordEmbedder": WordEmbedder},
        "opennmt.layers": {"gelu": gelu, "PositionEmbedder": PositionEmbedder,
                           "SinusoidalPositionEncoder": SinusoidalPositionEncoder},
    }
    modules = {}
    for name, attributes in content.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        module.__path__ = []

        def refuse(attribute, name=name):
            if attribute.startswith("_"):
                raise AttributeError(attribute)
            raise _Refused(f"{name}.{attribute} has no meaning here")

        module.__getattr__ = refuse
        modules[name] = module
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    return modules


@contextlib.contextmanager
def _opennmt_replaced():
    saved = {name: m for name, m in sys.modules.items()
             if name == "opennmt" or name.startswith("opennmt.")}
    for name in saved:
        del sys.modules[name]
    sys.modules.update(_stand_in())
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n == "opennmt" or n.startswith("opennmt.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _line_of(error, path):
    trace = error.__traceback__
    line = None
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == path:
            line = trace.tb_lineno
        trace = trace.tb_next
    return line


def read_other_model_file(path):
    """The description of the model a model file's `model()` returns (see the module)."""
    try:
        with _opennmt_replaced():
            spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            builder = getattr(module, "model", None)
            if builder is None or not callable(builder):
                raise _Refused("defines no callable `model` (OpenNMT-tf calls the file's `model`)")
            model = builder()
    except (_Refused, TypeError) as error:
        line = _line_of(error, path)
        where = f"{path}, line {line}" if line else path
        raise ModelFileError(f"model file {where}: {error}") from None
    if not isinstance(model, _Model):
        raise ModelFileError(f"model file {path}: model() returned {type(model).__name__}, not a "
                             "SequenceTagger, SequenceClassifier or LanguageModel")
    return model.description


def build_model(description, vocabulary_size, num_outputs=None):
    """The opennmt-lite model of a description. vocabulary_size: rows of the input embedding;
    num_outputs: the number of tags or labels (tagger, classifier)."""
    from opennmt_lite.hyperparameters import ModelHyperparameters

    hyperparameters = ModelHyperparameters(**description["hyperparameters"])
    if description["type"] == "LanguageModel":
        from opennmt_lite.models.language_model import LanguageModel as Model

        return Model(hyperparameters, vocabulary_size, description["maximum_position"],
                     description["gelu_approximation"])
    from opennmt_lite.models.encoder_models import SequenceClassifier as Classifier
    from opennmt_lite.models.encoder_models import SequenceTagger as Tagger

    if description["type"] == "SequenceTagger":
        return Tagger(hyperparameters, vocabulary_size, num_outputs,
                      crf_decoding=description["crf_decoding"])
    return Classifier(hyperparameters, vocabulary_size, num_outputs)


# The classes whose mention makes a model file one of these models (or a refused catalog one).
_OTHER_NAMES = re.compile(r"\b(SequenceTagger|SequenceClassifier|LanguageModel|GPT2Small|"
                          + "|".join(REFUSED_CATALOG) + r")\b")
MODEL_TYPES = {"SequenceTagger": "sequence_tagger", "SequenceClassifier": "sequence_classifier",
               "LanguageModel": "language_model"}


def is_other_model_file(path):
    """Whether the model file names a tagger, classifier, language model or RNN/CNN catalog
    model (then `read_other_model_file` reads it, not the Transformer's reader)."""
    with open(path, encoding="utf-8", errors="replace") as stream:
        return bool(_OTHER_NAMES.search(stream.read()))


def model_section(description):
    """The config's `model` section keys of a description (model.type and the hyper-parameters;
    a tagger's crf_decoding; a language model's learned positions and GELU approximation when
    the file sets them)."""
    section = dict(description["hyperparameters"], type=MODEL_TYPES[description["type"]])
    if description["type"] == "SequenceTagger":
        section["crf_decoding"] = description["crf_decoding"]
    if description["type"] == "LanguageModel":
        for name in ("maximum_position", "gelu_approximation"):
            if description[name]:
                section[name] = description[name]
    return section
