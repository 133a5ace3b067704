"""OpenNMT-tf 2.x checkpoints of a SequenceTagger, SequenceClassifier or LanguageModel: which
checkpoint name holds which variable of opennmt_lite/models/encoder_models.py's and
language_model.py's models.

OpenNMT-tf saves them as `model/encoder/...` (the encoder, named as in a Transformer),
`model/output_layer/{kernel,bias}`, `model/transition_params` (a tagger with CRF) and the
embedding under its inputter; our models use the same attribute names except the embedding's.
"""

from opennmt_lite.checkpointing import store
from opennmt_lite.checkpointing.names import named_variables
from opennmt_lite.checkpointing.onmt_names import KIND, SOURCE_EMBEDDING


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
    from opennmt_lite.checkpointing.names import named_trainable, optimizer_state

    mapping = (model_mapping(model) if hasattr(model, "encoder")
               else language_model_mapping(model))
    onmt_name = {id(variable): name for name, variable in mapping.items()}
    stored = store.contents(prefix)
    trainable = named_trainable(model)
    state = optimizer_state(optimizer, trainable)
    targets = {}
    for path, variable in trainable.items():
        for slot in ("m", "v"):
            name = f"{onmt_name[id(variable)]}/.OPTIMIZER_SLOT/optimizer/{slot}"
            if name in stored and f"{slot}/{path}" in state:
                targets[name] = state[f"{slot}/{path}"]
    if "optimizer/iter" in stored:
        targets["optimizer/iter"] = state["iterations"]
    for name, value in store.read(prefix, targets).items():
        targets[name].assign(value)
    return int(state["iterations"].numpy()) if "optimizer/iter" in targets else 0
