"""`run.py score`: the negative log-likelihood of existing translations, line by line (see
opennmt_lite.inference.score), as OpenNMT-tf's `onmt-main score`."""

import logging

from opennmt_lite.commands import add_checkpoint_argument
from opennmt_lite.config import ConfigError
from opennmt_lite.data import DataError
from opennmt_lite.errors import ArgumentError

HELP = ("score existing translations (OpenNMT-tf's score: 'NLL ||| tokens' per line, then the "
        "token-level scores and the alignment with score.with_token_level / with_alignments)")
logger = logging.getLogger("opennmt_lite")


def add_arguments(parser):
    add_checkpoint_argument(parser)
    parser.add_argument("--features_file", required=True, help="source lines (a language "
                        "model: the lines it scores)")
    parser.add_argument("--predictions_file",
                        help="target lines to score, one per source line (n-best lists: give "
                        "each source line once per hypothesis); required but for a language "
                        "model, which scores --features_file alone, as OpenNMT-tf's")
    parser.add_argument("--output_file", help="default: standard output")


def run(args, config):
    from opennmt_lite import build
    from opennmt_lite.data import read_lines
    from opennmt_lite.files import write_lines
    from opennmt_lite.inference.score import format_lines, score_pairs
    from opennmt_lite.outputs import check_file, writing

    if config.model.is_encoder_model:
        raise ConfigError(f"score: model.type {config.model.type} has no score (neither has "
                          f"OpenNMT-tf's SequenceTagger nor SequenceClassifier): use infer, or "
                          f"evaluate on its predictions")
    if config.model.is_language_model:
        if args.predictions_file:
            raise ArgumentError("--predictions_file: a language model scores the lines of "
                                "--features_file alone (as OpenNMT-tf's); remove it")
    elif not args.predictions_file:
        raise ArgumentError("--predictions_file is required: the translations to score")
    if args.output_file:
        check_file(args.output_file, "--output_file")
    # (a language model's lines are the decoder's target, as its inputs read them)
    targets_file = args.predictions_file or args.features_file
    sources = read_lines(args.features_file, kind="--features_file")
    targets = read_lines(targets_file, kind="--predictions_file")
    if len(sources) != len(targets):
        raise DataError(f"--features_file {args.features_file} has {len(sources)} lines but "
                        f"--predictions_file {args.predictions_file} has {len(targets)}: they "
                        "must align line by line")
    model, assets, prefix = build.inference_model(config, args.checkpoint)
    data = build.scoring_input(args.features_file, targets_file, config.score, assets,
                                config.data)
    options = config.score
    details = bool(options.with_token_level or options.with_alignments)
    scores, token_scores, alignments = (score_pairs(model, data, details=True) if details
                                        else (score_pairs(model, data), None, None))
    tokens = assets.target_tokenizer.tokenize_batch(targets)
    lines = format_lines(scores, tokens, token_scores if options.with_token_level else None,
                         alignments, options.with_alignments)
    with writing(f"--output_file {args.output_file}" if args.output_file else "standard output"):
        write_lines(lines, args.output_file)
    if args.output_file:
        logger.info("wrote %d scores (checkpoint %s) to %s", len(scores), prefix, args.output_file)
    return scores
