"""Run untrusted Python in a bubblewrap sandbox and collect its raw, typed results.

The host side of :mod:`rlvr.verifiers.code`. :func:`run_job` starts the runner
(``_runner.py``, passed as ``python -I -S -c SOURCE``: no file of the checkout is
mounted) inside ``bwrap`` with:

* no network (own network namespace), own PID, IPC, UTS and cgroup namespaces, a new
  session (no terminal injection), a cleared environment;
* a read-only view of the interpreter and system libraries only (``/usr``, the Python
  prefix, mounted at ``/opt/python`` when it lives elsewhere): no home, no project, no
  ``/etc``; every ``site-packages``/``dist-packages`` (and bundled wheel) directory in
  that view covered by an empty read-only tmpfs, so programs get the standard library
  only; a private ``/tmp`` (tmpfs of ``tmp_mb`` and ``tmp_files`` inodes, the inode cap
  set by the runner, which then drops the capability it took), a private ``/proc`` and a ``/dev`` of
  ``null``, ``zero``, ``full``, ``random``, ``urandom`` and the ``fd``/``std*`` links
  (no pty, no ``/dev/shm``); the rest of the root read-only; bwrap's own arguments
  come through a pipe (``--args``), so no host path shows in ``/proc/1/cmdline``;
* as root (CI, containers), the untrusted code runs as an unprivileged uid of its own
  with no capabilities, because ``RLIMIT_NPROC`` does not bind root; run by an
  ordinary user, bwrap's user namespace already makes it unprivileged;
* in each test's child, before the program runs: a seccomp allow list
  (:mod:`rlvr.verifiers.code.seccomp`: no sockets, keyrings, namespaces, mounts, ``setsid``,
  SysV IPC, ``memfd``, AIO, epoll...: no kernel object a program could grow past what the
  job's limits bound); the runner itself first joins a fresh session keyring, so the
  caller's keys are not even possessed, and turns non-dumpable, so a child sharing its
  uid cannot open ``/proc/<runner>/fd``;
* limits per process: address space, CPU time, file size, open files, processes; per
  test: wall-clock time and output size; per job: total wall-clock time, what the host
  reads back and, where cgroups are writable (:mod:`rlvr.verifiers.code.cgroups`), the
  memory, task count and CPU share of the whole job.

Killing the outer ``bwrap`` takes the whole PID namespace with it (``--die-with-parent``
on its init), so no process of a job survives the verdict.

Without ``bwrap`` nothing runs unless the caller opts into ``sandbox="none"`` (or sets
``RLVR_CODE_SANDBOX=none``): the same runner, limits, seccomp filter and cgroups in a
temporary directory, with none of the isolation above, and an
:class:`UnsandboxedCodeWarning` each call.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.errors import RunStopped
import rlvr.verifiers.code.cgroups as cgroups
from rlvr.verifiers.code.seccomp import Filter, UnsupportedArchitecture, build_filter

__all__ = ["Limits", "SandboxRun", "SandboxUnavailable", "UnsandboxedCodeWarning", "parse_result_line", "resolve_sandbox", "run_job",
           "warm_up"]

RUNNER = Path(__file__).with_name("_runner.py")
SANDBOX_ENV = "RLVR_CODE_SANDBOX"
_UID_BASE = 100_000  # sandbox uids: far above any system or human account
_UIDS_PER_PROCESS = 1000  # process P owns [_UID_BASE + P * 1000, + 1000): below 2**32 - 2 for any pid
_PREFIX_IN_JAIL = "/opt/python"  # where an interpreter prefix outside /usr is mounted
_DEVICES = ("null", "zero", "full", "random", "urandom")
_MASKED_PROC = ("/proc/keys", "/proc/key-users")
# Directories of third-party code: hidden in the jail wherever they are found.
_PACKAGE_DIRS = ("site-packages", "dist-packages", "python-wheels")
_uid_lock = threading.Lock()
_uid_next = 0
_uids_held: dict[int, int] = {}  # first offset in the block: count, for shared jails still alive


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
    tmp_files: int = 4096
    """Files, directories and links in the private ``/tmp`` (the tmpfs's inode cap): each costs
    ~1 KiB of unreclaimable kernel memory that ``tmp_mb`` does not count (a 64 MiB tmpfs
    otherwise holds ~3 million empty files, ~750 MiB of kernel slab)."""
    processes: int = 32
    """Processes of the sandbox's uid (RLIMIT_NPROC): a fork bomb stops here. With a
    pids cgroup, also the job's tasks (threads included), plus the sandbox's own few."""
    open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_kb: int = 1024
    """Stdout kept per test; more is a failed test, not a truncated pass."""
    source_chars: int = 64_000
    """Longer programs are refused without running (a 1 MB source scores 0)."""
    job_memory_mb: int = 1024
    """Memory of the whole job, page cache and ``/tmp`` included (memory cgroup, with
    ``cgroups=True`` where writable); RLIMIT_AS alone bounds each process, not their sum."""
    job_cpus: float = 1.0
    """CPUs the whole job may use at once (CFS quota, where a cpu cgroup is writable);
    0 for no quota. Jobs also get equal CPU weights there."""
    cgroups: bool = False
    """Per-job cgroups where writable, enforcing the two limits above and ``processes`` on
    the whole job. Off by default: measured here (cgroup v1), running inside one costs ~10 ms
    per job whatever it enforces, 0.7-0.75x the programs/s. Without them the seccomp filter,
    the rlimits and one scheduler autogroup per job still hold, but a job's processes
    together may use up to ``processes`` x ``memory_mb``; turn them on where several jobs
    share a machine with other work."""

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

    Never leaves a process behind: the job's process group (and, where it has them,
    its cgroups) is killed and reaped before this returns, whatever happened inside.
    """
    mode = resolve_sandbox(sandbox)
    seccomp = _seccomp_filter(required=mode == "bwrap")
    as_root = os.geteuid() == 0
    # The jail's description first: the first job of a process walks /usr for package
    # directories (~0.3 s warm, 25 s seen cold), which is not the program's time.
    options, command = _bwrap_args(limits, as_root) if mode == "bwrap" else ([], [])
    job = {
        **job,
        "limits": limits.runner_limits(),
        "uid": _sandbox_uid() if mode == "bwrap" and as_root else None,
        "pid_namespace": mode == "bwrap",
        "seccomp": seccomp.job_entry() if seccomp else None,
        "tmp_inodes": limits.tmp_files if mode == "bwrap" else None,
    }
    payload = json.dumps(job).encode()
    start = time.monotonic()  # the job's clock
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    workdir, args_fd, job_cgroups = None, None, None
    try:
        if mode == "bwrap":
            args_fd = _pipe_with(b"".join(a.encode() + b"\0" for a in options))
            argv, cwd = ["bwrap", "--args", str(args_fd), "--", *command], None
        else:
            warnings.warn(
                "running untrusted code WITHOUT the bubblewrap sandbox (sandbox='none'): it can "
                "read your files and environment (only the seccomp filter, where it loads, keeps it off the network)",
                UnsandboxedCodeWarning,
                stacklevel=3,
            )
            # In the caller's temp dir: a verification pool gives each worker its own and
            # removes it with the worker, so a killed worker leaves nothing behind.
            workdir = cwd = env["TMPDIR"] = tempfile.mkdtemp(prefix="rlvr-code-")
            argv = [_python(), "-I", "-S", "-c", _runner_source()]
        try:
            if limits.cgroups:
                job_cgroups = cgroups.create(limits.job_memory_mb << 20, limits.processes + cgroups.TRUSTED_TASKS, limits.job_cpus)
        except OSError as err:
            raise SandboxUnavailable(f"could not create the job's cgroups: {err}") from err
        if job_cgroups is not None:
            argv = job_cgroups.wrap(argv)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=cwd, env=env, start_new_session=True,  # one process group to kill
                pass_fds=() if args_fd is None else (args_fd,),
            )
        except OSError as err:
            raise SandboxUnavailable(f"could not start the sandbox: {err}") from err
        if args_fd is not None:
            os.close(args_fd)
            args_fd = None
        status = "crashed"  # until _communicate says otherwise
        n_tests = max(len(job.get("probes", [])), len(job.get("inputs", [])))
        try:
            cap = (n_tests + 1) * 8 * (limits.output_kb << 10)  # JSON escaping may grow text
            out, err, status = _communicate(proc, payload, start + limits.total_s, cap)
        finally:
            _kill_group(proc, grace_s=0.5 if status == "ok" else 0.0)
            if job["uid"] is not None and job_cgroups is None:
                _sweep_uids({job["uid"]})  # with cgroups, removing them below does the same, cheaper
    finally:
        if args_fd is not None:
            os.close(args_fd)
        if job_cgroups is not None:
            job_cgroups.remove()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    run = SandboxRun(status=status, stderr=err.decode("utf-8", "replace")[-4000:], wall_s=time.monotonic() - start)
    for line in out.split(b"\n"):
        msg = parse_result_line(line)
        if msg is not None:
            run.lines.append(msg)
            if len(run.lines) > 2 * n_tests + 8:  # honest runners send one line per test
                break
    if status == "ok" and proc.returncode != 0:
        run.status = "crashed"
    if proc.returncode != 0 and not run.lines and _failed_to_start(proc.returncode, err, mode):
        raise SandboxUnavailable(f"the sandbox failed to start: {run.stderr.strip()}")
    return run


