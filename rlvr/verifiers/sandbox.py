"""Run untrusted Python in a bubblewrap sandbox and collect its raw, typed results.

The host side of :mod:`rlvr.verifiers.code`. :func:`run_job` starts
``rlvr/verifiers/_runner.py`` inside ``bwrap`` with:

* no network (own network namespace), own PID, IPC and UTS namespaces, a new session
  (no terminal injection), a cleared environment (``PATH`` and ``LC_ALL`` only);
* a read-only view of the interpreter and system libraries only (``/usr``, the
  Python prefix): no home, no project, no ``/etc``; a private ``/tmp`` (tmpfs of
  ``tmp_mb``), a private ``/proc`` and a minimal ``/dev``;
* as root (CI, containers), the untrusted code runs as an unprivileged uid of its own
  with no capabilities, because ``RLIMIT_NPROC`` does not bind root; run by an
  ordinary user, bwrap's user namespace already makes it unprivileged;
* limits per process: address space, CPU time, file size, open files, processes; per
  test: wall-clock time and output size; per job: total wall-clock time and what the
  host reads back.

Killing the outer ``bwrap`` takes the whole PID namespace with it (``--die-with-parent``
on its init), so no process of a job survives the verdict, ``setsid`` or not.

Without ``bwrap`` nothing runs unless the caller opts into ``sandbox="none"`` (or sets
``RLVR_CODE_SANDBOX=none``): the same runner and limits in a temporary directory,
with none of the isolation above, and an :class:`UnsandboxedCodeWarning` each call.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.errors import RunStopped

__all__ = ["Limits", "SandboxRun", "SandboxUnavailable", "UnsandboxedCodeWarning", "parse_result_line", "resolve_sandbox", "run_job"]

RUNNER = Path(__file__).with_name("_runner.py")
SANDBOX_ENV = "RLVR_CODE_SANDBOX"
_UID_BASE = 200_000  # sandbox uids: far above any system or human account
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed job (one completion and its tests)."""

    test_s: float = 2.0
    """Wall-clock seconds per test (and for loading the program)."""
    total_s: float = 20.0
    """Wall-clock seconds for the whole job, sandbox start included."""
    cpu_s: int = 10
    """CPU seconds per process (RLIMIT_CPU); wall clock is what stops ``sleep``."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS)."""
    file_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE)."""
    tmp_mb: int = 64
    """Size of the private ``/tmp`` (all files together)."""
    processes: int = 32
    """Processes of the sandbox's uid (RLIMIT_NPROC): a fork bomb stops here."""
    open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_kb: int = 1024
    """Stdout kept per test; more is a failed test, not a truncated pass."""
    source_chars: int = 64_000
    """Longer programs are refused without running (a 1 MB source scores 0)."""

    def runner_limits(self) -> dict[str, float | int]:
        return {
            "test_s": self.test_s,
            "cpu_s": self.cpu_s,
            "memory_bytes": self.memory_mb << 20,
            "file_bytes": self.file_mb << 20,
            "processes": self.processes,
            "open_files": self.open_files,
            "output_bytes": self.output_kb << 10,
        }


class SandboxUnavailable(RunStopped):
    """bubblewrap is missing or broken, and the caller did not opt out of the sandbox."""


class UnsandboxedCodeWarning(UserWarning):
    """Untrusted code ran without the OS-level sandbox (``sandbox="none"``)."""


@dataclass
class SandboxRun:
    """What came back from one job: per-test lines from the runner and how it ended."""

    lines: list[dict] = field(default_factory=list)
    status: str = "ok"  # ok | timeout | output_limit | crashed
    stderr: str = ""
    wall_s: float = 0.0


def resolve_sandbox(sandbox: str | None) -> str:
    """``"bwrap"`` or ``"none"``; raises :class:`SandboxUnavailable` rather than run
    code unsandboxed by accident."""
    mode = sandbox or os.environ.get(SANDBOX_ENV) or "bwrap"
    if mode not in ("bwrap", "none"):
        raise ValueError(f"sandbox must be 'bwrap' or 'none', got {mode!r}")
    if mode == "bwrap" and shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, so untrusted code will not run. Install it "
            "(Debian/Ubuntu: apt-get install bubblewrap), or accept a much weaker sandbox with "
            f"sandbox='none' / {SANDBOX_ENV}=none."
        )
    return mode


