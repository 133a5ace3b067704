"""`run.py inspect`: runs the encoder on one sentence or a batch and shows every intermediate
tensor: as text (always), attention heat maps (--attention_png), and a self-contained HTML
walk-through (--html; see opennmt_lite.inspection.html)."""

import time

import numpy as np

from opennmt_lite.commands import add_checkpoint_argument
from opennmt_lite.errors import ArgumentError

HELP = ("show every intermediate tensor of the encoder (a language model: its decoder) on one "
        "sentence or a batch")


def add_arguments(parser):
    add_checkpoint_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sentence", help="raw source text (tokenized as configured)")
    source.add_argument("--ids", help='space-separated source token ids; several sentences (a padded '
                        'batch) separated by commas: "5 12 7, 3 25, 8 1 19"')
    source.add_argument("--batch", help="file of source sentences, one per line (a padded batch)")
    parser.add_argument("--attention_png", help="directory for attention heat maps (PNG)")
    parser.add_argument("--values", action="store_true", help="also print tensor values")
    parser.add_argument("--html", help="write the walk-through of every step to this HTML file")
    parser.add_argument("--target", help="target text whose cross-attention (alignments) the HTML "
                        "page shows, for one source sentence (default: the model's greedy translation)")


def _tokens_of(text, option, assets, controls=None):
    """(tokens, ids) of a source text, with the `<s>`/`</s>` of `controls`
    (data.source_sequence_controls) as the model reads them."""
    from opennmt_lite.data.vocab import BOS_TOKEN, EOS_TOKEN

    tokens = assets.source_tokenizer.tokenize(text)
    if len(tokens) == 0:
        raise ArgumentError(f"{option}: the source is empty after tokenization")
    if controls is not None:
        tokens = [BOS_TOKEN] * controls.start + list(tokens) + [EOS_TOKEN] * controls.end
    return tokens, assets.source_vocabulary.lookup(tokens)


def _ids_of(text, vocabulary):
    sources = []
    for number, part in enumerate(text.split(","), 1):
        where = f"--ids, sentence {number}" if "," in text else "--ids"
        try:
            ids = np.array([int(x) for x in part.split()], np.int64)
        except ValueError:
            raise ArgumentError(f"{where} must be space-separated integers, got {part.strip()!r}") from None
        outside = [int(i) for i in ids if not 0 <= i < vocabulary.num_ids]
        if outside:
            raise ArgumentError(f"{where}: {outside[0]} is outside the source vocabulary "
                                f"(ids 0 to {vocabulary.num_ids - 1})")
        if len(ids) == 0:
            raise ArgumentError(f"{where}: the source is empty")
        sources.append((vocabulary.to_tokens(ids), ids))
    return sources


def sources_of(args, assets, maximum_length=None, controls=None):
    """[(tokens, ids)] of --sentence, --ids or --batch (texts with the source sequence
    `controls`; ids as given); `maximum_length`: the longest allowed."""
    from opennmt_lite.data.text import read_lines

    if args.sentence is not None:
        sources, where = [_tokens_of(args.sentence, "--sentence", assets, controls)], ["--sentence"]
    elif args.ids is not None:
        sources = _ids_of(args.ids, assets.source_vocabulary)
        where = [f"--ids, sentence {n}" if len(sources) > 1 else "--ids" for n in range(1, len(sources) + 1)]
    else:
        lines = read_lines(args.batch, "--batch", ArgumentError)
        if not lines:
            raise ArgumentError(f"--batch {args.batch}: the file is empty")
        where = [f"--batch {args.batch}, line {n}" for n in range(1, len(lines) + 1)]
        sources = [_tokens_of(line, name, assets, controls) for line, name in zip(lines, where)]
    for (tokens, _), name in zip(sources, where):
        if maximum_length is not None and len(tokens) > maximum_length:
            raise ArgumentError(f"{name}: {len(tokens)} tokens, more than the model is run on "
                                f"(infer.maximum_features_length: {maximum_length})")
    return sources


def padded(sources):
    """(ids [batch, time] padded with 0, lengths [batch])."""
    lengths = np.array([len(ids) for _, ids in sources], np.int32)
    batch = np.zeros([len(sources), lengths.max()], np.int32)
    for row, (_, ids) in zip(batch, sources):
        row[: len(ids)] = ids
    return batch, lengths


