"""The seccomp filter every untrusted process of a code job runs under.

Built here, on the host, as classic BPF bytes; the runner inside the sandbox installs
them in each test's child (``PR_SET_NO_NEW_PRIVS``, then ``PR_SET_SECCOMP``) after the
uid drop and the rlimits, just before the program runs. Children, threads and
``exec``'d programs inherit a filter and cannot remove it.

A short deny list, not an allow list: CPython and the standard library use hundreds of
calls, and a missed one would fail honest programs. What is refused, and why:

* keyrings (``add_key``, ``request_key``, ``keyctl``): they are shared with the caller
  (its session keyring) and a uid's user keyring outlives the job;
* new namespaces (``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag): a new
  user namespace hands out capabilities, mounts and uncounted memory; ``clone3`` gets
  ``ENOSYS`` because its flags sit in memory a filter cannot read, and glibc then falls
  back to ``clone`` (threads and ``fork`` keep working), as container runtimes do;
* mounts and root changes (``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the
  new mount API);
* other processes (``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd``,
  ``kcmp``, ``process_madvise``);
* kernel surface no test needs (``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``io_uring_*``, ``open_by_handle_at``, ``kexec_*``, module loading);
* ``setsid``: every process of a job stays in its one session, so one scheduler
  autogroup per job however many processes it forks;
* memory that no limit counts: SysV IPC (``shm*``, ``msg*``, ``sem*``), POSIX message
  queues (``mq_open``), ``memfd_create``, ``memfd_secret``;
* per-user kernel objects shared with the host account (``inotify_init*``,
  ``fanotify_init``);
* sockets other than ``AF_UNIX`` (``socket`` with another domain): the jail has no network,
  and an internet socket on its loopback leaves state that outlives the process (TCP's
  TIME_WAIT ports), which a later program in a shared jail (:mod:`rlvr.verifiers.served`)
  could read.

Refused calls fail with ``EPERM``. A call from another ABI (32-bit x86 via ``int 0x80``,
x32) kills the process: the filter checks the architecture first.

Hand-written rather than through libseccomp: the program is a list of equality tests,
one flag test and one argument test (~75 instructions), the runner inside the sandbox may only use the
standard library so it needs the bytes anyway, and the only Python binding on PyPI that
needs no compiler (``pyseccomp``) has not been released since 2021. The syscall
numbers below are checked against libseccomp's tables by the tests where the library
is installed.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from dataclasses import dataclass

__all__ = ["DENIED", "Filter", "UnsupportedArchitecture", "build_filter", "host_arch"]

# name: (x86_64, aarch64); None where the architecture has no such call.
SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "unshare": (272, 97), "setns": (308, 268), "clone": (56, 220), "clone3": (435, 435),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "kcmp": (312, 272), "process_madvise": (440, 440),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "setsid": (112, 157),
    "shmget": (29, 194), "shmat": (30, 196), "shmdt": (67, 197), "shmctl": (31, 195),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "semget": (64, 190), "semop": (65, 193), "semtimedop": (220, 192), "semctl": (66, 191),
    "mq_open": (240, 180), "memfd_create": (319, 279), "memfd_secret": (447, 447),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "fanotify_init": (300, 262),
    "socket": (41, 198),
}
DENIED = tuple(name for name in SYSCALLS if name not in ("clone", "clone3", "socket"))
"""Calls that fail with EPERM whatever their arguments."""

# Every CLONE_NEW* flag clone() accepts (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
# NEWNET; CLONE_NEWTIME shares its bit with clone()'s exit signal and is clone3/unshare only).
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_ARCHES = {  # machine: (AUDIT_ARCH_* value the kernel reports, column in SYSCALLS)
    "x86_64": (0xC000003E, 0),  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    "aarch64": (0xC00000B7, 1),  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
}
_X32_BIT = 0x40000000  # x86_64 syscall numbers with this bit set are the x32 ABI

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LOW = 0, 4, 16  # struct seccomp_data, little-endian
_AF_UNIX = 1


class UnsupportedArchitecture(RuntimeError):
    """No syscall table for this machine: code must not run unfiltered."""


@dataclass(frozen=True)
class Filter:
    """A filter program for one architecture and the numbers the runner needs."""

    arch: str
    program: bytes  # struct sock_filter[], 8 bytes per instruction
    keyctl_nr: int  # the runner leaves the caller's session keyring with keyctl

    def job_entry(self) -> dict[str, object]:
        """What the runner reads from the job (JSON)."""
        return {"filter": self.program.hex(), "keyctl": self.keyctl_nr}


def host_arch() -> str:
    """The architecture this interpreter's system calls use, e.g. ``x86_64``.

    A 32-bit interpreter on a 64-bit kernel makes 32-bit calls, which no table here
    covers, so the pointer size is part of the answer.
    """
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if struct.calcsize("P") != 8 or sys.byteorder != "little":
        return f"{machine}-{8 * struct.calcsize('P')}bit-{sys.byteorder}"
    return machine


def build_filter(arch: str | None = None) -> Filter:
    """The filter for ``arch`` (default: this machine); raises
    :class:`UnsupportedArchitecture` for one without a table."""
    arch = arch or host_arch()
    if arch not in _ARCHES:
        raise UnsupportedArchitecture(f"no seccomp syscall table for {arch!r} (have: {sorted(_ARCHES)})")
    audit_arch, column = _ARCHES[arch]
    denied = [nr for name in DENIED if (nr := SYSCALLS[name][column]) is not None]
    clone_nr, clone3_nr, socket_nr = SYSCALLS["clone"][column], SYSCALLS["clone3"][column], SYSCALLS["socket"][column]

    # Layout: checks, then the shared tail [ALLOW, socket domain test (2), clone flag test (2),
    # EPERM, ALLOW, ENOSYS, KILL]. Jumps go forward only and count the instructions skipped
    # (8-bit fields).
    checks: list[tuple[int, int, str]] = []  # (opcode, k, target) with target a tail label
    if arch == "x86_64":
        checks.append((_JGE_K, _X32_BIT, "kill"))
    checks += [(_JEQ_K, nr, "eperm") for nr in denied]
    checks += [(_JEQ_K, clone3_nr, "enosys"), (_JEQ_K, clone_nr, "clone"), (_JEQ_K, socket_nr, "socket")]
    head = 3  # load arch, check arch, load nr
    first_tail = head + len(checks)
    tail = {"socket": first_tail + 1, "clone": first_tail + 3, "eperm": first_tail + 5, "allow": first_tail + 6,
            "enosys": first_tail + 7, "kill": first_tail + 8}

    def jump(at: int, target: str) -> int:
        offset = tail[target] - at - 1
        assert 0 <= offset < 256, offset
        return offset

    prog = [
        (_LD_ABS_W, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, jump(1, "kill"), audit_arch),
        (_LD_ABS_W, 0, 0, _OFF_NR),
    ]
    for opcode, k, target in checks:
        prog.append((opcode, jump(len(prog), target), 0, k))
    prog += [
        (_RET_K, 0, 0, _RET_ALLOW),
        (_LD_ABS_W, 0, 0, _OFF_ARG0_LOW),  # socket's domain
        (_JEQ_K, jump(first_tail + 2, "allow"), jump(first_tail + 2, "eperm"), _AF_UNIX),
        (_LD_ABS_W, 0, 0, _OFF_ARG0_LOW),  # clone's flags: every CLONE_NEW* bit is in the low word
        (_JSET_K, 0, 1, CLONE_NEW_FLAGS),  # any of them set: EPERM, else ALLOW
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
    ]
    assert len(prog) == tail["kill"] + 1
    program = b"".join(struct.pack("<HBBI", *insn) for insn in prog)
    return Filter(arch=arch, program=program, keyctl_nr=SYSCALLS["keyctl"][column])  # type: ignore[arg-type]