def warm_up(sandbox: str | None = None) -> None:
    """Do now what the first job of a process would otherwise do on its own clock: walk
    ``/usr`` and the interpreter prefix for package directories to hide, build the seccomp
    filter, read the runner. `run_job` starts a job's clock after these anyway; calling this
    in a worker's warm-up (or a preflight) keeps the walk off the first item's time too."""
    try:
        jailed = resolve_sandbox(sandbox) == "bwrap"
    except SandboxUnavailable:
        return  # no bwrap: the first job says so itself
    if jailed:
        _package_dirs()
        _interpreter_in_jail()
    _seccomp_filter(required=False)
    _runner_source()


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
    """A uid for one job. Concurrent jobs get different uids, so one job's fork bomb does not
    use up another's process limit, and the host's sweep after a job kills only its processes."""
    return sandbox_uids(1)


def sandbox_uids(count: int) -> int:
    """The first of ``count`` consecutive uids from this process's own block (no other process
    ever holds one of them), none of them held by a jail still alive: hand them back with
    `release_uids` once the jail's processes are swept. A one-job sandbox's uid is taken back
    when the next one is handed out past it (its sweep ends before `run_job` returns)."""
    global _uid_next
    if not 0 < count <= _UIDS_PER_PROCESS // 8:
        raise ValueError(f"uids are handed out at most {_UIDS_PER_PROCESS // 8} at a time, not {count}")
    with _uid_lock:
        for _ in range(2 * _UIDS_PER_PROCESS):
            if _uid_next + count > _UIDS_PER_PROCESS:
                _uid_next = 0
            first = _uid_next
            clash = next((lo + n for lo, n in _uids_held.items() if lo < first + count and first < lo + n), None)
            if clash is None:
                _uid_next = first + count
                if count > 1:
                    _uids_held[first] = count
                return _UID_BASE + os.getpid() * _UIDS_PER_PROCESS + first
            _uid_next = clash
    raise SandboxUnavailable(f"no {count} free sandbox uids in this process's block: too many shared jails alive at once")


