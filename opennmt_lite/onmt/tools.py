"""OpenNMT-tf 2.32's helper commands, with its options and its outputs: `onmt-build-vocab`,
`onmt-tokenize-text`, `onmt-detokenize-text`, `onmt-merge-config`.

Each function is a console command: it takes the arguments (default: the process's), returns the
exit status, and prints a user error as one line `error: ...` with status 2, without a
traceback (anything else is a bug: its traceback, status 1, as the `opennmt-lite` command).
The tokenizer configurations (`--tokenizer_config`: a YAML file or a JSON string) are read as
the `data.*_tokenization` section reads them (OpenNMT-tf's types and params), so a sampling
option (`bpe_dropout`, `sp_nbest_size`, SentencePieceTokenizer's `nbest_size`) is refused:
OpenNMT-tf's onmt-tokenize-text samples with it, one draw per run.
"""

import argparse
import math
import os
import sys

from opennmt_lite.config import integer_option  # (plain Python: no TensorFlow)
from opennmt_lite.errors import ArgumentError, UserError

# OpenNMT-tf's special tokens, in its vocabulary files' order (opennmt.constants).
PADDING_TOKEN, START_TOKEN, END_TOKEN = "<blank>", "<s>", "</s>"
# SentencePiece's own special pieces, left out when its .vocab is read as a vocabulary.
SENTENCEPIECE_SPECIALS = ("<unk>", "<s>", "</s>")
NUM_OOV_BUCKETS = 1  # the <unk> id added after the last line at training time


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line is one line, `error: ...` (then exit 2), as every
    other user error of these commands."""

    def error(self, message):
        self.exit(2, f"error: {message}\n")


def _parser(prog, description):
    return _Parser(prog=prog, description=description,
                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def _run(parser, action, argv, tensorflow=True):
    """Parses `argv` with `parser`, runs `action(args)`; returns the exit status. `tensorflow`:
    the action imports it (the data package does), without its start-up lines."""
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit:  # --help (0) or a bad option (2), already printed by argparse
        return exit.code
    from opennmt_lite.cli import guarded, import_tensorflow_quietly

    if tensorflow:
        import_tensorflow_quietly()

    def run_action():
        try:
            action(args)
        except BrokenPipeError:  # the reader (e.g. `head`) is gone: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError as error:  # an input or output file the user named
            from opennmt_lite.outputs import describe

            where = f"{error.filename}: " if error.filename else ""
            raise FileAccessError(f"{where}{describe(error)}") from None

    return guarded(run_action, parser.prog)


class FileAccessError(UserError, OSError):
    """An input or output file named on the command line that cannot be read or written."""


def _tokenizer(config):
    """The tokenizer of OpenNMT-tf's `--tokenizer_config` (a YAML file, a JSON string; nothing:
    split on spaces), read as the config's `data.source_tokenization` is."""
    from opennmt_lite import build

    if not config:
        return build.tokenizer(None)
    from opennmt_lite.config import command_line_tokenization

    return build.tokenizer(command_line_tokenization(config), "--tokenizer_config")


def _stdin_lines():
    """Standard input's lines as text (UTF-8, whatever the locale), without their line end."""
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            yield raw.rstrip(b"\n").decode("utf-8")
        except UnicodeDecodeError as error:
            raise ArgumentError(f"standard input, line {number}: invalid UTF-8 ({error.reason})") from None


def _print_line(text):
    # (surrogateescape: a --delimiter given as bytes that are not UTF-8 reaches argv as lone
    # surrogates, and is printed back as those bytes, as a byte-oriented tool would)
    _write_out(text.encode("utf-8", "surrogateescape") + b"\n")


def _write_out(data):
    """Writes `data` to standard output at once; a failed write (a full disk under `> file`)
    names the file it is redirected to."""
    from opennmt_lite.outputs import standard_output_name

    try:
        sys.stdout.flush()  # (text printed before, in order)
        out, remaining = sys.stdout.buffer, memoryview(data)
        while remaining:  # (unbuffered, under PYTHONUNBUFFERED: a partial write returns a count)
            written = out.write(remaining)
            remaining = remaining[written or 0:]
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        if error.filename is not None or not error.errno:
            raise
        raise OSError(error.errno, error.strerror, standard_output_name()) from None


def _strip(tokenizer):
    """How OpenNMT-tf strips an input line: Python's str.strip for the OpenNMT Tokenizer, ASCII
    whitespace only (tf.strings.strip) for its TensorFlow tokenizers."""
    from opennmt_lite.data.tokenizers import OpenNMTTokenizer

    if isinstance(tokenizer, OpenNMTTokenizer):
        return str.strip
    return lambda line: line.strip(" \t\n\r\x0b\x0c")


