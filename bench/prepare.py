"""One-time, cached data preparation shared by the OpenNMT-tf and opennmt-lite benchmarks.

    python bench/prepare.py [--cache-dir runs/bench_cache] [--force] [--long]

Writes under the cache directory (default `runs/bench_cache/`, git-ignored):

* `sp.en.model`, `sp.de.model`: one 8 000-piece unigram SentencePiece model per side, trained on
  `data/train.en` / `data/train.de` (no `<s>`/`</s>`/pad pieces; `<unk>` is id 0).
* `vocab.en`, `vocab.de`: OpenNMT-tf vocabularies: `<blank>`, `<s>`, `</s>`, then the pieces in
  id order without `<unk>` (what `onmt-build-vocab --sentencepiece` does). Unknown tokens get the
  out-of-vocabulary id `len(lines)`.
* `{train,valid,test}.tok.{en,de}`: the corpus as space-separated pieces. Both frameworks train
  on these very files with these vocabularies (no tokenizer in either config, so the text is only
  split on spaces): tokenization cost and vocabulary are identical on both sides.
* `encoder_batches.npz`: the batches of the encoder benchmark, defined once so that both sides
  run exactly the same padded id matrices (see `make_encoder_batches`).
* `stats.json`: sizes and length statistics (used by the FLOP estimate of `bench_train.py`).
* `manifest.json`: what the cache was built from; a change of the inputs or parameters rebuilds.

`--long` (`prepare_long()`) also writes `long/`, a cache of the same layout whose training files
hold longer sentences: 2 then 3 adjacent lines of `train.tok.*` joined, alternately (~25 source,
~28 target pieces on average instead of ~10 and ~11; same vocabularies, validation and test
files), for the measurements that depend on sentence length (XLA's padding, docs/performance.md).

`load_encoder_batches()`, `load_batches()` and `read_stats()` are importable from the OpenNMT-tf
venv as well (numpy and the standard library only; SentencePiece and opennmt_lite are imported
lazily).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE_DIR = os.path.join(ROOT, "runs", "bench_cache")
DATA_DIR = os.path.join(ROOT, "data")
LANGS = ("en", "de")
SPLITS = ("train", "valid", "test")
SPECIAL_TOKENS = ("<blank>", "<s>", "</s>")

# Bump when the meaning of a cached file changes.
CACHE_FORMAT = 1

DEFAULTS = dict(
    vocab_size=8000,
    model_type="unigram",
    character_coverage=1.0,
    seed=1234,
    sp_threads=2,
    encoder_batch_tokens=2048,
    maximum_features_length=100,
    maximum_labels_length=100,
)


def cache_paths(cache_dir=DEFAULT_CACHE_DIR):
    """Every file of the cache, by role."""
    join = lambda name: os.path.join(cache_dir, name)  # noqa: E731
    paths = dict(
        cache_dir=cache_dir,
        manifest=join("manifest.json"),
        stats=join("stats.json"),
        encoder_batches=join("encoder_batches.npz"),
        encoder_checkpoint=join("onmt_init_ckpt"),
    )
    for lang in LANGS:
        paths[f"sp_model_{lang}"] = join(f"sp.{lang}.model")
        paths[f"vocab_{lang}"] = join(f"vocab.{lang}")
        for split in SPLITS:
            paths[f"{split}_{lang}"] = join(f"{split}.tok.{lang}")
    return paths


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wanted_manifest(params):
    inputs = {}
    for split in SPLITS:
        for lang in LANGS:
            path = os.path.join(DATA_DIR, f"{split}.{lang}")
            inputs[os.path.relpath(path, ROOT)] = _sha256(path)
    return dict(format=CACHE_FORMAT, params=params, inputs=inputs)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return None


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as stream:
        json.dump(value, stream, indent=2, sort_keys=True)
        stream.write("\n")
    os.replace(tmp, path)


def _log(message):
    print(f"[prepare] {message}", file=sys.stderr, flush=True)


def train_sentencepiece_model(input_file, model_prefix, vocab_path, params):
    """Trains one SentencePiece model and writes its OpenNMT-tf vocabulary.

    Uses `opennmt_lite.tokenizers.train_sentencepiece` when it exists, else SentencePiece directly
    with the same options. If `vocab_size` pieces cannot be reached, retries with
    `hard_vocab_limit=False` (SentencePiece then stops below) and says so.
    Returns (number of pieces, hard_vocab_limit used).
    """
    options = dict(
        vocab_size=params["vocab_size"],
        model_type=params["model_type"],
        character_coverage=params["character_coverage"],
        seed=params["seed"],
        num_threads=params["sp_threads"],
    )
    for hard in (True, False):
        try:
            _train_one(input_file, model_prefix, vocab_path, hard_vocab_limit=hard, **options)
        except (ValueError, RuntimeError) as error:
            if not hard:
                raise
            _log(f"WARNING: {params['vocab_size']} pieces not reachable on {input_file} ({error}); "
                 "retrying with hard_vocab_limit=False")
            continue
        import sentencepiece as spm

        size = spm.SentencePieceProcessor(model_file=model_prefix + ".model").get_piece_size()
        if size != params["vocab_size"]:
            _log(f"WARNING: {model_prefix}.model has {size} pieces, not {params['vocab_size']}")
        return size, hard
    raise AssertionError("unreachable")


def _train_one(input_file, model_prefix, vocab_path, vocab_size, model_type, character_coverage,
               seed, num_threads, hard_vocab_limit):
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    try:
        from opennmt_lite.data.tokenizers import train_sentencepiece
    except ImportError:
        train_sentencepiece = None
    if train_sentencepiece is not None:
        train_sentencepiece(
            [input_file], model_prefix, vocab_size, model_type=model_type,
            character_coverage=character_coverage, seed=seed, num_threads=num_threads,
            vocabulary_path=vocab_path, hard_vocab_limit=hard_vocab_limit,
        )
        return
    # Fallback: the same options through SentencePiece itself.
    import sentencepiece as spm

    if seed is not None:
        spm.set_random_generator_seed(int(seed))
    spm.SentencePieceTrainer.train(
        input=input_file, model_prefix=model_prefix, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage, input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=num_threads, unk_id=0, bos_id=-1, eos_id=-1,
        pad_id=-1, hard_vocab_limit=hard_vocab_limit, minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_file=model_prefix + ".model")
    tokens = list(SPECIAL_TOKENS)
    for index in range(processor.get_piece_size()):
        if processor.is_unknown(index) or processor.is_control(index):
            continue
        tokens.append(processor.id_to_piece(index))
    with open(vocab_path, "w", encoding="utf-8") as stream:
        stream.write("".join(token + "\n" for token in tokens))


def tokenize_file(model_path, input_path, output_path, num_threads=2):
    """Encodes each line to pieces joined by single spaces. Returns the token count per line."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model_path)
    with open(input_path, encoding="utf-8") as stream:
        lines = stream.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pieces = processor.encode(lines, out_type=str, num_threads=num_threads)
    for line_pieces in pieces:
        for piece in line_pieces:
            if any(c in piece for c in " \t\r\n\x0b\x0c"):
                raise ValueError(f"piece {piece!r} contains ASCII whitespace; cannot write it "
                                 "as space-separated tokens")
    tmp = output_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as stream:
        stream.write("".join(" ".join(p) + "\n" for p in pieces))
    os.replace(tmp, output_path)
    return [len(p) for p in pieces]


