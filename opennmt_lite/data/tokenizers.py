"""Tokenizers (text <-> tokens) and SentencePiece training.

OpenNMT-tf's tokenizers (its `type` names in brackets):

* `SpaceTokenizer` (SpaceTokenizer, our `space`): the text is already tokenized; tokens are
  separated by ASCII whitespace (space, tab, `\\n`, `\\r`, `\\v`, `\\f`), exactly what
  `tf.strings.split` (OpenNMT-tf's SpaceTokenizer) does. Other Unicode spaces (e.g. U+00A0)
  stay inside tokens.
* `SentencePieceTokenizer` (SentencePieceTokenizer, our `sentencepiece`): raw text is encoded
  to SentencePiece pieces (no sampling).
* `OpenNMTTokenizer` (OpenNMTTokenizer): the OpenNMT Tokenizer (`pyonmttok`), every option
  passed through, tokenizing without sampling (`training=False`).
* `CharacterTokenizer` (CharacterTokenizer): one token per Unicode character, spaces as `▁`.
"""

import contextlib
import logging
import os
import re

import sentencepiece as spm

from opennmt_lite.data import fingerprints
from opennmt_lite.data.vocab import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, UNK_TOKEN, Vocabulary
from opennmt_lite.errors import MissingFileError, UserError
from opennmt_lite.files import PARTIAL, Staging

logger = logging.getLogger("opennmt_lite")



class TokenizerError(UserError, ValueError):
    """A tokenizer that cannot be configured, loaded or trained as asked."""


_ASCII_WHITESPACE = re.compile("[ \t\n\r\x0b\x0c]+")


class SpaceTokenizer:
    """Pre-tokenized text: split on ASCII whitespace, join with one space."""

    def tokenize(self, text):
        return [token for token in _ASCII_WHITESPACE.split(text) if token]

    def tokenize_batch(self, lines):
        split = _ASCII_WHITESPACE.split
        return [[token for token in split(line) if token] for line in lines]

    def detokenize(self, tokens):
        return " ".join(tokens)

    def __repr__(self):
        return "SpaceTokenizer()"


class SentencePieceTokenizer:
    """Encodes raw text to SentencePiece pieces with a trained model (no sampling)."""

    def __init__(self, model_path, num_threads=None):
        model_path = os.fspath(model_path)
        if not os.path.isfile(model_path):
            raise MissingFileError(f"SentencePiece model not found: {model_path}")
        self.model_path = model_path
        self.num_threads = num_threads if num_threads is not None else min(os.cpu_count() or 1, 8)
        self.processor = spm.SentencePieceProcessor()
        try:
            self.processor.Load(model_file=model_path)
        except (RuntimeError, OSError) as error:
            raise TokenizerError(f"cannot load SentencePiece model {model_path}: {error}") from None

    def tokenize(self, text):
        return self.processor.encode(text, out_type=str)

    def tokenize_batch(self, lines):
        lines = list(lines)
        if not lines:
            return []
        return self.processor.encode(lines, out_type=str, num_threads=self.num_threads)

    def detokenize(self, tokens):
        return self.processor.decode(list(tokens))

    def normalize(self, text):
        """The text as the model sees it: decode(encode(text)) (NFKC, spaces squeezed...)."""
        return self.processor.decode(self.processor.encode(text))

    def pieces(self):
        """The model's pieces in id order."""
        return [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]

    def __repr__(self):
        return f"SentencePieceTokenizer({self.model_path!r})"


class CharacterTokenizer:
    """One token per Unicode character; a space becomes the token `▁` (OpenNMT-tf's
    CharacterTokenizer: `list(text.replace(" ", "▁"))`, joined back with `▁` -> space)."""

    def tokenize(self, text):
        return list(text.replace(" ", "\u2581"))

    def tokenize_batch(self, lines):
        return [list(line.replace(" ", "\u2581")) for line in lines]

    def detokenize(self, tokens):
        return "".join(tokens).replace("\u2581", " ")

    def __repr__(self):
        return "CharacterTokenizer()"


# pyonmttok's constructor reports an unknown or mistyped option as a TypeError listing its whole
# signature: the `name: type = default` entries are read from that message.
_SIGNATURE_ENTRY = re.compile(r"(\w+): ([\w.| \[\]]+?)(?: = [^,)]*)?(?=, |\))")


