#!/usr/bin/env python
"""Makes the fixtures of OpenNMT-tf's other Transformer models with the real OpenNMT-tf 2.32 (run
with the OpenNMT-tf virtual environment's Python; see bench/onmt_env.py):

    /work/onmt-venv/bin/python bench/onmt_model_fixtures.py [--only NAME] [WORK]
    /work/onmt-venv/bin/python bench/onmt_model_fixtures.py --gpt2-variables
    /work/onmt-venv/bin/python bench/onmt_model_fixtures.py --bioes

NAME: tagger_crf, tagger, classifier, lm (default: all four). Each one is trained in WORK/NAME
(a scratch folder), then its files listed in `KEEP` are copied to tests/fixtures/onmt_tf_NAME/.
The folder's README.md says what each file is. The data are derived from the shipped corpus:

- words: a line of data/*.en split into words and punctuation (`\\w+|[^\\w\\s]`); training set
  every 10th line of data/train.en with 1 to 25 words; held-out inputs the first 100 lines of
  data/test.en (evaluation: the next 100);
- tags (BIOES, deterministic from the words, so that a tagger can learn them): a word starting
  with a digit is `S-NUM`; a run of words starting with a capital letter, the sentence's first
  word excepted, is one `CAP` chunk (`S-CAP`, or `B-CAP I-CAP... E-CAP`); every other word `O`;
- class labels: `format` if the line holds `%`, else `error` if it holds a negative word
  (`NEGATIVE_WORDS`), else `sentence` if it ends with `.`, `!` or `?`, else `other`.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
BIN = os.path.dirname(sys.executable)
WORD = re.compile(r"\w+|[^\w\s]")
NEGATIVE_WORDS = {"error", "failed", "cannot", "unable", "invalid", "not", "no", "fail", "failure"}
TAGS = ["O", "B-CAP", "I-CAP", "E-CAP", "S-CAP", "S-NUM"]
LABELS = ["error", "format", "other", "sentence"]
STEPS = {"tagger_crf": 1000, "tagger": 1000, "classifier": 1000, "lm": 3000}

TRANSFORMER_ENCODER = """\
        encoder=opennmt.encoders.SelfAttentionEncoder(
            num_layers=2,
            num_units=32,
            num_heads=2,
            ffn_inner_dim=64,
            dropout=0.1,
            attention_dropout=0.1,
            ffn_dropout=0.1,
        ),"""


def tagger_model_file(name, crf_decoding):
    """The model.py of a tagger fixture (with or without CRF decoding)."""
    return f'''"""OpenNMT-tf 2.32 custom model file of the "onmt_tf_{name}" fixture."""

import opennmt


def model():
    return opennmt.models.SequenceTagger(
        inputter=opennmt.inputters.WordEmbedder(embedding_size=32),
{TRANSFORMER_ENCODER}
        crf_decoding={crf_decoding},
    )
'''


MODEL_FILES = {
    "tagger_crf": tagger_model_file("tagger_crf", True),
    "tagger": tagger_model_file("tagger", False),
    "classifier": f'''"""OpenNMT-tf 2.32 custom model file of the "onmt_tf_classifier" fixture."""

import opennmt


def model():
    return opennmt.models.SequenceClassifier(
        inputter=opennmt.inputters.WordEmbedder(embedding_size=32),
{TRANSFORMER_ENCODER}
    )
''',
    # The catalog's GPT2Small, scaled down: gelu, learned positions, no source.
    "lm": '''"""OpenNMT-tf 2.32 custom model file of the "onmt_tf_lm" fixture: GPT2Small's layout,
scaled down."""

import opennmt


def model():
    return opennmt.models.LanguageModel(
        decoder=opennmt.decoders.SelfAttentionDecoder(
            num_layers=2,
            num_units=32,
            num_heads=2,
            ffn_inner_dim=64,
            dropout=0.1,
            attention_dropout=0.1,
            ffn_dropout=0.1,
            ffn_activation=opennmt.layers.gelu,
            position_encoder_class=lambda: opennmt.layers.PositionEmbedder(maximum_position=128),
            num_sources=0,
        ),
        embedding_size=32,
    )
''',
}

PARAMS = """\
params:
  optimizer: Adam
  learning_rate: 0.002
  average_loss_in_time: true
  beam_width: 1
