"""`python -m opennmt_lite <command> ...`: the `opennmt-lite` command."""

from opennmt_lite.cli import run

if __name__ == "__main__":
    run(prog="python -m opennmt_lite")
