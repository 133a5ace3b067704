"""`run.py evaluate`: BLEU and chrF of a predictions file against references, with sacrebleu."""

import sacrebleu

from opennmt_lite.data import read_lines


def score_files(predictions_file, references_file):
    """{"BLEU": score, "chrF": score, "lines": n, "signature": ...}; both files detokenized,
    aligned line by line."""
    hypotheses = read_lines(predictions_file)
    references = read_lines(references_file)
    if len(hypotheses) != len(references):
        raise ValueError(
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
