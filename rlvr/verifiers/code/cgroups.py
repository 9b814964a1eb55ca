"""Per-job cgroups for the code sandbox: memory, process count and CPU of a whole job.

RLIMIT_AS bounds one process's address space, not what a job holds in total (many
processes, tmpfs pages), and RLIMIT_NPROC is per uid. Where this process may create
cgroups (root with cgroup v1 hierarchies mounted read-write, as on our CI machines; or
cgroup v2 with the controllers enabled where this process sits), each job gets a
cgroup of its own under this process's cgroup, so a job never escapes the limits its
caller runs under:

* memory: ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted) / v2 ``memory.max`` and ``memory.swap.max = 0``: all the job's memory,
  page cache and tmpfs included; past it the kernel's OOM killer ends a process of the
  job, never one outside it;
* pids: ``pids.max``: every task (thread or process) of the job, sandbox included;
* cpu: the default, equal weight (``cpu.shares`` 1024 / ``cpu.weight`` 100), so a job
  with 32 busy processes gets the CPU share of one busy process, and optionally a CFS
  quota (``cpu.cfs_quota_us`` / ``cpu.max``) of ``job_cpus`` CPUs.

The job enters its cgroups race-free: :meth:`JobCgroups.wrap` starts it through
``/bin/sh``, which writes its own pid into each ``cgroup.procs`` and then ``exec``s the
sandbox, so no process of the job ever runs outside them. (A ``preexec_fn`` would do
the same, but is unsafe when the caller has threads, which verification pools do.)
:meth:`JobCgroups.remove` kills whatever is left and removes them. Cgroups of a process
that was killed before it could remove them are removed by the next process that
starts a job under the same parent.

Where nothing is writable (an ordinary user, a read-only ``/sys/fs/cgroup``, a v2
hierarchy without delegated controllers), :func:`create` returns ``None`` and jobs run
without cgroups.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["JobCgroups", "create"]

CONTROLLERS = ("memory", "pids", "cpu")
TRUSTED_TASKS = 4  # outer bwrap, bwrap's PID-namespace init, the runner, slack
_PREFIX = "rlvr-"
_counter = itertools.count()
_lock = threading.Lock()
_parents: list[tuple[Path, tuple[str, ...], int]] | None = None  # (dir, controllers, version)

# sh: write our pid into each cgroup.procs given before "--", then become the command after it.
_ENTER = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || { echo "rlvr-sandbox: cannot enter cgroup $1" >&2; exit 125; }; '
    'shift; done; shift; exec "$@"'
)
ENTER_FAILED = b"rlvr-sandbox: cannot enter cgroup"


@dataclass(frozen=True)
class Settings:
    """What one job's cgroups enforce."""

    memory_bytes: int
    tasks: int
    cpus: float  # CFS quota in CPUs; 0 for none

    def files(self, controllers: tuple[str, ...], version: int) -> list[tuple[str, str, bool]]:
        """(file, value, required) to write, in order."""
        out: list[tuple[str, str, bool]] = []
        if "memory" in controllers:
            if version == 1:  # memsw (memory + swap) must stay >= the memory limit: write it second
                out += [("memory.limit_in_bytes", str(self.memory_bytes), True),
                        ("memory.memsw.limit_in_bytes", str(self.memory_bytes), False)]
            else:
                out += [("memory.max", str(self.memory_bytes), True), ("memory.swap.max", "0", False)]
        if "pids" in controllers:
            out.append(("pids.max", str(self.tasks), True))
        if "cpu" in controllers and self.cpus > 0:
            quota = max(1000, int(self.cpus * 100_000))
            if version == 1:
                out += [("cpu.cfs_period_us", "100000", True), ("cpu.cfs_quota_us", str(quota), True)]
            else:
                out.append(("cpu.max", f"{quota} 100000", True))
        return out


class JobCgroups:
    """The cgroups of one running job (one directory per hierarchy)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside these cgroups."""
        return ["/bin/sh", "-c", _ENTER, "rlvr-job", *(str(d / "cgroup.procs") for d in self.dirs), "--", *argv]

    def remove(self, patience_s: float = 2.0) -> None:
        """Kill every process still in the job's cgroups, then remove them."""
        deadline = time.monotonic() + patience_s
        for d in self.dirs:
            _kill_and_remove(d, deadline)


def create(memory_bytes: int, tasks: int, cpus: float) -> JobCgroups | None:
    """A fresh cgroup per available hierarchy, limits written; ``None`` where none is
    writable. Raises ``OSError`` if a hierarchy that worked before now refuses."""
    parents = _usable_parents()
    if not parents:
        return None
    settings = Settings(memory_bytes, tasks, cpus)
    name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
    job = JobCgroups([])
    try:
        for parent, controllers, version in parents:
            d = parent / name
            d.mkdir()
            job.dirs.append(d)
            _write_settings(d, settings.files(controllers, version))
    except OSError:
        job.remove(patience_s=0.5)
        raise
    return job


