"""`run.py build-vocab`: the vocabularies (and SentencePiece models) the config's `data` section
names, trained on its training files (see opennmt_lite.data.vocab_builder)."""

import os

from opennmt_lite.commands import non_negative_int, positive_int
from opennmt_lite.config import ConfigError

HELP = "write the vocabularies (training SentencePiece models, or counting tokens)"


def add_arguments(parser):
    parser.add_argument("--size", type=non_negative_int, default=0,
                        help="word vocabularies (no SentencePiece training): at most this many "
                        "lines, special tokens included (0 = every token), as onmt-build-vocab")
    parser.add_argument("--min_frequency", type=positive_int, default=1,
                        help="word vocabularies: keep tokens seen at least this many times")
    parser.add_argument("--size_multiple", type=positive_int, default=1,
                        help="word vocabularies: pad with filler tokens until lines + 1 (<unk>) "
                        "is a multiple of this")


def run(args, config):
    from opennmt_lite.outputs import writing

    data = config.data
    for name in ("train_features_file", "train_labels_file", "source_vocabulary", "target_vocabulary"):
        if not getattr(data, name):
            raise ConfigError(f"data.{name} must be set to build the vocabularies")
    check_outputs(data)
    with writing("build-vocab"):  # a full disk: one line, the previous files kept
        if config.model.is_encoder_model:
            _build_encoder_model_vocabularies(args, config)
        else:
            _build(args, config)


def check_outputs(data):
    """The files build-vocab writes (the vocabularies, and the SentencePiece models it trains)
    can be written: their directories are created (see opennmt_lite.outputs)."""
    from opennmt_lite.outputs import check_file

    check_file(data.source_vocabulary, "data.source_vocabulary", create_parents=True)
    check_file(data.target_vocabulary, "data.target_vocabulary", create_parents=True)
    for side in ("source", "target"):
        tokenization = getattr(data, f"{side}_tokenization")
        if tokenization is not None and tokenization.type == "sentencepiece":
            check_file(tokenization.model, f"data.{side}_tokenization.model", create_parents=True)


def _build(args, config):
    from opennmt_lite.data.tokenizers import train_sentencepiece
    from opennmt_lite.data.vocab_builder import build_vocab

    data, seed = config.data, config.train.seed
    source, target = data.source_tokenization, data.target_tokenization
    trains = [t is not None and t.type == "sentencepiece" for t in (source, target)]
    if not any(trains):  # word vocabularies: tokens counted as onmt-build-vocab counts them
        _build_word_vocabularies(args, data)
        return
    if not all(trains):
        raise ConfigError("build-vocab trains SentencePiece models for both sides, or none: give "
                          "data.source_tokenization and data.target_tokenization both the type "
                          "sentencepiece, or neither")
    if source.model == target.model:  # one joint model (e.g. for share_embeddings: all)
        if data.source_vocabulary != data.target_vocabulary:
            raise ConfigError("a joint SentencePiece model needs one vocabulary file: set "
                              "data.source_vocabulary and data.target_vocabulary to the same path")
        train_sentencepiece(
            _training_files(data),
            os.path.splitext(source.model)[0], source.vocabulary_size,
            model_type=source.model_type, character_coverage=source.character_coverage,
            seed=seed, vocabulary_path=data.source_vocabulary,
        )
        return
    if data.source_vocabulary == data.target_vocabulary:
        raise ConfigError("two SentencePiece models need two vocabulary files: set "
                          "data.source_vocabulary and data.target_vocabulary to different paths "
                          "(or one data.*_tokenization.model for both sides)")
    build_vocab(
        features_file=data.train_features_file, labels_file=data.train_labels_file,
        source_model_prefix=os.path.splitext(source.model)[0],
        target_model_prefix=os.path.splitext(target.model)[0],
        source_vocabulary=data.source_vocabulary, target_vocabulary=data.target_vocabulary,
        source_size=source.vocabulary_size, target_size=target.vocabulary_size,
        model_type=source.model_type, character_coverage=source.character_coverage,
        seed=seed,
    )


