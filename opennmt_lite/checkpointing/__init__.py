"""Checkpoints: the store (store.py: find, check, read, save, rotate, quarantine), TensorFlow's
file format read and written without TensorFlow (bundle.py, crc32c.py), the names of
variables and optimizer state (names.py), OpenNMT-tf's names (onmt_names.py), the choice
between the two formats (formats.py) and what a training checkpoint holds
(training_checkpoint.py). Imports only the layers below it (base, config, data, layers,
models), never training, inference, export, build or commands."""
