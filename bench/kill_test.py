"""The kill test at scale: a small training run killed with SIGKILL N times at random moments
(during steps, during checkpoint writes, during evaluations), resumed after each kill, must end
with the weights of an uninterrupted run, bit for bit (TF_DETERMINISTIC_OPS=1), and lose no
checkpoint.

    python bench/kill_test.py                    # 20 kills
    python bench/kill_test.py --kills 5 --max_step 40 --workdir /tmp/kill_test
    python bench/kill_test.py --full_disk_every 3  # every 3rd resume on a nearly full disk

After every kill it checks that the checkpoint a resume would use is at least as new as the last
one the killed run reported saved ("no checkpoint lost"); at the end, that both runs hold the same
readable checkpoints and the same values of every variable. Not part of the test suite (it takes
minutes: every resume starts a fresh process); tests/test_interruption.py runs a small version.
With `--full_disk_every N`, every Nth resume runs on a "nearly full disk": RLIMIT_FSIZE one byte
under a checkpoint's data file (SIGXFSZ ignored, so a write past it fails with EFBIG), so its next
save fails; it must then exit with status 2 and one `error: saving checkpoint ...` line, leave
nothing of that save and lose no checkpoint, and a kill aimed at that save hits it while it fails.
Prints its figures and writes them to <workdir>/kill_test.json. Exit status 0 when every check
passes, 1 otherwise.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = [sys.executable, os.path.join(REPO, "run.py")]
ENV = dict(os.environ, TF_DETERMINISTIC_OPS="1", TF_CPP_MIN_LOG_LEVEL="3")
SAVED = re.compile(r"saved checkpoint .*ckpt-(\d+)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to send (default 20)")
    parser.add_argument("--max_step", type=int, default=120)
    parser.add_argument("--save_every", type=int, default=4, help="train.save_checkpoints_steps")
    parser.add_argument("--eval_every", type=int, default=6, help="eval.steps")
    parser.add_argument("--lines", type=int, default=2000, help="training pairs (from data/train.*)")
    parser.add_argument("--seed", type=int, default=0, help="of the kill moments")
    parser.add_argument("--workdir", default=os.path.join(REPO, "runs", "kill_test"))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--full_disk_every", type=int, default=0,
                        help="every Nth resume runs with a file-size limit just under a "
                        "checkpoint's size, so that its next save fails (default 0: never; 1 "
                        "would never get past a save)")
    args = parser.parse_args(argv)
    if args.full_disk_every == 1:
        parser.error("--full_disk_every 1: no resume would get past a save; give 0 or at least 2")
    return args


# -- the training run ----------------------------------------------------------------------------

def write_data(workdir, lines):
    paths = {}
    for name, count in (("train.en", lines), ("train.de", lines), ("valid.en", 40), ("valid.de", 40)):
        paths[name] = os.path.join(workdir, "data", name)
        os.makedirs(os.path.dirname(paths[name]), exist_ok=True)
        with open(os.path.join(REPO, "data", name), encoding="utf-8") as f:
            head = [next(f) for _ in range(count)]
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines(head)
    return paths


def write_config(workdir, name, paths, args):
    """A tiny model (2 layers of 64 units) with frequent checkpoints and evaluations (loss and
    BLEU of greedy translations), so that kills land in each phase."""
    import yaml

    vocab = os.path.join(workdir, "vocab")
    config = {
        "model_dir": os.path.join(workdir, name),
        "data": {
            "train_features_file": paths["train.en"], "train_labels_file": paths["train.de"],
            "eval_features_file": paths["valid.en"], "eval_labels_file": paths["valid.de"],
            "source_vocabulary": os.path.join(vocab, "src.txt"),
            "target_vocabulary": os.path.join(vocab, "tgt.txt"),
            "source_tokenization": {"model": os.path.join(vocab, "src.model"), "vocabulary_size": 1000},
            "target_tokenization": {"model": os.path.join(vocab, "tgt.model"), "vocabulary_size": 1000},
        },
        "model": {"num_layers": 2, "num_units": 64, "num_heads": 2, "ffn_inner_dim": 128,
                  "maximum_relative_position": 4},
        "params": {"learning_rate": 2.0, "decay_params": {"warmup_steps": 20}, "label_smoothing": 0.1,
                   "beam_width": 1, "maximum_decoding_length": 30},
        "train": {"batch_type": "tokens", "batch_size": 512, "effective_batch_size": 1024,
                  "length_bucket_width": 1, "maximum_features_length": 40, "maximum_labels_length": 40,
                  "max_step": args.max_step, "save_checkpoints_steps": args.save_every,
                  "keep_checkpoint_max": 5, "save_summary_steps": 1, "seed": 7},
        "eval": {"steps": args.eval_every, "scorers": ["bleu"]},
    }
    path = os.path.join(workdir, f"{name}.yml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    return path, config["model_dir"]


def start(config, log_path, file_size_limit=None):
    log = open(log_path, "a", encoding="utf-8")
    limit = (lambda: limit_file_size(file_size_limit)) if file_size_limit else None
    return subprocess.Popen(RUN + ["train", "--config", config], env=ENV, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=limit), log


def limit_file_size(limit):
    """In the child, before exec: a nearly full disk. A write past `limit` bytes fails with
    EFBIG (SIGXFSZ ignored: the process is not killed by it, and exec keeps that)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def checkpoint_size(model_dir):
    """The size of the newest checkpoint's largest file (its data)."""
    from opennmt_lite.checkpointing import store

    prefix = store.latest(model_dir)
    directory = os.path.dirname(prefix)
    return max(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
               if name.startswith(os.path.basename(prefix) + "."))