def _training_files(data):
    """Source and target training files in one list (each key: one path or a list)."""
    from opennmt_lite.data.text import as_file_list

    # (a language model's labels are its features: each file once)
    files = as_file_list(data.train_features_file) + as_file_list(data.train_labels_file)
    return list(dict.fromkeys(files))


def _build_word_vocabularies(args, data):
    """One vocabulary per side (or one for both when the two paths are the same) from the
    training files tokenized by each side's tokenizer, as `onmt-build-vocab --tokenizer_config
    ... --size N --min_frequency M --size_multiple K` writes them."""
    import collections

    from opennmt_lite import build
    from opennmt_lite.data.vocab_builder import build_word_vocab, count_tokens
    from opennmt_lite.files import Staging

    sides = []
    for side, files, path in (("source", data.train_features_file, data.source_vocabulary),
                              ("target", data.train_labels_file, data.target_vocabulary)):
        name = f"data.{side}_tokenization"
        tokenizer = build.tokenizer(getattr(data, f"{side}_tokenization"), name)
        if sides and (files, path) == sides[0][:2]:  # (a language model: one file, counted once)
            continue
        sides.append((files, path, count_tokens(files, tokenizer=tokenizer)))
    if len(sides) == 2 and data.source_vocabulary == data.target_vocabulary:  # (both sides)
        counts = collections.Counter()
        for _, _, side_counts in sides:
            counts.update(side_counts)  # (first-seen order kept: source tokens first)
        sides = [(_training_files(data), data.source_vocabulary, counts)]
    with Staging() as staging:  # the vocabularies replaced together, at the end
        for files, path, counts in sides:
            build_word_vocab(files, path, size=args.size, min_frequency=args.min_frequency,
                             size_multiple=args.size_multiple, staging=staging, counts=counts)


def _build_encoder_model_vocabularies(args, config):
    """A sequence tagger's or classifier's vocabularies: the source one from the features (a
    SentencePiece model and its vocabulary with data.source_tokenization type sentencepiece,
    else a word vocabulary as onmt-build-vocab counts it); the tags or labels vocabulary, when
    its file does not exist yet, the distinct tags or labels of the training labels file, sorted
    (an existing one is kept: its order is the output layer's)."""
    import logging

    from opennmt_lite import build
    from opennmt_lite.data.labels import read_label_vocabulary
    from opennmt_lite.data.text import read_lines
    from opennmt_lite.data.tokenizers import train_sentencepiece
    from opennmt_lite.data.vocab_builder import build_word_vocab, count_tokens
    from opennmt_lite.files import write_lines

    logger = logging.getLogger("opennmt_lite")
    data, kind = config.data, build.label_kind(config.model)
    source = data.source_tokenization
    if source is not None and source.type == "sentencepiece":
        train_sentencepiece([data.train_features_file], os.path.splitext(source.model)[0],
                            source.vocabulary_size, model_type=source.model_type,
                            character_coverage=source.character_coverage, seed=config.train.seed,
                            vocabulary_path=data.source_vocabulary)
    else:
        tokenizer = build.tokenizer(source, "data.source_tokenization")
        build_word_vocab([data.train_features_file], data.source_vocabulary, size=args.size,
                         min_frequency=args.min_frequency, size_multiple=args.size_multiple,
                         counts=count_tokens([data.train_features_file], tokenizer=tokenizer))
    if os.path.exists(data.target_vocabulary):
        read_label_vocabulary(data.target_vocabulary, kind)  # (checked, kept as it is)
        logger.info("data.target_vocabulary %s kept (%s vocabulary; remove it to rebuild it)",
                    data.target_vocabulary, kind)
        return
    lines = read_lines(data.train_labels_file, kind)
    labels = sorted({label for line in lines for label in line.split()})
    if not labels:
        raise ConfigError(f"data.train_labels_file {data.train_labels_file}: no {kind} to build "
                          f"data.target_vocabulary from")
    write_lines(labels, data.target_vocabulary)
    logger.info("wrote the %d %s of %s to %s", len(labels), kind, data.train_labels_file,
                data.target_vocabulary)
