"""Translating a file with an exported CTranslate2 model (`run.py infer --ctranslate2 DIR`).

Same input (the config's tokenizer and vocabulary, the same batches) and the same results as
`inference.translate.translate_file`: per source line, n_best (detokenized text, score), where the
score is the cumulative log-probability including `</s>` that OpenNMT-tf prints.

CTranslate2's `translate_batch` defaults differ from OpenNMT-tf's, so every option is passed
(`translate_options`): length_penalty 0 unless configured (its default, 1, also divides greedy
scores by the length), min_decoding_length from the config (its default 1 forbids an empty
translation), max_input_length 0 (its default truncates sources to 1024 tokens).
"""

import collections
import json
import os
import sys

import numpy as np
from tqdm import tqdm

from opennmt_lite.data.vocab import UNK_TOKEN
from opennmt_lite.errors import ArgumentError, MissingFileError, UserError


def translate_options(options):
    """`translate_batch` keyword arguments that decode as opennmt-lite does with `options` (a
    DecodingOptions): each of its fields has its CTranslate2 equivalent here."""
    beam = options.beam_width
    return dict(
        beam_size=beam,
        num_hypotheses=options.n_best,
        # OpenNMT-tf ranks beams by score / ((5 + length) / 6) ** alpha at every step;
        # CTranslate2 divides finished hypotheses by length ** alpha. Identical only for 0, and
        # greedy search never uses a penalty.
        length_penalty=0.0 if beam == 1 else float(options.length_penalty),
        max_decoding_length=int(options.maximum_decoding_length),
        min_decoding_length=int(options.minimum_decoding_length),
        # CTranslate2 adds its coverage term to every hypothesis at every step; OpenNMT-tf (and
        # opennmt-lite) only to hypotheses already finished: beams can differ (docs/opennmt-tf.md).
        coverage_penalty=0.0 if beam == 1 else float(options.coverage_penalty),
        # (0: the whole distribution, as here; seeded by `translate_file`)
        sampling_topk=int(options.sampling_topk),
        sampling_temperature=float(options.sampling_temperature),
        # (CTranslate2 replaces with the source token its own alignment head attends most)
        replace_unknowns=bool(options.replace_unknown_target),
        max_input_length=0,
        return_scores=True,
    )


def thread_settings(options, cores=None):
    """The threads of the `ctranslate2.Translator` that translates a file with `options` (a
    DecodingOptions): {"inter_threads": batches translated at once, "intra_threads": threads per
    batch}. `cores`: default every core this process may use.

    One thread per batch, as many batches at once as cores (`translate_file` submits batches
    ahead). CTranslate2 splits each operation of a batch over its intra_threads (OpenMP) and
    joins them after it; a decoding step's operations are small (a beam of batch x 4 rows against
    one layer), so the joins cost more than the split gains: on the 2-core benchmark machine, 100
    sentences in batches of 32 took 0.68-0.79 s in int8 with 2 intra threads against 0.052 s with
    one (float32: 0.09 against 0.058; bench/README.md). Whole batches on separate threads never
    wait for each other, and a batch computes the same arithmetic on whichever thread runs it:
    the translations are those of one thread. Sampling (sampling_topk != 1) decodes one batch at a
    time: CTranslate2 draws from one random generator per thread, and which thread takes which
    batch varies between runs, so a seeded translation would not be reproducible."""
    cores = max(1, cores or len(os.sched_getaffinity(0)))
    sampling = options.sampling_topk != 1
    return dict(inter_threads=1 if sampling else cores, intra_threads=1)


def load_translator(path, assets, compute_type="default", threads=None):
    """A `ctranslate2.Translator` for the model directory `path`, checked against the config's
    vocabularies (a model exported from another config would translate garbage). `threads`:
    `thread_settings`' dict (default: for greedy or beam search on every core), or a number of
    batches translated at once, one thread each."""
    import ctranslate2

    if not os.path.isfile(os.path.join(path, "model.bin")):
        raise MissingFileError(f"--ctranslate2 {path}: no CTranslate2 model (model.bin) there; "
                                "write one with `run.py export --format ctranslate2`")
    _check_vocabularies(path, assets)
    if not isinstance(threads, dict):
        threads = dict(inter_threads=threads or len(os.sched_getaffinity(0)), intra_threads=1)
    try:
        return ctranslate2.Translator(path, device="cpu", compute_type=compute_type, **threads)
    except (RuntimeError, ValueError, OSError) as error:  # a damaged or foreign model.bin
        raise ModelDirectoryError(f"--ctranslate2 {path}: not a loadable CTranslate2 model: "
                                  f"{_first_line(error)}") from None