# --- onmt-tokenize-text / onmt-detokenize-text ---------------------------------------------

def _stream_parser(prog, description, delimiter_help):
    parser = _parser(prog, description)
    parser.add_argument("--delimiter", default=" ", help=delimiter_help)
    parser.add_argument("--tokenizer_config", default=None,
                        help="tokenization configuration: a YAML file or a JSON string")
    return parser


def tokenize_text_parser():
    return _stream_parser("onmt-tokenize-text", "Tokenizes standard input, one sentence a line.",
                          "token delimiter for text serialization")


def tokenize_text(argv=None):
    """`onmt-tokenize-text`: standard input, one sentence per line, to its tokens joined by
    --delimiter on standard output."""
    parser = tokenize_text_parser()

    def action(args):
        tokenizer = _tokenizer(args.tokenizer_config)
        strip = _strip(tokenizer)
        for line in _stdin_lines():
            _print_line(args.delimiter.join(tokenizer.tokenize(strip(line))))

    return _run(parser, action, argv)


def detokenize_text_parser():
    return _stream_parser("onmt-detokenize-text", "Detokenizes standard input, one sentence a line.",
                          "token delimiter used in text serialization")


def detokenize_text(argv=None):
    """`onmt-detokenize-text`: standard input, tokens joined by --delimiter, to detokenized text
    on standard output."""
    parser = detokenize_text_parser()

    def action(args):
        if not args.delimiter:
            raise ArgumentError("--delimiter: must not be empty")
        tokenizer = _tokenizer(args.tokenizer_config)
        strip = _strip(tokenizer)
        for line in _stdin_lines():
            _print_line(tokenizer.detokenize(strip(line).split(args.delimiter)))

    return _run(parser, action, argv)


# --- onmt-merge-config ----------------------------------------------------------------------

def merge_config_parser():
    parser = _parser("onmt-merge-config", "Merges configuration files, left to right, and prints the result.")
    parser.add_argument("config", nargs="+", help="configuration files")
    return parser


def merge_config(argv=None):
    """`onmt-merge-config`: the YAML configuration files merged left to right (mappings merged
    key by key, `optimizer_params` and `decay_params` replaced whole), printed as YAML."""
    parser = merge_config_parser()

    def action(args):
        import yaml

        from opennmt_lite.config import merge

        merged = {}
        for path in args.config:
            try:
                with open(path, encoding="utf-8") as stream:
                    content = yaml.safe_load(stream)
            except UnicodeDecodeError as error:
                raise ArgumentError(f"{path}: not UTF-8 text ({error.reason})") from None
            except yaml.YAMLError as error:
                mark = getattr(error, "problem_mark", None)
                where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
                problem = getattr(error, "problem", None) or str(error).splitlines()[0]
                raise ArgumentError(f"{path}: invalid YAML{where}: {problem}") from None
            if content is None:  # an empty file adds nothing
                continue
            if not isinstance(content, dict):
                raise ArgumentError(f"{path}: a configuration must be a mapping, got "
                                    f"{type(content).__name__}")
            merged = merge(merged, content)
        # As OpenNMT-tf prints it: yaml.dump's keys sorted, block style, and print's own newline.
        _write_out((yaml.dump(merged, default_flow_style=False) + "\n").encode("utf-8"))

    return _run(parser, action, argv, tensorflow=False)


# --- onmt-build-vocab -----------------------------------------------------------------------

def build_vocab_parser():
    parser = _parser("onmt-build-vocab", "Builds a word vocabulary, or a SentencePiece model and its vocabulary.")
    parser.add_argument("data", nargs="*", help="data files")
    parser.add_argument("--from_vocab", default=None,
                        help="start from this saved vocabulary (see --from_format)")
    parser.add_argument("--from_format", default="default", choices=["default", "sentencepiece"],
                        help="format of --from_vocab: one token per line, or SentencePiece's "
                        ".vocab (piece<TAB>score)")
    parser.add_argument("--save_vocab", required=True, help="output vocabulary file (with "
                        "--sentencepiece: the prefix of <prefix>.model and <prefix>.vocab)")
    parser.add_argument("--min_frequency", type=integer_option(0), default=1,
                        help="minimum token frequency")
    parser.add_argument("--size", type=integer_option(0), default=0,
                        help="maximum vocabulary size, special tokens included (0: no limit)")
    parser.add_argument("--size_multiple", type=integer_option(1), default=1,
                        help="pad with filler tokens until the size + 1 (the <unk> id added at "
                        "training time) is a multiple of this")
    parser.add_argument("--without_sequence_tokens", action="store_true",
                        help="no <s> and </s> after <blank> at the start of the vocabulary")
    parser.add_argument("--tokenizer_config", default=None,
                        help="tokenization configuration (a YAML file or a JSON string); with "
                        "--sentencepiece, an OpenNMTTokenizer whose tokens SentencePiece learns on")
    parser.add_argument("--sentencepiece", nargs="*", default=None,
                        help="train a SentencePiece model and its vocabulary; takes SentencePiece "
                        "training options as key=value (e.g. character_coverage=0.98)")
    return parser


