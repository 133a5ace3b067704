"""The models a server translates with, one class per backend, each reusing the code of the
command that translates the same way:

* `checkpoint`: the newest (or a named) checkpoint, decoded by `run.py infer`'s
  `inference.translate.translate_file` (any beam size and n_best up to serve.max_beam_size);
* `ctranslate2`: an export of `run.py export --format ctranslate2`, decoded by `run.py infer
  --ctranslate2`'s `inference.ctranslate2.translate_file` (the same options);
* `saved_model`: an export of `run.py export`, its `translate` signature (`serving_default` for
  alignments) fed with the config's source pieces; its beam size and n_best were fixed at export
  (the config's params.beam_width and infer.n_best), so a request may only ask for those (n_best
  fewer).

Every backend tokenizes with the model's config (`Model.prepare`: its tokenizer and vocabulary, as
`encode_lines` uses them for infer, then a sentence
longer than infer.maximum_features_length is cut to its first pieces, as `infer` cuts it) and
`translate(sources, options, alignments)` returns, per source, n_best (text, score[, alignment
[target tokens, source]]) as `translate_file` does.
"""

import dataclasses
import logging
import os
import threading

import numpy as np

from opennmt_lite import build
from opennmt_lite.data.corpus import MonolingualCorpus, RaggedIds
from opennmt_lite.data.pipeline import pad_source_batch
from opennmt_lite.errors import UserError

logger = logging.getLogger("opennmt_lite")
FEW_SENTENCES = 4  # (see `tokenized`)


class ModelLoadError(UserError, RuntimeError):
    """A model of the server that cannot be loaded (names the serve.models entry)."""


class OptionError(ValueError):
    """Decoding options a request asks for that this model cannot give (HTTP 400)."""


@dataclasses.dataclass
class Source:
    """One sentence ready to translate: its pieces (cut to infer.maximum_features_length) and
    their ids; `length_before` counts the pieces before the cut."""

    tokens: list
    ids: np.ndarray
    length_before: int


