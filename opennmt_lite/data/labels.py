"""Reading a tagger's and a classifier's data as OpenNMT-tf does: a tags file (one tag per token
of the features file's line, space-separated) or a labels file (one class label per line), and
their vocabularies (one tag or label per line, no special tokens: OpenNMT-tf reads them with no
out-of-vocabulary id, so an unknown tag or label is an error here rather than a silent -1).

Every mistake is one line naming the file and line (DataError, exit 2).
"""

from opennmt_lite.data.text import DataError, read_lines


def read_label_vocabulary(path, kind="tags"):
    """The tags or labels of a vocabulary file, in id order."""
    labels = read_lines(path, f"{kind} vocabulary")
    seen = {}
    for number, label in enumerate(labels, start=1):
        if not label or label != label.strip() or " " in label or "\t" in label:
            raise DataError(f"{kind} vocabulary {path}, line {number}: {label!r} is not one "
                            f"{kind[:-1]} (one per line, without spaces)")
        if label in seen:
            raise DataError(f"{kind} vocabulary {path}, line {number}: {label!r} repeats line "
                            f"{seen[label]}")
        seen[label] = number
    if not labels:
        raise DataError(f"{kind} vocabulary {path} is empty")
    return labels


def _paired_lines(features_path, labels_path, kind):
    features = read_lines(features_path, "features")
    labels = read_lines(labels_path, kind)
    if len(features) != len(labels):
        raise DataError(f"{kind} file {labels_path} has {len(labels)} lines, features file "
                        f"{features_path} has {len(features)}: they must pair line by line")
    return features, labels


def read_tagged(features_path, tags_path, vocabulary):
    """[(tokens, tag ids)] of each line pair; `vocabulary`: the tags in id order."""
    ids = {tag: i for i, tag in enumerate(vocabulary)}
    features, tags = _paired_lines(features_path, tags_path, "tags")
    examples = []
    for number, (line, tag_line) in enumerate(zip(features, tags), start=1):
        tokens, line_tags = line.split(), tag_line.split()
        if len(tokens) != len(line_tags):
            raise DataError(f"tags file {tags_path}, line {number}: {len(line_tags)} tags for the "
                            f"{len(tokens)} tokens of {features_path}'s line {number}")
        unknown = [tag for tag in line_tags if tag not in ids]
        if unknown:
            raise DataError(f"tags file {tags_path}, line {number}: tag {unknown[0]!r} is not in "
                            f"the tags vocabulary")
        examples.append((tokens, [ids[tag] for tag in line_tags]))
    return examples


def read_classified(features_path, labels_path, vocabulary):
    """[(tokens, label id)] of each line pair; `vocabulary`: the labels in id order."""
    ids = {label: i for i, label in enumerate(vocabulary)}
    features, labels = _paired_lines(features_path, labels_path, "labels")
    examples = []
    for number, (line, label_line) in enumerate(zip(features, labels), start=1):
        label = label_line.strip()
        if not label or len(label.split()) != 1:
            raise DataError(f"labels file {labels_path}, line {number}: expected one label, got "
                            f"{label_line!r}")
        if label not in ids:
            raise DataError(f"labels file {labels_path}, line {number}: label {label!r} is not in "
                            f"the labels vocabulary")
        examples.append((line.split(), ids[label]))
    return examples
