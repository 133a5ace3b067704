#!/usr/bin/env python
"""opennmt-lite command line from a checkout: `python run.py <command> ...`, the same as the
installed `opennmt-lite` command (opennmt_lite/cli.py, where the commands are parsed and run)."""

import sys

from opennmt_lite import cli

if __name__ == "__main__":
    cli.before_tensorflow(sys.argv[1:])  # (XLA's cache, the CPU kernels: read once, at start)
cli.import_tensorflow_quietly()  # at import, as before: `import run` leaves TensorFlow set up


def main(argv=None):
    """`opennmt_lite.cli.main` under the name `run.py` (tests call it in-process)."""
    return cli.main(argv, prog="run.py")


if __name__ == "__main__":
    cli.run(prog="run.py")
