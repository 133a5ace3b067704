"""Where a command may write: the one output-path policy of every command that writes.

One function per kind of output, called before any work so that a mistake costs nothing:

- `check_file(path, option)`: an output file (predictions, scores, an HTML page, a vocabulary).
  Refused: a directory, a path under a regular file, a directory that cannot be written.
- `check_directory(path, option, force)`: an output directory (an export, an averaged or
  updated checkpoint, attention maps). Also refused: a directory that already holds files,
  unless `force`.
- `check_model_dir(path)`: training's model_dir, which may hold a run to resume.

Missing directories: the output itself is created when written; its missing parent directories
are created for the paths a config names (model_dir, vocabularies, SentencePiece models: a
project's layout such as `runs/sample`), while a path given on the command line must lie in an
existing directory (a mistyped path is reported, not turned into a tree of new directories).

Whether a directory can be written is found by writing (and removing) a small file in it:
permission bits do not stop root, and a read-only file system is only seen by trying.

`standard_output_name()`: how a failed write to standard output names it (and the file it is
redirected to).

`writing(what)` turns an OSError met while writing (no space left, file too large, read-only
file system, permission denied) into an OutputError: one line naming the file and the error.
Every refusal and failure is an OutputError (a user error: `error: <message>`, exit status 2).
"""

import contextlib
import errno
import os
import re
import shutil
import tempfile

from opennmt_lite.errors import OutputError, UserError

PROBE_PREFIX = ".write-test-"


def describe(error):
    """`No space left on device (ENOSPC)` for an OSError; the first line of anything else."""
    if isinstance(error, OSError) and error.errno:
        name = errno.errorcode.get(error.errno, str(error.errno))
        return f"{error.strerror or os.strerror(error.errno)} ({name})"
    text = str(getattr(error, "message", "") or error).strip()
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)  # (TensorFlow's op wrapper)
    return text.splitlines()[0] if text else type(error).__name__


def _blocking_file(path):
    """The nearest existing ancestor of `path` (itself excluded) when it is not a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else parent


def _named(path, option):
    path = os.fspath(path)
    if not path.strip():
        raise OutputError(f"{option}: an empty path names no output")
    return path


def _try_writing(directory, option, path):
    """OutputError unless a file can be created in the existing `directory`."""
    try:
        descriptor, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=directory)
    except OSError as error:
        raise OutputError(f"{option} {path} cannot be written: {directory}: {describe(error)}") from None
    os.close(descriptor)
    with contextlib.suppress(OSError):
        os.remove(probe)


def _parent(path, option, create_parents):
    """The parent directory of `path`, created if `create_parents`; OutputError if it is missing
    (and not to be created), lies under a file, or cannot be created."""
    blocking = _blocking_file(path)
    if blocking is not None:
        raise OutputError(f"{option} {path} cannot be created: {blocking} is a file, not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        if not create_parents:
            shown = os.path.dirname(os.path.normpath(path)) or parent
            raise OutputError(f"{option} {path}: directory {shown} does not exist")
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as error:
            raise OutputError(f"{option} {path} cannot be created: {describe(error)}") from None
    return parent


def check_file(path, option, create_parents=False):
    """Checks that the output file `path` (named `option` in errors) can be written; returns it."""
    path = _named(path, option)
    if os.path.isdir(path):
        raise OutputError(f"{option} {path} is a directory, not a file")
    _try_writing(_parent(path, option, create_parents), option, path)
    return path


def check_directory(path, option, force=False, create_parents=False, force_option="--force"):
    """Checks that the output directory `path` can be written: new, empty, or (with `force`)
    holding files the command may write beside or replace. `force_option`: the option that
    allows that, named in the error (None: the command has none). Returns `path`."""
    path = _named(path, option)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{option} {path} is a file, not a directory")
    if os.path.isdir(path):
        if os.listdir(path) and not force:
            allow = f", or {force_option} to write into it" if force_option else ""
            raise OutputError(f"{option} {path} already holds files: give a new or empty "
                              f"directory{allow}")
        _try_writing(path, option, path)
    else:
        _try_writing(_parent(path, option, create_parents), option, path)
    return path


def check_model_dir(path, option="model_dir"):
    """Creates training's model_dir (and its parents) if needed and checks it can be written;
    it may hold a run to resume. Returns `path`."""
    path = _named(path, option)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{option} {path} is a file, not a directory")
    _parent(path, option, create_parents=True)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{option} {path} cannot be created: {describe(error)}") from None
    _try_writing(path, option, path)
    return path


# The OS errors of a write that fails for want of room or permission (others, such as a file
# not found, are not turned into "cannot write").
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM,
                errno.EIO, errno.ENOTDIR, errno.EISDIR}


@contextlib.contextmanager
def writing(what, also=()):
    """Turns an OSError of a failed write (WRITE_ERRORS), or one of the types in `also` (e.g.
    TensorFlow's OpError around a SavedModel's writing), raised in the block into an
    OutputError: `<what>: cannot write <file>: <error>`. User errors and others pass."""
    try:
        yield
    except UserError:
        raise
    except (OSError, *also) as error:
        if isinstance(error, OSError) and error.errno not in WRITE_ERRORS:
            raise
        where = getattr(error, "filename", None)
        where = f" {where}" if where else ""
        raise OutputError(f"{what}: cannot write{where}: {describe(error)}") from None


def standard_output_name():
    """How an error names standard output: "standard output", with the file it is redirected to
    when it is one (`command > file`; found in /proc, where there is one)."""
    import sys

    try:
        target = os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}")
    except (OSError, ValueError, AttributeError):  # (no /proc, or a stdout without a descriptor)
        return "standard output"
    return f"standard output ({target})" if os.path.isfile(target) else "standard output"


@contextlib.contextmanager
def staged_directory(path, option):
    """Yields a new temporary directory beside `path`; when the block ends without an exception
    it is moved onto `path` (an existing empty directory is replaced; one holding files is
    refused before, by check_directory), else removed: a failed write leaves no half output."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    with writing(f"{option} {path}"):
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(path))}-", dir=parent)
    try:
        yield staging
        with writing(f"{option} {path}"):
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
            os.replace(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