# ------------------------------------------------------------------------- internals


def _write_settings(d: Path, files: list[tuple[str, str, bool]]) -> None:
    for file, value, required in files:
        if not required and not (d / file).exists():
            continue
        with open(d / file, "w") as f:
            f.write(value)


def _kill_and_remove(d: Path, deadline: float) -> None:
    while True:
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return
        except OSError:
            pids = []
        if not pids:
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                pass  # tasks still exiting: try again
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # only the job's processes are in its cgroup
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > deadline:
            return  # left for the next process's sweep
        time.sleep(0.005)


def _usable_parents() -> list[tuple[Path, tuple[str, ...], int]]:
    """Once per process: where jobs' cgroups go, checked by creating one (and sweeping
    the leftovers of dead processes)."""
    global _parents
    with _lock:
        if _parents is None:
            _parents = []
            for parent, controllers, version in _candidate_parents():
                probe = parent / f"{_PREFIX}{os.getpid()}-probe"
                try:
                    _sweep_stale(parent)
                    probe.mkdir()
                    try:
                        _write_settings(probe, Settings(1 << 30, 64, 1.0).files(controllers, version))
                    finally:
                        probe.rmdir()
                except OSError:
                    continue
                _parents.append((parent, controllers, version))
        return _parents


def _candidate_parents() -> list[tuple[Path, tuple[str, ...], int]]:
    """This process's own cgroup directory in each hierarchy that has one of
    :data:`CONTROLLERS`: v1 hierarchies first, then v2 for the controllers left."""
    try:
        with open("/proc/self/cgroup") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        with open("/proc/self/mountinfo") as f:
            mounts = [_parse_mountinfo(line) for line in f]
    except OSError:
        return []
    own_v1 = {c: path for _, cs, path in own if cs for c in cs.split(",")}
    own_v2 = next((path for _, cs, path in own if not cs), None)
    out: list[tuple[Path, tuple[str, ...], int]] = []
    covered: set[str] = set()
    for fstype, root, mountpoint, options in mounts:
        wanted = tuple(c for c in CONTROLLERS if c in options and c not in covered)
        if fstype == "cgroup" and wanted and own_v1.get(wanted[0]) is not None:
            d = _inside(mountpoint, root, own_v1[wanted[0]])
            if d is not None:
                out.append((d, wanted, 1))
                covered.update(wanted)
    for fstype, root, mountpoint, _ in mounts:
        if fstype != "cgroup2" or own_v2 is None:
            continue
        d = _inside(mountpoint, root, own_v2)
        if d is None:
            continue
        try:
            available = (d / "cgroup.controllers").read_text().split()
            enabled = set((d / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        wanted = tuple(c for c in CONTROLLERS if c in available and c not in covered)
        missing = [c for c in wanted if c not in enabled]
        if missing:  # possible only where this cgroup has no processes of its own (or is the root)
            try:
                (d / "cgroup.subtree_control").write_text(" ".join("+" + c for c in missing))
            except OSError:
                wanted = tuple(c for c in wanted if c in enabled)
        if wanted:
            out.append((d, wanted, 2))
            covered.update(wanted)
        break
    return out


def _parse_mountinfo(line: str) -> tuple[str, str, str, set[str]]:
    """(fstype, root, mount point, super options) of one /proc/self/mountinfo line."""
    left, _, right = line.partition(" - ")
    fields, tail = left.split(), right.split()
    if len(fields) < 5 or len(tail) < 3:
        return ("", "", "", set())
    unescape = lambda s: s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
    return (tail[0], unescape(fields[3]), unescape(fields[4]), set(tail[2].split(",")))


def _inside(mountpoint: str, root: str, path: str) -> Path | None:
    """The directory of cgroup ``path`` under a hierarchy mounted at ``mountpoint``
    whose root is ``root`` (a container may mount only its own subtree)."""
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    d = Path(mountpoint + path[len(root):])
    return d if d.is_dir() else None


def _sweep_stale(parent: Path) -> None:
    """Remove job cgroups whose creating process is gone (it was killed mid-job)."""
    for entry in os.scandir(parent):
        name = entry.name
        if not (name.startswith(_PREFIX) and entry.is_dir(follow_symlinks=False)):
            continue
        try:
            pid = int(name[len(_PREFIX):].split("-", 1)[0])
            os.kill(pid, 0)
            continue  # its process is alive: its own job
        except ValueError:
            continue
        except PermissionError:
            continue
        except ProcessLookupError:
            pass
        _kill_and_remove(Path(entry.path), time.monotonic() + 0.5)
