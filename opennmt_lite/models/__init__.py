"""The model: word embeddings, the self-attention encoder and decoder, the Transformer."""

from opennmt_lite.models.decoders import SelfAttentionDecoder
from opennmt_lite.models.encoders import SelfAttentionEncoder
from opennmt_lite.models.inputters import WordEmbedder
from opennmt_lite.models.transformer import Transformer