class SentenceBatch:
    """Sentences as `translate_file` reads an InferenceInput: `corpus`, `batches` (one: the batch
    the server formed) and `numpy_batches()`."""

    def __init__(self, sources, controls):
        lengths = np.array([len(s.ids) for s in sources], np.int64)
        offsets = np.zeros(len(sources) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate([s.ids for s in sources]) if sources else np.zeros([0], np.int32)
        self.corpus = MonolingualCorpus(RaggedIds(flat, offsets), [list(s.tokens) for s in sources],
                                        np.arange(len(sources)), ["request"], controls)
        self.batches = [np.arange(len(sources))]

    def numpy_batches(self):
        for indices in self.batches:
            yield pad_source_batch(self.corpus, indices)


def tokenized(tokenizer, texts):
    """[pieces] of each text: the tokenizer's batch call, or for a few texts one call each
    (SentencePiece's batch call starts a pool of threads, which costs more than a few texts)."""
    texts = list(texts)
    if len(texts) > FEW_SENTENCES:
        return tokenizer.tokenize_batch(texts)
    return [tokenizer.tokenize(text) for text in texts]


class Model:
    """What every backend shares: the config, its assets and the options it decodes with."""

    backend = None

    def __init__(self, model_id, config, path):
        self.model_id = model_id
        self.config = config
        self.path = path
        self.assets = build.assets(config.data)
        self.controls = build.sequence_controls(config.data, sides=("source",))["source_controls"]
        self.maximum_length = config.infer.maximum_features_length
        self.default_beam = config.params.beam_width
        self.default_n_best = config.infer.n_best
        self._options = {}

    def prepare(self, sentences):
        """[Source] of raw sentences (the config's tokenizer and vocabulary, infer's cut)."""
        vocabulary = self.assets.source_vocabulary
        sources = []
        for pieces in tokenized(self.assets.source_tokenizer, sentences):
            ids, before = vocabulary.lookup(pieces), len(pieces)
            if self.maximum_length and before > self.maximum_length:
                logger.warning("model %s: a sentence of %d tokens, more than "
                               "infer.maximum_features_length=%d: translating its first %d tokens",
                               self.model_id, before, self.maximum_length, self.maximum_length)
                ids, pieces = ids[:self.maximum_length], pieces[:self.maximum_length]
            sources.append(Source(list(pieces), np.asarray(ids, np.int32), before))
        return sources

    def options(self, beam_size=None, n_best=None, max_beam_size=None):
        """The DecodingOptions of a request (None: the config's); OptionError when refused."""
        key = (beam_size, n_best, max_beam_size)
        if key not in self._options:  # (made once: a request's options are few)
            if len(self._options) > 1000:
                self._options.clear()
            self._options[key] = self._make_options(beam_size, n_best, max_beam_size)
        return self._options[key]

    def _make_options(self, beam_size, n_best, max_beam_size):
        beam = self.default_beam if beam_size is None else beam_size
        if max_beam_size is not None and beam > max_beam_size:
            raise OptionError(f"beam_size {beam} is more than this server allows "
                              f"(serve.max_beam_size={max_beam_size})")
        best = (min(self.default_n_best, beam) if n_best is None else n_best)
        if best > beam:
            raise OptionError(f"n_best ({best}) cannot exceed the beam size ({beam})")
        return build.decoding_options(self.config.params, self.config.infer, beam, best,
                                      self.config.train.seed)

    def describe(self):
        """This model in GET /models (OpenNMT-py's fields, and the backend)."""
        return {"model_id": self.model_id, "backend": self.backend,
                "opt": {"beam_size": self.default_beam, "n_best": self.default_n_best,
                        "max_length": self.config.params.maximum_decoding_length,
                        "max_source_length": self.maximum_length},
                "models": [self.path], "loaded": True, "timeout": -1}

    def default_workers(self):
        return 1


class CheckpointModel(Model):
    backend = "checkpoint"

    def __init__(self, model_id, config, path=None):
        super().__init__(model_id, config, path)
        self.model, _, self.path = build.inference_model(config, path)
        self._functions = {}
        self._lock = threading.Lock()

    def translate(self, sources, options, alignments=None):
        from opennmt_lite.inference.translate import decoding_function, translate_file

        key = (options, alignments)
        with self._lock:  # (one tf.function, traced once, per options)
            if key not in self._functions:
                self._functions[key] = decoding_function(self.model, options, alignments)
        return translate_file(self.model, self.assets, SentenceBatch(sources, self.controls),
                              options, progress=False, alignments=alignments,
                              decode=self._functions[key])


class CTranslate2Model(Model):
    backend = "ctranslate2"

    def __init__(self, model_id, config, path, workers=None):
        from opennmt_lite.inference import ctranslate2

        super().__init__(model_id, config, path)
        self.workers = workers or self.default_workers()
        self.translator = ctranslate2.load_translator(path, self.assets, threads=self.workers)
        ctranslate2.check_source_controls(path, config.data.source_sequence_controls)
        self.unk_token = ctranslate2.unknown_token(path)

    def default_workers(self):
        return len(os.sched_getaffinity(0))

    def translate(self, sources, options, alignments=None):
        from opennmt_lite.inference import ctranslate2

        return ctranslate2.translate_file(self.translator, self.assets,
                                          SentenceBatch(sources, self.controls), options,
                                          progress=False, unk_token=self.unk_token,
                                          alignments=alignments)


class SavedModelModel(Model):
    backend = "saved_model"

    def __init__(self, model_id, config, path):
        from opennmt_lite import keras_backend

        if not keras_backend.tensorflow_installed():  # (on either backend: TensorFlow's loader)
            raise ModelLoadError("the saved_model backend needs TensorFlow, which is not "
                                 "installed (an install from requirements-jax.txt): serve a "
                                 "checkpoint or a CTranslate2 model instead")
        import tensorflow as tf

        super().__init__(model_id, config, path)
        if not os.path.isfile(os.path.join(path, "saved_model.pb")):
            raise ModelLoadError(f"{path}: no SavedModel (saved_model.pb) there; write one with "
                                 "`run.py export`")
        try:  # (registers the SentencePiece op of the text signatures, when the export has them)
            import tensorflow_text  # noqa: F401
        except ImportError:
            pass
        self.loaded = tf.saved_model.load(path)
        self.signatures = {name: self.loaded.signatures[name] for name in ("translate", "serving_default")}
        self._tf = tf

    def _make_options(self, beam_size, n_best, max_beam_size):
        if beam_size is not None and beam_size != self.default_beam:
            raise OptionError(f"model {self.model_id} (saved_model) translates with the beam size "
                              f"fixed at export, {self.default_beam}; got beam_size {beam_size}")
        if n_best is not None and n_best > self.default_n_best:
            raise OptionError(f"model {self.model_id} (saved_model) returns at most the n_best "
                              f"fixed at export, {self.default_n_best}; got n_best {n_best}")
        options = super()._make_options(None, None, None)
        return dataclasses.replace(options, n_best=n_best or self.default_n_best)

    def translate(self, sources, options, alignments=None):
        tf = self._tf
        width = max([len(s.tokens) for s in sources] + [1])
        tokens = np.array([s.tokens + [""] * (width - len(s.tokens)) for s in sources], dtype=object)
        length = np.array([len(s.tokens) for s in sources], np.int32)
        signature = self.signatures["serving_default" if alignments else "translate"]
        outputs = signature(tokens=tf.constant(tokens, tf.string), length=tf.constant(length))
        pieces, lengths = outputs["tokens"].numpy(), outputs["length"].numpy()
        scores = outputs["log_probs"].numpy()
        attention = outputs["alignment"].numpy() if alignments else None
        detokenize = self.assets.target_tokenizer.detokenize
        results = []
        for row in range(len(sources)):
            hypotheses = []
            for k in range(options.n_best):
                hypothesis = [p.decode("utf-8") for p in pieces[row, k, :lengths[row, k]]]
                hypotheses.append((detokenize(hypothesis), float(scores[row, k]))
                                  + ((attention[row, k, :len(hypothesis)],) if alignments else ()))
            results.append(hypotheses)
        return results


def load_model(entry, config, workers=None):
    """The Model of one serve.models entry ({id, config, backend, path}) whose config is loaded
    (`config`); ModelLoadError names the entry when it cannot be loaded."""
    where = f"model {entry['id']} ({entry['backend']}{', ' + entry['path'] if entry['path'] else ''})"
    try:
        if entry["backend"] == "ctranslate2":
            return CTranslate2Model(entry["id"], config, entry["path"], workers)
        if entry["backend"] == "saved_model":
            return SavedModelModel(entry["id"], config, entry["path"])
        return CheckpointModel(entry["id"], config, entry["path"])
    except UserError as error:
        raise ModelLoadError(f"{where}: {error}") from None
    except Exception as error:  # noqa: BLE001 (a damaged export: TensorFlow's or CTranslate2's error)
        text = str(error).strip().splitlines()
        raise ModelLoadError(f"{where}: cannot be loaded: {text[0] if text else type(error).__name__}") from None
