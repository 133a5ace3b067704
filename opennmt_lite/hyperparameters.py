"""The model's hyper-parameters: one frozen carrier, each name and default written once, and
OpenNMT-tf 2.32's catalog presets.

Plain Python (no TensorFlow, no Keras): the config builds a `ModelHyperparameters` from its
`model` section when a YAML file is loaded, and the builder hands it to the Transformer, which
hands it to its encoder, decoder and their layers (each layer's `get_config` stores it as a
dict, `from_dict` rebuilds it). The exports, OpenNMT-tf import and the inspector read it there.
"""

import dataclasses

SHARE_EMBEDDINGS = ("none", "source_target_input", "target", "all")
# OpenNMT-tf's EmbeddingsSharingLevel.AUTO, a config value only: "all" when the source and target
# vocabularies are the same file (as the config names them), else "target" (resolved by config.py).
SHARE_EMBEDDINGS_AUTO = "auto"
# "auto": none with relative positions (OpenNMT-tf's TransformerRelative), sinusoidal without.
# A new absolute encoding is named here and made in opennmt_lite/layers/position.py.
POSITION_ENCODINGS = ("auto", "sinusoidal", "none")
FFN_ACTIVATIONS = ("relu", "gelu", "swish")
# The sizes a model cannot do without: the config asks for them (or a preset), never defaults them.
ARCHITECTURE = ("num_layers", "num_units", "num_heads", "ffn_inner_dim")


@dataclasses.dataclass(frozen=True)
class ModelHyperparameters:
    """OpenNMT-tf's Transformer hyper-parameters, with its defaults (TransformerBase).

    share_embeddings: "none"; "source_target_input" (one table for source and target inputs,
    which then need the same vocabulary); "target" (target input table = output projection);
    "all" (both). maximum_relative_position: None, or the clipping distance of relative position
    representations in self-attention (Shaw et al., 2018). position_encoding: see
    POSITION_ENCODINGS and `absolute_position_encoding`.
    """

    num_layers: int = 6
    num_units: int = 512
    num_heads: int = 8
    ffn_inner_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.1
    ffn_dropout: float = 0.1
    ffn_activation: str = "relu"
    mha_bias: bool = True
    maximum_relative_position: int = None
    pre_norm: bool = True
    position_encoding: str = "auto"
    share_embeddings: str = "none"
    output_layer_bias: bool = True
    # OpenNMT-tf's WordEmbedder dropout and TransformerLayerWrapper input dropout (applied to a
    # sub-layer's input, after the pre-norm): 0 in its Transformer; OpenNMT-tf's params.dropout
    # sets them with the others.
    embedding_dropout: float = 0.0
    layer_input_dropout: float = 0.0

    def __post_init__(self):
        for name in ARCHITECTURE:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_units % self.num_heads != 0:
            raise ValueError(
                f"num_units ({self.num_units}) must be divisible by num_heads ({self.num_heads})")
        # (a rate of 1 or more would divide by zero in dropout's 1 / (1 - rate) scaling)
        for name in ("dropout", "attention_dropout", "ffn_dropout", "embedding_dropout",
                     "layer_input_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name, choices in (("ffn_activation", FFN_ACTIVATIONS),
                              ("position_encoding", POSITION_ENCODINGS),
                              ("share_embeddings", SHARE_EMBEDDINGS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        relative = self.maximum_relative_position
        if relative is not None and (isinstance(relative, bool) or not isinstance(relative, int)
                                     or relative < 1):
            raise ValueError(f"maximum_relative_position must be None or a positive integer, "
                             f"got {relative!r}")

    @property
    def absolute_position_encoding(self):
        """What the stacks add to their embeddings: "sinusoidal" or "none" ("auto" resolved).
        Relative positions (maximum_relative_position) act in self-attention, independently."""
        if self.position_encoding == "auto":
            return "none" if self.maximum_relative_position else "sinusoidal"
        return self.position_encoding

    @property
    def shares_input_embeddings(self):
        """One embedding table for the source and the target inputs."""
        return self.share_embeddings in ("source_target_input", "all")

    @property
    def shares_output_embedding(self):
        """The output projection is the transposed target input table."""
        return self.share_embeddings in ("target", "all")

    def to_dict(self):
        """{name: value} of every hyper-parameter (JSON types: for Keras' get_config)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        """The carrier of `to_dict()`'s output; names missing take their default."""
        unknown = sorted(set(values) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown model hyper-parameters: {', '.join(unknown)}")
        return cls(**values)


# OpenNMT-tf 2.32's opennmt/models/catalog.py, hyper-parameter for hyper-parameter: the values
# a preset sets (the others keep the carrier's defaults).
_BASE = dict(num_layers=6, num_units=512, num_heads=8, ffn_inner_dim=2048, dropout=0.1,
             attention_dropout=0.1, ffn_dropout=0.1, maximum_relative_position=None,
             pre_norm=True, share_embeddings="none")
_BIG = dict(_BASE, num_units=1024, num_heads=16, ffn_inner_dim=4096)
_SCALING = dict(_BIG, pre_norm=False, dropout=0.3, attention_dropout=0.1, ffn_dropout=0.0,
                share_embeddings=SHARE_EMBEDDINGS_AUTO, output_layer_bias=False)
PRESETS = {
    "Transformer": dict(_BASE),
    "TransformerBase": dict(_BASE),
    "TransformerBig": dict(_BIG),
    "TransformerRelative": dict(_BASE, maximum_relative_position=20),
    "TransformerBaseRelative": dict(_BASE, maximum_relative_position=20),
    "TransformerBigRelative": dict(_BIG, maximum_relative_position=20),
    "TransformerBaseSharedEmbeddings": dict(_BASE, share_embeddings="all"),
    "TransformerBigSharedEmbeddings": dict(_BIG, share_embeddings="all"),
    # Ott et al. (2018), fairseq's transformer_wmt_en_de_big: post-norm, no output-layer bias,
    # embeddings shared as EmbeddingsSharingLevel.AUTO (see SHARE_EMBEDDINGS_AUTO). Their
    # auto_config (the source `</s>`, Adam, InvSqrtDecay...) is in config.py.
    "ScalingNmtEnDe": _SCALING,
    "ScalingNmtEnFr": dict(_SCALING, dropout=0.1, attention_dropout=0.0),
    "TransformerTiny": dict(_BASE, num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=64),
}
# OpenNMT-tf's LanguageModel of the catalog: a decoder without source, learned positions, the
# tanh gelu (its `type` and these two keys are the config's model section's, not
# hyper-parameters: see config.NOT_HYPERPARAMETERS). Apart from PRESETS, the Transformers.
LANGUAGE_MODEL_PRESETS = {
    "GPT2Small": dict(_BASE, num_layers=12, num_units=768, num_heads=12, ffn_inner_dim=3072,
                      ffn_activation="gelu", type="language_model", maximum_position=1024,
                      gelu_approximation=True),
}

