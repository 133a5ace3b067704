"""`python -m opennmt_lite.onmt <onmt-command> [options]`: OpenNMT-tf's commands by name
(`onmt-main`, `onmt-build-vocab`, `onmt-tokenize-text`, `onmt-detokenize-text`,
`onmt-merge-config`), for an environment where OpenNMT-tf's own scripts hold those names."""

import importlib
import sys

# command -> (module, function): the console scripts of pyproject.toml, minus onmt-main's
# process exit (the function returns the status).
COMMANDS = {
    "onmt-main": ("opennmt_lite.onmt.main", "main"),
    "onmt-build-vocab": ("opennmt_lite.onmt.tools", "build_vocab"),
    "onmt-tokenize-text": ("opennmt_lite.onmt.tools", "tokenize_text"),
    "onmt-detokenize-text": ("opennmt_lite.onmt.tools", "detokenize_text"),
    "onmt-merge-config": ("opennmt_lite.onmt.tools", "merge_config"),
}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m opennmt_lite.onmt {{{','.join(COMMANDS)}}} [options]",
              file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module, function = COMMANDS[argv[0]]
    return getattr(importlib.import_module(module), function)(argv[1:])


if __name__ == "__main__":
    from opennmt_lite.cli import exit_with

    exit_with(main(sys.argv[1:]))
