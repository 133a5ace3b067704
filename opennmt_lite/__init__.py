"""opennmt-lite: OpenNMT-tf's Transformer on Keras 3 and TensorFlow 2.21."""

__version__ = "0.1.0"
