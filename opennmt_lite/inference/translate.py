"""Translating a file (`run.py infer`) with greedy or beam search, as OpenNMT-tf's `infer` does.

Output, one line per source line in file order (n_best lines per source with infer.n_best > 1):
the hypothesis detokenized by the target SentencePiece model when one is configured, else its
tokens joined by spaces; with `with_scores`, `SCORE ||| hypothesis` (SCORE = the cumulative
log-probability OpenNMT-tf prints); with `infer.with_alignments`, then ` ||| ` and the alignment
of each target token (the attention of the decoder's alignment head, as OpenNMT-tf prints it):
`hard`, `SOURCE-TARGET` pairs (the most attended source position of each target position);
`soft`, each target position's attention vector over the batch's source positions (`%.6f`
values, target positions separated by ` ; `); with source sequence controls, their `<s>`/`</s>`
are positions too, as OpenNMT-tf prints them. Unknown target ids are written `<unk>`, or with
`params.replace_unknown_target` replaced by the most attended source token (OpenNMT-tf's rule,
which never picks a source `<s>`/`</s>`).
With `params.decoding_noise`, words of each hypothesis are then dropped, replaced or moved
(opennmt_lite.data.noise, seeded by the options' seed); its score stays the one decoded.
"""

import logging
import sys

import numpy as np
from tqdm import tqdm

from opennmt_lite import keras_backend

logger = logging.getLogger("opennmt_lite")


def translation_function(model, options, return_attention=False):
    """The decoding function of the Keras backend in use: `decoding.translation_function` (a
    tf.function) on TensorFlow, `portable_decoding.translation_function` (jax.jit) on JAX; both
    (source_ids, source_length) -> DecodingResult."""
    if keras_backend.selected() == "jax":
        from opennmt_lite.inference import portable_decoding

        return portable_decoding.translation_function(model, options, return_attention)
    from opennmt_lite.inference import decoding

    return decoding.translation_function(model, options, return_attention)


def out_of_memory(error):
    """Whether `error` is running out of memory: NumPy's MemoryError, TensorFlow's
    ResourceExhaustedError, or XLA's RESOURCE_EXHAUSTED status (JAX's runtime error)."""
    if isinstance(error, MemoryError):
        return True
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.ResourceExhaustedError):
        return True
    return type(error).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and (
        "RESOURCE_EXHAUSTED" in str(error))


def translate_file(model, assets, inference_input, options, progress=True, alignments=None,
                   decode=None):
    """-> list (file order) of lists (n_best) of (detokenized text, log_prob), or with
    `alignments` ("hard" or "soft") of (text, log_prob, alignment [target tokens, source]).

    `inference_input`: a built InferenceInput; `options`: a DecodingOptions (build.decoding_options).
    A batch that does not fit in memory is translated line by line; a line that does not fit
    alone gets empty hypotheses with a -inf score and an error naming it, and the rest of the
    file is translated (as OpenNMT-tf translates every line, a file is never lost to one line).
    `decode`: `decoding_function(model, options, alignments)`, made once by a caller that
    translates many inputs (the server), so that it is traced once.
    """
    data = inference_input
    replace_unknown = options.replace_unknown_target
    decode = decode or decoding_function(model, options, alignments)
    vocabulary = assets.target_vocabulary
    noise = options.token_noise()
    results = [None] * len(data.corpus)
    batches = data.numpy_batches()
    if progress:
        batches = tqdm(batches, total=len(data.batches), desc="translating", unit="batch",
                       file=sys.stderr, leave=False)
    failed = []
    for batch in batches:
        for rows, output in _decode_batch(decode, batch, failed):
            ids, lengths, scores = (np.asarray(output.ids), np.asarray(output.lengths),
                                    np.asarray(output.log_probs))
            # (OpenNMT-tf's alignment: what it prints and replaces unknown targets with)
            attention = None if output.onmt_attention is None else np.asarray(output.onmt_attention)
            for row, index in enumerate(batch["index"][rows]):
                hypotheses = []
                for k in range(ids.shape[1]):
                    hypothesis = ids[row, k, : lengths[row, k]]
                    tokens = vocabulary.to_tokens(hypothesis)
                    alignment = None if attention is None else attention[row, k, : len(hypothesis)]
                    if replace_unknown:
                        tokens = replace_unknown_tokens(
                            tokens, hypothesis == vocabulary.oov_id, data.corpus.tokens[int(index)],
                            alignment, first=int(bool(data.corpus.source_controls.start)))
                    text = assets.target_tokenizer.detokenize(noise(tokens))
                    hypotheses.append((text, float(scores[row, k]))
                                      + ((alignment,) if alignments else ()))
                results[int(index)] = hypotheses
    n_best = options.n_best
    for index in failed:
        logger.error("line %d (%d tokens) could not be translated: not enough memory; its output "
                     "is empty", index + 1, int(data.corpus.source_lengths[index]))
        results[index] = [("", float("-inf")) + ((np.zeros([0, 0]),) if alignments else ())] * n_best
    if failed:
        logger.error("%d line(s) of %d could not be translated (lower infer.maximum_features_length "
                     "or infer.batch_size)", len(failed), len(results))
    return results