def reported_steps(model_dir):
    path = os.path.join(model_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["step"] for line in f if line.endswith("\n")]


def evaluated_steps(model_dir):
    path = os.path.join(model_dir, "eval", "history.jsonl")
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {json.loads(line)["step"] for line in f if line.endswith("\n")}


def saved_steps(log_path, since):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        f.seek(since)
        return [int(m.group(1)) for m in SAVED.finditer(f.read())]


def wait_for(predicate, process, deadline):
    """Polls until `predicate()` holds (True) or the process ends (False)."""
    while time.time() < deadline:
        if predicate():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    raise TimeoutError("the training process did not get there in time")


# -- the checks ----------------------------------------------------------------------------------

def latest_step(model_dir):
    """The step of the checkpoint a resumed run restores (opennmt_lite.checkpointing.store's choice)."""
    import tensorflow as tf

    from opennmt_lite.checkpointing import store

    prefix = store.latest(model_dir)
    if prefix is None:
        return None
    return int(tf.train.load_checkpoint(prefix).get_tensor("optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"))


def leftovers(model_dir):
    """What a save cut short leaves: TensorFlow's ckpt-N_temp/ folders, incomplete checkpoints."""
    from opennmt_lite.checkpointing import store

    directory = store.checkpoint_directory(model_dir)
    if not os.path.isdir(directory):
        return []
    found = [name for name in os.listdir(directory) if store.LEFTOVER_PATTERN.match(name)]
    found += [os.path.basename(p) for p in store.candidates(directory)
              if store.damage(p, read_data=False) is not None]
    return found


