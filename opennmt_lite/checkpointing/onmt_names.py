"""Reading OpenNMT-tf 2.x checkpoints: which checkpoint name holds which opennmt-lite variable.

OpenNMT-tf stores each variable under `model/<attribute path>/.ATTRIBUTES/VARIABLE_VALUE`. The
opennmt-lite layers use the same attribute names, so the map from a checkpoint name to one of our
variables is the attribute path with a prefix (`model/encoder/`), except for the embeddings,
which OpenNMT-tf keeps under its inputters. Finding, checking and reading checkpoints is
store.py's job, and choosing this format formats.py's; this module only names things and
assigns what it named.
"""

from opennmt_lite.checkpointing import store
from opennmt_lite.checkpointing.names import named_trainable, named_variables, optimizer_state

VALUE_SUFFIX = store.SUFFIX
MARK = "model/examples_inputter/"  # OpenNMT-tf keeps its embeddings under its inputters
SOURCE_EMBEDDING = "model/examples_inputter/features_inputter/embedding"
TARGET_EMBEDDING = "model/examples_inputter/labels_inputter/embedding"
KIND = "OpenNMT-tf checkpoint"


def encoder_mapping(encoder, embedder=None, encoder_scope="model/encoder",
                    embedding_name=SOURCE_EMBEDDING):
    """{checkpoint name: variable} for an encoder's weights and its source embedding."""
    mapping = {
        f"{encoder_scope}/{path}": variable
        for path, variable in named_variables(encoder, include_seeds=False).items()
    }
    if embedder is not None:
        mapping[embedding_name] = embedder.embedding
    return mapping


def model_mapping(model, available=()):
    """{checkpoint name: variable} for every weight of a `Transformer`.

    With shared input embeddings OpenNMT-tf stores the one table under either inputter's name;
    `available` (the checkpoint's names) picks the one present.
    """
    embedding_names = {
        "source_inputter/embedding": [SOURCE_EMBEDDING, TARGET_EMBEDDING],
        "target_inputter/embedding": [TARGET_EMBEDDING],
    }
    mapping = {}
    for path, variable in named_variables(model, include_seeds=False).items():
        if path in embedding_names:
            candidates = embedding_names[path]
            name = next((c for c in candidates if c in available), candidates[0])
        else:
            name = f"model/{path}"
        mapping[name] = variable
    return mapping


def load_onmt_encoder(path, encoder, embedder=None):
    """Loads an OpenNMT-tf 2.x checkpoint's encoder (and source embedding) into opennmt-lite layers.

    `path`: a checkpoint prefix or a directory (see `store.resolve`). The layers are built
    first if needed. Fails, naming every variable, when one is missing, mis-shaped, or left over.
    """
    if not encoder.built:
        encoder.build((None, None, encoder.hyperparameters.num_units))
    if embedder is not None and not embedder.built:
        embedder.build()
    leftover = ["model/encoder/"] + ([SOURCE_EMBEDDING] if embedder is not None else [])
    return store.assign(store.resolve(path), encoder_mapping(encoder, embedder), leftover, KIND)


def load_onmt_model(path, model):
    """Loads every variable of an OpenNMT-tf 2.x Transformer checkpoint (a prefix or a directory)
    into `model`. Fails, naming each variable, if anything is missing, mis-shaped or left over."""
    return assign_model(store.resolve(path), model)


def assign_model(prefix, model):
    """load_onmt_model for a checkpoint prefix."""
    if not model.built:
        model.build()
    mapping = model_mapping(model, store.contents(prefix))
    return store.assign(prefix, mapping, ("model/",), KIND)


def assign_optimizer_state(prefix, model, optimizer):
    """Copies an OpenNMT-tf checkpoint's Adam/LazyAdam slots (`m`, `v`) and step (`iter`) into a
    built Keras Adam `optimizer`, so training continues where OpenNMT-tf stopped.
    Returns the restored step (0 if the checkpoint holds no optimizer state)."""
    return assign_optimizer_slots(prefix, model_mapping(model, store.contents(prefix)), model,
                                  optimizer)


def assign_optimizer_slots(prefix, mapping, model, optimizer):
    """assign_optimizer_state for any model whose {checkpoint name: variable} map is `mapping`
    (a translation model's, a tagger's, a language model's)."""
    stored = store.contents(prefix)
    onmt_name = {id(v): name for name, v in mapping.items()}
    trainable = named_trainable(model)
    state = optimizer_state(optimizer, trainable)
    targets = {}  # {checkpoint name: our slot variable}
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

