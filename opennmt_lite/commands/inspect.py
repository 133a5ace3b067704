"""`run.py inspect`: runs the encoder on one sentence and prints every intermediate tensor
(see opennmt_lite.inspection)."""

import os

import numpy as np

from opennmt_lite.commands import add_checkpoint_argument
from opennmt_lite.errors import ArgumentError, OutputError

HELP = "show every intermediate tensor of the encoder on one sentence"


def add_arguments(parser):
    add_checkpoint_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sentence", help="raw source text (tokenized as configured)")
    source.add_argument("--ids", help="space-separated source token ids")
    parser.add_argument("--attention_png", help="directory for attention heat maps (PNG)")
    parser.add_argument("--values", action="store_true", help="also print tensor values")


def source_of(args, assets):
    """(tokens, ids) of --sentence or --ids."""
    vocabulary = assets.source_vocabulary
    if args.sentence is not None:
        tokens = assets.source_tokenizer.tokenize(args.sentence)
        ids = vocabulary.lookup(tokens)
    else:
        try:
            ids = np.array([int(x) for x in args.ids.split()], np.int64)
        except ValueError:
            raise ArgumentError(f"--ids must be space-separated integers, got {args.ids!r}") from None
        outside = [int(i) for i in ids if not 0 <= i < vocabulary.num_ids]
        if outside:
            raise ArgumentError(f"--ids: {outside[0]} is outside the source vocabulary "
                                f"(ids 0 to {vocabulary.num_ids - 1})")
        tokens = vocabulary.to_tokens(ids)
    if len(ids) == 0:
        raise ArgumentError(f"{'--sentence' if args.sentence is not None else '--ids'}: the source "
                            "is empty after tokenization")
    return tokens, ids


def run(args, config, out=print):
    from opennmt_lite import build
    from opennmt_lite.inspection.text import save_attention_maps, summarize, trace_encoder

    if args.attention_png and os.path.exists(args.attention_png) and not os.path.isdir(args.attention_png):
        raise OutputError(f"--attention_png {args.attention_png} is a file, not a directory")
    model, assets, path = build.inference_model(config, args.checkpoint, required=False)
    out(f"weights: {path}" if path else "weights: randomly initialized (no checkpoint in "
        f"{config.model_dir})")
    tokens, ids = source_of(args, assets)
    out(f"tokens: {' '.join(tokens)}")
    out(f"ids:    {' '.join(str(i) for i in ids)}")
    tensors = trace_encoder(model, [ids], [len(ids)])
    for name, value in tensors.items():
        out(summarize(name, value, args.values))
    if args.attention_png:
        for saved in save_attention_maps(tensors, tokens, args.attention_png):
            out(f"saved {saved}")
    return tensors
