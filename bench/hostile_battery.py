"""The generated battery of hostile values at a larger count: tests/test_hostile_battery.py with
more random values per config key and option, every accepted command-line case run for real
(the test suite runs one per option), and a seed of your choice.

    python bench/hostile_battery.py                 # seed 1, 10 random values, all cases run
    python bench/hostile_battery.py --seed 7 --random_values 50

Exit status: pytest's (0 when no case ended in a traceback, a hang or a malformed error).
"""

import argparse
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--random_values", type=int, default=10,
                        help="random values per config key and per option, beside the fixed ones")
    parser.add_argument("--cases_per_option", type=int, default=1_000_000,
                        help="accepted command-line cases run for real, per option")
    args = parser.parse_args(argv)
    env = dict(os.environ, HOSTILE_SEED=str(args.seed), HOSTILE_RANDOM_VALUES=str(args.random_values),
               HOSTILE_CASES_PER_OPTION=str(args.cases_per_option))
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               os.path.join(REPO, "tests", "test_hostile_battery.py")]
    return subprocess.run(command, cwd=REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