def build_vocab(argv=None):
    """`onmt-build-vocab`: a word vocabulary counted from data files (or built on a saved one), or
    a SentencePiece model and its vocabulary (--sentencepiece), as OpenNMT-tf 2.32 writes them."""
    parser = build_vocab_parser()

    def action(args):
        from opennmt_lite.files import Staging
        from opennmt_lite.outputs import check_file, writing

        specials = [PADDING_TOKEN] + ([] if args.without_sequence_tokens else [START_TOKEN, END_TOKEN])
        sentencepiece = args.sentencepiece is not None
        path = args.save_vocab + ".vocab" if sentencepiece else args.save_vocab
        check_file(path, "--save_vocab")  # (before any work: a mistake costs nothing)
        if sentencepiece:
            check_file(args.save_vocab + ".model", "--save_vocab")
        # (the data read first: an unreadable file is not a failed write)
        tokens = None if sentencepiece else _word_vocabulary(args, specials)
        # Written under temporary names, renamed when whole (the model and its vocabulary
        # together): a failed write leaves the previous files as they were.
        with writing(f"--save_vocab {args.save_vocab}"), Staging() as staging:
            if sentencepiece:
                tokens = _sentencepiece_vocabulary(args, specials, staging)
            with staging.open(path, "w", encoding="utf-8", newline="\n") as stream:
                stream.write("".join(token + "\n" for token in tokens))

    return _run(parser, action, argv)


def _word_vocabulary(args, specials):
    """The vocabulary lines of OpenNMT-tf's `Vocab`: the special tokens (never pruned), the
    --from_vocab tokens (frequency 1 each), then the data's tokens, each entry in first-seen
    order; ranked by frequency (stable), pruned, padded to --size_multiple."""
    from opennmt_lite.data.vocab_builder import count_tokens

    tokenizer = _tokenizer(args.tokenizer_config)
    frequencies = dict.fromkeys(specials, math.inf)
    if args.from_vocab is not None:
        for token in _saved_vocabulary(args.from_vocab, args.from_format):
            frequencies.setdefault(token, 1)
    for token, count in count_tokens(args.data, tokenizer=tokenizer).items():
        frequencies[token] = frequencies.get(token, 0) + count
    tokens = _prune(frequencies, size=args.size, min_frequency=args.min_frequency)
    return _pad_to_multiple(tokens, args.size_multiple)


def _saved_vocabulary(path, file_format):
    """The tokens of a saved vocabulary, one per line; SentencePiece's `piece<TAB>score` lines
    without its special pieces for file_format "sentencepiece"."""
    from opennmt_lite.data.text import read_lines

    tokens = []
    for number, line in enumerate(read_lines(path, kind="--from_vocab"), start=1):
        if file_format == "sentencepiece":
            fields = line.split("\t")
            if len(fields) != 2:
                raise ArgumentError(f"--from_vocab {path}, line {number}: expected "
                                    "piece<TAB>score (--from_format sentencepiece)")
            line = fields[0]
            if line in SENTENCEPIECE_SPECIALS:
                continue
        tokens.append(line)
    return tokens


def _prune(frequencies, size=0, min_frequency=1):
    """Tokens by decreasing frequency (ties in first-seen order); the least frequent ones below
    `min_frequency` dropped (never the first); at most `size` when `size` > 0."""
    ranked = sorted(frequencies, key=lambda token: -frequencies[token])
    keep = len(ranked)
    while keep > 1 and frequencies[ranked[keep - 1]] < min_frequency:
        keep -= 1
    if size > 0:
        keep = min(keep, size)
    return ranked[:keep]


def _pad_to_multiple(tokens, multiple):
    """Appends `averyunlikelytoken<i>` fillers (skipping one already present) until the size
    plus the <unk> id is a multiple of `multiple`."""
    tokens, present, index = list(tokens), set(tokens), 0
    while (len(tokens) + NUM_OOV_BUCKETS) % multiple != 0:
        filler = f"averyunlikelytoken{index}"
        index += 1
        if filler not in present:
            tokens.append(filler)
            present.add(filler)
    return tokens