def read_vocabulary(path):
    """{token: id} of an OpenNMT-tf vocabulary file, and the out-of-vocabulary id."""
    with open(path, encoding="utf-8") as stream:
        tokens = stream.read().split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    if tuple(tokens[:3]) != SPECIAL_TOKENS:
        raise ValueError(f"{path}: the first lines must be {SPECIAL_TOKENS}")
    ids = {}
    for index, token in enumerate(tokens):
        ids.setdefault(token, index)
    return ids, len(tokens)


def make_batches(tokenized_path, vocab_path, max_tokens=None, max_examples=None):
    """Batches of a tokenized file: [(ids int32 [B, T], lengths int32 [B], line numbers [B])].

    Every non-empty line, mapped to ids with the vocabulary (unknown token -> the OOV id, as
    OpenNMT-tf does), sorted by length (stable: ties keep file order), then packed greedily so
    that B * T <= max_tokens (T being the longest sequence of the batch; padding id 0) and
    B <= max_examples. A sequence longer than max_tokens gets a batch of its own. Batches are in
    ascending length order; every side runs the same list in the same order.
    """
    import numpy as np

    ids_of, oov = read_vocabulary(vocab_path)
    with open(tokenized_path, encoding="utf-8") as stream:
        lines = stream.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    sequences = [[ids_of.get(t, oov) for t in line.split(" ") if t] for line in lines]
    order = sorted((i for i, s in enumerate(sequences) if s), key=lambda i: len(sequences[i]))
    batches = []
    current = []
    for index in order:
        length = len(sequences[index])  # ascending: the new sequence is the batch's longest
        too_many_tokens = max_tokens and (len(current) + 1) * length > max_tokens
        too_many_examples = max_examples and len(current) >= max_examples
        if current and (too_many_tokens or too_many_examples):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    result = []
    for batch in batches:
        width = max(len(sequences[i]) for i in batch)
        ids = np.zeros((len(batch), width), dtype=np.int32)
        lengths = np.zeros((len(batch),), dtype=np.int32)
        for row, index in enumerate(batch):
            ids[row, : len(sequences[index])] = sequences[index]
            lengths[row] = len(sequences[index])
        result.append((ids, lengths, np.asarray(batch, dtype=np.int64)))
    return result


