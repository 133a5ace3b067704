"""Translates a file with an opennmt-lite TFLite export in LiteRT's interpreter; needs only
NumPy and ai-edge-litert (`pip install ai-edge-litert`), plus sentencepiece for a model whose
export holds SentencePiece models. Written as `translate.py` into each TFLite export directory
(`run.py export --format tflite`); it does not use opennmt-lite or TensorFlow.

    python translate.py [--model_dir DIR] < source.txt > translation.txt

Each line is translated as `run.py infer` translates it: tokenized (SentencePiece when the
export holds `source.model`, else split on ASCII whitespace), each token mapped to its line in
`source_vocabulary.txt` (a token not in the file: the number of lines), the model run, the ids
read up to `</s>` (2) or padding (0) and mapped back with `target_vocabulary.txt` (the number of
lines: `<unk>`), detokenized with `target.model` or joined by spaces. A line without a token
gives an empty line (infer would decode it from fully masked attention: a guess).
"""

import argparse
import os
import re
import sys

import numpy as np

END_ID, PAD_ID = 2, 0
WHITESPACE = re.compile("[ \t\n\r\x0b\x0c]+")


def split_lines(data):
    """The lines of UTF-8 bytes as `run.py infer` reads them: split on `\\n` only, one trailing
    `\\r` removed each, no extra line after a final line end."""
    lines = data.decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path):
    with open(path, "rb") as stream:
        return split_lines(stream.read())


class Translator:
    def __init__(self, model_dir, num_threads=None):
        from ai_edge_litert.interpreter import Interpreter

        path = lambda name: os.path.join(model_dir, name)  # noqa: E731
        self.source_ids = {token: i for i, token in enumerate(read_lines(path("source_vocabulary.txt")))}
        self.target_tokens = read_lines(path("target_vocabulary.txt")) + ["<unk>"]
        self.source_model = self.target_model = None
        if os.path.exists(path("source.model")):
            import sentencepiece

            self.source_model = sentencepiece.SentencePieceProcessor(model_file=path("source.model"))
        if os.path.exists(path("target.model")):
            import sentencepiece

            self.target_model = sentencepiece.SentencePieceProcessor(model_file=path("target.model"))
        interpreter = Interpreter(model_path=path("opennmt.tflite"), num_threads=num_threads)
        self.run = interpreter.get_signature_runner("serving_default")

    def translate(self, line):
        """The translation of one line of text."""
        if self.source_model is not None:
            tokens = self.source_model.encode(line, out_type=str)
        else:
            tokens = [token for token in WHITESPACE.split(line) if token]
        if not tokens:
            return ""
        unknown = len(self.source_ids)
        ids = np.array([self.source_ids.get(token, unknown) for token in tokens], np.int32)
        output = self.run(ids=ids)["output_0"].tolist()
        ends = [i for i, value in enumerate(output) if value in (END_ID, PAD_ID)]
        pieces = [self.target_tokens[value] for value in output[:ends[0] if ends else len(output)]]
        if self.target_model is not None:
            return self.target_model.decode(pieces)
        return " ".join(pieces)


def thread_count(text):
    """--num_threads: an integer of at least 1 (LiteRT raises on other values). Checked here,
    not by opennmt-lite's config.integer_option: this script runs without opennmt-lite."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"must be between 1 and {2**31 - 1}, got {value}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the export directory (default: this script's)")
    parser.add_argument("--num_threads", type=thread_count, help="interpreter threads (default: LiteRT's)")
    args = parser.parse_args(argv)
    translator = Translator(args.model_dir, args.num_threads)
    for line in split_lines(sys.stdin.buffer.read()):
        sys.stdout.write(translator.translate(line) + "\n")


if __name__ == "__main__":
    main()
