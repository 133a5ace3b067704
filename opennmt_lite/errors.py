"""Telling a user's mistake from a bug, so the CLI prints the first plainly and the second fully."""

import os
import traceback

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
USER_ERROR_TYPES = (ValueError, TypeError, FileNotFoundError, IsADirectoryError, RuntimeError)


def is_user_error(error):
    """True for errors raised by opennmt-lite's own checks (config, data, checkpoints...): an
    exception of a plain type whose innermost frame is in this package. An error raised inside
    TensorFlow or Keras is treated as a bug and shown with its traceback."""
    if not isinstance(error, USER_ERROR_TYPES):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(PACKAGE_DIR)