def release_uids(first_uid: int, count: int) -> None:
    """Give back what `sandbox_uids` handed out (after the jail's processes are swept)."""
    with _uid_lock:
        _uids_held.pop(first_uid - _UID_BASE - os.getpid() * _UIDS_PER_PROCESS, None)


def _sweep_uids(uids: set[int], patience_s: float = 2.0) -> None:
    """Return only when no live process runs as one of the jobs' uids, killing stragglers.

    The PID namespace dies with bwrap, but its processes may still be exiting when the
    outer bwrap has already returned (a fork bomb under load takes a moment): the
    verdict must not come before they are gone. Zombies are dead already (their
    reaper is the host's init) and are not waited for.
    """
    deadline = time.monotonic() + patience_s
    while True:
        alive = [pid for pid, state in _processes_of(uids) if state != "Z"]
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)  # unique uid: these are the job's processes
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def _processes_of(uids: set[int]) -> list[tuple[int, str]]:
    """(pid, state letter) of every process whose real uid is one of ``uids``."""
    found, needles = [], [b"\nUid:\t%d\t" % uid for uid in uids]
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read(1024)
        except OSError:
            continue
        if any(needle in status for needle in needles):
            state = status.partition(b"\nState:")[2].split(None, 1)[:1]
            found.append((int(entry.name), state[0].decode() if state else "?"))
    return found


def _python() -> str:
    """The base interpreter (not a venv's launcher): the sandbox sees no venv."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _seccomp_filter(required: bool) -> Filter | None:
    """This machine's filter; without one, bwrap mode refuses to run at all."""
    try:
        return _host_filter()
    except UnsupportedArchitecture as err:
        if required:
            raise SandboxUnavailable(f"{err}: untrusted code will not run without its seccomp filter") from None
        return None


@functools.lru_cache(maxsize=1)
def _host_filter() -> Filter:
    return build_filter()


@functools.lru_cache(maxsize=1)
def _runner_source() -> str:
    return RUNNER.read_text()


def _pipe_with(data: bytes) -> int:
    """The read end of a pipe already holding ``data`` (and closed for writing)."""
    if len(data) > 60_000:  # a pipe buffer holds 64 KiB; no reader runs yet
        raise SandboxUnavailable(f"bwrap arguments too long ({len(data)} bytes)")
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd


def _failed_to_start(returncode: int, err: bytes, mode: str) -> bool:
    """Whether a job that produced nothing never got as far as the program: bwrap,
    the cgroup entry, the runner's start-up or the interpreter itself (exit 127, the
    dynamic loader) failed. Nothing the program does leads to these."""
    return (
        (mode == "bwrap" and b"bwrap:" in err)
        or cgroups.ENTER_FAILED in err
        or b"rlvr-runner:" in err
        or returncode == 127
    )


