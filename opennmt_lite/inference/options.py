"""How to decode: the token ids decoding relies on, `DecodingOptions` and `DecodingResult`.

Plain Python and NumPy (no TensorFlow, no Keras), shared by the TensorFlow loop
(`inference/decoding.py`), the portable one that Keras' JAX backend compiles
(`inference/portable_decoding.py`), the config's builder and the exports.
"""

import dataclasses
import typing

import numpy as np

from opennmt_lite.data.noise import WordNoiser

PAD_ID = 0
START_ID = 1
END_ID = 2
# Added to the `</s>` logit before the minimum decoding length (OpenNMT-tf's value).
END_PENALTY = -1e7
FLOAT32_MAX = np.float32(np.finfo(np.float32).max)


class DecodingResult(typing.NamedTuple):
    """What a decoding returns (tensors of the backend that decoded, or NumPy arrays): see
    decoding.py's docstring for the shapes."""

    ids: typing.Any
    lengths: typing.Any
    log_probs: typing.Any
    attention: typing.Any = None
    onmt_attention: typing.Any = None


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How to decode, OpenNMT-tf's `params`/`infer` keys of the same names; checked when made.

    beam_width 1 is greedy search (length_penalty is then ignored, as in OpenNMT-tf); n_best
    hypotheses are returned per source (at most beam_width); maximum_decoding_length bounds the
    steps (`</s>` included), minimum_decoding_length forbids `</s>` before that many steps;
    coverage_penalty (beam search only) re-ranks finished hypotheses by their source coverage;
    sampling_topk != 1 draws the next tokens at random from the sampling_topk best (0: from
    all) at sampling_temperature, seeded by `seed`; decoding_noise drops, replaces or moves
    words of the translations (`noiser`).
    """

    beam_width: int = 1
    length_penalty: float = 0.0
    n_best: int = 1
    maximum_decoding_length: int = 250
    minimum_decoding_length: int = 0
    coverage_penalty: float = 0.0
    sampling_topk: int = 1
    sampling_temperature: float = 1.0
    seed: int = 0
    # Applied to the decoded tokens (inference/translate.py), from the decoder's alignment:
    replace_unknown_target: bool = False
    # Applied to the decoded tokens after that (inference/translate.py; not in the SavedModel):
    # ((module name, (arguments...)), ...) of opennmt_lite.data.noise, drawn with `seed`, over
    # the words that decoding_subword_token cuts.
    decoding_noise: tuple = ()
    decoding_subword_token: str = "￭"
    decoding_subword_token_is_spacer: typing.Optional[bool] = None

    def __post_init__(self):
        beam_width, n_best = self.beam_width, self.n_best
        if int(beam_width) != beam_width or beam_width < 1:
            raise ValueError(f"beam_width must be a positive integer, got {beam_width!r}")
        if int(n_best) != n_best or not 1 <= n_best <= beam_width:
            raise ValueError(f"n_best must be an integer in [1, beam_width={beam_width}], got {n_best!r}")
        if int(self.sampling_topk) != self.sampling_topk or self.sampling_topk < 0:
            raise ValueError(f"sampling_topk must be a non-negative integer (0: sample from the "
                             f"whole distribution), got {self.sampling_topk!r}")
        if not self.sampling_temperature > 0:
            raise ValueError(f"sampling_temperature must be positive, got "
                             f"{self.sampling_temperature!r}")
        for name in ("maximum_decoding_length", "minimum_decoding_length"):
            value = getattr(self, name)
            if int(value) != value or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        self.noiser()  # (an unknown module or bad arguments fail here, not mid-file)

    def noiser(self):
        """The `WordNoiser` of decoding_noise, or None without it."""
        if not self.decoding_noise:
            return None
        return WordNoiser.from_config(self.decoding_noise, self.decoding_subword_token,
                                      self.decoding_subword_token_is_spacer)

    def token_noise(self):
        """tokens -> tokens: decoding_noise applied to each hypothesis in turn, its draws from
        one generator seeded by `seed` (a new one at each call, so a pass repeats); the tokens
        unchanged without decoding_noise. What infer, infer --ctranslate2 and evaluation apply."""
        noiser = self.noiser()
        if noiser is None:
            return lambda tokens: tokens
        draws = np.random.default_rng(self.seed)
        return lambda tokens: noiser(tokens, draws)
