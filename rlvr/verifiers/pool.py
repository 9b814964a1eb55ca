"""Score many completions in worker processes, with a hard timeout per item.

Timeouts here are enforced from outside: a worker that overruns its item is killed
(SIGKILL) and replaced, so a verifier stuck in C code or a runaway sandbox cannot
stall training, and no signal handler is needed in the caller (signals work only on
the main thread; a timeout that silently fails in a thread or a Ray worker once made
every score 0 elsewhere). Errors and timeouts come back as ``None`` and are counted,
never scored as 0, except where a verifier declares ``timeout_score`` (python_code: a
program that outlives its sandbox's limits is wrong, so 0). A verifier that enforces
its own limit declares ``time_limit_s`` and the pool waits at least 1.25x that plus 1 s.

API (for the training loop)::

    pool = VerifierPool("boxed_math", workers=2, timeout_s=10.0)   # or "pkg.mod:fn", or a
    result = pool.score(completions, answers)                      # picklable function
    result.scores        # list[float | None], in input order; None = error, timeout or not scored
    result.failed        # list[bool]: which items have no score for an error or a timeout
    result.item_seconds  # list[float]: time of each item inside its worker
    result.errors, result.timeouts, result.messages, result.seconds
    result.timing()      # PoolTiming: seconds, items, slowest item; training logs it as time/verify/<term>/*
    pool.close()         # or use it as a context manager

    score_all("python_code", completions, answers, workers=2, timeout_s=30.0)  # one-shot

``score`` may be called from any thread (one batch at a time per pool; a lock
serialises callers). Workers start with ``spawn`` (no state inherited from a
threaded parent) and are reused across calls; starting one costs about half a second.
A verifier function with a callable ``warm_up`` attribute has it called once in each
worker before the worker takes items (``boxed_math`` imports sympy there).
Each worker gets a temporary directory of its own as its ``tempfile`` root (and
``TMPDIR``), removed when the worker is closed, killed or replaced: what a verifier
leaves there (``sandbox="none"`` code jobs) goes with a worker killed mid-item.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence, Union

__all__ = ["PoolResult", "PoolTiming", "VerifierPool", "score_all"]

VerifierSpec = Union[str, Callable[[str, str], float]]
_MAX_MESSAGES = 20  # error messages kept per batch (the counts are complete)


@dataclass(frozen=True)
class PoolTiming:
    """How long a pool took over the items it scored: one batch, or several added up (the
    generation rounds of a training step). Training logs it as time/verify/<term>/seconds, items_per_s
    and slowest_item_s; errors and timeouts are already reward/<term>/errors and /timeouts."""

    seconds: float = 0.0  # wall time from the first item sent to the last score back
    items: int = 0
    slowest_item_s: float = 0.0  # the longest item inside its worker; a timed-out one counts the pool's timeout

    def __add__(self, other: PoolTiming) -> PoolTiming:
        return PoolTiming(self.seconds + other.seconds, self.items + other.items, max(self.slowest_item_s, other.slowest_item_s))

    def metrics(self, prefix: str) -> dict[str, float]:
        """{prefix/seconds, prefix/items_per_s, prefix/slowest_item_s}.

        >>> PoolTiming(seconds=2.0, items=8, slowest_item_s=0.5).metrics("time/verify/boxed_math")["time/verify/boxed_math/items_per_s"]
        4.0
        """
        return {
            f"{prefix}/seconds": self.seconds,
            f"{prefix}/items_per_s": self.items / self.seconds if self.seconds > 0 else 0.0,
            f"{prefix}/slowest_item_s": self.slowest_item_s,
        }


@dataclass
class PoolResult:
    """Scores of one batch, in input order, and what went wrong."""

    scores: list[float | None]  # None: an error, a timeout, or the verifier returned None (not scored)
    item_seconds: list[float] = field(default_factory=list)  # a timed-out item counts timeout_s
    failed: list[bool] = field(default_factory=list)  # per item: no score for an error or a timeout (not a None score)
    errors: int = 0
    timeouts: int = 0
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def timing(self) -> PoolTiming:
        return PoolTiming(self.seconds, len(self.scores), max(self.item_seconds, default=0.0))


def resolve_verifier(spec: VerifierSpec) -> Callable[[str, Any], float | None]:
    """A callable from a registered name or a ``"module:function"`` path, resolved as training
    resolves it (:func:`rlvr.verifiers.contract.resolve_reward`: per-item or TRL-batched, detected
    once; ConfigError, a ValueError, when it cannot be), or a callable as it is."""
    if callable(spec):
        return spec
    # start-up time: each worker process imports this module; only a spec given by name needs the contract (and config)
    from rlvr.verifiers.contract import resolve_reward

    return resolve_reward(spec, where="VerifierPool")


def _worker_main(conn: Connection, spec: VerifierSpec, temp_root: str) -> None:
    tempfile.tempdir = os.environ["TMPDIR"] = temp_root
    try:
        fn = resolve_verifier(spec)
        # A verifier may declare a warm-up (imports, caches) to run before the worker
        # reports ready, so that no timed item pays for it.
        warm_up = getattr(fn, "warm_up", None)
        if callable(warm_up):
            warm_up()
    except BaseException as err:
        conn.send(("init_error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, completion, answer = message
        start = time.perf_counter()
        try:
            score = fn(completion, answer)  # None: the verifier does not score this item (not an error)
            if score is not None:
                score = float(score)
                if not math.isfinite(score):
                    raise ValueError(f"non-finite score {score}")
            conn.send((index, score, None, time.perf_counter() - start))
        except BaseException as err:  # a verifier bug is an error, not a 0
            conn.send((index, None, f"{type(err).__name__}: {err}"[:300], time.perf_counter() - start))


class _Worker:
    def __init__(self, ctx: Any, spec: VerifierSpec) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.temp_root = tempfile.mkdtemp(prefix="rlvr-worker-")
        # Also removed at exit if the pool is never closed.
        self._remove_at_exit = weakref.finalize(self, shutil.rmtree, self.temp_root, True)
        self.process = ctx.Process(target=_worker_main, args=(child, spec, self.temp_root), daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.item: int | None = None
        self.deadline = math.inf

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)  # SIGKILL cannot be ignored; a D-state worker is abandoned
        self.conn.close()
        self.remove_temp_root()

    def remove_temp_root(self) -> None:
        self._remove_at_exit()  # rmtree, once


class VerifierPool:
    """Worker processes that score ``(completion, answer)`` pairs with a verifier."""

    def __init__(self, verifier: VerifierSpec, *, workers: int = 2, timeout_s: float = 10.0) -> None:
        if workers < 1 or timeout_s <= 0:
            raise ValueError("workers must be >= 1 and timeout_s > 0")
        fn = resolve_verifier(verifier)  # fail here, clearly, not in a worker
        # A verifier that enforces its own time limit (python_code: its sandbox's) declares
        # it; the pool never cuts it short, or a slow wrong program would come back missing
        # instead of scoring 0. Past that limit the verifier itself is stuck: a timeout.
        own_limit = getattr(fn, "time_limit_s", None)
        self.spec = verifier
        self.timeout_s = max(timeout_s, own_limit * 1.25 + 1.0) if own_limit else timeout_s
        self.timeout_score: float | None = getattr(fn, "timeout_score", None)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(self._ctx, verifier) for _ in range(workers)]
        self._lock = threading.Lock()
        self._startup_deaths = 0  # workers that died before ready: a broken set-up

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(timeout=1)
            if worker.process.is_alive():
                worker.kill()
            worker.remove_temp_root()
        self._workers = []

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> PoolResult:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        with self._lock:
            if not self._workers:
                raise RuntimeError("the pool is closed")
            return self._score(list(completions), list(answers))

    def _score(self, completions: list[str], answers: list[str]) -> PoolResult:
        start = time.monotonic()
        result = PoolResult(scores=[None] * len(completions), item_seconds=[0.0] * len(completions), failed=[False] * len(completions))
        pending = deque(range(len(completions)))
        done = 0

        def fail(worker: _Worker, message: str, timeout: bool) -> None:
            nonlocal done
            if timeout:
                result.timeouts += 1
                result.item_seconds[worker.item] = self.timeout_s  # type: ignore[index]
                result.scores[worker.item] = self.timeout_score  # type: ignore[index]
            else:
                result.errors += 1
            result.failed[worker.item] = result.scores[worker.item] is None  # type: ignore[index]
            if len(result.messages) < _MAX_MESSAGES:
                result.messages.append(f"item {worker.item}: {message}")
            done += 1
            self._replace(worker)

        while done < len(completions):
            for worker in self._workers:
                if worker.ready and worker.item is None and pending:
                    worker.item = pending.popleft()
                    worker.deadline = time.monotonic() + self.timeout_s
                    worker.conn.send((worker.item, completions[worker.item], answers[worker.item]))
            now = time.monotonic()
            next_deadline = min((w.deadline for w in self._workers if w.item is not None), default=math.inf)
            waitables = [w.conn for w in self._workers] + [w.process.sentinel for w in self._workers]
            ready = set(wait(waitables, timeout=max(0.0, min(next_deadline - now, 1.0))))
            for worker in list(self._workers):
                if worker.conn in ready:
                    try:
                        message = worker.conn.recv()
                    except (EOFError, OSError):
                        message = None
                    if message is None:  # the worker died; its sentinel says so below
                        pass
                    elif message[0] == "ready":
                        worker.ready = True
                    elif message[0] == "init_error":
                        self.close()
                        raise RuntimeError(f"verifier worker failed to start: {message[1]}")
                    elif message[0] == worker.item:
                        index, score, error, seconds = message
                        result.item_seconds[index] = seconds
                        if error is None:
                            result.scores[index] = score
                        else:
                            result.errors += 1
                            result.failed[index] = True
                            if len(result.messages) < _MAX_MESSAGES:
                                result.messages.append(f"item {index}: {error}")
                        worker.item, worker.deadline = None, math.inf
                        done += 1
                        continue
                if worker.process.sentinel in ready and not worker.process.is_alive():
                    if worker.item is not None:
                        fail(worker, f"worker died (exit code {worker.process.exitcode})", timeout=False)
                    else:
                        self._startup_deaths += 0 if worker.ready else 1
                        if self._startup_deaths > 3 * len(self._workers):
                            self.close()
                            raise RuntimeError("verifier workers keep dying before they are ready")
                        self._replace(worker)
                elif worker.item is not None and time.monotonic() > worker.deadline:
                    fail(worker, f"timed out after {self.timeout_s:g}s", timeout=True)
        result.seconds = time.monotonic() - start
        return result

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = _Worker(self._ctx, self.spec)


def score_all(
    verifier: VerifierSpec,
    completions: Sequence[str],
    answers: Sequence[str],
    *,
    workers: int = 2,
    timeout_s: float = 10.0,
) -> PoolResult:
    """Score one batch with a temporary :class:`VerifierPool` (see the module doc)."""
    with VerifierPool(verifier, workers=workers, timeout_s=timeout_s) as pool:
        return pool.score(completions, answers)
