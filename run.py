#!/usr/bin/env python
"""opennmt-lite command line from a checkout: `python run.py <command> ...`, the same as the
installed `opennmt-lite` command (opennmt_lite/cli.py, where the commands are parsed and run)."""

import sys

from opennmt_lite import cli

if __name__ == "__main__":
    cli.set_xla_cache(sys.argv[1:])  # (before TensorFlow starts: XLA reads its flags once)
cli.import_tensorflow_quietly()  # at import, as before: `import run` leaves TensorFlow set up


def main(argv=None):
    """`opennmt_lite.cli.main` under the name `run.py` (tests call it in-process)."""
    return cli.main(argv, prog="run.py")


if __name__ == "__main__":
    cli.run(prog="run.py")