"""

TRAIN = """\
train:
  batch_type: tokens
  batch_size: 1024
  max_step: {steps}
  save_checkpoints_steps: {steps}
  keep_checkpoint_max: 1
  save_summary_steps: 100
  maximum_features_length: 100
  maximum_labels_length: 100
"""

CONFIGS = {
    "tagger_crf": """\
model_dir: .

data:
  train_features_file: train.tok.en
  train_labels_file: train.tags
  source_vocabulary: src-vocab.txt
  target_vocabulary: tags-vocab.txt
  tagging_scheme: bioes

""",
    "classifier": """\
model_dir: .

data:
  train_features_file: train.tok.en
  train_labels_file: train.labels
  source_vocabulary: src-vocab.txt
  target_vocabulary: labels-vocab.txt

""",
    "lm": """\
model_dir: .

data:
  train_features_file: train.tok.en
  vocabulary: vocab.txt

""",
}
CONFIGS["tagger"] = CONFIGS["tagger_crf"]
INFER = """
infer:
  batch_type: examples
  batch_size: 16
"""
# A language model generates from prefixes of one length per batch (OpenNMT-tf asserts it):
# buckets of width 1 keep them apart; the predictions still come out in file order.
LM_INFER = """
infer:
  batch_type: examples
  batch_size: 16
  length_bucket_width: 1
"""
LM_PARAMS_EXTRA = "  maximum_decoding_length: 30\n"


def words(line):
    return WORD.findall(line)


def read_words(path):
    with open(path, encoding="utf-8") as f:
        return [words(line) for line in f]


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def bioes_tags(tokens):
    tags = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token[0].isdigit():
            tags.append("S-NUM")
            index += 1
            continue
        end = index
        while end < len(tokens) and end > 0 and tokens[end][0].isupper():
            end += 1
        if end == index:
            tags.append("O")
            index += 1
        elif end == index + 1:
            tags.append("S-CAP")
            index = end
        else:
            tags.extend(["B-CAP"] + ["I-CAP"] * (end - index - 2) + ["E-CAP"])
            index = end
    return tags


def class_label(tokens):
    if "%" in tokens:
        return "format"
    if any(token.lower() in NEGATIVE_WORDS for token in tokens):
        return "error"
    if tokens[-1] in (".", "!", "?"):
        return "sentence"
    return "other"


def run(*args, cwd, stdout=None, stderr=None):
    print("+", " ".join(args), flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    subprocess.run(args, check=True, cwd=cwd, env=env, stdout=stdout, stderr=stderr)


def write_data(work, name):
    train = [t for t in read_words(os.path.join(DATA, "train.en"))[::10] if 1 <= len(t) <= 25]
    test = read_words(os.path.join(DATA, "test.en"))
    held_out, evaluation = test[:100], test[100:200]
    write_lines(os.path.join(work, "train.tok.en"), [" ".join(t) for t in train])
    write_lines(os.path.join(work, "test.first100.tok.en"), [" ".join(t) for t in held_out])
    write_lines(os.path.join(work, "eval.tok.en"), [" ".join(t) for t in evaluation])
    if name.startswith("tagger"):
        for file, sentences in (("train.tags", train), ("test.first100.tags", held_out),
                                ("eval.tags", evaluation)):
            write_lines(os.path.join(work, file), [" ".join(bioes_tags(t)) for t in sentences])
        write_lines(os.path.join(work, "tags-vocab.txt"), TAGS)
    elif name == "classifier":
        for file, sentences in (("train.labels", train), ("test.first100.labels", held_out),
                                ("eval.labels", evaluation)):
            write_lines(os.path.join(work, file), [class_label(t) for t in sentences])
        write_lines(os.path.join(work, "labels-vocab.txt"), LABELS)
    else:
        # Prefixes of 1 to 4 words (fewer if the line is shorter) to continue.
        write_lines(os.path.join(work, "test.first100.prefix.en"),
                    [" ".join(t[: 1 + i % 4]) for i, t in enumerate(held_out)])


def write_config(work, name):
    config = CONFIGS[name] + PARAMS
    if name == "lm":
        config += LM_PARAMS_EXTRA
    config += "\n" + TRAIN.format(steps=STEPS[name]) + (LM_INFER if name == "lm" else INFER)
    with open(os.path.join(work, "config.yml"), "w") as f:
        f.write(f"# Run configuration of this fixture for OpenNMT-tf 2.32 "
                f"(made by bench/onmt_model_fixtures.py).\n{config}")
    with open(os.path.join(work, "model.py"), "w") as f:
        f.write(MODEL_FILES[name])


def load_model(work):
    """The fixture's model, built and restored from its checkpoint, and its data config."""
    import opennmt
    import tensorflow as tf

    sys.path.insert(0, work)
    import importlib

    import model as model_module

    importlib.reload(model_module)
    sys.path.pop(0)
    config = opennmt.config.load_config([os.path.join(work, "config.yml")])
    data = {key: os.path.join(work, value) if isinstance(value, str) and
            os.path.exists(os.path.join(work, value)) else value
            for key, value in config["data"].items()}
    model = model_module.model()
    model.initialize(data, params=config["params"])
    return model, tf.train.Checkpoint(model=model), tf.train.latest_checkpoint(work)