def _bwrap_args(limits: Limits, as_root: bool) -> tuple[list[str], list[str]]:
    """bwrap's options (the jail described in the module doc) and the command."""
    argv = ["--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LC_ALL", "C.UTF-8"]
    # CAP_SYS_ADMIN and CAP_SETPCAP: the runner's first act caps /tmp's inodes (bwrap's --size
    # caps bytes only), then it drops both for good (_runner._cap_tmp_inodes), before it reads
    # anything a program wrote or forks anything.
    remount = ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
    if as_root:
        # No user namespace: the runner starts as uid 0 with only the capabilities it
        # needs to hand the untrusted child an unprivileged uid of its own and to kill it.
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL", *remount]
    else:
        # The user namespace maps one uid, so the program shares it with bwrap's init,
        # which holds our stdout: a program could write forged results to
        # /proc/1/fd/1. --as-pid-1 makes the (non-dumpable) runner the init instead,
        # which also ignores signals from inside. Its orphans' zombies wait for the
        # job's end.
        argv += ["--unshare-all", "--as-pid-1", *remount]  # capabilities in the jail's own user namespace
    for top in _SYSTEM_TOPS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    python, prefix, in_jail = _interpreter_in_jail()
    if not any(in_jail.startswith(top + "/") for top in _SYSTEM_TOPS):
        parts = Path(in_jail).parts[1:-1]  # parents world-traversable: bwrap copies the source's (0700)
        for i in range(len(parts)):
            argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[: i + 1])]
        argv += ["--ro-bind", prefix, in_jail]
        if glob.glob(os.path.join(prefix, "lib", "libpython*.so*")):
            # Its RUNPATH names the host prefix; the loader tries LD_LIBRARY_PATH first.
            argv += ["--setenv", "LD_LIBRARY_PATH", in_jail + "/lib"]
    for host_dir in _package_dirs():
        jail_dir = in_jail + host_dir[len(prefix):] if host_dir.startswith(prefix + "/") else host_dir
        argv += ["--tmpfs", jail_dir, "--remount-ro", jail_dir]
    argv += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp", "--proc", "/proc"]
    for masked in _MASKED_PROC:  # as container runtimes do: the keys the uid may view, host-wide
        argv += ["--dev-bind", "/dev/null", masked]  # reads as empty (a ro bind would be nodev)
    argv += ["--perms", "0755", "--dir", "/dev"]
    for name in _DEVICES:
        argv += ["--dev-bind", "/dev/" + name, "/dev/" + name]
    argv += ["--symlink", "/proc/self/fd", "/dev/fd"]
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        argv += ["--symlink", f"/proc/self/fd/{fd}", "/dev/" + name]
    argv += ["--remount-ro", "/", "--chdir", "/tmp"]
    return argv, [python, "-I", "-S", "-c", _runner_source()]


_SYSTEM_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@functools.lru_cache(maxsize=1)
def _interpreter_in_jail() -> tuple[str, str, str]:
    """(interpreter path in the jail, host prefix, prefix in the jail).

    A prefix under ``/usr`` is already in the jail. Another one (pyenv's under the
    home directory, conda's) is mounted at ``/opt/python`` so the jail's tree shows
    no home directory, provided the interpreter lies inside it; otherwise it keeps its
    own path. Python finds its standard library from the interpreter's location.
    """
    python, prefix = _python(), os.path.realpath(sys.base_prefix)
    if any(prefix == top or prefix.startswith(top + "/") for top in _SYSTEM_TOPS):
        return python, prefix, prefix
    if not python.startswith(prefix + "/"):
        return python, prefix, prefix
    return _PREFIX_IN_JAIL + python[len(prefix):], prefix, _PREFIX_IN_JAIL


@functools.lru_cache(maxsize=1)
def _package_dirs() -> tuple[str, ...]:
    """Every third-party package directory the jail would show (host paths): the
    ``site-packages``, ``dist-packages`` and ``python-wheels`` directories, and the
    wheels bundled with ``ensurepip``, under ``/usr`` and the interpreter prefix.

    A full walk (symlinks not followed), once per process: ~0.3 s for ~140,000 entries
    here. Any Python's packages count (a tool's bundled interpreter under ``/usr/lib``
    too): a program can add any directory to ``sys.path``.
    """
    _, prefix, _ = _interpreter_in_jail()
    roots = [top for top in _SYSTEM_TOPS if os.path.isdir(top) and not os.path.islink(top)]
    if not any(prefix == r or prefix.startswith(r + "/") for r in roots):
        roots.append(prefix)
    found: list[str] = []
    stack = list(roots)
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            if entry.name in _PACKAGE_DIRS or (entry.name == "_bundled" and os.path.basename(d) == "ensurepip"):
                found.append(entry.path)
            else:
                stack.append(entry.path)
    return tuple(sorted(found))


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
