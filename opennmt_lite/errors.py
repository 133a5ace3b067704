"""What the user did wrong, as opposed to a bug.

An error is a user error by construction: the code that knows what the user did wrong (a config
value, a command-line option, a missing or damaged file, a model_dir held by another trainer...)
raises a `UserError`, whose message names the key, option or file. `run.py` prints it as
`error: <message>` and exits with status 2. Every other exception is a bug: `run.py` prints its
traceback and a line saying so, and exits with status 1.

The error types of the modules (ConfigError, CheckpointError, DataError, VocabularyError,
DistributionError, TrainingError...) derive from `UserError` and also from the built-in type a
caller would catch (ValueError, FileNotFoundError...), so `except ValueError` keeps working.
"""

import signal

EXIT_BUG = 1
EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake of the user's that the program can name; the message says what and where."""


class ArgumentError(UserError, ValueError):
    """A command-line value that cannot be used (named with its option)."""


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named (in the config or on the command line) does not exist."""


class NotAFileError(UserError, IsADirectoryError):
    """A path the user named as a file is a directory."""


class OutputError(UserError, OSError):
    """An output the user named cannot be written there (exists, not a directory, read-only)."""


class EnvironmentVariableError(UserError, ValueError):
    """An environment variable that opennmt-lite reads holds a value it cannot use (the message
    names the variable and its allowed values)."""


class BusyError(UserError, RuntimeError):
    """Another process holds what this one needs (a model_dir being trained)."""


class Interrupted(BaseException):
    """A run stopped by a signal (after saving what it had, for `train`): `run.py` prints the
    message and exits with the status shells and schedulers expect, 128 + the signal number (130
    for SIGINT, 143 for SIGTERM). A BaseException, like KeyboardInterrupt: no `except Exception`
    on the way out may swallow it."""

    def __init__(self, signum, message=""):
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)

    @property
    def exit_code(self):
        return 128 + self.signum