def first_batch(model, work, features_file, count=8):
    import tensorflow as tf

    dataset = model.features_inputter.make_inference_dataset(
        os.path.join(work, features_file), batch_size=count)
    features = next(iter(dataset))
    return {key: value for key, value in features.items() if isinstance(value, tf.Tensor)}


def piece_numbers(work, name):
    """pieces.npz: numbers of the model's pieces on the first 8 held-out inputs (the language
    model: 4) (dropout off),
    from OpenNMT-tf's own layers and the restored checkpoint."""
    import tensorflow as tf

    model, checkpoint, path = load_model(work)
    result = {}
    if name == "lm":
        # (4 lines: the logits over a 4 001-word vocabulary are most of the fixture's size)
        features = first_batch(model, work, "test.first100.tok.en", count=4)
        ids, length = features["ids"], features["length"]
        # (a training-style call, with ids_out, builds the variables)
        model(dict(features, ids_out=ids), training=False)
        checkpoint.restore(path).expect_partial()
        logits, _ = model._decode(ids, length, training=False)
        result.update(ids=ids.numpy(), length=length.numpy(), logits=logits.numpy())
    else:
        features = first_batch(model, work, "test.first100.tok.en")
        model(features, training=False)
        checkpoint.restore(path).expect_partial()
        length = features["length"]
        inputs = model.features_inputter(features, training=False)
        outputs, _, outputs_length = model.encoder(inputs, sequence_length=length, training=False)
        result.update(ids=features["ids"].numpy(), length=length.numpy(),
                      encoder_outputs=outputs.numpy())
        if name == "classifier":
            ragged = tf.RaggedTensor.from_tensor(outputs, lengths=outputs_length)
            pooled = tf.reduce_mean(ragged, axis=1)
            result.update(pooled=pooled.numpy(), logits=model.output_layer(pooled).numpy())
        else:
            logits, predictions = model(features, training=False)
            result.update(logits=logits.numpy(), tags_id=predictions["tags_id"].numpy())
            if model.crf_decoding:
                result["transition_params"] = model.transition_params.numpy()
    np.savez(os.path.join(work, "pieces.npz"), **result)


def crf_reference(path):
    """crf.npz: TensorFlow Addons' CRF (the functions OpenNMT-tf's tagger calls) on random
    potentials: crf_log_likelihood, crf_sequence_score, crf_log_norm and crf_decode, for lengths
    of the whole time, shorter, one and zero."""
    import tensorflow as tf
    import tensorflow_addons as tfa

    rng = np.random.default_rng(11)
    result = {}
    for case, (batch, time, tags, lengths) in enumerate((
            (5, 7, 6, [7, 4, 1, 0, 6]), (3, 1, 4, [1, 1, 0]), (2, 12, 9, [12, 9]))):
        potentials = (rng.normal(size=(batch, time, tags)) * 3).astype(np.float32)
        transitions = rng.normal(size=(tags, tags)).astype(np.float32)
        gold = rng.integers(0, tags, size=(batch, time)).astype(np.int32)
        lengths = np.array(lengths, np.int32)
        log_likelihood, _ = tfa.text.crf_log_likelihood(
            tf.constant(potentials), tf.constant(gold), tf.constant(lengths),
            transition_params=tf.constant(transitions))
        sequence_score = tfa.text.crf_sequence_score(
            tf.constant(potentials), tf.constant(gold), tf.constant(lengths),
            tf.constant(transitions))
        log_norm = tfa.text.crf_log_norm(
            tf.constant(potentials), tf.constant(lengths), tf.constant(transitions))
        decoded, best_score = tfa.text.crf_decode(
            tf.constant(potentials), tf.constant(transitions), tf.constant(lengths))
        for key, value in dict(
                potentials=potentials, transitions=transitions, gold=gold, lengths=lengths,
                log_likelihood=log_likelihood.numpy(), sequence_score=sequence_score.numpy(),
                log_norm=log_norm.numpy(), decoded=decoded.numpy(),
                best_score=best_score.numpy()).items():
            result[f"case{case}_{key}"] = value
    np.savez(path, **result)


