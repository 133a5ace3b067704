#!/usr/bin/env python3
"""Build the English->German parallel corpus shipped in data/.

The segments are taken from compiled gettext message catalogs (``*.mo``):
the English ``msgid`` is the source side, the German ``msgstr`` the target.

Usage::

    python3 data/make_corpus.py [LOCALE_DIR_OR_MO_FILE ...] [-o OUTPUT_DIR]

Without positional arguments the German catalogs of this Debian system are
read (see ``DEFAULT_DIRS``).  The output directory defaults to the folder
holding this script.  Only the standard library is used, and the result is
deterministic: the same input catalogs always give byte-identical files.
"""

import argparse
import hashlib
import os
import struct
import sys
import unicodedata

DEFAULT_DIRS = (
    "/usr/share/locale/de/LC_MESSAGES",
    "/usr/share/vim/vim90/lang/de/LC_MESSAGES",
)

MAX_CHARS = 500  # pairs with a longer side are dropped
VALID_SIZE = 500  # pairs in valid.*
TEST_SIZE = 500  # pairs in test.*

MO_MAGIC_LE = 0x950412DE
CONTEXT_SEP = "\x04"
PLURAL_SEP = "\x00"


# --------------------------------------------------------------------------
# Reading .mo files
# --------------------------------------------------------------------------


