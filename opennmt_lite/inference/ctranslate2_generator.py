"""`run.py infer --ctranslate2 DIR` of a language model: the continuations of
opennmt_lite/inference/continuation.py computed by `ctranslate2.Generator` on the model
`run.py export --format ctranslate2` wrote (opennmt_lite/export/language_model.py).

The same prefixes (`<s>` first with data.sequence_controls start), and the decoding options as
CTranslate2 arguments: max_length = params.maximum_decoding_length (`</s>` counted, as
CTranslate2 counts its end token), min_length, beam_size, num_hypotheses (infer.n_best),
sampling_topk / sampling_temperature (seeded), length_penalty 0 unless params.length_penalty
(the scores are then the sums of log-probabilities, `</s>`'s included).
"""

import os

from opennmt_lite.errors import MissingFileError


def generate_options(options):
    """The `Generator.generate_batch` arguments of a DecodingOptions."""
    return dict(max_length=options.maximum_decoding_length,
                min_length=options.minimum_decoding_length, beam_size=options.beam_width,
                num_hypotheses=options.n_best, length_penalty=options.length_penalty,
                sampling_topk=options.sampling_topk,
                sampling_temperature=options.sampling_temperature,
                include_prompt_in_result=False, return_scores=True)


def load_generator(path):
    import ctranslate2

    if not os.path.isfile(os.path.join(path, "model.bin")):
        raise MissingFileError(f"--ctranslate2 {path}: no CTranslate2 model there (run.py export "
                               "--format ctranslate2)")
    return ctranslate2.Generator(path, device="cpu")


def continue_file_ctranslate2(path, assets, inference_input, options, start=False):
    """continuation.continue_file's results, decoded by CTranslate2."""
    import ctranslate2

    from opennmt_lite.data import DataError

    generator = load_generator(path)
    if options.sampling_topk != 1:
        ctranslate2.set_random_seed(options.seed)
    vocabulary = assets.target_vocabulary
    unknown = unknown_token(vocabulary)
    results = [None] * len(inference_input.corpus)
    for batch in inference_input.numpy_batches():
        empty = batch["index"][batch["source_length"] == 0]
        if len(empty):
            raise DataError(f"--features_file {inference_input.features_file}, line "
                            f"{int(empty.min()) + 1}: an empty prefix: a language model "
                            "continues a context")
        prompts = [[token if token != "<unk>" else unknown
                    for token in vocabulary.to_tokens(row[:length])]
                   for row, length in zip(batch["source_ids"], batch["source_length"])]
        outputs = [None] * len(prompts)
        # (one call per prompt length: a batch of prompts of different lengths continued
        # differently from the same prompts alone, in CTranslate2 4.8's Generator)
        for size in sorted({len(prompt) for prompt in prompts}):
            rows = [row for row, prompt in enumerate(prompts) if len(prompt) == size]
            for row, output in zip(rows, generator.generate_batch(
                    [prompts[row] for row in rows], **generate_options(options))):
                outputs[row] = output
        for index, prompt, output in zip(batch["index"], prompts, outputs):
            prefix = [("<unk>" if t == unknown else t) for t in prompt[int(start):]]
            results[int(index)] = [
                (assets.target_tokenizer.detokenize(
                    prefix + [("<unk>" if t == unknown else t) for t in sequence]), float(score))
                for sequence, score in zip(output.sequences, output.scores)]
    return results


def unknown_token(vocabulary):
    """The token the exported model has for unknown words: `<unk>`, or its stand-in when the
    vocabulary holds `<unk>` as a line (export/ctranslate2.py's `_unknown_token`)."""
    taken = set(vocabulary.tokens)
    name = "<unk>"
    while name in taken:
        name = name[:-1] + "_oov>"
    return name
