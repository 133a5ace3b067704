"""`run.py export`: a TensorFlow SavedModel (see opennmt_lite.export.saved_model), with
`--format ctranslate2` a CTranslate2 model (see opennmt_lite.export.ctranslate2), with
`--format tflite|tflite_float16|tflite_dynamic_range` a TensorFlow Lite model of the whole
translation (see opennmt_lite.export.tflite)."""

import logging

from opennmt_lite.commands import add_checkpoint_argument
from opennmt_lite.errors import ArgumentError

HELP = "write a TensorFlow SavedModel, a CTranslate2 model or a TensorFlow Lite model"
logger = logging.getLogger("opennmt_lite")
# CTranslate2 weight types (opennmt_lite.export.ctranslate2.QUANTIZATIONS; not imported here so
# that `run.py --help` does not need CTranslate2).
QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")
# OpenNMT-tf's TFLite format names (opennmt_lite.export.tflite.FORMATS).
TFLITE_FORMATS = ("tflite", "tflite_float16", "tflite_dynamic_range")


def add_arguments(parser):
    add_checkpoint_argument(parser)
    parser.add_argument("--output", required=True, help="SavedModel directory to write")
    parser.add_argument("--format", choices=("saved_model", "ctranslate2") + TFLITE_FORMATS,
                        default="saved_model")
    parser.add_argument("--quantization", choices=QUANTIZATIONS,
                        help="ctranslate2: weight type (default float32)")
    parser.add_argument("--force", action="store_true",
                        help="ctranslate2: replace a model already in --output")


def run(args, config):
    from opennmt_lite import build, keras_backend
    from opennmt_lite.outputs import check_directory, staged_directory, writing

    if args.format != "ctranslate2":  # (CTranslate2's needs NumPy only: either backend)
        keras_backend.require_tensorflow(f"export --format {args.format}")
    if config.model.is_encoder_model:
        return _export_encoder_model(args, config)
    if args.format != "ctranslate2" and (args.quantization or args.force):
        raise ArgumentError("--quantization and --force apply to --format ctranslate2 only "
                            "(TFLite: --format tflite_float16 or tflite_dynamic_range)")
    if config.model.is_language_model:
        return _export_language_model(args, config)
    if args.format in TFLITE_FORMATS:  # (refuses decoding_noise, before any warning about it)
        return _export_tflite(args, config)
    if config.params.decoding_noise:  # (OpenNMT-tf's SavedModel adds it in the graph)
        logger.warning("params.decoding_noise is not part of the exported model: its "
                       "translations are not noised (run.py infer adds the noise)")
    if args.format == "ctranslate2":
        return _export_ctranslate2(args, config)
    import tensorflow as tf

    from opennmt_lite.export.saved_model import export_model

    check_directory(args.output, "--output", force_option=None)  # (never overwritten)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    options = build.decoding_options(config.params, config.infer, seed=config.train.seed)
    # Written beside --output, moved onto it once complete: a failed write leaves nothing.
    with staged_directory(args.output, "--output") as staging:
        with writing(f"--output {args.output}", also=(tf.errors.OpError,)):
            export_model(model, assets, options, config.data, staging,
                         maximum_source_length=config.infer.maximum_features_length)
    logger.info("moved the SavedModel into %s", args.output)  # (the log above names the staging)
    return args.output


def _export_language_model(args, config):
    """A language model's SavedModel or CTranslate2 Generator (opennmt_lite/export/
    language_model.py); TFLite is the Transformer's."""
    import tensorflow as tf

    from opennmt_lite import build
    from opennmt_lite.export import language_model
    from opennmt_lite.outputs import check_directory, staged_directory, writing

    if args.format in TFLITE_FORMATS:
        raise ArgumentError(f"--format {args.format}: a language model exports to saved_model or "
                            "ctranslate2")
    options = build.decoding_options(config.params, config.infer, seed=config.train.seed)
    if args.format == "ctranslate2":
        from opennmt_lite.export import ctranslate2

        ctranslate2.check_destination(args.output, args.force)
        check_directory(args.output, "--output", force=True)
        model, assets, _ = build.inference_model(config, args.checkpoint)
        with writing(f"--output {args.output}"):
            return language_model.export_ctranslate2(model, assets, options, config.data,
                                                     args.output, args.quantization, args.force)
    check_directory(args.output, "--output", force_option=None)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    with staged_directory(args.output, "--output") as staging:
        with writing(f"--output {args.output}", also=(tf.errors.OpError,)):
            language_model.export_saved_model(model, assets, options, config.data, staging)
    return args.output


def _export_ctranslate2(args, config):
    from opennmt_lite import build
    from opennmt_lite.export import ctranslate2
    from opennmt_lite.outputs import check_directory, writing

    ctranslate2.check_destination(args.output, args.force)  # before loading the model
    check_directory(args.output, "--output", force=True)  # (a model replaced only with --force)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    options = build.decoding_options(config.params, config.infer, seed=config.train.seed)
    with writing(f"--output {args.output}"):
        return ctranslate2.export_model(model, assets, options, config.data, args.output,
                                        quantization=args.quantization, force=args.force)


def _export_tflite(args, config):
    import tensorflow as tf

    from opennmt_lite import build
    from opennmt_lite.export import tflite
    from opennmt_lite.outputs import check_directory, staged_directory, writing

    check_directory(args.output, "--output", force_option=None)  # (never overwritten)
    options = build.decoding_options(config.params, config.infer, seed=config.train.seed)
    # (before loading the model: a refusal costs nothing)
    tflite.check_options(options, config.params.tflite_output_size)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    with staged_directory(args.output, "--output") as staging:
        with writing(f"--output {args.output}", also=(tf.errors.OpError,)):
            tflite.export_model(model, assets, options, config.data, staging,
                                quantization=tflite.FORMATS[args.format],
                                output_size=config.params.tflite_output_size,
                                maximum_source_length=config.infer.maximum_features_length)
    logger.info("moved the TFLite model into %s", args.output)
    return args.output


def _export_encoder_model(args, config):
    """A sequence tagger's or classifier's SavedModel (export/encoder_models.py); CTranslate2
    and TFLite have no such model: refused in one line."""
    import tensorflow as tf

    from opennmt_lite import build
    from opennmt_lite.export.encoder_models import export_encoder_model
    from opennmt_lite.outputs import check_directory, staged_directory, writing

    if args.format != "saved_model":
        what = "CTranslate2 has no sequence tagger or classifier" if args.format == "ctranslate2" \
            else "the TFLite export is the Transformer's translation"
        raise ArgumentError(f"--format {args.format}: not for model.type {config.model.type} "
                            f"({what}); export --format saved_model")
    if args.quantization or args.force:
        raise ArgumentError("--quantization and --force apply to --format ctranslate2 only")
    check_directory(args.output, "--output", force_option=None)
    model, assets, _ = build.inference_model(config, args.checkpoint)
    with staged_directory(args.output, "--output") as staging:
        with writing(f"--output {args.output}", also=(tf.errors.OpError,)):
            export_encoder_model(model, assets, staging)
    logger.info("moved the SavedModel into %s", args.output)
    return args.output