def run_job(job: dict, limits: Limits, sandbox: str | None = None) -> SandboxRun:
    """Run one runner job (see ``_runner.py``) and return its result lines.

    Never leaves a process behind: the job's process group is killed and reaped
    before this returns, whatever happened inside.
    """
    mode = resolve_sandbox(sandbox)
    as_root = os.geteuid() == 0
    job = {
        **job,
        "limits": limits.runner_limits(),
        "uid": _sandbox_uid() if mode == "bwrap" and as_root else None,
        "pid_namespace": mode == "bwrap",
    }
    payload = json.dumps(job).encode()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rlvr-code-") as workdir:
        if mode == "bwrap":
            argv, cwd = _bwrap_argv(limits, as_root), None
        else:
            warnings.warn(
                "running untrusted code WITHOUT the bubblewrap sandbox (sandbox='none'): it can "
                "read your files and environment and use the network",
                UnsandboxedCodeWarning,
                stacklevel=3,
            )
            argv, cwd = [_python(), "-I", "-S", str(RUNNER)], workdir
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=cwd, env=env, start_new_session=True,  # one process group to kill
            )
        except OSError as err:
            raise SandboxUnavailable(f"could not start the sandbox: {err}") from err
        status = "crashed"  # until _communicate says otherwise
        n_tests = max(len(job.get("probes", [])), len(job.get("inputs", [])))
        try:
            cap = (n_tests + 1) * 8 * (limits.output_kb << 10)  # JSON escaping may grow text
            out, err, status = _communicate(proc, payload, start + limits.total_s, cap)
        finally:
            _kill_group(proc, grace_s=0.5 if status == "ok" else 0.0)
            if job["uid"] is not None:
                _sweep_uid(job["uid"])
    run = SandboxRun(status=status, stderr=err.decode("utf-8", "replace")[-4000:], wall_s=time.monotonic() - start)
    for line in out.split(b"\n"):
        msg = parse_result_line(line)
        if msg is not None:
            run.lines.append(msg)
            if len(run.lines) > 2 * n_tests + 8:  # honest runners send one line per test
                break
    if status == "ok" and proc.returncode != 0:
        run.status = "crashed"
    if mode == "bwrap" and proc.returncode != 0 and not run.lines and b"bwrap:" in err:
        raise SandboxUnavailable(f"bwrap failed: {run.stderr.strip()}")
    return run


def parse_result_line(line: bytes, max_items: int = 250_000) -> dict | None:
    """One line the runner printed, as a dict, or None. The line is untrusted (the program
    shares the sandbox with the runner), so it is decoded only when it cannot recurse or
    flood: at most two levels of nesting and ``max_items`` commas, strings aside. The
    runner's own lines ({"id": i, "value": [flat tokens]}) always are."""
    skeleton = _JSON_STRING.sub(b'""', line)
    if skeleton.count(b"[") + skeleton.count(b"{") > 2 or skeleton.count(b",") > max_items:
        return None
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return msg if isinstance(msg, dict) else None


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


# ------------------------------------------------------------------------- internals


def _sandbox_uid() -> int:
    """A uid for one job. Concurrent jobs get different uids (the counter, the pid), so
    one job's fork bomb does not use up another's process limit."""
    return _UID_BASE + (os.getpid() % 10_000) * 100 + next(_uid_counter) % 100


def _sweep_uid(uid: int, patience_s: float = 2.0) -> None:
    """Return only when no live process runs as the job's uid, killing stragglers.

    The PID namespace dies with bwrap, but its processes may still be exiting when the
    outer bwrap has already returned (a fork bomb under load takes a moment): the
    verdict must not come before they are gone. Zombies are dead already (their
    reaper is the host's init) and are not waited for.
    """
    deadline = time.monotonic() + patience_s
    while True:
        alive = [pid for pid, state in _processes_of(uid) if state != "Z"]
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)  # unique uid: these are the job's processes
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def _processes_of(uid: int) -> list[tuple[int, str]]:
    """(pid, state letter) of every process whose real uid is ``uid``."""
    found, needle = [], b"\nUid:\t%d\t" % uid
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read(1024)
        except OSError:
            continue
        if needle in status:
            state = status.partition(b"\nState:")[2].split(None, 1)[:1]
            found.append((int(entry.name), state[0].decode() if state else "?"))
    return found


def _python() -> str:
    """The base interpreter (not a venv's launcher): the sandbox sees no venv."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _bwrap_argv(limits: Limits, as_root: bool) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LC_ALL", "C.UTF-8"]
    if as_root:
        # No user namespace: the runner starts as uid 0 with only the capabilities it
        # needs to hand the untrusted child an unprivileged uid of its own and to kill it.
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    else:
        argv += ["--unshare-all"]  # includes the user namespace
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    python = _python()
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        # Parents are created world-traversable: bwrap would copy /root's 0700 otherwise.
        parts = Path(prefix).parts[1:-1]
        for i in range(len(parts)):
            argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[: i + 1])]
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--ro-bind", str(RUNNER), "/rlvr_runner.py",
             "--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp",
             "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp",
             "--", python, "-I", "-S", "/rlvr_runner.py"]
    return argv


def _communicate(proc: subprocess.Popen, payload: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, str]:
    """Write the job, read stdout/stderr until EOF, the deadline or ``cap`` bytes."""
    assert proc.stdin and proc.stdout and proc.stderr
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    out, err, sent = bytearray(), bytearray(), 0
    status = "ok"
    try:
        while any(key.fileobj is not proc.stdin for key in sel.get_map().values()):
            wait = deadline - time.monotonic()
            if wait <= 0:
                status = "timeout"
                break
            for key, _ in sel.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        sent += os.write(proc.stdin.fileno(), payload[sent : sent + 65536])
                    except (BrokenPipeError, OSError):
                        sent = len(payload)
                    if sent >= len(payload):
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > cap:
                        return bytes(out[:cap]), bytes(err), "output_limit"
                elif len(err) < 65536:
                    err += chunk
    finally:
        sel.close()
    return bytes(out), bytes(err), status


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Kill and reap the job: its process group, then the process itself."""
    if proc.poll() is None and grace_s > 0:
        try:
            proc.wait(timeout=grace_s)  # a finished runner lets bwrap exit on its own
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()
