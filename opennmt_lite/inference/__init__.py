"""Inference: greedy and beam search, translating files."""