def run(args, config, out=print):
    from opennmt_lite import build
    from opennmt_lite.inspection.text import save_attention_maps, summarize, trace_encoder
    from opennmt_lite.outputs import check_directory, check_file, writing

    if args.attention_png:  # (a folder of images: written beside what it holds)
        check_directory(args.attention_png, "--attention_png", force=True)
    if args.html:
        check_file(args.html, "--html")
    if args.target is not None and not args.html:
        raise ArgumentError("--target is shown in the HTML page only: add --html FILE")
    if config.model.is_language_model:
        return _run_language_model(args, config, out, time.perf_counter())
    start = time.perf_counter()
    # The input is checked before the model is built: a mistake there fails at once.
    sources = sources_of(args, build.assets(config.data, config.model),
                         config.infer.maximum_features_length, config.data.source_sequence_controls)
    if args.target is not None and config.model.is_encoder_model:
        raise ArgumentError(f"--target: a {config.model.type} has no decoder, so no alignment to "
                            f"show (its page is the encoder's)")
    if args.target is not None and len(sources) > 1:
        raise ArgumentError("--target is the translation of one source sentence: use it with "
                            "--sentence or one --ids sequence")
    model, assets, weights = _model_and_inputs(args, config, sources, out)
    source_ids, source_length = padded(sources)
    tensors = trace_encoder(model, source_ids, source_length)
    for name, value in tensors.items():
        out(summarize(name, value, args.values))
    if config.model.is_encoder_model:  # (what the model makes of the encoding)
        for number, line in enumerate(_predictions(model, assets, source_ids, source_length)):
            prefix = f"[{number}] " if len(sources) > 1 else ""
            out(f"{prefix}{build.label_kind(config.model)}: {line}")
    if args.attention_png:
        with writing(f"--attention_png {args.attention_png}"):
            for saved in save_attention_maps(tensors, sources[0][0], args.attention_png):
                out(f"saved {saved}")
    if args.html:
        with writing(f"--html {args.html}"):
            size = write_html(args, config, model, assets, weights, sources, tensors)
        out(f"saved {args.html} ({size / 1e6:.2f} MB, {time.perf_counter() - start:.1f} s)")
    return tensors


def _model_and_inputs(args, config, sources, out):
    """(model, assets, weights' description): the checkpoint's model, or random weights drawn
    from train.seed (reproducible); prints where the weights come from and each input's tokens
    and ids."""
    import keras

    from opennmt_lite import build

    keras.utils.set_random_seed(config.train.seed)
    model, assets, path = build.inference_model(config, args.checkpoint, required=False)
    weights = path or (f"randomly initialized (no checkpoint in {config.model_dir}; seed "
                       f"train.seed {config.train.seed})")
    out(f"weights: {weights}")
    for number, (tokens, ids) in enumerate(sources):
        prefix = f"[{number}] " if len(sources) > 1 else ""
        out(f"{prefix}tokens: {' '.join(tokens)}")
        out(f"{prefix}ids:    {' '.join(str(i) for i in ids)}")
    return model, assets, weights


def _predictions(model, assets, source_ids, source_length):
    """A tagger's tags (a line per sentence) or a classifier's label of each sentence."""
    labels = assets.target_vocabulary
    if hasattr(model, "predict_tags"):
        tags = np.asarray(model.predict_tags(source_ids, source_length))
        return [" ".join(labels[t] for t in row[:n]) for row, n in zip(tags, source_length)]
    return [labels[i] for i in np.asarray(model.predict_labels(source_ids, source_length))]


