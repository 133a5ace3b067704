"""`run.py update_vocab`: the newest checkpoint of model_dir moved to new vocabularies, as
OpenNMT-tf's `onmt-main update_vocab` (see opennmt_lite.training.vocab_update)."""

from opennmt_lite.errors import ArgumentError

HELP = "change the vocabularies of a trained model (kept tokens keep their rows)"


def add_arguments(parser):
    parser.add_argument("--src_vocab", help="the new source vocabulary (default: unchanged)")
    parser.add_argument("--tgt_vocab", help="the new target vocabulary (default: unchanged)")
    parser.add_argument("--output_dir", required=True,
                        help="where to write the updated checkpoint (a new or empty directory)")
    parser.add_argument("--force", action="store_true",
                        help="write into --output_dir even if it already holds files")


def run(args, config):
    from opennmt_lite import build
    from opennmt_lite.outputs import check_directory
    from opennmt_lite.training.averaging import check_output_dir
    from opennmt_lite.training.vocab_update import update_vocab

    if not args.src_vocab and not args.tgt_vocab:
        raise ArgumentError("update_vocab: give --src_vocab, --tgt_vocab or both")
    check_output_dir(args.output_dir, config.model_dir, "--output_dir")
    check_directory(args.output_dir, "--output_dir", force=args.force)
    path = update_vocab(config, args.output_dir, args.src_vocab, args.tgt_vocab,
                        build.training_checkpoint)
    print(path)
    return path
