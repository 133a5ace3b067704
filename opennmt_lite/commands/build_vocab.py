"""`run.py build-vocab`: the vocabularies (and SentencePiece models) the config's `data` section
names, trained on its training files (see opennmt_lite.data.vocab_builder)."""

import os

from opennmt_lite.commands import non_negative_int
from opennmt_lite.config import ConfigError

HELP = "train SentencePiece models and write OpenNMT-tf vocabularies"


def add_arguments(parser):
    parser.add_argument("--size", type=non_negative_int, default=0,
                        help="pre-tokenized data only: vocabulary lines (0 = every token)")


def run(args, config):
    from opennmt_lite.data.tokenizers import train_sentencepiece
    from opennmt_lite.data.vocab_builder import build_vocab, build_word_vocab
    from opennmt_lite.files import Staging

    data, seed = config.data, config.train.seed
    for name in ("train_features_file", "train_labels_file", "source_vocabulary", "target_vocabulary"):
        if not getattr(data, name):
            raise ConfigError(f"data.{name} must be set to build the vocabularies")
    source, target = data.source_tokenization, data.target_tokenization
    if source is None and target is None:
        sides = [(data.train_features_file, data.source_vocabulary),
                 (data.train_labels_file, data.target_vocabulary)]
        if data.source_vocabulary == data.target_vocabulary:  # one shared vocabulary: both sides
            sides = [([data.train_features_file, data.train_labels_file], data.source_vocabulary)]
        with Staging() as staging:  # the vocabularies replaced together, at the end
            for files, path in sides:
                build_word_vocab(files, path, size=args.size, staging=staging)
        return
    if source is None or target is None or source.type != "sentencepiece" or target.type != "sentencepiece":
        raise ConfigError("build-vocab trains SentencePiece models for both sides, or none "
                          "(pre-tokenized data): set both data.source_tokenization and "
                          "data.target_tokenization, or neither")
    if source.model == target.model:  # one joint model (e.g. for share_embeddings: all)
        if data.source_vocabulary != data.target_vocabulary:
            raise ConfigError("a joint SentencePiece model needs one vocabulary file: set "
                              "data.source_vocabulary and data.target_vocabulary to the same path")
        train_sentencepiece(
            [data.train_features_file, data.train_labels_file],
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