class ModelDirectoryError(UserError, ValueError):
    """A directory given as a CTranslate2 model that is not one (names it)."""


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def unknown_token(path):
    """The token the model at `path` writes for the out-of-vocabulary id."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise MissingFileError(f"--ctranslate2 {path}: no config.json there (not a model "
                               "written by `run.py export --format ctranslate2`)") from None
    except (OSError, ValueError) as error:  # unreadable, invalid UTF-8 or JSON
        raise ModelDirectoryError(f"--ctranslate2 {path}: config.json cannot be read: "
                                  f"{_first_line(error)}") from None
    if not isinstance(config, dict):
        raise ModelDirectoryError(f"--ctranslate2 {path}: config.json is not a JSON object")
    return config.get("unk_token", UNK_TOKEN)


def check_source_controls(path, controls):
    """Refuses a model whose `add_source_bos` / `add_source_eos` (config.json) are not the
    config's `data.source_sequence_controls`: it would read other sources than the model saw."""
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        settings = json.load(f)  # (readable: unknown_token read it first)
    for flag, name, token in (("start", "add_source_bos", "<s>"), ("end", "add_source_eos", "</s>")):
        if bool(settings.get(name, False)) != bool(getattr(controls, flag)):
            raise ArgumentError(
                f"--ctranslate2 {path}: its config.json has {name}: "
                f"{str(bool(settings.get(name, False))).lower()} but data.source_sequence_controls."
                f"{flag} is {str(bool(getattr(controls, flag))).lower()} (the source {token}): "
                "export the model with this config")


def _check_vocabularies(path, assets):
    unk = unknown_token(path)
    for side, vocabulary in (("source", assets.source_vocabulary), ("target", assets.target_vocabulary)):
        stored = _read_vocabulary(path, side)
        if stored != vocabulary.tokens + [unk]:
            raise ArgumentError(f"--ctranslate2 {path}: its {side} vocabulary differs from "
                             f"{vocabulary.path}: export the model with this config")


def _read_vocabulary(path, side):
    for name in (f"{side}_vocabulary", "shared_vocabulary"):
        for extension, read in ((".json", json.load), (".txt", lambda f: f.read().split("\n")[:-1])):
            file = os.path.join(path, name + extension)
            if os.path.isfile(file):
                try:
                    with open(file, encoding="utf-8") as f:
                        return read(f)
                except (OSError, ValueError) as error:  # unreadable, invalid UTF-8 or JSON
                    raise ModelDirectoryError(f"--ctranslate2 {path}: {file} cannot be read: "
                                              f"{_first_line(error)}") from None
    raise MissingFileError(f"--ctranslate2 {path}: no {side} vocabulary file")


def translate_file(translator, assets, inference_input, options, progress=True, unk_token=UNK_TOKEN,
                   alignments=None):
    """-> list (file order) of lists (n_best) of (detokenized text, log_prob[, alignment]), like
    inference.translate.translate_file, decoding with `translator` in the same batches.
    `unk_token`: the model's unknown token (`unknown_token(path)`). With `alignments`, CTranslate2's
    attention [target tokens, source tokens] (its source width is the sentence's own)."""
    data = inference_input
    arguments = dict(translate_options(options), return_attention=bool(alignments))
    if options.sampling_topk != 1:
        import ctranslate2

        ctranslate2.set_random_seed(options.seed)
    noise = options.token_noise()
    results = [None] * len(data.corpus)
    batches = data.batches
    if progress:
        batches = tqdm(batches, desc="translating", unit="batch", file=sys.stderr, leave=False)
    # Batches are submitted ahead (asynchronous) and read in order: the translator's
    # inter_threads translate that many at once (thread_settings). A sampling translator has one.
    ahead = 2 * getattr(translator, "num_translators", 1)
    pending = collections.deque()
    for indices in batches:
        sources = [list(data.corpus.tokens[int(i)]) for i in indices]
        pending.append((indices, sources, translator.translate_batch(
            sources, max_batch_size=0, asynchronous=True, **arguments)))
        if len(pending) >= ahead:
            _collect(*pending.popleft(), translator, assets, arguments, noise, unk_token, results)
    while pending:
        _collect(*pending.popleft(), translator, assets, arguments, noise, unk_token, results)
    return results


def _collect(indices, sources, outputs, translator, assets, arguments, noise, unk_token, results):
    """Stores the translations of one submitted batch (`outputs`: its asynchronous results) in
    `results`, as `translate_file` returns them."""
    for index, source, output in zip(indices, sources, outputs):
        output = output.result()
        hypotheses = [_known(tokens, unk_token) for tokens in output.hypotheses]
        # (decoding noise: applied to the tokens as inference.translate does)
        noisy = [noise(tokens) for tokens in hypotheses]
        scores = output.scores
        if arguments["length_penalty"] != 0 or arguments["coverage_penalty"] != 0:
            # CTranslate2 then returns penalized scores: rescore for the plain log-probability.
            scores = [sum(r.log_probs) for r in translator.score_batch(
                [source] * len(hypotheses), hypotheses, max_input_length=0)]
        attention = output.attention if arguments["return_attention"] else [None] * len(hypotheses)
        results[int(index)] = [
            (assets.target_tokenizer.detokenize(tokens), float(score))
            + ((np.asarray(vectors, np.float32).reshape(len(vectors), -1),)
               if arguments["return_attention"] else ())
            for tokens, score, vectors in zip(noisy, scores, attention)]


def _known(tokens, unk):
    """opennmt-lite writes the out-of-vocabulary id as `<unk>` (the model's name may differ)."""
    return [UNK_TOKEN if token == unk else token for token in tokens]
