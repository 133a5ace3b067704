"""Translation speed of one opennmt-lite checkout, for side-by-side runs against another:

    for i in 1 2 3; do for c in . /path/to/other/checkout; do python bench/translate_ab.py $c 3; done; done

Loads tests/fixtures/onmt_tf_relative (the model OpenNMT-tf trained) with CHECKOUT's code,
translates its 100 test sentences in batches of 16 with beam 4 (a tf.function, traced and
warmed up once), and prints one JSON line: target tokens per pass and tokens/s of each of
`repeats` passes, with their median. Alternate the checkouts, fresh processes, and compare
medians (the same tokens on both sides mean the same translations). Works with checkouts from
before the hyper-parameter carrier and the decoding options (issue 23)."""
import json, os, sys, time
checkout = os.path.abspath(sys.argv[1]); repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
sys.path.insert(0, checkout); os.chdir(checkout)
import numpy as np
import opennmt_lite
from opennmt_lite.models import Transformer
from opennmt_lite.data.vocab import Vocabulary
from opennmt_lite.inference import decoding
try:
    from opennmt_lite.hyperparameters import ModelHyperparameters
    from opennmt_lite.checkpointing.onmt_names import load_onmt_model
    model = Transformer(ModelHyperparameters(num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128,
                                             maximum_relative_position=8), 801, 801)
except ImportError:
    from opennmt_lite.onmt.checkpoint_import import load_onmt_model
    model = Transformer(801, 801, num_layers=2, num_units=64, num_heads=2, ffn_inner_dim=128,
                        maximum_relative_position=8)
fixture = "tests/fixtures/onmt_tf_relative"
load_onmt_model(fixture, model)
vocab = Vocabulary.from_file(f"{fixture}/src-vocab.txt")
lines = [l.split() for l in open(f"{fixture}/test.first100.tok.en", encoding="utf-8")]
options = dict(beam_width=4, n_best=1, maximum_decoding_length=250)
if hasattr(decoding, "DecodingOptions"):
    run = decoding.translation_function(model, decoding.DecodingOptions(**options))
else:
    run = decoding.translation_function(model, **options)
batches = []
for s in range(0, len(lines), 16):
    chunk = lines[s:s + 16]; n = np.array([len(t) for t in chunk], np.int32)
    ids = np.zeros([len(chunk), n.max()], np.int32)
    for r, t in enumerate(chunk): ids[r, :len(t)] = vocab.lookup(t)
    batches.append((ids, n))
def one_pass():
    tokens = 0
    for ids, n in batches:
        tokens += int(run(ids, n).lengths.numpy().sum())
    return tokens
one_pass()  # trace + warm-up
rates = []
for _ in range(repeats):
    start = time.perf_counter(); tokens = one_pass(); rates.append(tokens / (time.perf_counter() - start))
print(json.dumps({"checkout": checkout, "tokens": tokens, "rates": rates, "median": float(np.median(rates))}))
