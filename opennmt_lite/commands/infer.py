"""`run.py infer`: translates a file (see opennmt_lite.inference.translate for the output)."""

import logging

from opennmt_lite.commands import add_checkpoint_argument, positive_int
from opennmt_lite.config import integer_option
from opennmt_lite.errors import ArgumentError

HELP = "translate a file (a language model: continue each line)"
logger = logging.getLogger("opennmt_lite")


def add_arguments(parser):
    add_checkpoint_argument(parser)
    parser.add_argument("--features_file", required=True)
    parser.add_argument("--predictions_file", help="default: standard output")
    parser.add_argument("--beam_width", type=positive_int)
    parser.add_argument("--n_best", type=positive_int)
    parser.add_argument("--with_scores", action="store_true", default=None)
    parser.add_argument("--seed", type=integer_option(key_path="train.seed"),
                        help="seed of random sampling (params.sampling_topk != 1; default train.seed)")
    parser.add_argument("--ctranslate2", metavar="DIR",
                        help="translate with this CTranslate2 model (run.py export --format "
                        "ctranslate2) instead of the checkpoint")


def run(args, config):
    from opennmt_lite import build
    from opennmt_lite.files import write_lines
    from opennmt_lite.inference.translate import format_lines, translate_file
    from opennmt_lite.outputs import check_file, writing

    if args.predictions_file:
        check_file(args.predictions_file, "--predictions_file")
    if config.model.is_encoder_model:
        return _label(args, config)
    seed = config.train.seed if args.seed is None else args.seed
    options = build.decoding_options(config.params, config.infer, args.beam_width, args.n_best, seed)
    if config.model.is_language_model:
        results = _continue(args, config, options)
    elif args.ctranslate2:
        results = _translate_ctranslate2(args, config, options)
    else:
        model, assets, _ = build.inference_model(config, args.checkpoint)
        data = build.inference_input(args.features_file, config.infer, assets, config.data)
        results = translate_file(model, assets, data, options, alignments=config.infer.with_alignments)
    with_scores = config.infer.with_scores if args.with_scores is None else args.with_scores
    with writing(f"--predictions_file {args.predictions_file}" if args.predictions_file else "standard output"):
        write_lines(format_lines(results, with_scores, config.infer.with_alignments),
                    args.predictions_file)
    if args.predictions_file:
        logger.info("wrote %d translations to %s", len(results), args.predictions_file)
    return results


# The options of translation that a sequence tagger or classifier has no use for.
TRANSLATION_OPTIONS = ("beam_width", "n_best", "with_scores", "seed", "ctranslate2")


def _label(args, config):
    """A sequence tagger's tags (one line of tags per input line) or a classifier's labels (one
    per line), as OpenNMT-tf writes them; batches of infer.batch_size lines in file order."""
    from opennmt_lite import build
    from opennmt_lite.data import read_lines
    from opennmt_lite.files import write_lines
    from opennmt_lite.inference.other_models import label_lines
    from opennmt_lite.outputs import writing

    for name in TRANSLATION_OPTIONS:
        if getattr(args, name, None) is not None:
            raise ArgumentError(f"--{name}: a {config.model.type} has no such option (it writes "
                                f"one {build.label_kind(config.model)} line per input line)")
    if config.infer.batch_type != "examples":
        raise ArgumentError(f"infer.batch_type: {config.infer.batch_type}: a {config.model.type} "
                            f"infers batches of examples (infer.batch_size lines)")
    model, assets, _ = build.inference_model(config, args.checkpoint)
    lines = read_lines(args.features_file, kind="--features_file")
    results = label_lines(model, assets, lines, config.infer.batch_size)
    with writing(f"--predictions_file {args.predictions_file}" if args.predictions_file
                 else "standard output"):
        write_lines(results, args.predictions_file)
    if args.predictions_file:
        logger.info("wrote %d lines of %s to %s", len(results), build.label_kind(config.model),
                    args.predictions_file)
    return results
def _continue(args, config, options):
    """A language model's continuation of each line of --features_file."""
    from opennmt_lite import build
    from opennmt_lite.inference.continuation import continue_file

    if args.ctranslate2:
        from opennmt_lite.inference.ctranslate2_generator import continue_file_ctranslate2

        if args.checkpoint:
            raise ArgumentError("--checkpoint and --ctranslate2 exclude each other (the "
                                "CTranslate2 model holds its own weights)")
        assets = build.assets(config.data)
        data = build.prefix_input(args.features_file, config.infer, assets, config.data)
        return continue_file_ctranslate2(args.ctranslate2, assets, data, options,
                                         start=config.data.target_sequence_controls.start)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    data = build.prefix_input(args.features_file, config.infer, assets, config.data)
    return continue_file(model, assets, data, options,
                         start=config.data.target_sequence_controls.start)


def _translate_ctranslate2(args, config, options):
    """The same tokenization, batches and results, decoded by CTranslate2."""
    from opennmt_lite import build
    from opennmt_lite.inference import ctranslate2

    if args.checkpoint:
        raise ArgumentError("--checkpoint and --ctranslate2 exclude each other (the CTranslate2 "
                            "model holds its own weights)")
    assets = build.assets(config.data)
    translator = ctranslate2.load_translator(args.ctranslate2, assets,
                                             threads=ctranslate2.thread_settings(options))
    ctranslate2.check_source_controls(args.ctranslate2, config.data.source_sequence_controls)
    data = build.inference_input(args.features_file, config.infer, assets, config.data)
    return ctranslate2.translate_file(translator, assets, data, options,
                                      unk_token=ctranslate2.unknown_token(args.ctranslate2),
                                      alignments=config.infer.with_alignments)
