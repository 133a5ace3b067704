"""OpenNMT-tf compatibility: its command lines (onmt-main, onmt-build-vocab, onmt-tokenize-text, onmt-detokenize-text, onmt-merge-config) and model files."""
