"""`run.py evaluate`: BLEU and chrF of a predictions file against references, with sacrebleu."""

import sacrebleu

from opennmt_lite.data import DataError, read_lines

HELP = "BLEU and chrF of a predictions file against references"


def add_arguments(parser):
    parser.add_argument("--predictions_file", required=True)
    parser.add_argument("--references_file", required=True)


def run(args, config):
    for name, value in score_files(args.predictions_file, args.references_file).items():
        print(f"{name}: {value}")


def score_files(predictions_file, references_file):
    """{"BLEU": score, "chrF": score, "lines": n, "signature": ...}; both files detokenized,
    aligned line by line."""
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
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    result = {
        "BLEU": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrF": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "lines": len(hypotheses),
    }
    result["signature"] = f"{bleu.get_signature()} | {chrf.get_signature()}"
    return result