def full_disk_failure(log_path, since, model_dir):
    """What a run whose save failed on a full disk left: its error line, the checkpoint a
    resume uses, and the problems (no such line, a traceback, a leftover, a checkpoint lost)."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        f.seek(since)
        text = f.read()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    saved = [int(m.group(1)) for m in SAVED.finditer(text)]
    restored, left = latest_step(model_dir), leftovers(model_dir)
    problems = []
    if len(errors) != 1 or "saving checkpoint" not in errors[0] or "Traceback" in text:
        problems.append(f"a failed save did not end with one error line: {text[-2000:]}")
    if left:
        problems.append(f"a failed save left {left}")
    if saved and (restored is None or restored < max(saved)):
        problems.append(f"checkpoint lost on a full disk: saved {max(saved)}, resumes from {restored}")
    return {"error": errors[-1] if errors else None, "restorable_step": restored,
            "last_logged_save": max(saved) if saved else None, "problems": problems}


def final_values(model_dir):
    """{name: value} of every variable of the newest checkpoint, and the readable checkpoint steps
    kept (the save counter differs between the runs: a resumed run saves some steps twice)."""
    import tensorflow as tf

    from opennmt_lite.checkpointing import store

    directory = store.checkpoint_directory(model_dir)
    kept = sorted(int(p.rsplit("-", 1)[1]) for p in store.candidates(directory)
                  if store.damage(p) is None)
    reader = tf.train.load_checkpoint(store.latest(model_dir))
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
              if not name.startswith("save_counter") and not name.startswith("_CHECKPOINTABLE")}
    return values, kept


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    sys.path.insert(0, REPO)
    rng = random.Random(args.seed)
    workdir = os.path.abspath(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    paths = write_data(workdir, args.lines)
    straight_config, straight_dir = write_config(workdir, "straight", paths, args)
    killed_config, killed_dir = write_config(workdir, "killed", paths, args)
    began = time.time()
    subprocess.run(RUN + ["build-vocab", "--config", straight_config], env=ENV, check=True,
                   capture_output=True, timeout=args.timeout)

    started = time.time()
    result = subprocess.run(RUN + ["train", "--config", straight_config], env=ENV,
                            capture_output=True, text=True, timeout=args.timeout)
    if result.returncode != 0:
        sys.exit(f"the uninterrupted run failed:\n{result.stdout[-3000:]}")
    straight_seconds = time.time() - started

    log_path = os.path.join(workdir, "killed.log")
    kills, problems, restarts, faults = [], [], 0, []
    full_disk = checkpoint_size(straight_dir) - 1
    finished = False
    while len(kills) < args.kills and not finished:
        since = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        full = args.full_disk_every > 0 and (restarts + 1) % args.full_disk_every == 0
        process, log = start(killed_config, log_path, full_disk if full else None)
        restarts += 1
        deadline = time.time() + args.timeout
        first = (reported_steps(killed_dir) or [0])[-1]
        aim = rng.choice(("step", "save", "eval"))
        every = {"step": 1, "save": args.save_every, "eval": args.eval_every}[aim]
        # the next step of that kind after a random number of steps (evaluations come right after
        # their step is reported, saves just before it: kill a moment after the report)
        target = first + rng.randint(1, 3 * every)
        target = -(-target // every) * every
        delay = {"step": rng.uniform(0.0, 0.3), "save": rng.uniform(0.0, 0.02),
                 "eval": rng.uniform(0.05, 1.5)}[aim]
        reached = wait_for(lambda: (reported_steps(killed_dir) or [0])[-1] >= target, process, deadline)
        if reached:
            time.sleep(delay)
        if process.poll() is None:
            process.kill()
            process.wait()
            log.close()
            last = (reported_steps(killed_dir) or [0])[-1]
            saved = saved_steps(log_path, since)
            restored = latest_step(killed_dir)
            left = leftovers(killed_dir)
            if left:
                phase = "checkpoint write"
            elif last % args.eval_every == 0 and last not in evaluated_steps(killed_dir):
                phase = "evaluation"
            else:
                phase = "step"
            kill = {"aim": aim, "phase": phase, "last_reported_step": last, "restorable_step": restored,
                    "last_logged_save": max(saved) if saved else None, "leftovers": left,
                    "full_disk": full}
            kills.append(kill)
            if saved and (restored is None or restored < max(saved)):
                problems.append(f"checkpoint lost: {kill}")
            print(f"kill {len(kills):2d}: aimed at {aim:4s}, hit {phase:16s} at step {last:4d}; "
                  f"resumes from {restored}{' (left ' + ', '.join(left) + ')' if left else ''}",
                  flush=True)
        elif full and process.returncode == 2 and latest_step(killed_dir) != args.max_step:
            log.close()  # its save failed on the nearly full disk: said, nothing lost or left
            fault = full_disk_failure(log_path, since, killed_dir)
            faults.append(fault)
            problems += fault.pop("problems")
            print(f"full disk: the save failed, exit 2; resumes from {fault['restorable_step']}", flush=True)
        else:
            log.close()
            # (exit status 2 when the run it resumes already reached max_step)
            finished = process.returncode in (0, 2) and latest_step(killed_dir) == args.max_step
            if not finished:
                problems.append(f"a resumed run failed with exit status {process.returncode}")
                break
    if not finished:  # the last resume, to the end
        result = subprocess.run(RUN + ["train", "--config", killed_config], env=ENV,
                                capture_output=True, text=True, timeout=args.timeout)
        restarts += 1
        if result.returncode not in (0, 2):
            problems.append(f"the final resume failed:\n{result.stdout[-3000:]}")

    straight, straight_kept = final_values(straight_dir)
    resumed, resumed_kept = final_values(killed_dir)
    different = sorted(name for name in straight
                       if name not in resumed or not np.array_equal(straight[name], resumed[name]))
    different += sorted(set(resumed) - set(straight))
    if different:
        problems.append(f"{len(different)} variable(s) differ from the uninterrupted run: {different[:5]}")
    if straight_kept != resumed_kept:
        problems.append(f"checkpoints kept differ: {straight_kept} uninterrupted, {resumed_kept} resumed")
    phases = {phase: sum(k["phase"] == phase for k in kills) for phase in ("step", "checkpoint write", "evaluation")}
    figures = {
        "kills": len(kills), "phases": phases, "processes": restarts,
        "max_step": args.max_step, "save_every": args.save_every, "eval_every": args.eval_every,
        "steps_lost_per_kill_max": max((k["last_reported_step"] - (k["restorable_step"] or 0) for k in kills), default=0),
        "variables_compared": len(straight), "variables_different": len(different),
        "checkpoints_kept": resumed_kept, "uninterrupted_seconds": round(straight_seconds, 1),
        "total_seconds": round(time.time() - began, 1), "problems": problems, "kill_log": kills,
        "full_disk_failures": len(faults), "full_disk_log": faults,
    }
    with open(os.path.join(workdir, "kill_test.json"), "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=1)
    print(f"{len(kills)} kills ({', '.join(f'{v} during {k}' for k, v in phases.items())}), "
          f"{restarts} processes; at most {figures['steps_lost_per_kill_max']} steps redone after a kill; "
          f"{len(straight)} variables compared, {len(different)} different; checkpoints kept "
          f"{resumed_kept} (uninterrupted: {straight_kept}); {len(faults)} saves failed on a full "
          f"disk; {figures['total_seconds']} s")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("OK" if not problems else "FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
