"""`run.py infer`: translate a file with greedy or beam search, as OpenNMT-tf's `infer` does.

Output, one line per source line in file order (n_best lines per source with infer.n_best > 1):
the hypothesis detokenized by the target SentencePiece model when one is configured, else its
tokens joined by spaces; with `with_scores`, `SCORE ||| hypothesis` (SCORE = the cumulative
log-probability OpenNMT-tf prints). Unknown target ids are written `<unk>`.
"""

import contextlib
import logging
import sys

import keras
import numpy as np
from tqdm import tqdm

from opennmt_lite.data import InferenceInput
from opennmt_lite.inference import translation_function

logger = logging.getLogger("opennmt_lite")


def decoding_options(config, beam_width=None, n_best=None):
    params, infer = config["params"], config["infer"]
    beam_width = max(1, beam_width or params["beam_width"])
    n_best = n_best or infer["n_best"]
    if n_best > beam_width:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam width ({beam_width})")
    return dict(
        beam_width=beam_width,
        length_penalty=params["length_penalty"],
        n_best=n_best,
        maximum_decoding_length=params["maximum_decoding_length"],
        minimum_decoding_length=params["minimum_decoding_length"],
    )


def translate_file(model, assets, config, features_file, options, progress=True):
    """-> list (file order) of lists (n_best) of (detokenized text, log_prob)."""
    infer = config["infer"]
    data = InferenceInput(
        features_file, source_vocabulary=assets.source_vocabulary,
        source_tokenizer=assets.source_tokenizer, batch_size=infer["batch_size"],
        batch_type=infer["batch_type"], length_bucket_width=infer["length_bucket_width"] or None,
    )
    decode = translation_function(model, **options)
    results = [None] * len(data.corpus)
    batches = data.numpy_batches()
    if progress:
        batches = tqdm(batches, total=len(data.batches), desc="translating", unit="batch",
                       file=sys.stderr, leave=False)
    for batch in batches:
        output = decode(batch["source_ids"], batch["source_length"])
        ids, lengths, scores = (output.ids.numpy(), output.lengths.numpy(), output.log_probs.numpy())
        for row, index in enumerate(batch["index"]):
            hypotheses = []
            for k in range(ids.shape[1]):
                tokens = assets.target_vocabulary.to_tokens(ids[row, k, : lengths[row, k]])
                hypotheses.append((assets.target_tokenizer.detokenize(tokens), float(scores[row, k])))
            results[int(index)] = hypotheses
    return results


def format_lines(results, with_scores):
    for hypotheses in results:
        for text, score in hypotheses:
            yield f"{score:f} ||| {text}" if with_scores else text


def infer_command(config, features_file, predictions_file=None, checkpoint=None, beam_width=None,
                  n_best=None, with_scores=None):
    from opennmt_lite.resources import create_model, load_assets, restore_weights

    keras.config.set_dtype_policy("float32")
    options = decoding_options(config, beam_width, n_best)
    assets = load_assets(config)
    model = create_model(config, assets)
    restore_weights(config, model, checkpoint)
    results = translate_file(model, assets, config, features_file, options)
    with_scores = config["infer"]["with_scores"] if with_scores is None else with_scores
    with contextlib.ExitStack() as stack:
        out = (stack.enter_context(open(predictions_file, "w", encoding="utf-8"))
               if predictions_file else sys.stdout)
        for line in format_lines(results, with_scores):
            out.write(line + "\n")
    if predictions_file:
        logger.info("wrote %d translations to %s", len(results), predictions_file)
    return results
