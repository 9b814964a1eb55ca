"""The two families of errors a user can meet, and the exit status the CLI gives each.

- :class:`UsageError` (exit 2): the config, the data, the model path or a command-line argument
  cannot work; nothing was trained. Fix the input and run again. ConfigError, DataError and
  ModelError are usage errors.
- :class:`RunStopped` (exit 1): a run that started had to stop (rewards kept coming back missing,
  the loss kept turning NaN, a checkpoint could not be written or read, the policy diverged, the
  code sandbox failed). RewardError, TrainingError, CheckpointError, DecodingError and
  SandboxUnavailable are runs that stopped.

Each specific class keeps its name and its place (``except ConfigError`` works as before); the
CLI catches only these two. Both stay a ValueError / RuntimeError as they were, so code that
caught those still does.
"""

from __future__ import annotations

__all__ = ["EXIT_RUN_STOPPED", "EXIT_USAGE", "LearnerLost", "RunStopped", "UsageError"]

EXIT_USAGE = 2
EXIT_RUN_STOPPED = 1


class UsageError(ValueError):
    """Bad config, data, model path or argument; the message names the field, file or line."""


class RunStopped(RuntimeError):
    """A run had to stop; the message says why and what was kept."""


class LearnerLost(RunStopped):
    """Part of a learner died (a learner rank's process killed, its node lost). The RL loop asks
    the learner to `recover` and trains on from the last complete checkpoint, redoing the steps
    after it (at most distributed.max_restarts times); raised past that, the run stops."""
