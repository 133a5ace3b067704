"""One trainer per model directory.

Two trainers writing the same checkpoints would each rotate away the other's, and resume from
whichever saved last. `train` therefore holds an advisory lock on `<model_dir>/.lock`
(`fcntl.flock`) for its whole run, with its pid, host and start time written in the file. A second
trainer fails at once, naming the holder. The kernel releases a flock when its holder dies, even
by `kill -9`: a lock left by a killed trainer is simply taken over (the file's old content then
names the dead holder, which is logged).

flock is local to a machine on most network filesystems: two hosts training into one NFS
directory are not detected.
"""

import contextlib
import datetime
import fcntl
import logging
import os
import socket

from opennmt_lite.errors import BusyError
from opennmt_lite.outputs import check_model_dir

logger = logging.getLogger("opennmt_lite")

LOCK_NAME = ".lock"


def prepare_model_dir(model_dir):
    """Creates `model_dir` if needed; OutputError (a user error) if it is a file, cannot be
    created, or cannot be written (see opennmt_lite.outputs)."""
    return check_model_dir(model_dir)


def _holder_text(descriptor):
    os.lseek(descriptor, 0, os.SEEK_SET)
    return os.read(descriptor, 4096).decode("utf-8", "replace").strip()


@contextlib.contextmanager
def model_dir_lock(model_dir):
    """Holds the lock of `model_dir` for the block (created if needed). Raises BusyError naming
    the holder when another process holds it."""
    prepare_model_dir(model_dir)
    path = os.path.join(model_dir, LOCK_NAME)
    try:
        # (not inherited by child processes: a lock must die with its trainer)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise OutputError(f"model_dir {model_dir}: cannot create {path}: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(descriptor) or "a process that is starting"
            raise BusyError(f"model_dir {model_dir} is already being trained by {holder} "
                            f"(lock {path}); wait for it to end or stop it") from None
        previous = _holder_text(descriptor)
        if previous:  # the holder did not release it: killed (the kernel released its flock)
            logger.info("taking over the lock %s left by %s, which no longer runs", path, previous)
        since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        text = f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n"
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, text.encode("utf-8"), 0)
        try:
            yield path
        finally:
            os.ftruncate(descriptor, 0)  # an empty lock file: released cleanly
    finally:
        os.close(descriptor)  # releases the flock
