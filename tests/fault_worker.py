"""Runs commands under a file-size limit, for tests/test_write_faults.py.

    python tests/fault_worker.py JOBS.json RESULTS.json

RLIMIT_FSIZE with SIGXFSZ ignored makes every write past the limit fail with EFBIG, in
TensorFlow's C++ file writers as in Python's: the one way to cut the files TensorFlow writes at
a chosen byte. The limit is set only around each job (the soft limit; the hard one is kept, so
it can be raised again), and the jobs share one process, so TensorFlow starts once.

A job is {"argv": [...], "limit": bytes} (run.main(argv) under the limit), or {"save":
{"config": path, "directory": checkpoints folder, "step": n}, "limit": bytes} (the newest
checkpoint of the folder restored into a training checkpoint built once per config, then saved
as ckpt-<step> under the limit), or {"onmt": tools function, "argv": [...], "stdin": path,
"stdout": path} (one of OpenNMT-tf's helper commands, its standard streams from and to files). A result is {"code": exit status, "stderr": text, "seconds": duration}. (Run it with its
standard error on a pipe: a file there would be cut by the limit too.)
"""

import contextlib
import io
import json
import logging
import os
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def file_size_limit(limit):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def save_job(job, checkpoints):
    """Exit status and stderr of one checkpoint save under the limit, as run.py reports them."""
    from opennmt_lite import build
    from opennmt_lite.config import load_config
    from opennmt_lite.errors import UserError

    spec = job["save"]
    if spec["config"] not in checkpoints:
        checkpoints[spec["config"]] = build.training_checkpoint(load_config([spec["config"]]))
    checkpoint = checkpoints[spec["config"]]
    checkpoint.save_dir = checkpoint.restore_dir = spec["directory"]
    checkpoint.latest = None
    checkpoint.restore()
    with file_size_limit(job["limit"]):
        try:
            checkpoint.save(spec["step"])
        except UserError as error:
            return 2, f"error: {error}\n"
    return 0, ""


def onmt_job(job):
    """Exit status of one of OpenNMT-tf's helper commands (opennmt_lite.onmt.tools) under the
    limit; its standard input read from job["stdin"], its standard output redirected to the
    file job["stdout"] (as `command < in > out` would), when given."""
    from opennmt_lite.onmt import tools

    with contextlib.ExitStack() as stack:
        if job.get("stdin"):
            stdin = stack.enter_context(open(job["stdin"], encoding="utf-8"))
            stack.enter_context(_replaced(sys, "stdin", stdin))
        if job.get("stdout"):
            sys.stdout.flush()
            saved = os.dup(1)
            descriptor = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(descriptor, 1)
            os.close(descriptor)
            stack.callback(lambda: (os.dup2(saved, 1), os.close(saved)))
        with file_size_limit(job["limit"]):
            return getattr(tools, job["onmt"])(job["argv"])


@contextlib.contextmanager
def _replaced(owner, name, value):
    previous = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, previous)


def main(jobs_path, results_path):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not a killed process
    logging.basicConfig(level=logging.WARNING, stream=sys.__stderr__)
    import run
    from opennmt_lite.cli import import_tensorflow_quietly

    import_tensorflow_quietly()  # (before any limit: starting TensorFlow writes a file)

    with open(jobs_path, encoding="utf-8") as f:
        jobs = json.load(f)
    results, checkpoints = [], {}
    for job in jobs:
        start = time.perf_counter()
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            if "save" in job:
                code, text = save_job(job, checkpoints)
                stderr.write(text)
            elif "onmt" in job:
                code = onmt_job(job)
            else:
                with file_size_limit(job["limit"]):
                    code = run.main(job["argv"])
        results.append({"code": code, "stderr": stderr.getvalue(),
                        "seconds": round(time.perf_counter() - start, 2)})
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
