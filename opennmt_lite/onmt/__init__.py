"""OpenNMT-tf compatibility: its checkpoint names, and importing its checkpoints."""
