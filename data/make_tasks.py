#!/usr/bin/env python
"""Writes the tagging and classification tasks of the shipped examples (configs/tagger.yml,
configs/classifier.yml), derived from the English-German corpus of this folder: no annotated
corpus could be installed from PyPI or Debian (see README.md, "Sequence taggers and
classifiers"), so the annotations are made by rules from the text itself.

    python data/make_tasks.py [OUTPUT_DIR]      (default: runs/tasks)

Every line is split into words and punctuation marks (`\\w+|[^\\w\\s]`), written space-separated.

- Tagging (`tagger.*`: train, valid and test from data/{train,valid,test}.en): capitalised
  names and numbers, in the BIOES scheme: a run of words starting with a capital letter, the
  line's first word excepted, is one `CAP` chunk (`S-CAP`, or `B-CAP I-CAP ... E-CAP`); a word
  starting with a digit is `S-NUM`; every other word `O`. English lines of 1 to 100 words.
- Classification (`language.*`): which side of the corpus a line is from, `en` or `de`: each
  pair gives two examples, its English line labelled `en` and its German line `de`. (Some lines
  are the same on both sides, such as names and numbers: no model can tell those.)
"""

import argparse
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
WORD = re.compile(r"\w+|[^\w\s]")
SPLITS = ("train", "valid", "test")


def words(line):
    return WORD.findall(line)


def bioes_tags(tokens):
    """The CAP / NUM tags of one line's words (see the module docstring)."""
    tags = ["O"] * len(tokens)
    index = 0
    while index < len(tokens):
        if tokens[index][0].isdigit():
            tags[index] = "S-NUM"
            index += 1
            continue
        if index == 0 or not tokens[index][0].isupper():
            index += 1
            continue
        end = index
        while end + 1 < len(tokens) and tokens[end + 1][0].isupper():
            end += 1
        if end == index:
            tags[index] = "S-CAP"
        else:
            tags[index:end + 1] = ["B-CAP"] + ["I-CAP"] * (end - index - 1) + ["E-CAP"]
        index = end + 1
    return tags


def read(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [words(line) for line in f.read().splitlines()]


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def main(output):
    os.makedirs(output, exist_ok=True)
    for split in SPLITS:
        english, german = read(f"{split}.en"), read(f"{split}.de")
        tagged = [tokens for tokens in english if 1 <= len(tokens) <= 100]
        write(os.path.join(output, f"tagger.{split}.en"), [" ".join(t) for t in tagged])
        write(os.path.join(output, f"tagger.{split}.tags"), [" ".join(bioes_tags(t))
                                                             for t in tagged])
        pairs = [(en, de) for en, de in zip(english, german) if en and de]
        write(os.path.join(output, f"language.{split}.txt"),
              [" ".join(tokens) for pair in pairs for tokens in pair])
        write(os.path.join(output, f"language.{split}.labels"), ["en", "de"] * len(pairs))
        print(f"{split}: {len(tagged)} tagged lines, {2 * len(pairs)} classified lines")
    print(f"wrote the tasks to {output}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", nargs="?", default=os.path.join("runs", "tasks"),
                        help="where the task files go (default: runs/tasks)")
    main(parser.parse_args().output_dir)
