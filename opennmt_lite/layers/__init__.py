"""Keras 3 layers reproducing OpenNMT-tf's Transformer building blocks."""

from opennmt_lite.layers.attention import MultiHeadAttention, relative_positions
from opennmt_lite.layers.common import Dense, LayerNorm, LayerWrapper
from opennmt_lite.layers.position import SinusoidalPositionEncoder, sinusoidal_encoding
from opennmt_lite.layers.transformer import (
    FeedForwardNetwork,
    SelfAttentionDecoderLayer,
    SelfAttentionEncoderLayer,
    TransformerLayerWrapper,
)