def _charset_of(header_text):
    """Return the charset declared in a catalog header (default UTF-8)."""
    for line in header_text.split("\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() != "content-type":
            continue
        for param in value.split(";"):
            key, _, val = param.strip().partition("=")
            if key.strip().lower() == "charset" and val.strip():
                charset = val.strip()
                if charset.upper() == "CHARSET":  # untouched template value
                    return "utf-8"
                return charset
    return "utf-8"


def read_mo(path):
    """Yield raw (msgid, msgstr) byte strings of a .mo file in table order.

    The binary layout is: magic, revision, number of strings N, offset of
    the table of original strings, offset of the table of translations.
    Each table holds N (length, offset) pairs of 32-bit integers.
    """
    with open(path, "rb") as handle:
        blob = handle.read()
    if len(blob) < 20:
        raise ValueError("%s: too short for a .mo file" % path)
    (magic,) = struct.unpack("<I", blob[:4])
    if magic == MO_MAGIC_LE:
        order = "<"
    elif struct.unpack(">I", blob[:4])[0] == MO_MAGIC_LE:
        order = ">"
    else:
        raise ValueError("%s: bad magic number 0x%08x" % (path, magic))
    _, count, orig_table, trans_table = struct.unpack(order + "4I", blob[4:20])

    def entry(table, index):
        length, offset = struct.unpack_from(order + "2I", blob, table + 8 * index)
        if offset + length > len(blob):
            raise ValueError("%s: string %d runs past end of file" % (path, index))
        return blob[offset : offset + length]

    for index in range(count):
        yield entry(orig_table, index), entry(trans_table, index)


def catalog_pairs(path, stats):
    """Yield decoded (english, german) pairs of one catalog, in table order."""
    raw = list(read_mo(path))
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":
            charset = _charset_of(msgstr.decode("ascii", "replace"))
            break
    for msgid_b, msgstr_b in raw:
        if msgid_b == b"":
            continue  # header entry
        try:
            msgid = msgid_b.decode(charset)
            msgstr = msgstr_b.decode(charset)
        except (UnicodeDecodeError, LookupError):
            stats["undecodable"] += 1
            continue
        # msgctxt is stored as "context\x04msgid"; only the msgid is kept.
        if CONTEXT_SEP in msgid:
            msgid = msgid.split(CONTEXT_SEP, 1)[1]
        if PLURAL_SEP in msgid:
            singular, plural = msgid.split(PLURAL_SEP, 1)
            plural = plural.split(PLURAL_SEP, 1)[0]
            forms = msgstr.split(PLURAL_SEP)
            yield singular, forms[0]
            if len(forms) > 1:
                yield plural, forms[1]
        else:
            yield msgid, msgstr


# --------------------------------------------------------------------------
# Cleaning
# --------------------------------------------------------------------------


def clean(text):
    """Put a segment on one line: every whitespace run becomes one space."""
    return " ".join(text.split())


def has_control_char(text):
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def collect(paths):
    """Read all catalogs and return the cleaned, de-duplicated pairs."""
    stats = {
        "catalogs": 0,
        "raw": 0,
        "undecodable": 0,
        "empty": 0,
        "identical": 0,
        "too_long": 0,
        "control_char": 0,
        "duplicate": 0,
    }
    seen = set()
    pairs = []
    per_catalog = []
    for path in paths:
        stats["catalogs"] += 1
        kept_here = 0
        for source, target in catalog_pairs(path, stats):
            stats["raw"] += 1
            source, target = clean(source), clean(target)
            if not source or not target:
                stats["empty"] += 1
            elif source == target:
                stats["identical"] += 1
            elif len(source) > MAX_CHARS or len(target) > MAX_CHARS:
                stats["too_long"] += 1
            elif has_control_char(source) or has_control_char(target):
                stats["control_char"] += 1
            elif (source, target) in seen:
                stats["duplicate"] += 1
            else:
                seen.add((source, target))
                pairs.append((source, target))
                kept_here += 1
        per_catalog.append((path, kept_here))
    return pairs, stats, per_catalog


# --------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------


def group_key(source):
    """Key under which sources are kept together in one split.

    Identical sources always share a key.  The key also ignores case,
    ``_``/``&`` accelerator marks and trailing punctuation, so that
    near-identical variants such as "_Open" / "Open" / "open:" cannot land
    on both sides of the train/test boundary.  It is only used for
    grouping; the text written out is never changed by it.
    """
    key = source.casefold().replace("_", "").replace("&", "")
    return " ".join(key.split()).rstrip(" .:;,!?\u2026")


def split(pairs, valid_size=VALID_SIZE, test_size=TEST_SIZE):
    """Assign whole source groups to test, valid and train.

    All pairs whose sources share a ``group_key`` go to the same split, so
    no source sentence of valid/test is seen in training.  Groups are
    visited in the order of the SHA-1 of their key; a group joins test
    (then valid) while it still fits in the requested size, the rest is
    train.  Each split keeps the corpus order of its pairs.
    """
    groups = {}
    for index, (source, _) in enumerate(pairs):
        groups.setdefault(group_key(source), []).append(index)

    def order(group):
        return hashlib.sha1(group.encode("utf-8")).hexdigest(), group

    assignment = {}
    sizes = {"test": 0, "valid": 0}
    wanted = (("test", test_size), ("valid", valid_size))
    for group in sorted(groups, key=order):
        size = len(groups[group])
        for name, limit in wanted:
            if sizes[name] + size <= limit:
                assignment[group] = name
                sizes[name] += size
                break
        else:
            assignment[group] = "train"
        if all(sizes[name] == limit for name, limit in wanted):
            break
    result = {"train": [], "valid": [], "test": []}
    for source, target in pairs:
        result[assignment.get(group_key(source), "train")].append((source, target))
    return result


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def find_catalogs(locations):
    """Return the .mo files below the given folders/files, sorted by name."""
    found = set()
    for location in locations:
        if os.path.isfile(location):
            found.add(os.path.abspath(location))
            continue
        if not os.path.isdir(location):
            print("warning: %s not found, skipped" % location, file=sys.stderr)
            continue
        for name in os.listdir(location):
            if name.endswith(".mo"):
                full = os.path.join(location, name)
                if os.path.isfile(full):
                    found.add(os.path.abspath(full))
    return sorted(found, key=lambda p: (os.path.basename(p), p))


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(line)
            handle.write("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "locations",
        nargs="*",
        default=list(DEFAULT_DIRS),
        help="LC_MESSAGES folders or .mo files (default: %s)" % " ".join(DEFAULT_DIRS),
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        default=os.path.dirname(os.path.abspath(__file__)),
        help="where to write {train,valid,test}.{en,de} (default: this script's folder)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also list pairs kept per catalog"
    )
    args = parser.parse_args(argv)

    catalogs = find_catalogs(args.locations)
    if not catalogs:
        parser.error("no .mo files found")
    pairs, stats, per_catalog = collect(catalogs)
    splits = split(pairs)

    os.makedirs(args.output_dir, exist_ok=True)
    for name in ("train", "valid", "test"):
        write_lines(os.path.join(args.output_dir, name + ".en"), (s for s, _ in splits[name]))
        write_lines(os.path.join(args.output_dir, name + ".de"), (t for _, t in splits[name]))

    if args.verbose:
        for path, kept in per_catalog:
            print("%6d  %s" % (kept, path))
    print("catalogs read:            %d" % stats["catalogs"])
    print("raw pairs:                %d" % stats["raw"])
    print("dropped, undecodable:     %d" % stats["undecodable"])
    print("dropped, empty side:      %d" % stats["empty"])
    print("dropped, source==target:  %d" % stats["identical"])
    print("dropped, > %d chars:     %d" % (MAX_CHARS, stats["too_long"]))
    print("dropped, control chars:   %d" % stats["control_char"])
    print("dropped, duplicate pair:  %d" % stats["duplicate"])
    print("kept pairs:               %d" % len(pairs))
    for name in ("train", "valid", "test"):
        print("%-5s %6d pairs" % (name, len(splits[name])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