KEEP = {
    "common": ["config.yml", "model.py", "checkpoint", "test.first100.tok.en", "pieces.npz",
               "eval.tok.en", "train.first200.tok.en", "src-vocab.txt", "eval.result.txt"],
    "tagger_crf": ["tags-vocab.txt", "test.first100.tags", "eval.tags", "train.first200.tags",
                   "pred.first100.tags", "eval.log.txt", "crf.npz"],
    "tagger": ["tags-vocab.txt", "test.first100.tags", "eval.tags", "train.first200.tags",
               "pred.first100.tags", "eval.log.txt"],
    "classifier": ["labels-vocab.txt", "test.first100.labels", "eval.labels",
                   "train.first200.labels", "pred.first100.labels", "eval.log.txt"],
    "lm": ["vocab.txt", "test.first100.prefix.en", "pred.first100.greedy.en",
           "score.first100.txt", "eval.log.txt"],
}


def evaluation_line(log_path):
    with open(log_path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if "Evaluation result" in line]
    return lines[-1][lines[-1].index("Evaluation result"):] + "\n"


def make(name, work):
    os.makedirs(work, exist_ok=True)
    print("working in", work, flush=True)
    write_data(work, name)
    write_config(work, name)
    vocab = "vocab.txt" if name == "lm" else "src-vocab.txt"
    size = "4000" if name == "lm" else "2000"
    run(os.path.join(BIN, "onmt-build-vocab"), "--size", size, "--save_vocab", vocab,
        "train.tok.en", cwd=work)
    onmt_main = [os.path.join(BIN, "onmt-main"), "--model", "model.py", "--config", "config.yml"]
    steps = STEPS[name]
    if not os.path.exists(os.path.join(work, f"ckpt-{steps}.index")):
        run(*onmt_main, "--seed", "1", "train", cwd=work)
    checkpoint = ["--checkpoint_path", f"ckpt-{steps}"]
    if name == "lm":
        with open(os.path.join(work, "pred.first100.greedy.en"), "w") as out:
            run(*onmt_main, *checkpoint, "infer", "--features_file", "test.first100.prefix.en",
                cwd=work, stdout=out)
        with open(os.path.join(work, "score.first100.txt"), "w") as out:
            run(*onmt_main, *checkpoint, "score", "--features_file", "test.first100.tok.en",
                cwd=work, stdout=out)
        labels = []
    else:
        output = "pred.first100.tags" if name.startswith("tagger") else "pred.first100.labels"
        with open(os.path.join(work, output), "w") as out:
            run(*onmt_main, *checkpoint, "infer", "--features_file", "test.first100.tok.en",
                cwd=work, stdout=out)
        labels = ["--labels_file", "eval.tags" if name.startswith("tagger") else "eval.labels"]
    # stdout: the metrics as a Python dict (float32 values); the log: the line OpenNMT-tf prints.
    with open(os.path.join(work, "eval.log"), "w") as log, \
            open(os.path.join(work, "eval.result.txt"), "w") as out:
        run(*onmt_main, *checkpoint, "eval", "--features_file", "eval.tok.en", *labels,
            cwd=work, stdout=out, stderr=log)
    with open(os.path.join(work, "eval.log.txt"), "w") as f:
        f.write(evaluation_line(os.path.join(work, "eval.log")))
    for suffix in ("tok.en", "tags", "labels"):
        source = os.path.join(work, f"train.{suffix}")
        if os.path.exists(source):
            with open(source, encoding="utf-8") as f:
                head = [next(f) for _ in range(200)]
            with open(os.path.join(work, f"train.first200.{suffix}"), "w") as f:
                f.writelines(head)
    piece_numbers(work, name)
    if name == "tagger_crf":
        crf_reference(os.path.join(work, "crf.npz"))
    target = os.path.join(FIXTURES, f"onmt_tf_{name}")
    os.makedirs(target, exist_ok=True)
    files = KEEP["common"] + KEEP[name] + [f"ckpt-{steps}.index",
                                           f"ckpt-{steps}.data-00000-of-00001"]
    for file in files:
        if file == "src-vocab.txt" and name == "lm":
            continue
        shutil.copy(os.path.join(work, file), target)


