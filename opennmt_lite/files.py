"""Files written whole or not at all: under a temporary name beside the real one, synced to disk,
then renamed onto it (a rename within a directory is atomic: a reader, or a run after a crash,
finds the old file or the new one, never a part of one)."""

import contextlib
import errno
import os

PARTIAL = ".partial"
PREVIOUS = ".previous"  # a replaced file, kept while a set of files is renamed
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV)


def _sync_directory(directory):
    # The rename itself is durable only once the directory is synced (POSIX; skipped where a
    # directory cannot be opened, e.g. Windows).
    try:
        descriptor = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _sync_file(path):
    with open(path, "rb+") as stream:
        try:
            os.fsync(stream.fileno())
        except OSError as error:  # (a full disk may only show here): say which file
            raise OSError(error.errno, error.strerror, path) from None


def _remove(path):
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class Staging:
    """A set of files written under temporary names (`<path>.partial`) and renamed onto their
    real names by `commit()`, in the order they were staged, those staged with `last=True`
    after all the others. As a context manager: commits on success, removes the temporary
    files on an exception."""

    def __init__(self, suffix=PARTIAL):
        self.suffix = suffix  # (two stagings of one file at a time need different suffixes)
        self._pairs = []  # (temporary, final, last)

    def path(self, final, last=False):
        """The temporary path to write instead of `final` (its directory is created)."""
        final = os.fspath(final)
        directory = os.path.dirname(final)
        if directory:
            os.makedirs(directory, exist_ok=True)
        temporary = final + self.suffix
        _remove(temporary)  # left by a killed run
        self._pairs.append((temporary, final, last))
        return temporary

    @contextlib.contextmanager
    def open(self, final, mode="w", **open_options):
        """`open()` of the temporary file of `final` (staged as by `path`); a failed write or
        close, which names no file, names `final`."""
        try:
            with open(self.path(final), mode, **open_options) as stream:
                yield stream
        except OSError as error:
            if error.filename is not None or not error.errno:
                raise
            raise OSError(error.errno, error.strerror, os.fspath(final)) from None

    def commit(self):
        """Syncs every temporary file, then renames them onto their real names. If a rename
        fails (a read-only or full file system), the files already renamed are put back as
        they were: the set is replaced whole or not at all."""
        pairs = [p for p in self._pairs if not p[2]] + [p for p in self._pairs if p[2]]
        for temporary, _, _ in pairs:
            _sync_file(temporary)
        # The previous files, kept under a second name (a hard link: no copy) until the end.
        previous = {}
        try:
            for _, final, _ in pairs:
                if len(pairs) > 1 and os.path.isfile(final):
                    _remove(final + PREVIOUS)
                    try:
                        os.link(final, final + PREVIOUS)
                    except OSError as error:
                        if error.errno not in _NO_HARD_LINKS:
                            raise
                        continue  # (a file system without hard links: no way back there)
                    previous[final] = final + PREVIOUS
            done = []
            try:
                for temporary, final, _ in pairs:
                    os.replace(temporary, final)
                    done.append(final)
            except OSError:
                for final in reversed(done):
                    with contextlib.suppress(OSError):
                        if final in previous:
                            os.replace(previous.pop(final), final)
                        else:
                            os.remove(final)
                raise
        finally:
            for kept in previous.values():
                with contextlib.suppress(OSError):
                    os.remove(kept)
        for directory in {os.path.dirname(final) for _, final, _ in pairs}:
            _sync_directory(directory)
        self._pairs = []

    def discard(self):
        for temporary, _, _ in self._pairs:
            with contextlib.suppress(OSError):  # (on a read-only file system, nothing to undo)
                _remove(temporary)
        self._pairs = []

    def __enter__(self):
        return self

    def __exit__(self, error_type, error, traceback):
        if error_type is None:
            try:
                self.commit()
            except BaseException:  # e.g. no space left for the sync: no temporary file left
                self.discard()
                raise
        else:
            self.discard()


@contextlib.contextmanager
def atomic_write(path, mode="w", suffix=PARTIAL, **open_options):
    """`open(path, mode)` for writing, except that `path` is replaced only when the block ends
    without an exception (before that, an existing file at `path` stays as it was). The data go
    to `path + suffix` first."""
    with Staging(suffix) as staging, staging.open(path, mode, **open_options) as stream:
        yield stream


def write_lines(lines, path=None):
    """Writes each line and a line end to `path`, replaced whole at the end (an interrupted run
    leaves the previous file, not a part), or to standard output when `path` is None."""
    import sys

    with contextlib.ExitStack() as stack:
        out = (stack.enter_context(atomic_write(path, encoding="utf-8")) if path else sys.stdout)
        for line in lines:
            out.write(line + "\n")
