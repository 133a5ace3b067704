"""Looking inside the model: showing the intermediate tensors that `opennmt_lite.recorder`
records (as text, HTML pages, alignments, decoding steps)."""