def make_encoder_batches(tokenized_path, vocab_path, max_tokens=2048):
    """The encoder benchmark's batches: [(ids int32 [B, T], lengths int32 [B])], all the
    sentences of `tokenized_path` packed by `make_batches` into <= max_tokens padded tokens."""
    return [(ids, lengths) for ids, lengths, _ in
            make_batches(tokenized_path, vocab_path, max_tokens=max_tokens)]


def save_batches(path, batches):
    """Writes [(ids, lengths[, line numbers])] as npz: ids_i, length_i[, index_i] (the format of
    bench/onmt_translate.py --write-batches)."""
    import numpy as np

    arrays = {"num_batches": np.asarray(len(batches))}
    for i, batch in enumerate(batches):
        for name, array in zip(("ids", "length", "index"), batch):
            arrays[f"{name}_{i:05d}"] = array
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)



def load_batches(path):
    """[(ids int32 [B, T], lengths int32 [B][, line numbers [B]])] as `save_batches` writes."""
    import numpy as np

    with np.load(path) as data:
        count = int(data["num_batches"])
        return [tuple(data[f"{name}_{i:05d}"] for name in ("ids", "length", "index")
                      if f"{name}_{i:05d}" in data) for i in range(count)]


def load_encoder_batches(path=None):
    """[(ids int32 [B, T], lengths int32 [B])] as written by `prepare`."""
    return [batch[:2] for batch in load_batches(path or cache_paths()["encoder_batches"])]


def read_stats(cache_dir=DEFAULT_CACHE_DIR):
    stats = read_json(cache_paths(cache_dir)["stats"])
    if stats is None:
        raise FileNotFoundError(f"no stats.json in {cache_dir}: run bench/prepare.py first")
    return stats


def _length_stats(source_lengths, target_lengths, max_source, max_target):
    """Statistics of the examples kept by OpenNMT-tf's training length filter (0 < src <= max_src,
    tgt + 1 <= max_tgt). Target lengths count `</s>` (n + 1), as OpenNMT-tf's target
    `length` feature and its `target words/s` do."""
    kept = [(s, t + 1) for s, t in zip(source_lengths, target_lengths)
            if 0 < s <= max_source and t + 1 <= max_target]
    n = max(len(kept), 1)
    src_tokens = sum(s for s, _ in kept)
    tgt_tokens = sum(t for _, t in kept)
    return dict(
        examples=len(kept),
        dropped=len(source_lengths) - len(kept),
        source_tokens=src_tokens,
        target_tokens=tgt_tokens,
        mean_source_length=src_tokens / n,
        mean_target_length=tgt_tokens / n,
        # Mean of T over tokens (a token in a sequence of length T attends to T positions):
        # sum(T^2) / sum(T), used by the attention part of the FLOP estimate.
        source_attention_span=sum(s * s for s, _ in kept) / max(src_tokens, 1),
        target_attention_span=sum(t * t for _, t in kept) / max(tgt_tokens, 1),
        # Decoder cross-attention: each target position attends to the source length.
        cross_attention_span=sum(s * t for s, t in kept) / max(tgt_tokens, 1),
    )


