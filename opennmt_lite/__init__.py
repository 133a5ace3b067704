"""opennmt-lite: OpenNMT-tf's Transformer on Keras 3 and TensorFlow 2.21."""

__version__ = "0.1.0"

# The package name under which the layers, models and schedules register for Keras serialization
# (`keras.saving.register_keras_serializable(package=PACKAGE)`); saved models name it.
PACKAGE = "opennmt_lite"

# pyonmttok before TensorFlow: the other way round, the OpenNMT Tokenizer crashes (SIGSEGV) as
# soon as it loads a SentencePiece model (`sp_model_path`), both libraries carrying their own
# copies of the same native dependencies.
try:
    import pyonmttok  # noqa: F401
except ImportError:  # pragma: no cover (in requirements.txt; only OpenNMTTokenizer needs it)
    pass