def decoding_function(model, options, alignments=None):
    """The function `translate_file` decodes with for `options` and `alignments` (compiled for
    the Keras backend in use: `translation_function`)."""
    needs_attention = bool(alignments or options.replace_unknown_target)
    return translation_function(model, options, return_attention=needs_attention)


def _decode_batch(decode, batch, failed):
    """[(rows of `batch`, decoder output for them)]: the whole batch at once, else (out of
    memory) line by line; the file index of a line that does not fit alone is added to `failed`."""
    try:
        return [(np.arange(len(batch["index"])), decode(batch["source_ids"], batch["source_length"]))]
    except Exception as error:  # noqa: BLE001 (only running out of memory is handled)
        if not out_of_memory(error):
            raise
        if len(batch["index"]) == 1:
            failed.append(int(batch["index"][0]))
            return []
        logger.warning("out of memory on a batch of %d lines: translating them one by one",
                       len(batch["index"]))
    outputs = []
    for row, length in enumerate(batch["source_length"].tolist()):
        ids = batch["source_ids"][row:row + 1, :max(length, 1)]
        try:
            outputs.append((np.array([row]), decode(ids, batch["source_length"][row:row + 1])))
        except Exception as error:  # noqa: BLE001 (only running out of memory is handled)
            if not out_of_memory(error):
                raise
            failed.append(int(batch["index"][row]))
    return outputs


def replace_unknown_tokens(tokens, unknown, source_tokens, alignment, first=0):
    """`tokens` with each one flagged in `unknown` replaced by the source token its alignment
    row attends most, among the source's real positions (OpenNMT-tf's replace_unknown_target):
    the columns of `first` on (1 after a source `<s>`), as many as the source has tokens, so
    neither a source `<s>` nor `</s>` is ever chosen (OpenNMT-tf's mask_attention)."""
    source_length = len(source_tokens)
    tokens = list(tokens)
    for position in np.flatnonzero(unknown):
        if source_length:
            # (no vector for the last token of a hypothesis stopped at maximum_decoding_length:
            # OpenNMT-tf pads the alignment with zeros, whose argmax is the first token)
            row = (alignment[position, first:first + source_length] if position < len(alignment)
                   else np.zeros([source_length]))
            tokens[position] = source_tokens[int(np.argmax(row))]
    return tokens


def format_alignment(alignment, kind):
    """OpenNMT-tf's `hard` (`source-target` pairs) or `soft` (vectors) alignment text of an
    alignment [target tokens, source]."""
    if kind == "hard":
        return " ".join(f"{source}-{target}"
                        for target, source in enumerate(np.argmax(alignment, axis=-1)))
    return " ; ".join(" ".join(f"{value:.6f}" for value in vector) for vector in alignment)


def format_lines(results, with_scores, alignments=None):
    """The output lines of `translate_file`'s results: [SCORE ||| ]text[ ||| alignment]."""
    for hypotheses in results:
        for text, score, *alignment in hypotheses:
            line = f"{score:f} ||| {text}" if with_scores else text
            yield f"{line} ||| {format_alignment(alignment[0], alignments)}" if alignments else line
