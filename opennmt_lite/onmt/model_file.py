"""OpenNMT-tf model files (`onmt-main --model model.py`), read without OpenNMT-tf.

A model file is the user's own Python code, and it is run as OpenNMT-tf 2.32 runs it
(opennmt/config.py `load_model_from_file`): executed as a module, with its folder first on
`sys.path` while it loads, then its `model` is called (a function, a lambda or a class) and the
model it returns is used; `onmt-main --auto_config` then asks that model for its `auto_config()`.

While the file runs, and only then, `sys.modules` holds a stand-in `opennmt` package (even when
the real OpenNMT-tf is installed, so that the result never depends on it). The stand-in offers
what Transformer model files use: `opennmt.models.Transformer` with OpenNMT-tf's keyword
arguments and defaults, the catalog's Transformer classes, `opennmt.inputters.WordEmbedder`,
`opennmt.layers.SinusoidalPositionEncoder`, `opennmt.models.EmbeddingsSharingLevel`,
`opennmt.layers.MultiHeadAttentionReduction`, `opennmt.config.merge_config`. Its Transformer
records hyper-parameters instead of building layers. Whatever else the file asks of it (an RNN
encoder, a custom layer, an argument with no meaning here) raises `ModelFileError`, one line
naming the file and the line.

    read_model_file("model.py")
    -> {"model": {hyper-parameters, as the YAML `model` section names them},
        "auto_config": None, or the config a subclass's own `auto_config()` returns}
"""

import contextlib
import copy
import numbers
import os
import sys
import traceback
import types

from opennmt_lite.config import AUTO_CONFIG, PRESET_AUTO_CONFIG, REPLACED_WHOLE
from opennmt_lite.errors import UserError
from opennmt_lite.hyperparameters import SHARE_EMBEDDINGS_AUTO, ModelHyperparameters

# The name the file runs under (OpenNMT-tf imports it under its file name; a fixed private name
# cannot shadow a module of the same name, e.g. a model file called `config.py`).
MODULE_NAME = "opennmt_lite_model_file"
SUPPORTED = ("opennmt.models.Transformer and its catalog classes, opennmt.inputters.WordEmbedder, "
             "opennmt.layers.SinusoidalPositionEncoder, opennmt.models.EmbeddingsSharingLevel")


class ModelFileError(UserError, ValueError):
    """A model file that cannot be read here; the message names the file and the line."""


class _Refused(Exception):
    """Raised by the stand-in: `where` is (file, line) when known at the raise (a WordEmbedder
    refused at the Transformer call is named where it was made), else found from the traceback."""

    def __init__(self, message, where=None):
        super().__init__(message)
        self.where = where