def _run_language_model(args, config, out, start):
    """inspect of a language model: its decoder on the prefixes (with `<s>` first when
    data.sequence_controls has start: true), then its next-token logits."""
    from opennmt_lite import build
    from opennmt_lite.data import Controls
    from opennmt_lite.inspection import html, steps
    from opennmt_lite.inspection.text import save_attention_maps, summarize, trace_language_model
    from opennmt_lite.outputs import writing

    if args.target is not None:
        raise ArgumentError("--target: a language model has no source to align a target to")
    controls = Controls(config.data.target_sequence_controls.start, False)
    sources = sources_of(args, build.assets(config.data), config.infer.maximum_features_length,
                         controls)
    model, assets, weights = _model_and_inputs(args, config, sources, out)
    ids, length = padded(sources)
    tensors = trace_language_model(model, ids, length)
    for name, value in tensors.items():
        out(summarize(name, value, args.values))
    if args.attention_png:
        with writing(f"--attention_png {args.attention_png}"):
            for saved in save_attention_maps(tensors, sources[0][0], args.attention_png):
                out(f"saved {saved}")
    if args.html:
        walk = steps.walk(tensors, model.hyperparameters, scope="decoder",
                          learned_positions=model.maximum_position is not None)
        hyper = dict(vocabulary_size=model.vocabulary_size,
                     maximum_position=model.maximum_position,
                     gelu_approximation=model.gelu_approximation,
                     **model.hyperparameters.to_dict())
        about = {"title": f"Language model walk-through: "
                          f"{' | '.join(' '.join(t) for t, _ in sources)}"[:200],
                 "weights": weights, "model": hyper, "target_origin": None,
                 "generated": f"opennmt-lite run.py inspect, config {', '.join(args.config)}, "
                              f"{time.strftime('%Y-%m-%d %H:%M:%S')}"}
        with writing(f"--html {args.html}"):
            size = html.write_page(args.html, walk, sources, None, about)
        out(f"saved {args.html} ({size / 1e6:.2f} MB, {time.perf_counter() - start:.1f} s)")
    return tensors


def write_html(args, config, model, assets, weights, sources, tensors):
    from opennmt_lite.inspection import alignment, html, steps

    source_ids, source_length = padded(sources)
    if config.model.is_encoder_model:  # (no decoder: the encoder's steps alone)
        from opennmt_lite import build

        kind = build.label_kind(config.model)
        hyper = dict(source_vocabulary_size=model.source_vocabulary_size,
                     **{f"num_{kind}": model.num_outputs},
                     crf_decoding=getattr(model, "crf_decoding", False),
                     **model.hyperparameters.to_dict())
        predictions = _predictions(model, assets, source_ids, source_length)
        about = {"title": f"{config.model.type} encoder walk-through: "
                          f"{' | '.join(' '.join(t) for t, _ in sources)}"[:200],
                 "weights": weights, "model": hyper,
                 "target_origin": f"no decoder; the model's {kind}: "
                                  + " | ".join(predictions),
                 "generated": f"opennmt-lite run.py inspect, config {', '.join(args.config)}, "
                              f"{time.strftime('%Y-%m-%d %H:%M:%S')}"}
        return html.write_page(args.html, steps.walk(tensors, model.hyperparameters), sources,
                               None, about)
    if args.target is not None:
        tokens = assets.target_tokenizer.tokenize(args.target)
        if len(tokens) == 0:
            raise ArgumentError("--target: the target is empty after tokenization")
        targets, origin = [alignment.given_target(tokens, assets.target_vocabulary)], "given"
    else:
        # Greedy, but not longer than twice the source and 10 tokens: enough to read alignments.
        limit = min(config.params.maximum_decoding_length, 2 * int(source_length.max()) + 10)
        targets = alignment.greedy_targets(model, source_ids, source_length, assets.target_vocabulary, limit)
        origin = f"the model's greedy translation, at most {limit} tokens"
    attention = alignment.trace_cross_attention(model, source_ids, source_length, targets)
    walk = steps.walk(tensors, model.hyperparameters) + steps.alignment_steps(attention)
    # The page's "Model" table: the vocabulary sizes, then every hyper-parameter.
    hyper = dict(source_vocabulary_size=model.source_vocabulary_size,
                 target_vocabulary_size=model.target_vocabulary_size,
                 **model.hyperparameters.to_dict())
    about = {"title": f"Encoder walk-through: {' | '.join(' '.join(t) for t, _ in sources)}"[:200],
             "weights": weights, "model": hyper, "target_origin": origin,
             "generated": f"opennmt-lite run.py inspect, config {', '.join(args.config)}, "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S')}"}
    return html.write_page(args.html, walk, sources, targets, about)
