"""`run.py train`: builds the vocabularies if they are missing, then trains (resuming from the
latest checkpoint of model_dir)."""

import contextlib
import logging
import os
import signal

from opennmt_lite.commands import build_vocab, positive_int
from opennmt_lite.errors import Interrupted

HELP = "train the model"
logger = logging.getLogger("opennmt_lite")


def add_arguments(parser):
    build_vocab.add_arguments(parser)
    parser.add_argument("--num_devices", type=positive_int,
                        help="train on N devices of this machine (GPUs, or the CPU split in N)")


def config_overrides(args):
    return {"train": {"num_devices": args.num_devices}} if args.num_devices else {}


def missing_vocabulary(data):
    paths = [data.source_vocabulary, data.target_vocabulary] + [
        t.model for t in (data.source_tokenization, data.target_tokenization) if t
    ]
    return [path for path in paths if path and not os.path.exists(path)]


def run(args, config):
    from opennmt_lite import build, keras_backend
    from opennmt_lite.outputs import writing

    if os.environ.get("TF_CONFIG"):  # (MultiWorkerMirroredStrategy: TensorFlow's own)
        keras_backend.require_tensorflow("multi-worker training (TF_CONFIG is set)")
    from opennmt_lite.training.distribute import is_chief_task
    from opennmt_lite.training.lock import model_dir_lock

    # One trainer per model_dir (the other workers of a multi-worker run share the chief's).
    lock = model_dir_lock(config.model_dir) if is_chief_task() else contextlib.nullcontext()
    with lock:
        missing = missing_vocabulary(config.data)
        if missing:  # first run: build what the config names, so one command does the whole job
            logger.info("building vocabularies (missing: %s)", ", ".join(missing))
            build_vocab.run(args, config)
        # (onmt-main's `train` evaluates only with --with_eval; run.py's when eval files are set)
        trainer = build.trainer(config, with_evaluation=getattr(args, "with_eval", None))
        try:
            with writing(f"model_dir {config.model_dir}"):  # (its logs; checkpoints: their own)
                summary = trainer.run()
        except KeyboardInterrupt:  # a second Ctrl-C (see trainer.StopRequest)
            raise Interrupted(signal.SIGINT, (
                f"interrupted again at step {trainer.step}: stopped at once, without saving; the "
                f"newest checkpoint in {config.model_dir} is kept")) from None
    if summary["stopped"] in ("SIGINT", "SIGTERM"):
        # saved and stopped: the exit status tells shells and schedulers which signal did it
        raise Interrupted(signal.Signals[summary["stopped"]], (
            f"stopped by {summary['stopped']} at step {summary['step']} after saving "
            f"{summary.get('checkpoint')}"))
    logger.info("training finished at step %d (%s); latest checkpoint: %s",
                summary["step"], summary["stopped"], summary.get("checkpoint"))
    if config.train.average_last_checkpoints and is_chief_task():
        average_at_end(config)


def average_at_end(config):
    """train.average_last_checkpoints: the newest N checkpoints averaged into <model_dir>/avg,
    as OpenNMT-tf does at the end of training (skipped, with a warning, when fewer than 2)."""
    from opennmt_lite.checkpointing import store
    from opennmt_lite.commands.average_checkpoints import average

    count = config.train.average_last_checkpoints
    available = [p for p in store.candidates(store.checkpoint_directory(config.model_dir))
                 if store.damage(p, read_data=False) is None]
    if len(available) < 2 or count < 2:
        logger.warning("train.average_last_checkpoints: %d: not averaging, %d checkpoint(s) in %s "
                       "(at least 2 needed)", count, min(len(available), count),
                       store.checkpoint_directory(config.model_dir))
        return None
    output_dir = os.path.join(config.model_dir, "avg")
    # (training's own folder: the average of a previous run is replaced, or kept beside)
    path = average(config, output_dir, count, option="<model_dir>/avg", force=True)
    logger.info("train.average_last_checkpoints: the average of the last %d checkpoints is %s "
                "(use it with --checkpoint %s)", min(count, len(available)), path, output_dir)
    return path