def read_model_file(path, num_replicas=1):
    """{"model": {name: value}, "auto_config": dict or None, "embedding_sizes_from_files":
    {side: (file, line)}} of an OpenNMT-tf model file.

    "model" has every hyper-parameter of ModelHyperparameters, OpenNMT-tf's default where the file
    says nothing. "auto_config" is None unless the model's class defines its own `auto_config`;
    then it is what that method returns for `num_replicas` (OpenNMT-tf's YAML keys, the parent's
    configuration merged under it, as OpenNMT-tf does). "embedding_sizes_from_files" names the
    sides whose WordEmbedder has no embedding_size (where it is made): their size is the
    pretrained vectors', so the configuration must give data.<side>_embedding.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelFileError(f"model file {path} not found")
    if os.path.isdir(path):
        raise ModelFileError(f"model file {path} is a directory")
    with open(path, "rb") as f:
        source = f.read()
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:  # (ValueError: a null byte in the source)
        line = getattr(error, "lineno", None)
        reason = getattr(error, "msg", None) or str(error)
        raise ModelFileError(_located(path, line, f"invalid Python: {reason}")) from None

    with _stand_in_opennmt(), _registered(MODULE_NAME) as module:
        module.__file__ = path
        try:
            with _first_on_path(os.path.dirname(os.path.abspath(path))):
                exec(code, module.__dict__)  # noqa: S102 (the user's own model file, as OpenNMT-tf runs it)
            model = _call_model(module, path)
            auto_config = None
            if type(model).auto_config is not Transformer.auto_config:
                auto_config = model.auto_config(num_replicas=num_replicas)
                if not isinstance(auto_config, dict):
                    raise _Refused(f"auto_config() returned {type(auto_config).__name__}, not a dict",
                                   where=_definition(type(model).auto_config))
        except (Exception, SystemExit) as error:
            raise ModelFileError(_describe(error, path)) from None
    return {"model": dict(model._hyperparameters), "auto_config": copy.deepcopy(auto_config),
            "embedding_sizes_from_files": dict(getattr(model, "_embedding_sizes_from_files", {}))}


def _call_model(module, path):
    """What OpenNMT-tf does with the module: `module.model()` (here also a model instance)."""
    if "model" not in module.__dict__:
        raise _Refused("defines no `model` (OpenNMT-tf calls the file's `model`: "
                       "def model(): return opennmt.models.Transformer(...))", where=(path, None))
    builder = module.model
    if isinstance(builder, Transformer):
        model = builder
    elif callable(builder):
        model = builder()
    else:
        raise _Refused(f"`model` ({type(builder).__name__}) is not callable: OpenNMT-tf calls "
                       f"it (a function, a lambda or a model class)", where=(path, None))
    if not isinstance(model, Transformer):
        raise _Refused(f"model() returned {type(model).__name__}, not an opennmt.models.Transformer",
                       where=_definition(builder) or (path, None))
    if not hasattr(model, "_hyperparameters"):
        raise _Refused(f"{type(model).__name__}.__init__ does not call the Transformer's __init__",
                       where=_definition(type(model).__init__))
    _check_overrides(type(model))
    return model


def _check_overrides(cls):
    """A subclass may define __init__, auto_config and private helpers: any other method would
    replace OpenNMT-tf model code (call, compute_loss...) that does not run here."""
    for klass in cls.__mro__:
        if klass.__module__ == __name__:  # (the stand-in's own classes)
            break
        for name, value in vars(klass).items():
            if name.startswith("_") or name == "auto_config" or not callable(value):
                continue
            raise _Refused(f"{klass.__name__}.{name} overrides OpenNMT-tf's model code, which does "
                           f"not run in opennmt-lite (a subclass may define __init__, auto_config "
                           f"and private _helpers)", where=_definition(value))


# ----------------------------------------------------------------------------------------------
# Where: the file and line to name.


def _located(file, line, message):
    return f"{file}, line {line}: {message}" if line else f"{file}: {message}"


def _definition(function):
    """(file, first line) of a Python function, or None."""
    code = getattr(function, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code else None


def _is_user_frame(filename):
    # (not this module, not the import machinery's "<frozen importlib._bootstrap>")
    return filename != _THIS_FILE and not filename.startswith("<")


def _caller():
    """(file, line) of the innermost user code on the stack."""
    frame = sys._getframe(1)
    while frame is not None and not _is_user_frame(frame.f_code.co_filename):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame else (None, None)


def _describe(error, path):
    """One line for an exception raised while the file loads or its model is made.

    A refusal names the innermost user code that used the stand-in (the file, or a module of the
    user's it imports); any other exception the innermost line of the file itself.
    """
    frames = [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(error.__traceback__)]
    if isinstance(error, ModuleNotFoundError) and (error.name or "").startswith("opennmt."):
        error = _Refused(f"{error.name} has no meaning in opennmt-lite, which reads {SUPPORTED}")
    if isinstance(error, _Refused):
        message = str(error)
        user = [where for where in frames if _is_user_frame(where[0])]
        file, line = error.where or (user[-1] if user else (path, None))
    else:
        text = str(error).strip().splitlines()
        message = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
        own = [where for where in frames if where[0] == path]
        file, line = own[-1] if own else (path, None)
    return _located(file, line, message)


# ----------------------------------------------------------------------------------------------
# The stand-in `opennmt` package.


class _Level(int):
    """An EmbeddingsSharingLevel value: OpenNMT-tf's int, with its names."""

    def __new__(cls, value, name, level_name):
        level = super().__new__(cls, value)
        level.name, level.level_name = name, level_name
        return level

    def __repr__(self):
        return f"EmbeddingsSharingLevel.{self.name}"


class EmbeddingsSharingLevel:
    """OpenNMT-tf's levels (plain ints there too), and the opennmt-lite name of each."""

    NONE = _Level(0, "NONE", "none")
    SOURCE_TARGET_INPUT = _Level(1, "SOURCE_TARGET_INPUT", "source_target_input")
    TARGET = _Level(2, "TARGET", "target")
    ALL = _Level(3, "ALL", "all")
    AUTO = _Level(4, "AUTO", "auto")  # (all or target, decided by the vocabulary files: config.py)


class MultiHeadAttentionReduction:
    NONE = 0
    FIRST_HEAD_LAST_LAYER = 1
    AVERAGE_LAST_LAYER = 2
    AVERAGE_ALL_LAYERS = 3


class SinusoidalPositionEncoder:
    """OpenNMT-tf's sinusoidal position encoding, summed to the embeddings (its default reducer)."""

    def __init__(self, reducer=None, **kwargs):
        if reducer is not None or kwargs:
            raise _Refused("SinusoidalPositionEncoder: only the default (a sum to the embeddings, "
                           "no layer arguments) is implemented")


class WordEmbedder:
    """An embedding table; its size must be the model's num_units (OpenNMT-tf's default), or
    None: then, as in OpenNMT-tf, the size is the pretrained vectors' (data.*_embedding), which
    must be given. `dropout` is the model's embedding_dropout (one rate for both sides here)."""

    def __init__(self, embedding_size=None, dropout=0.0, **kwargs):
        if kwargs:
            raise _Refused(f"WordEmbedder: {', '.join(sorted(kwargs))} has no meaning in opennmt-lite")
        self.embedding_size = embedding_size
        self.dropout = _rate(dropout, "WordEmbedder dropout")
        self.where = _caller()


_DEFAULT_ACTIVATION = object()  # (OpenNMT-tf's tf.nn.relu, without importing TensorFlow)
# {function name in tf.nn or keras.activations: opennmt-lite's ffn_activation}
ACTIVATIONS = (("relu", "relu"), ("gelu", "gelu"), ("swish", "swish"), ("silu", "swish"))


def merge_config(a, b):
    """OpenNMT-tf's `opennmt.config.merge_config`: `b` merged into `a` in place (and returned);
    optimizer_params and decay_params are replaced whole."""
    for name, value in b.items():
        if isinstance(value, dict) and name not in REPLACED_WHOLE:
            a[name] = merge_config(a.get(name, {}), value)
        else:
            a[name] = value
    return a


class Transformer:
    """opennmt.models.Transformer: OpenNMT-tf 2.32's arguments and defaults, in its order;
    it records the hyper-parameters (`_hyperparameters`, ModelHyperparameters' names)."""

    def __init__(self, source_inputter=None, target_inputter=None, num_layers=6, num_units=512,
                 num_heads=8, ffn_inner_dim=2048, dropout=0.1, attention_dropout=0.1,
                 ffn_dropout=0.1, ffn_activation=_DEFAULT_ACTIVATION, mha_bias=True,
                 position_encoder_class=SinusoidalPositionEncoder,
                 share_embeddings=EmbeddingsSharingLevel.NONE, share_encoders=False,
                 maximum_relative_position=None,
                 attention_reduction=MultiHeadAttentionReduction.FIRST_HEAD_LAST_LAYER,
                 pre_norm=True, output_layer_bias=True, **unknown):
        if unknown:
            raise _Refused(f"Transformer() got unknown arguments: {', '.join(sorted(unknown))}")
        num_units = _integer(num_units)
        for inputter in (source_inputter, target_inputter):
            _check_inputter(inputter, num_units)
        if attention_reduction != MultiHeadAttentionReduction.FIRST_HEAD_LAST_LAYER:
            raise _Refused("attention_reduction: only FIRST_HEAD_LAST_LAYER (the default) is "
                           "implemented")
        if not isinstance(share_encoders, bool):  # (a single source: nothing to share)
            raise _Refused(f"share_encoders must be True or False, got {share_encoders!r}")
        values = dict(
            num_layers=_layers(num_layers), num_units=num_units, num_heads=_integer(num_heads),
            ffn_inner_dim=_integer(ffn_inner_dim), dropout=_rate(dropout, "dropout"),
            attention_dropout=_rate(attention_dropout, "attention_dropout"),
            ffn_dropout=_rate(ffn_dropout, "ffn_dropout"),
            ffn_activation=_activation(ffn_activation), mha_bias=_flag(mha_bias, "mha_bias"),
            maximum_relative_position=_integer(maximum_relative_position),
            pre_norm=_flag(pre_norm, "pre_norm"),
            position_encoding=_position_encoding(position_encoder_class),
            share_embeddings=_sharing(share_embeddings),
            output_layer_bias=_flag(output_layer_bias, "output_layer_bias"),
            embedding_dropout=_embedding_dropout(source_inputter, target_inputter),
            # (its layer wrappers' input dropouts: 0, reached only by params.dropout)
            layer_input_dropout=0.0)
        try:  # (AUTO is "all" or "target", both valid here, chosen when the config is loaded)
            ModelHyperparameters(**dict(values, share_embeddings=values["share_embeddings"]
                                        .replace(SHARE_EMBEDDINGS_AUTO, "all")))
        except ValueError as error:
            raise _Refused(str(error)) from None
        self._hyperparameters = values
        self._embedding_sizes_from_files = _sizes_from_files(source_inputter, target_inputter)
        self._num_units = num_units  # (OpenNMT-tf's attribute, which auto_config overrides read)

    def auto_config(self, num_replicas=1):
        """OpenNMT-tf's Transformer.auto_config (SequenceToSequence's merged under it)."""
        config = copy.deepcopy(AUTO_CONFIG)
        config["params"]["decay_params"] = {"model_dim": self._num_units,
                                            **config["params"]["decay_params"]}
        return config


def _integer(value):
    # (numpy integers too; anything else is left for ModelHyperparameters to refuse)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def _layers(num_layers):
    if isinstance(num_layers, (list, tuple)):  # OpenNMT-tf's (encoder layers, decoder layers)
        if len(num_layers) != 2 or num_layers[0] != num_layers[1]:
            raise _Refused(f"num_layers={num_layers!r}: different encoder and decoder depths are "
                           f"not implemented")
        num_layers = num_layers[0]
    return _integer(num_layers)


def _rate(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _Refused(f"{name} must be a number, got {value!r}")
    return float(value)


def _flag(value, name):
    if not isinstance(value, bool):
        raise _Refused(f"{name} must be True or False, got {value!r}")
    return value


def _check_inputter(inputter, num_units):
    if inputter is None:  # OpenNMT-tf's default: WordEmbedder(embedding_size=num_units)
        return
    if not isinstance(inputter, WordEmbedder):
        raise _Refused(f"{type(inputter).__name__} inputter: only opennmt.inputters.WordEmbedder "
                       f"is implemented")
    if inputter.embedding_size not in (None, num_units):  # (None: the pretrained file's size)
        raise _Refused(f"WordEmbedder(embedding_size={inputter.embedding_size!r}): the embedding "
                       f"size must be num_units ({num_units}) in opennmt-lite", where=inputter.where)


def _embedding_dropout(source_inputter, target_inputter):
    """The one embedding dropout rate of the two WordEmbedders (0 for a default inputter)."""
    rates = [inputter.dropout if inputter is not None else 0.0
             for inputter in (source_inputter, target_inputter)]
    if rates[0] != rates[1]:
        where = next(i.where for i in (source_inputter, target_inputter) if i is not None and i.dropout)
        raise _Refused(f"WordEmbedder dropouts {rates[0]} (source) and {rates[1]} (target): "
                       f"opennmt-lite has one embedding dropout rate for both sides", where=where)
    return rates[0]


def _sizes_from_files(source_inputter, target_inputter):
    """{side: (file, line)} of the WordEmbedders without embedding_size."""
    return {side: inputter.where for side, inputter in
            (("source", source_inputter), ("target", target_inputter))
            if inputter is not None and inputter.embedding_size is None}


def _activation(function):
    """The name of a feed-forward activation: TensorFlow's and Keras' own functions, compared by
    identity (looked up only if the file imported them: reading a file imports neither)."""
    if function is _DEFAULT_ACTIVATION:
        return "relu"
    namespaces = (getattr(sys.modules.get("tensorflow"), "nn", None),
                  getattr(sys.modules.get("keras"), "activations", None))
    for namespace in namespaces:
        for name, label in ACTIVATIONS:
            if namespace is not None and getattr(namespace, name, None) is function:
                return label
    raise _Refused(f"ffn_activation={getattr(function, '__name__', function)!r}: only tf.nn.relu, "
                   f"tf.nn.gelu (exact) and tf.nn.swish are implemented")


def _position_encoding(position_encoder_class):
    if position_encoder_class is None:
        return "none"
    encoder = position_encoder_class
    if callable(encoder) and not isinstance(encoder, type):  # (OpenNMT-tf: "or a callable")
        encoder = encoder()
    if encoder is SinusoidalPositionEncoder or isinstance(encoder, SinusoidalPositionEncoder):
        return "sinusoidal"
    raise _Refused(f"position_encoder_class={getattr(encoder, '__name__', encoder)!r}: only "
                   f"opennmt.layers.SinusoidalPositionEncoder or None is implemented")


def _sharing(level):
    if isinstance(level, _Level) and level.level_name:
        return level.level_name
    names = {int(value): value.level_name for value in vars(EmbeddingsSharingLevel).values()
             if isinstance(value, _Level) and value.level_name}
    if isinstance(level, int) and not isinstance(level, bool) and level in names:
        return names[level]
    raise _Refused(f"share_embeddings={level!r}: use EmbeddingsSharingLevel.NONE, "
                   f"SOURCE_TARGET_INPUT, TARGET, ALL or AUTO")


# The catalog (OpenNMT-tf 2.32's opennmt/models/catalog.py), its Transformer classes.
class TransformerBase(Transformer):
    pass


class TransformerBaseSharedEmbeddings(Transformer):
    def __init__(self):
        super().__init__(share_embeddings=EmbeddingsSharingLevel.ALL)


class TransformerBaseRelative(Transformer):
    def __init__(self):
        super().__init__(position_encoder_class=None, maximum_relative_position=20)


class TransformerBig(Transformer):
    def __init__(self):
        super().__init__(num_units=1024, num_heads=16, ffn_inner_dim=4096)


class TransformerBigSharedEmbeddings(Transformer):
    def __init__(self):
        super().__init__(num_units=1024, num_heads=16, ffn_inner_dim=4096,
                         share_embeddings=EmbeddingsSharingLevel.ALL)


class TransformerBigRelative(Transformer):
    def __init__(self):
        super().__init__(num_units=1024, num_heads=16, ffn_inner_dim=4096,
                         position_encoder_class=None, maximum_relative_position=20)


class TransformerTiny(Transformer):
    def __init__(self):
        super().__init__(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=64)


class ScalingNmtEnDe(Transformer):
    def __init__(self, dropout=0.3, attention_dropout=0.1):
        super().__init__(num_units=1024, num_heads=16, ffn_inner_dim=4096, pre_norm=False,
                         dropout=dropout, attention_dropout=attention_dropout, ffn_dropout=0,
                         share_embeddings=EmbeddingsSharingLevel.AUTO, output_layer_bias=False)

    def auto_config(self, num_replicas=1):
        # (the Transformer's, then the catalog's own values: see config.PRESET_AUTO_CONFIG)
        return merge_config(super().auto_config(num_replicas=num_replicas),
                            copy.deepcopy(PRESET_AUTO_CONFIG["ScalingNmtEnDe"]))


class ScalingNmtEnFr(ScalingNmtEnDe):
    def __init__(self):
        super().__init__(dropout=0.1, attention_dropout=0)

    def auto_config(self, num_replicas=1):
        differences = {"params": {"learning_rate": 0.0007}, "train": {"effective_batch_size": 655360}}
        return merge_config(super().auto_config(num_replicas=num_replicas), differences)


CATALOG = {cls.__name__: cls for cls in (
    TransformerBase, TransformerBaseSharedEmbeddings, TransformerBaseRelative, TransformerBig,
    TransformerBigSharedEmbeddings, TransformerBigRelative, TransformerTiny, ScalingNmtEnDe,
    ScalingNmtEnFr)}
# The catalog module's aliases (opennmt.models has only the generic Transformer).
CATALOG_ALIASES = {"Transformer": TransformerBase, "TransformerRelative": TransformerBaseRelative}

# {module: {name: value}}: everything the stand-in offers.
STAND_IN = {
    "opennmt": {"__version__": "2.32.0"},
    "opennmt.models": dict(CATALOG, Transformer=Transformer,
                           EmbeddingsSharingLevel=EmbeddingsSharingLevel),
    "opennmt.models.catalog": dict(CATALOG, **CATALOG_ALIASES),
    "opennmt.models.transformer": {"Transformer": Transformer},
    "opennmt.models.sequence_to_sequence": {"EmbeddingsSharingLevel": EmbeddingsSharingLevel},
    "opennmt.inputters": {"WordEmbedder": WordEmbedder},
    "opennmt.layers": {"SinusoidalPositionEncoder": SinusoidalPositionEncoder,
                       "MultiHeadAttentionReduction": MultiHeadAttentionReduction},
    "opennmt.layers.position": {"SinusoidalPositionEncoder": SinusoidalPositionEncoder},
    "opennmt.config": {"merge_config": merge_config},
    "opennmt.encoders": {},
    "opennmt.decoders": {},
}


def _module(name, attributes):
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    module.__path__ = []  # (a package: `import opennmt.x` of anything else is refused)

    def refuse(attribute):
        if attribute.startswith("_"):  # (probed by the import machinery, hasattr...)
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        raise _Refused(f"{name}.{attribute} has no meaning in opennmt-lite, which reads {SUPPORTED}")

    module.__getattr__ = refuse
    return module


@contextlib.contextmanager
def _stand_in_opennmt():
    """The stand-in in sys.modules for the duration; what was there before (the real OpenNMT-tf,
    or nothing) is put back."""
    def ours(name):
        return name == "opennmt" or name.startswith("opennmt.")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    modules = {name: _module(name, attributes) for name, attributes in STAND_IN.items()}
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


@contextlib.contextmanager
def _registered(name):
    """A fresh module under `name` in sys.modules for the duration (classes and dataclasses of
    the file look their module up there)."""
    previous = sys.modules.get(name)
    module = sys.modules[name] = types.ModuleType(name)
    try:
        yield module
    finally:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous


@contextlib.contextmanager
def _first_on_path(folder):
    """`folder` first on sys.path (the file may import its neighbours), as OpenNMT-tf does."""
    cached = folder in sys.path_importer_cache
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
        if not cached:
            sys.path_importer_cache.pop(folder, None)


_THIS_FILE = _caller.__code__.co_filename  # (as the frames name it, wherever it is installed)
