"""Several programs through one bubblewrap sandbox, one after another, each as if it were alone.

Starting a sandbox (bwrap, then an interpreter importing the runner's modules) costs ~25 ms
here, several times what a small program's tests take, so a batch of programs one sandbox each
is bound by start-ups. Here one sandbox serves a list of jobs: the runner's ``serve`` mode
(``_runner._serve``) forks a process for each job before the job exists anywhere in the jail,
so what a job's process holds is its own program and probes and nothing of any other; between
jobs every other process is killed and reaped, ``/tmp`` is emptied and a throwaway child checks
that no process, file or unix socket is left (the server itself never reads anything a program
chose), and a jail that is not clean is abandoned for a fresh one. Each job has its own session,
its own uid (as root) and its own wall-clock limit (``total_s``, from the moment the host hands it
over to its last line; the clearing after it is not on its clock); a job that overruns takes its
sandbox with it, and the jobs after it start in a fresh one.

What a shared jail still shares, and why it is bounded: counters. The PID counter and the inode
numbers of ``/tmp`` move by what an earlier job did, a few bits from one job to the next. The
network namespace is shared too; its stateful parts are refused (internet sockets, by the
seccomp filter: TCP's TIME_WAIT ports outlive a process) or checked (a unix socket left bound).
So the caller never puts two programs for the same tests in one sandbox (`plan_servers`): what
one program could learn from an earlier one is about another problem, never a sibling's answer
to its own.

Not used without bwrap (``sandbox="none"`` has no PID namespace to clear) nor with per-job
cgroups (``Limits.cgroups``): there every job gets its own sandbox, as before (`run_job`).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from collections import defaultdict
from typing import Hashable, Sequence

from rlvr.verifiers.code.sandbox import (
    Limits, SandboxRun, SandboxUnavailable, _bwrap_args, _failed_to_start, _kill_group, _pipe_with, _seccomp_filter,
    _sweep_uids, parse_result_line, release_uids, resolve_sandbox, sandbox_uids,
)

__all__ = ["MAX_JOBS_PER_SANDBOX", "plan_servers", "run_jobs_served"]

MAX_JOBS_PER_SANDBOX = 64


def plan_servers(problems: Sequence[Hashable], cap: int = MAX_JOBS_PER_SANDBOX) -> list[list[int]]:
    """Indices of jobs grouped into sandboxes: never two jobs of one problem in a group, at most
    ``cap`` per group. The k-th job of every problem goes to group k (then split by ``cap``)."""
    rounds: dict[int, list[int]] = defaultdict(list)
    seen: dict[Hashable, int] = defaultdict(int)
    for i, problem in enumerate(problems):
        rounds[seen[problem]].append(i)
        seen[problem] += 1
    return [group[k : k + cap] for _, group in sorted(rounds.items()) for k in range(0, len(group), cap)]


def can_serve(limits: Limits, sandbox: str | None) -> bool:
    """Whether jobs may share a sandbox here: only under bwrap and without per-job cgroups."""
    return resolve_sandbox(sandbox) == "bwrap" and not limits.cgroups


def run_jobs_served(jobs: list[dict], limits: Limits, sandbox: str | None = None) -> list[SandboxRun]:
    """Each job's run, as `run_job` would give it, through as few sandboxes as failures allow.
    The caller has grouped the jobs (`plan_servers`) and checked `can_serve`."""
    runs: list[SandboxRun] = []
    while len(runs) < len(jobs):
        done = _serve(jobs[len(runs) : len(runs) + MAX_JOBS_PER_SANDBOX], limits)
        if not done:  # a fresh jail never got ready for its first job: not the program's doing
            raise SandboxUnavailable("a fresh shared sandbox did not get ready for its first job")
        runs += done
    return runs


def _serve(jobs: list[dict], limits: Limits) -> list[SandboxRun]:
    """Run jobs in one fresh sandbox until they end or one fails (that one's run is the last).
    A job the jail never got ready for has no run: the caller retries it in a fresh jail."""
    seccomp = _seccomp_filter(required=True)
    as_root = os.geteuid() == 0
    uid_base = sandbox_uids(len(jobs)) if as_root else None  # job n runs as uid_base + n
    header = {"pid_namespace": True, "seccomp": seccomp.job_entry() if seccomp else None, "limits": limits.runner_limits(),
              "uid_base": uid_base, "jobs": len(jobs), "tmp_inodes": limits.tmp_files}
    options, command = _bwrap_args(limits, as_root)
    args_fd = _pipe_with(b"".join(a.encode() + b"\0" for a in options))
    try:
        proc = subprocess.Popen(
            ["bwrap", "--args", str(args_fd), "--", *command, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, start_new_session=True, pass_fds=(args_fd,),
        )
    except OSError as err:
        if uid_base is not None:
            release_uids(uid_base, len(jobs))
        raise SandboxUnavailable(f"could not start the sandbox: {err}") from err
    finally:
        os.close(args_fd)
    channel = _Channel(proc)
    runs: list[SandboxRun] = []
    try:
        started = channel.send(_message(header), time.monotonic() + limits.total_s) == "ok"
        for n, job in enumerate(jobs if started else ()):
            run = _one(channel, n, job, limits)
            if run is None:
                break
            runs.append(run)
            if run.status != "ok" or channel.ended:
                break
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole jail; then what its stderr still holds
        except (ProcessLookupError, PermissionError):
            pass
        if not any(run.lines for run in runs):
            channel.drain_stderr()
        _kill_group(proc, grace_s=0.0)
        channel.close()
        if uid_base is not None:
            _sweep_uids({uid_base + n for n in range(len(jobs))})
            release_uids(uid_base, len(jobs))
    if not any(run.lines for run in runs) and proc.returncode != 0 and _failed_to_start(proc.returncode, channel.err, "bwrap"):
        raise SandboxUnavailable(f"the sandbox failed to start: {channel.err.decode('utf-8', 'replace')[-4000:].strip()}")
    return runs


CLEAR_S = 5.0
"""How long the host waits for the jail to be cleared after a job (the server gives up at ~2.2 s)."""


def _one(channel: "_Channel", n: int, job: dict, limits: Limits) -> SandboxRun | None:
    """Hand job ``n`` over when the jail is ready for it and collect its lines until it has
    finished; then wait for the jail to be cleared (not on the job's clock). None when the jail
    never got ready for it."""
    if channel.wait_for({"ready": n}, time.monotonic() + limits.total_s) != "ok":
        return None
    start = time.monotonic()  # the job's clock: from the hand-over to its last line
    deadline = start + limits.total_s
    n_tests = max(len(job.get("probes", [])), len(job.get("inputs", [])))
    cap = (n_tests + 1) * 8 * (limits.output_kb << 10)  # as run_job: JSON escaping may grow text
    run = SandboxRun(status="crashed")
    channel.job_err = b""
    status = channel.send(_message(job), deadline)
    received = 0
    while status == "ok":
        line = channel.line(deadline, cap)
        if isinstance(line, str):
            status = line
            break
        received += len(line) + 1
        if received > cap:
            status = "output_limit"
            break
        msg = parse_result_line(line)
        if msg is None:
            continue
        if msg.get("finished") == n:
            status = "ok" if msg.get("exit") == 0 else "crashed"
            run.wall_s = time.monotonic() - start
            cleared = channel.wait_for({"done": n}, time.monotonic() + CLEAR_S)
            channel.ended = cleared != "ok"  # "unclean", or it never said: a fresh jail for the rest
            break
        if "id" in msg and len(run.lines) <= 2 * n_tests + 8:  # honest runners send one line per test
            run.lines.append(msg)
    if status != "ok":
        run.wall_s = time.monotonic() - start
    run.status = {"eof": "crashed"}.get(status, status)
    run.stderr = channel.job_err.decode("utf-8", "replace")[-4000:]
    return run


def _message(obj: dict) -> bytes:
    data = json.dumps(obj).encode()
    return b"%d\n" % len(data) + data


class _Channel:
    """The served jail's stdin and stdout, with deadlines; stderr is kept, the jail's first
    64 KiB (what a failed start said) and each job's own (``job_err``, 64 KiB)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdin and proc.stdout and proc.stderr
        self.proc, self.buffer, self.err, self.job_err, self.ended = proc, b"", b"", b"", False
        os.set_blocking(proc.stdin.fileno(), False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(proc.stdout, selectors.EVENT_READ)
        self.selector.register(proc.stderr, selectors.EVENT_READ)

    def send(self, data: bytes, deadline: float) -> str:
        """Write all of ``data`` (reading output meanwhile); "ok", "timeout" or "eof"."""
        out = self.proc.stdin.fileno()  # type: ignore[union-attr]
        self.selector.register(out, selectors.EVENT_WRITE)
        try:
            while data:
                ready = self._select(deadline)
                if ready is None:
                    return "timeout"
                if out in ready:
                    try:
                        data = data[os.write(out, data[:65536]):]
                    except BlockingIOError:
                        pass
                    except OSError:
                        return "eof"
                if ready and not self._pump(ready):
                    return "eof"
            return "ok"
        finally:
            self.selector.unregister(out)

    def line(self, deadline: float, cap: int = 1 << 20) -> bytes | str:
        """The next stdout line, or "timeout" / "eof" / "output_limit" (``cap`` bytes without one)."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > cap:
                return "output_limit"
            ready = self._select(deadline)
            if ready is None:
                return "timeout"
            if not self._pump(ready):
                return "eof"
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def wait_for(self, expected: dict, deadline: float) -> str:
        """Read lines until one equal to ``expected``; "ok", or why not."""
        while True:
            line = self.line(deadline)
            if isinstance(line, str):
                return line
            msg = parse_result_line(line)
            if msg == expected:
                return "ok"
            if msg is not None and ("unclean" in msg or "ready" in msg):
                return "unexpected"

    def drain_stderr(self, patience_s: float = 0.5) -> None:
        """Read what stderr still holds (a failed start's reason) until it ends or a moment passes."""
        deadline = time.monotonic() + patience_s
        fd = self.proc.stderr.fileno()  # type: ignore[union-attr]
        while fd in {key.fd for key in self.selector.get_map().values()}:
            ready = self._select(deadline)
            if not ready:
                return
            self._pump(ready)

    def close(self) -> None:
        self.selector.close()

    def _select(self, deadline: float) -> set | None:
        wait = deadline - time.monotonic()
        if wait <= 0:
            return None
        return {key.fd for key, _ in self.selector.select(wait)}

    def _pump(self, ready: set) -> bool:
        """Read every stream that is ready; False once stdout has ended."""
        alive = True
        for stream in (self.proc.stdout, self.proc.stderr):
            fd = stream.fileno()  # type: ignore[union-attr]
            if fd not in ready or fd not in {key.fd for key in self.selector.get_map().values()}:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.selector.unregister(stream)
                if stream is self.proc.stdout:
                    alive = False
            elif stream is self.proc.stdout:
                self.buffer += chunk
            else:
                if len(self.err) < 65536:
                    self.err += chunk
                if len(self.job_err) < 65536:
                    self.job_err += chunk
        return alive and self.proc.stdout.fileno() in {key.fd for key in self.selector.get_map().values()}  # type: ignore[union-attr]