class OpenNMTTokenizer:
    """The OpenNMT Tokenizer (`pyonmttok.Tokenizer(**options)`), as OpenNMT-tf's
    OpenNMTTokenizer: `mode` defaults to "conservative", `case_feature` is refused. Tokenizes
    with `training=False` (no subword sampling: the training data is tokenized once).

    `name` is the config key named in errors (e.g. "data.source_tokenization.params"): an
    unknown option, a value of the wrong type, or pyonmttok's own refusal (an invalid mode, a
    missing model file) raises TokenizerError naming it."""

    def __init__(self, options=None, name="OpenNMTTokenizer params"):
        import pyonmttok

        options = dict(options or {})
        if options.get("case_feature"):
            raise TokenizerError(f"{name}.case_feature: not supported (as in OpenNMT-tf: token "
                                 "features are not model inputs)")
        options.setdefault("mode", "conservative")
        self.options = options
        self.name = name
        try:
            self.tokenizer = pyonmttok.Tokenizer(**options)
        except TypeError as error:
            raise TokenizerError(self._explain(str(error))) from None
        except (ValueError, RuntimeError) as error:
            raise TokenizerError(f"{name}: {str(error).splitlines()[0]}") from None

    def _explain(self, message):
        """One line from pyonmttok's TypeError: the unknown option (with a close match) or the
        option whose value has the wrong type."""
        import difflib

        signature = message.split("\n")[1] if "\n" in message else message
        expected = dict(_SIGNATURE_ENTRY.findall(signature))
        unknown = [key for key in self.options if key not in expected]
        if unknown and expected:
            close = difflib.get_close_matches(unknown[0], list(expected), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return (f"{self.name}.{unknown[0]}: unknown OpenNMT Tokenizer option{hint}; see "
                    "https://github.com/OpenNMT/Tokenizer/blob/master/docs/options.md")
        for key, value in self.options.items():
            kind = expected.get(key, "")
            simple = {"bool": bool, "str": str}.get(kind.split(" |")[0])
            if simple is not None and not isinstance(value, simple):
                return f"{self.name}.{key}: expected {kind}, got {value!r}"
            if "Supports" in kind and (isinstance(value, (bool, str)) or value is None):
                return f"{self.name}.{key}: expected a number, got {value!r}"
        return f"{self.name}: pyonmttok refused {self.options}: {message.splitlines()[0]}"

    def tokenize(self, text):
        return self.tokenizer.tokenize(text, training=False)[0]

    def tokenize_batch(self, lines):
        lines = list(lines)
        if not lines:
            return []
        return self.tokenizer.tokenize_batch(lines, training=False)[0]

    def detokenize(self, tokens):
        return self.tokenizer.detokenize(list(tokens))

    def __repr__(self):
        return f"OpenNMTTokenizer({self.options!r})"


TOKENIZER_CLASSES = (SpaceTokenizer, SentencePieceTokenizer, OpenNMTTokenizer, CharacterTokenizer)


def make_tokenizer(config=None, name="tokenizer"):
    """A tokenizer from a configuration.

    None (or `{"type": "space"}`) -> SpaceTokenizer; `{"type": "sentencepiece", "model": path}`
    -> SentencePieceTokenizer; `{"type": "opennmt", "params": {...}}` -> OpenNMTTokenizer;
    `{"type": "character"}` -> CharacterTokenizer (OpenNMT-tf's type names are accepted too).
    A tokenizer object is returned as is. The training options of a SentencePiece
    configuration (vocabulary_size, model_type, character_coverage) are accepted and unused
    here. `name` (the config key) is named in the OpenNMT Tokenizer's errors.
    """
    if config is None:
        return SpaceTokenizer()
    if isinstance(config, TOKENIZER_CLASSES):
        return config
    if not isinstance(config, dict):
        raise TokenizerError(f"tokenizer configuration must be a mapping or None, got {config!r}")
    kind = str(config.get("type", "")).lower()
    if kind in ("space", "spacetokenizer", "character", "charactertokenizer"):
        unknown = set(config) - {"type"}
        if unknown:
            raise TokenizerError(f"unknown option(s) {sorted(unknown)} for the {kind} tokenizer")
        return SpaceTokenizer() if kind.startswith("space") else CharacterTokenizer()
    if kind in ("opennmt", "opennmttokenizer"):
        unknown = set(config) - {"type", "params"}
        if unknown:
            raise TokenizerError(f"unknown option(s) {sorted(unknown)} for the OpenNMT tokenizer "
                                 "(its options go under 'params')")
        return OpenNMTTokenizer(config.get("params"), name=f"{name}.params")
    if kind in ("sentencepiece", "sentencepiecetokenizer"):
        unknown = set(config) - {"type", "model", "num_threads", "vocabulary_size", "model_type",
                                 "character_coverage"}
        if unknown:
            raise TokenizerError(f"unknown option(s) {sorted(unknown)} for the sentencepiece tokenizer")
        if not config.get("model"):
            raise TokenizerError("sentencepiece tokenizer: the 'model' option (model file) is required")
        return SentencePieceTokenizer(config["model"], num_threads=config.get("num_threads"))
    raise TokenizerError(
        f"unknown tokenizer type {config.get('type')!r} (expected 'sentencepiece', 'space', "
        "'opennmt' or 'character')"
    )


def train_sentencepiece(
    input_files,
    model_prefix,
    vocab_size,
    model_type="unigram",
    character_coverage=1.0,
    seed=1234,
    num_threads=2,
    vocabulary_path=None,
    hard_vocab_limit=True,
    extra_options=None,
    staging=None,
):
    """Trains a SentencePiece model and writes its OpenNMT-tf vocabulary.

    Writes `model_prefix.model` and `model_prefix.vocab` (SentencePiece's own piece<TAB>score
    list) and the OpenNMT-tf vocabulary `vocabulary_path` (default `model_prefix.onmt.vocab`):
    `<blank>`, `<s>`, `</s>`, then the model's pieces in id order without `<unk>`. This is the
    conversion `onmt-build-vocab --sentencepiece` does (it drops SentencePiece's `<unk>`, `<s>`
    and `</s>`; `<unk>` becomes the out-of-vocabulary id). Returns (model path, Vocabulary).

    Pieces only: the model has `<unk>` (id 0) and no `<s>`/`</s>`/pad pieces, so all its other
    vocab_size - 1 entries are real pieces and the vocabulary file has vocab_size + 2 lines
    (vocab_size + 3 embedding rows). `onmt-build-vocab --sentencepiece --size N` instead trains
    with SentencePiece's default `<s>`/`</s>` control pieces and writes N lines of which N - 3 are
    pieces: `vocab_size = N - 2` here gives the same number of pieces.

    Deterministic: all sentences are used in file order (input_sentence_size=0, no shuffling),
    the random generator is seeded, and the input/prefix paths stored in the model are reduced to
    base names, so two runs on the same data with the same num_threads give byte-identical files.
    The model does depend on num_threads (scores differ in the last digits between 1 and 2
    threads), hence its fixed default.

    `hard_vocab_limit=False` lets SentencePiece stop below vocab_size when the data holds too
    few candidates (SentencePiece raises an error otherwise, which is re-raised naming the files).

    Nothing is written in place: the files go to temporary names, with the vocabulary's
    fingerprint (`opennmt_lite.data.fingerprints`), and are renamed onto their real names at the
    end, or by the caller's `staging` (an `opennmt_lite.files.Staging`, committed with
    `fingerprints.commit`) to replace the files of several models together.
    """
    if isinstance(input_files, (str, os.PathLike)):
        input_files = [input_files]
    input_files = [os.fspath(path) for path in input_files]
    if not input_files:
        raise TokenizerError("train_sentencepiece: at least one input file is required")
    for path in input_files:
        if not os.path.isfile(path):
            raise MissingFileError(f"SentencePiece training file not found: {path}")
        if "," in path:
            raise TokenizerError(f"SentencePiece cannot read a file whose path has a comma: {path}")
    if model_type not in ("unigram", "bpe", "char", "word"):
        raise TokenizerError(f"unknown SentencePiece model_type {model_type!r}")
    model_prefix = os.fspath(model_prefix)
    if vocabulary_path is None:
        vocabulary_path = model_prefix + ".onmt.vocab"
    vocabulary_path = os.fspath(vocabulary_path)
    own_staging = staging is None
    staging = Staging() if own_staging else staging
    model_path = model_prefix + ".model"
    # SentencePiece writes <prefix>.model and <prefix>.vocab: a temporary prefix, then moved to
    # the staged names.
    training_prefix = model_prefix + PARTIAL
    directory = os.path.dirname(model_prefix)
    if directory:
        os.makedirs(directory, exist_ok=True)
    options = dict(
        input=",".join(input_files),
        model_prefix=training_prefix,
        vocab_size=int(vocab_size),
        model_type=model_type,
        character_coverage=float(character_coverage),
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=int(num_threads),
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        hard_vocab_limit=bool(hard_vocab_limit),
        minloglevel=2,
    )
    options.update(extra_options or {})
    if seed is not None:
        spm.set_random_generator_seed(int(seed))
    try:
        spm.SentencePieceTrainer.train(**options)
    except RuntimeError as error:
        raise TokenizerError(
            f"SentencePiece training on {', '.join(input_files)} (vocab_size={vocab_size}, "
            f"model_type={model_type}) failed: {error}"
        ) from None
    try:
        staged_model = staging.path(model_path)
        os.replace(training_prefix + ".model", staged_model)
        staged_pieces = staging.path(model_prefix + ".vocab")
        os.replace(training_prefix + ".vocab", staged_pieces)
        _strip_paths(staged_model, os.path.basename(model_prefix), model_path)
        try:
            processor = spm.SentencePieceProcessor(model_file=staged_model)
        except (RuntimeError, OSError):
            raise _not_whole(model_path) from None
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        _check_whole(staged_pieces, len(pieces), model_prefix + ".vocab")
        vocabulary = Vocabulary(sentencepiece_to_vocabulary_tokens(pieces, processor), path=None)
        vocabulary.save(staging.path(vocabulary_path))
        with open(staging.path(fingerprints.fingerprint_path(vocabulary_path), last=True), "w",
                  encoding="utf-8") as stream:
            stream.write(fingerprints.fingerprint(staged_model))
        if own_staging:
            fingerprints.commit(staging, [vocabulary_path])
    except BaseException:
        staging.discard()
        for extension in (".model", ".vocab"):  # (left there if the move above failed)
            with contextlib.suppress(OSError):
                os.remove(training_prefix + extension)
        raise
    vocabulary.path = vocabulary_path
    logger.info(
        "SentencePiece %s model %s: %d pieces; OpenNMT-tf vocabulary %s: %d lines",
        model_type, model_path, len(pieces), vocabulary_path, vocabulary.size,
    )
    return model_path, vocabulary


def _not_whole(path):
    from opennmt_lite.errors import OutputError

    return OutputError(f"SentencePiece wrote {path} only in part (no space left or a file-size "
                       "limit?): the previous files are kept")


def _check_whole(path, pieces, final_path):
    """SentencePiece's `.vocab` file has one line per piece, unless its write was cut short."""
    with open(path, "rb") as stream:
        if stream.read().count(b"\n") != pieces:
            raise _not_whole(final_path)


def sentencepiece_to_vocabulary_tokens(pieces, processor=None):
    """OpenNMT-tf vocabulary lines for SentencePiece pieces in id order: the three special tokens,
    then every piece except `<unk>`, `<s>` and `</s>` (and other control/unused pieces when the
    processor is given)."""
    tokens = list((PAD_TOKEN, BOS_TOKEN, EOS_TOKEN))
    for index, piece in enumerate(pieces):
        if piece in (UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN):
            continue
        if processor is not None and (processor.is_control(index) or processor.is_unknown(index)):
            continue
        tokens.append(piece)
    return tokens


def _strip_paths(model_path, prefix_name, final_path):
    """Replaces the input paths recorded in a model by their base names, and its prefix by
    `prefix_name`, so that the file does not depend on where (or under which temporary name) it
    was trained. `final_path`: the model's name in errors."""
    proto = _parsed_model(model_path, final_path)
    spec = proto.trainer_spec
    inputs = [os.path.basename(path) for path in spec.input]
    del spec.input[:]
    spec.input.extend(inputs)
    spec.model_prefix = prefix_name
    _rewrite_model(proto, model_path, final_path)


def _parsed_model(model_path, final_path):
    """The ModelProto of a model SentencePiece just wrote; an OutputError naming `final_path`
    when the file was cut short."""
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as stream:
        data = stream.read()
    try:
        proto.ParseFromString(data)
    except DecodeError:  # SentencePiece does not report a failed write: a cut file shows here
        raise _not_whole(final_path) from None
    if not proto.pieces:  # (cut before its first piece: an empty file parses)
        raise _not_whole(final_path)
    return proto


def _rewrite_model(proto, model_path, final_path):
    try:
        with open(model_path, "wb") as stream:
            stream.write(proto.SerializeToString())
    except OSError as error:  # (a failed write names no file)
        raise OSError(error.errno, error.strerror, final_path) from None


def check_trained_model(model_path, pieces_path, final_prefix):
    """Checks that SentencePiece wrote the model `model_path` and its piece list `pieces_path`
    (`<prefix>.vocab`) whole, under temporary names (an OutputError naming
    `<final_prefix>.model` or `.vocab` if not: SentencePiece does not report a failed write),
    and records `final_prefix` in the model as the prefix it was trained under."""
    final_model = final_prefix + ".model"
    proto = _parsed_model(model_path, final_model)
    proto.trainer_spec.model_prefix = final_prefix
    _rewrite_model(proto, model_path, final_model)
    try:
        processor = spm.SentencePieceProcessor(model_file=model_path)
    except (RuntimeError, OSError):
        raise _not_whole(final_model) from None
    _check_whole(pieces_path, processor.get_piece_size(), final_prefix + ".vocab")
