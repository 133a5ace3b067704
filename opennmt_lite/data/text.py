"""Reading text files line by line, with errors that name the file and the line.

Lines are split on `\\n` only (not on the other characters Python's str.splitlines treats as
line breaks), one trailing `\\r` is removed, and a final line end does not start an extra line:
the same lines as tf.data.TextLineDataset, which OpenNMT-tf reads with.
"""

import os

from opennmt_lite.errors import MissingFileError, NotAFileError, UserError


class DataError(UserError, ValueError):
    """Invalid training/evaluation data."""


def read_lines(path, kind="data", error=DataError):
    """The lines of a UTF-8 text file, without their line ends. `kind` names the file in the
    messages ("data file not found: ..."); invalid UTF-8 raises `error`, naming line and byte."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise MissingFileError(f"{kind} file not found: {path}")
    if os.path.isdir(path):
        raise NotAFileError(f"{kind} path is a directory, not a file: {path}")
    with open(path, "rb") as stream:
        data = stream.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as decode_error:
        line_start = data.rfind(b"\n", 0, decode_error.start) + 1
        line = data.count(b"\n", 0, decode_error.start) + 1
        raise error(
            f"{kind} file {path}, line {line}: invalid UTF-8 ({decode_error.reason}, byte "
            f"{decode_error.start - line_start + 1} of the line)"
        ) from None
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def count_lines(path):
    """The number of lines `read_lines` gives for a file, without decoding it."""
    with open(path, "rb") as stream:
        data = stream.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def parse_number(text):
    """float(text), or None where Python cannot read it (to find the field an error names)."""
    try:
        return float(text)
    except ValueError:
        return None


def as_file_list(files):
    """A list of paths from one path or a list of paths."""
    if isinstance(files, (str, bytes, os.PathLike)):
        return [os.fspath(files)]
    files = [os.fspath(path) for path in files]
    if not files:
        raise DataError("at least one data file is required")
    return files


def read_parallel(features_file, labels_file):
    """The lines of source and target files, pair by pair (a path or a list of paths each: the
    files are concatenated in order). Each source file must have as many lines as its target."""
    features_files = as_file_list(features_file)
    labels_files = as_file_list(labels_file)
    if len(features_files) != len(labels_files):
        raise DataError(
            f"{len(features_files)} source files but {len(labels_files)} target files: "
            f"{features_files} / {labels_files}"
        )
    source, target = [], []
    for source_path, target_path in zip(features_files, labels_files):
        source_lines = read_lines(source_path)
        target_lines = read_lines(target_path)
        if len(source_lines) != len(target_lines):
            raise DataError(
                f"parallel files differ in length: {source_path} has {len(source_lines)} lines, "
                f"{target_path} has {len(target_lines)} lines"
            )
        source.extend(source_lines)
        target.extend(target_lines)
    return source, target


def read_monolingual(files):
    """The lines of one file or of several concatenated."""
    lines = []
    for path in as_file_list(files):
        lines.extend(read_lines(path))
    return lines
