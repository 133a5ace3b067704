"""OpenNMT-tf 2.x checkpoints of a SequenceTagger, SequenceClassifier or LanguageModel: which
checkpoint name holds which variable of opennmt_lite/models/encoder_models.py's and
language_model.py's models.

OpenNMT-tf saves them as `model/encoder/...` (the encoder, named as in a Transformer),
`model/output_layer/{kernel,bias}`, `model/transition_params` (a tagger with CRF) and the
embedding under its inputter; our models use the same attribute names except the embedding's.
"""

from opennmt_lite.checkpointing import store
from opennmt_lite.checkpointing.names import named_variables
from opennmt_lite.checkpointing.onmt_names import KIND, SOURCE_EMBEDDING, assign_optimizer_slots


def model_mapping(model):
    """{checkpoint name: variable} for every weight of a built tagger or classifier."""
    mapping = {}
    for path, variable in named_variables(model, include_seeds=False).items():
        name = SOURCE_EMBEDDING if path == "features_inputter/embedding" else f"model/{path}"
        mapping[name] = variable
    return mapping


def load_onmt_model(path, model):
    """Loads every variable of an OpenNMT-tf tagger or classifier checkpoint (a prefix or a
    directory) into `model`; fails, naming each variable, if one is missing, mis-shaped or left
    over (a CRF's transitions into a tagger without CRF, say)."""
    if not model.built:
        model.build()
    prefix = store.resolve(path)
    return store.assign(prefix, model_mapping(model), ("model/",), KIND)


def load_onmt_language_model(path, model):
    """Loads an OpenNMT-tf LanguageModel checkpoint into opennmt_lite's LanguageModel: every name
    is `model/` + our attribute path (the output kernel is the embedding, saved once)."""
    if not model.built:
        model.build()
    return store.assign(store.resolve(path), language_model_mapping(model), ("model/",), KIND)


def language_model_mapping(model):
    """{checkpoint name: variable} for every weight of a built LanguageModel."""
    return {f"model/{attribute}": variable
            for attribute, variable in named_variables(model, include_seeds=False).items()}


def assign_optimizer_state(prefix, model, optimizer):
    """Copies an OpenNMT-tf checkpoint's Adam slots (`m`, `v`) and step of a tagger, classifier
    or language model into a built Keras Adam `optimizer`, so that training continues where
    OpenNMT-tf stopped. Returns the restored step (0 if the checkpoint holds none)."""
    mapping = (model_mapping(model) if hasattr(model, "encoder")
               else language_model_mapping(model))
    return assign_optimizer_slots(prefix, mapping, model, optimizer)