def _sentencepiece_vocabulary(args, specials, staging):
    """Trains `<save_vocab>.model` (staged in `staging`, an opennmt_lite.files.Staging) with the
    OpenNMT Tokenizer's SentencePiece learner (as OpenNMT-tf does, `keep_vocab`: the size is
    the model's) and returns the vocabulary lines: the model's pieces without its special ones,
    or, with an OpenNMTTokenizer pre-tokenization, the `size` most frequent tokens of the data
    tokenized with the model."""
    import tempfile

    import pyonmttok

    from opennmt_lite.data.tokenizers import OpenNMTTokenizer, check_trained_model
    from opennmt_lite.data.vocab_builder import count_tokens

    if args.min_frequency > 1:
        raise ArgumentError("--min_frequency: not supported with --sentencepiece (as in OpenNMT-tf)")
    if not args.data:
        raise ArgumentError("--sentencepiece: give the data files to train the model on")
    if args.from_vocab is not None:  # (OpenNMT-tf ignores it without a word)
        print("warning: --from_vocab is not used with --sentencepiece (as in OpenNMT-tf)",
              file=sys.stderr)
    size = args.size
    if args.size_multiple > 1:  # the next size whose size + 1 (<unk>) is a multiple
        size = size - (size + NUM_OOV_BUCKETS) % args.size_multiple + args.size_multiple
    options = {}
    for option in args.sentencepiece:
        key, equal, value = option.partition("=")
        if not equal or not key or "=" in value:
            raise ArgumentError(f"--sentencepiece: expected key=value, got {option!r}")
        options[key] = value
    tokenizer = _tokenizer(args.tokenizer_config) if args.tokenizer_config else None
    if tokenizer is not None and not isinstance(tokenizer, OpenNMTTokenizer):
        raise ArgumentError(f"--tokenizer_config: only an OpenNMTTokenizer can pre-tokenize for "
                            f"--sentencepiece, got {type(tokenizer).__name__}")
    for path in args.data:
        if not os.path.isfile(path):
            raise ArgumentError(f"data file not found: {path}")
    # SentencePiece writes <prefix>.model and <prefix>.vocab itself: into a new directory beside
    # them, checked whole, then the model staged for its rename (the vocabulary is ours).
    directory = os.path.dirname(os.path.abspath(args.save_vocab))
    with tempfile.TemporaryDirectory(prefix=f".{os.path.basename(args.save_vocab)}-",
                                     dir=directory) as training:
        prefix = os.path.join(training, os.path.basename(args.save_vocab))
        try:
            learner = pyonmttok.SentencePieceLearner(
                tokenizer=tokenizer.tokenizer if tokenizer is not None else None,
                keep_vocab=True, vocab_size=size, **options)
            for path in args.data:
                learner.ingest_file(path)
            learner.learn(prefix, verbose=False)
        except (TypeError, ValueError, RuntimeError) as error:
            if not os.path.isfile(prefix + ".model"):  # (else a write cut short: checked below)
                raise ArgumentError(f"--sentencepiece: SentencePiece training failed: "
                                    f"{str(error).splitlines()[0]}") from None
        model = staging.path(args.save_vocab + ".model")
        try:
            os.replace(prefix + ".model", model)
        except OSError as error:  # (named by the file it was to become)
            raise OSError(error.errno, error.strerror, args.save_vocab + ".model") from None
        check_trained_model(model, prefix + ".vocab", args.save_vocab)
        if tokenizer is None:
            pieces = _saved_vocabulary(prefix + ".vocab", "sentencepiece")
            frequencies = dict.fromkeys(specials, math.inf)
            for piece in pieces:
                frequencies.setdefault(piece, 1)
            return list(frequencies)
    with_model = OpenNMTTokenizer({**tokenizer.options, "sp_model_path": model},
                                  name="--tokenizer_config")
    frequencies = dict.fromkeys(specials, math.inf)
    for token, count in count_tokens(args.data, tokenizer=with_model).items():
        frequencies[token] = frequencies.get(token, 0) + count
    return _prune(frequencies, size=size)


# Each command's parser, by its name (tests/test_hostile_battery.py draws its cases from them).
PARSERS = {"onmt-build-vocab": build_vocab_parser, "onmt-tokenize-text": tokenize_text_parser,
           "onmt-detokenize-text": detokenize_text_parser, "onmt-merge-config": merge_config_parser}