def main():
    args = sys.argv[1:]
    names = list(STEPS)
    if args[:1] == ["--only"]:
        names = args[1].split(",")
        args = args[2:]
    work = args[0] if args else tempfile.mkdtemp(prefix="onmt_models_")
    for name in names:
        make(name, os.path.join(work, name))



def gpt2_variables(path):
    """gpt2small_variables.json: {name: shape} of OpenNMT-tf's catalog GPT2Small built with a
    vocabulary of 4 000 lines (the checkpoint layout a GPT2Small preset must load)."""
    import opennmt
    import tensorflow as tf

    work = tempfile.mkdtemp(prefix="gpt2_")
    vocab = os.path.join(work, "vocab.txt")
    write_lines(vocab, ["<blank>", "<s>", "</s>"] + [f"w{i}" for i in range(3997)])
    model = opennmt.models.get_model_from_catalog("GPT2Small")
    model.initialize({"vocabulary": vocab}, params={"maximum_decoding_length": 4})
    features = {"ids": tf.constant([[4, 5, 6]], tf.int64), "length": tf.constant([3], tf.int32),
                "ids_out": tf.constant([[5, 6, 2]], tf.int64)}
    model(features, training=False)
    checkpoint = tf.train.Checkpoint(model=model)
    prefix = checkpoint.write(os.path.join(work, "ckpt"))
    names = {name: shape for name, shape in tf.train.list_variables(prefix)
             if name.startswith("model/")}
    with open(path, "w") as f:
        json.dump(names, f, indent=0, sort_keys=True)


def bioes_reference(path):
    """bioes_counts.json: OpenNMT-tf's `flag_bioes_tags` turned into (true positives, false
    positives, false negatives) for 300 random pairs of tag sequences, ill-formed chunks
    included (tags drawn from O, B-X, I-X, E-X, S-X, B-Y, E-Y, S-Y)."""
    from opennmt.models.sequence_tagger import flag_bioes_tags

    rng = np.random.default_rng(5)
    tags = ["O", "B-X", "I-X", "E-X", "S-X", "B-Y", "E-Y", "S-Y"]
    cases = []
    for _ in range(300):
        length = int(rng.integers(1, 9))
        gold = [tags[i] for i in rng.choice(len(tags), length, p=[.4] + [.6 / 7] * 7)]
        # The prediction: the gold tags with some changed, so that chunks often match.
        predicted = [tag if rng.random() < 0.7 else tags[rng.integers(len(tags))] for tag in gold]
        gold_flags, predicted_flags = flag_bioes_tags(
            np.array([[t.encode() for t in gold]]), np.array([[t.encode() for t in predicted]]),
            np.array([length]))
        counts = [int(np.sum(gold_flags & predicted_flags)), int(np.sum(~gold_flags & predicted_flags)),
                  int(np.sum(gold_flags & ~predicted_flags))]
        cases.append({"gold": gold, "predicted": predicted, "counts": counts})
    with open(path, "w") as f:
        json.dump(cases, f, indent=0)


if __name__ == "__main__" and sys.argv[1:2] == ["--bioes"]:
    bioes_reference(os.path.join(FIXTURES, "onmt_tf_tagger_crf", "bioes_counts.json"))
    sys.exit(0)


if __name__ == "__main__" and sys.argv[1:2] == ["--gpt2-variables"]:
    gpt2_variables(os.path.join(FIXTURES, "onmt_tf_lm", "gpt2small_variables.json"))
    sys.exit(0)


if __name__ == "__main__":
    main()
