"""`run.py evaluate`: BLEU and chrF of a predictions file against references, with sacrebleu."""

import sacrebleu

from opennmt_lite.data import DataError, read_lines

HELP = ("BLEU and chrF of a predictions file against references (with --config of a sequence "
        "tagger or classifier: OpenNMT-tf's accuracy, and a bioes tagger's precision / recall / F1)")


def add_arguments(parser):
    parser.add_argument("--predictions_file", required=True)
    parser.add_argument("--references_file", required=True)


def run(args, config):
    if config is not None and config.model.is_encoder_model:
        results = label_scores(args.predictions_file, args.references_file, config.model.type,
                               config.data.tagging_scheme)
    else:
        results = score_files(args.predictions_file, args.references_file)
    for name, value in results.items():
        print(f"{name}: {value}")
    return results


def label_scores(predictions_file, references_file, model_type, tagging_scheme=None):
    """{"accuracy"[, "f1", "precision", "recall"], "lines"} of a tagger's (one tag per token) or
    classifier's (one label per line) predictions against the reference tags or labels, as
    OpenNMT-tf's evaluation computes them (inference/tagging_metrics.py)."""
    from opennmt_lite.config import SEQUENCE_TAGGER
    from opennmt_lite.inference.tagging_metrics import tagging_metrics

    hypotheses, references = _aligned_lines(predictions_file, references_file)
    tagger = model_type == SEQUENCE_TAGGER
    gold, predicted = [], []
    for number, (hypothesis, reference) in enumerate(zip(hypotheses, references), start=1):
        ours, theirs = hypothesis.split(), reference.split()
        if not tagger:  # (one label per line)
            ours, theirs = [hypothesis.strip()], [reference.strip()]
        elif len(ours) != len(theirs):
            raise DataError(f"{predictions_file}, line {number}: {len(ours)} tags, but "
                            f"{references_file}'s line {number} has {len(theirs)}")
        predicted.append(ours)
        gold.append(theirs)
    metrics = tagging_metrics(gold, predicted, tagging_scheme if tagger else None)
    result = {name: round(metrics[name], 4) for name in ("accuracy", "f1", "precision", "recall")
              if name in metrics}
    result["lines"] = len(hypotheses)
    return result


def _aligned_lines(predictions_file, references_file):
    hypotheses = read_lines(predictions_file)
    references = read_lines(references_file)
    for path, lines in ((predictions_file, hypotheses), (references_file, references)):
        if not lines:
            raise DataError(f"{path} is empty: nothing to score")
    if len(hypotheses) != len(references):
        raise DataError(
            f"{predictions_file} has {len(hypotheses)} lines but {references_file} has "
            f"{len(references)}: they must align line by line"
        )
    return hypotheses, references


def score_files(predictions_file, references_file):
    """{"BLEU": score, "chrF": score, "lines": n, "signature": ...}; both files detokenized,
    aligned line by line."""
    hypotheses, references = _aligned_lines(predictions_file, references_file)
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    result = {
        "BLEU": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrF": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "lines": len(hypotheses),
    }
    result["signature"] = f"{bleu.get_signature()} | {chrf.get_signature()}"
    return result