def prepare(cache_dir=DEFAULT_CACHE_DIR, force=False, **overrides):
    """Builds the cache if missing or stale; returns `cache_paths(cache_dir)`."""
    params = dict(DEFAULTS)
    unknown = set(overrides) - set(params)
    if unknown:
        raise ValueError(f"unknown prepare parameter(s): {sorted(unknown)}")
    params.update(overrides)
    paths = cache_paths(cache_dir)
    wanted = _wanted_manifest(params)
    if not force and read_json(paths["manifest"]) == wanted and all(
        os.path.exists(p) for k, p in paths.items()
        if k not in ("cache_dir", "encoder_checkpoint")
    ):
        return paths
    os.makedirs(cache_dir, exist_ok=True)
    if os.path.exists(paths["manifest"]):
        os.remove(paths["manifest"])
    # The shared OpenNMT-tf checkpoint depends on the vocabularies: rewritten on next use.
    shutil.rmtree(paths["encoder_checkpoint"], ignore_errors=True)
    start = time.time()
    stats = dict(params=params, sentencepiece={})
    lengths = {}
    for lang in LANGS:
        _log(f"training the {params['vocab_size']}-piece SentencePiece model for {lang}")
        prefix = paths[f"sp_model_{lang}"][: -len(".model")]
        pieces, hard = train_sentencepiece_model(
            os.path.join(DATA_DIR, f"train.{lang}"), prefix, paths[f"vocab_{lang}"], params
        )
        _, oov = read_vocabulary(paths[f"vocab_{lang}"])
        stats["sentencepiece"][lang] = dict(
            pieces=pieces, hard_vocab_limit=hard, vocabulary_lines=oov,
            vocabulary_size_with_oov=oov + 1,
        )
        for split in SPLITS:
            counts = tokenize_file(
                paths[f"sp_model_{lang}"], os.path.join(DATA_DIR, f"{split}.{lang}"),
                paths[f"{split}_{lang}"], num_threads=params["sp_threads"],
            )
            lengths[(split, lang)] = counts
    for split in SPLITS:
        if len(lengths[(split, "en")]) != len(lengths[(split, "de")]):
            raise ValueError(f"{split}.en and {split}.de have different line counts")
    src, tgt = lengths[("train", "en")], lengths[("train", "de")]
    stats["train"] = dict(
        lines=len(src),
        source_tokens=sum(src),
        target_tokens=sum(tgt),
        max_source_length=max(src),
        max_target_length=max(tgt),
        after_length_filter=_length_stats(
            src, tgt, params["maximum_features_length"], params["maximum_labels_length"]
        ),
    )
    _log("building the encoder benchmark batches")
    batches = make_encoder_batches(
        paths["train_en"], paths["vocab_en"], max_tokens=params["encoder_batch_tokens"]
    )
    save_batches(paths["encoder_batches"], batches)
    real = sum(int(l.sum()) for _, l in batches)
    padded = sum(int(i.size) for i, _ in batches)
    stats["encoder_batches"] = dict(
        num_batches=len(batches),
        sentences=sum(len(l) for _, l in batches),
        real_tokens=real,
        padded_tokens=padded,
        padding_fraction=1 - real / padded,
        max_batch_tokens=params["encoder_batch_tokens"],
        largest_batch_padded_tokens=max(int(i.size) for i, _ in batches),
        attention_span=sum(int((l.astype("int64") ** 2).sum()) for _, l in batches) / real,
        padded_attention_span=sum(int(i.shape[1]) * int(l.sum()) for i, l in batches) / real,
    )
    write_json(paths["stats"], stats)
    write_json(paths["manifest"], wanted)
    _log(f"cache ready in {cache_dir} ({time.time() - start:.0f} s)")
    return paths


LONG_GROUPS = (2, 3)  # lines joined into one example, in turn


def join_adjacent_lines(lines, groups=LONG_GROUPS):
    """`lines` (without newlines) joined by a space, `groups[0]` of them, then `groups[1]`, ...
    in turn; a shorter last group keeps what remains."""
    joined, start, turn = [], 0, 0
    while start < len(lines):
        size = groups[turn % len(groups)]
        joined.append(" ".join(line for line in lines[start:start + size] if line))
        start, turn = start + size, turn + 1
    return joined


def prepare_long(cache_dir=DEFAULT_CACHE_DIR, force=False):
    """The long-sentence cache `<cache_dir>/long/` (module doc); returns its `cache_paths`."""
    base = prepare(cache_dir)
    paths = cache_paths(os.path.join(cache_dir, "long"))
    wanted = dict(read_json(base["manifest"]), long_groups=list(LONG_GROUPS))
    if not force and read_json(paths["manifest"]) == wanted and os.path.exists(paths["stats"]):
        return paths
    os.makedirs(paths["cache_dir"], exist_ok=True)
    lengths = {}
    for key, path in paths.items():
        if key in ("cache_dir", "manifest", "stats", "encoder_checkpoint", "encoder_batches"):
            continue
        if key.startswith("train_"):
            with open(base[key], encoding="utf-8") as f:
                lines = join_adjacent_lines(f.read().splitlines())
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)
            lengths[key] = [len(line.split()) for line in lines]
        else:
            shutil.copyfile(base[key], path)
    src, tgt = lengths["train_en"], lengths["train_de"]
    stats = dict(read_stats(cache_dir), long_groups=list(LONG_GROUPS))
    stats["train"] = dict(
        lines=len(src), source_tokens=sum(src), target_tokens=sum(tgt),
        max_source_length=max(src), max_target_length=max(tgt),
        after_length_filter=_length_stats(src, tgt, DEFAULTS["maximum_features_length"],
                                          DEFAULTS["maximum_labels_length"]))
    write_json(paths["stats"], stats)
    write_json(paths["manifest"], wanted)
    _log(f"long-sentence cache ready in {paths['cache_dir']}")
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR)
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache is valid")
    parser.add_argument("--long", action="store_true",
                        help="also write <cache-dir>/long/, longer sentences (module doc)")
    args = parser.parse_args(argv)
    paths = prepare(args.cache_dir, force=args.force)
    if args.long:
        paths = prepare_long(args.cache_dir, force=args.force)
    print(json.dumps(read_stats(paths["cache_dir"]), indent=2, sort_keys=True))
    return paths


if __name__ == "__main__":
    main()
