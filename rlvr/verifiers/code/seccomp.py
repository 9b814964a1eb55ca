"""The seccomp filter every untrusted process of a code job runs under.

Built here, on the host, as classic BPF bytes; the runner inside the sandbox installs
them in each test's child (``PR_SET_NO_NEW_PRIVS``, then ``PR_SET_SECCOMP``) after the
uid drop and the rlimits, just before the program runs. Children, threads and
``exec``'d programs inherit a filter and cannot remove it.

**An allow list.** A deny list misses every resource class nobody has named yet (issue 33:
legacy AIO took the host's whole AIO budget, filled unix-socket buffers pinned ~1 GiB of
kernel memory, neither on the old list), so every call of the
architecture's table is either in :data:`ALLOWED` (what CPython, its standard library and
the programs it runs use) or in :data:`REFUSED`, under the reason it is refused; the
tests check that the two cover libseccomp's whole table for both architectures and
compare them with Docker's default profile (docs/verifiers.md lists every difference).
Three calls are decided on their arguments (:data:`ARGUMENT_CHECKED`): ``clone`` without
any ``CLONE_NEW*`` flag, ``fcntl`` with a command of :data:`FCNTL_COMMANDS`, and
``clone3`` answers ``ENOSYS`` (its flags sit in memory a filter cannot read; glibc then
falls back to ``clone``, as under container runtimes).

**The rule for kernel memory.** A job may create only kernel objects whose number is
bounded by its descriptors or processes (``RLIMIT_NOFILE`` x ``RLIMIT_NPROC``) and whose
size is fixed or capped by a limit of the job (pipes at their default 64 KiB, the ``/tmp``
tmpfs in bytes and inodes, eventfd/timerfd/signalfd, pidfds). Calls whose objects a
program can grow past that, or which draw on a budget shared with the host, are refused:
sockets (each buffers ~208 KiB-416 KiB that nothing of the job counts, and carries
descriptors in flight), epoll (watches per (file, descriptor number) pair, from a per-user
budget of 4% of RAM), legacy AIO (``fs.aio-max-nr`` is host-wide), inotify/fanotify
(per-user), POSIX timers, ``mlock``, range locks and ``F_SETPIPE_SZ`` (through ``fcntl``'s
command list), SysV IPC, POSIX message queues, ``memfd``, keyrings, ``io_uring``.

Refused calls fail with ``EPERM``; a number the table does not know (a call newer than
it) fails with ``ENOSYS``, so libc's fallbacks still work. A call from another ABI
(32-bit x86 via ``int 0x80``, x32) kills the process: the filter checks the
architecture first.

The decision is a binary search over the number ranges that share an action, ~8
comparisons a call, not a linear chain: every system call of the program pays for it.
Hand-written rather than through libseccomp: the runner inside the sandbox may only use
the standard library so it needs the bytes anyway, and the only Python binding on PyPI
that needs no compiler (``pyseccomp``) has not been released since 2021. The syscall
numbers below are checked against libseccomp's tables by the tests where the library is
installed.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from dataclasses import dataclass

__all__ = [
    "ALLOWED", "ARGUMENT_CHECKED", "FCNTL_COMMANDS", "Filter", "REFUSED", "SYSCALLS", "UnsupportedArchitecture",
    "actions", "build_filter", "host_arch",
]

# name: (x86_64, aarch64); None where the architecture has no such call. libseccomp 2.5's
# table for both architectures (every name it resolves), then the calls added since.
SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "_sysctl": (156, None), "accept": (43, 202), "accept4": (288, 242), "access": (21, None), "acct": (163, 89),
    "add_key": (248, 217), "adjtimex": (159, 171), "afs_syscall": (183, None), "alarm": (37, None),
    "arch_prctl": (158, None), "bind": (49, 200), "bpf": (321, 280), "brk": (12, 214), "cachestat": (451, 451),
    "capget": (125, 90), "capset": (126, 91), "chdir": (80, 49), "chmod": (90, None), "chown": (92, None),
    "chroot": (161, 51), "clock_adjtime": (305, 266), "clock_getres": (229, 114), "clock_gettime": (228, 113),
    "clock_nanosleep": (230, 115), "clock_settime": (227, 112), "clone": (56, 220), "clone3": (435, 435),
    "close": (3, 57), "close_range": (436, 436), "connect": (42, 203), "copy_file_range": (326, 285),
    "creat": (85, None), "create_module": (174, None), "delete_module": (176, 106), "dup": (32, 23),
    "dup2": (33, None), "dup3": (292, 24), "epoll_create": (213, None), "epoll_create1": (291, 20),
    "epoll_ctl": (233, 21), "epoll_ctl_old": (214, None), "epoll_pwait": (281, 22), "epoll_pwait2": (441, 441),
    "epoll_wait": (232, None), "epoll_wait_old": (215, None), "eventfd": (284, None), "eventfd2": (290, 19),
    "execve": (59, 221), "execveat": (322, 281), "exit": (60, 93), "exit_group": (231, 94), "faccessat": (269, 48),
    "faccessat2": (439, 439), "fadvise64": (221, 223), "fallocate": (285, 47), "fanotify_init": (300, 262),
    "fanotify_mark": (301, 263), "fchdir": (81, 50), "fchmod": (91, 52), "fchmodat": (268, 53),
    "fchmodat2": (452, 452), "fchown": (93, 55), "fchownat": (260, 54), "fcntl": (72, 25), "fdatasync": (75, 83),
    "fgetxattr": (193, 10), "finit_module": (313, 273), "flistxattr": (196, 13), "flock": (73, 32),
    "fork": (57, None), "fremovexattr": (199, 16), "fsconfig": (431, 431), "fsetxattr": (190, 7),
    "fsmount": (432, 432), "fsopen": (430, 430), "fspick": (433, 433), "fstat": (5, 80), "fstatfs": (138, 44),
    "fsync": (74, 82), "ftruncate": (77, 46), "futex": (202, 98), "futex_requeue": (456, 456),
    "futex_wait": (455, 455), "futex_waitv": (449, 449), "futex_wake": (454, 454), "futimesat": (261, None),
    "get_kernel_syms": (177, None), "get_mempolicy": (239, 236), "get_robust_list": (274, 100),
    "get_thread_area": (211, None), "getcpu": (309, 168), "getcwd": (79, 17), "getdents": (78, None),
    "getdents64": (217, 61), "getegid": (108, 177), "geteuid": (107, 175), "getgid": (104, 176),
    "getgroups": (115, 158), "getitimer": (36, 102), "getpeername": (52, 205), "getpgid": (121, 155),
    "getpgrp": (111, None), "getpid": (39, 172), "getpmsg": (181, None), "getppid": (110, 173),
    "getpriority": (140, 141), "getrandom": (318, 278), "getresgid": (120, 150), "getresuid": (118, 148),
    "getrlimit": (97, 163), "getrusage": (98, 165), "getsid": (124, 156), "getsockname": (51, 204),
    "getsockopt": (55, 209), "gettid": (186, 178), "gettimeofday": (96, 169), "getuid": (102, 174),
    "getxattr": (191, 8), "init_module": (175, 105), "inotify_add_watch": (254, 27), "inotify_init": (253, None),
    "inotify_init1": (294, 26), "inotify_rm_watch": (255, 28), "io_cancel": (210, 3), "io_destroy": (207, 1),
    "io_getevents": (208, 4), "io_pgetevents": (333, 292), "io_setup": (206, 0), "io_submit": (209, 2),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "io_uring_setup": (425, 425), "ioctl": (16, 29),
    "ioperm": (173, None), "iopl": (172, None), "ioprio_get": (252, 31), "ioprio_set": (251, 30), "kcmp": (312, 272),
    "kexec_file_load": (320, 294), "kexec_load": (246, 104), "keyctl": (250, 219), "kill": (62, 129),
    "landlock_add_rule": (445, 445), "landlock_create_ruleset": (444, 444), "landlock_restrict_self": (446, 446),
    "lchown": (94, None), "lgetxattr": (192, 9), "link": (86, None), "linkat": (265, 37), "listen": (50, 201),
    "listxattr": (194, 11), "llistxattr": (195, 12), "lookup_dcookie": (212, 18), "lremovexattr": (198, 15),
    "lseek": (8, 62), "lsetxattr": (189, 6), "lstat": (6, None), "madvise": (28, 233),
    "map_shadow_stack": (453, 453), "mbind": (237, 235), "membarrier": (324, 283), "memfd_create": (319, 279),
    "memfd_secret": (447, 447), "migrate_pages": (256, 238), "mincore": (27, 232), "mkdir": (83, None),
    "mkdirat": (258, 34), "mknod": (133, None), "mknodat": (259, 33), "mlock": (149, 228), "mlock2": (325, 284),
    "mlockall": (151, 230), "mmap": (9, 222), "modify_ldt": (154, None), "mount": (165, 40),
    "mount_setattr": (442, 442), "move_mount": (429, 429), "move_pages": (279, 239), "mprotect": (10, 226),
    "mq_getsetattr": (245, 185), "mq_notify": (244, 184), "mq_open": (240, 180), "mq_timedreceive": (243, 183),
    "mq_timedsend": (242, 182), "mq_unlink": (241, 181), "mremap": (25, 216), "msgctl": (71, 187),
    "msgget": (68, 186), "msgrcv": (70, 188), "msgsnd": (69, 189), "msync": (26, 227), "munlock": (150, 229),
    "munlockall": (152, 231), "munmap": (11, 215), "name_to_handle_at": (303, 264), "nanosleep": (35, 101),
    "newfstatat": (262, 79), "nfsservctl": (180, 42), "open": (2, None), "open_by_handle_at": (304, 265),
    "open_tree": (428, 428), "openat": (257, 56), "openat2": (437, 437), "pause": (34, None),
    "perf_event_open": (298, 241), "personality": (135, 92), "pidfd_getfd": (438, 438), "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424), "pipe": (22, None), "pipe2": (293, 59), "pivot_root": (155, 41),
    "pkey_alloc": (330, 289), "pkey_free": (331, 290), "pkey_mprotect": (329, 288), "poll": (7, None),
    "ppoll": (271, 73), "prctl": (157, 167), "pread64": (17, 67), "preadv": (295, 69), "preadv2": (327, 286),
    "prlimit64": (302, 261), "process_madvise": (440, 440), "process_mrelease": (448, 448),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "pselect6": (270, 72), "ptrace": (101, 117),
    "putpmsg": (182, None), "pwrite64": (18, 68), "pwritev": (296, 70), "pwritev2": (328, 287),
    "query_module": (178, None), "quotactl": (179, 60), "quotactl_fd": (443, 443), "read": (0, 63),
    "readahead": (187, 213), "readlink": (89, None), "readlinkat": (267, 78), "readv": (19, 65),
    "reboot": (169, 142), "recvfrom": (45, 207), "recvmmsg": (299, 243), "recvmsg": (47, 212),
    "remap_file_pages": (216, 234), "removexattr": (197, 14), "rename": (82, None), "renameat": (264, 38),
    "renameat2": (316, 276), "request_key": (249, 218), "restart_syscall": (219, 128), "rmdir": (84, None),
    "rseq": (334, 293), "rt_sigaction": (13, 134), "rt_sigpending": (127, 136), "rt_sigprocmask": (14, 135),
    "rt_sigqueueinfo": (129, 138), "rt_sigreturn": (15, 139), "rt_sigsuspend": (130, 133),
    "rt_sigtimedwait": (128, 137), "rt_tgsigqueueinfo": (297, 240), "sched_get_priority_max": (146, 125),
    "sched_get_priority_min": (147, 126), "sched_getaffinity": (204, 123), "sched_getattr": (315, 275),
    "sched_getparam": (143, 121), "sched_getscheduler": (145, 120), "sched_rr_get_interval": (148, 127),
    "sched_setaffinity": (203, 122), "sched_setattr": (314, 274), "sched_setparam": (142, 118),
    "sched_setscheduler": (144, 119), "sched_yield": (24, 124), "seccomp": (317, 277), "security": (185, None),
    "select": (23, None), "semctl": (66, 191), "semget": (64, 190), "semop": (65, 193), "semtimedop": (220, 192),
    "sendfile": (40, 71), "sendmmsg": (307, 269), "sendmsg": (46, 211), "sendto": (44, 206),
    "set_mempolicy": (238, 237), "set_mempolicy_home_node": (450, 450), "set_robust_list": (273, 99),
    "set_thread_area": (205, None), "set_tid_address": (218, 96), "setdomainname": (171, 162),
    "setfsgid": (123, 152), "setfsuid": (122, 151), "setgid": (106, 144), "setgroups": (116, 159),
    "sethostname": (170, 161), "setitimer": (38, 103), "setns": (308, 268), "setpgid": (109, 154),
    "setpriority": (141, 140), "setregid": (114, 143), "setresgid": (119, 149), "setresuid": (117, 147),
    "setreuid": (113, 145), "setrlimit": (160, 164), "setsid": (112, 157), "setsockopt": (54, 208),
    "settimeofday": (164, 170), "setuid": (105, 146), "setxattr": (188, 5), "shmat": (30, 196), "shmctl": (31, 195),
    "shmdt": (67, 197), "shmget": (29, 194), "shutdown": (48, 210), "sigaltstack": (131, 132),
    "signalfd": (282, None), "signalfd4": (289, 74), "socket": (41, 198), "socketpair": (53, 199),
    "splice": (275, 76), "stat": (4, None), "statfs": (137, 43), "statx": (332, 291), "swapoff": (168, 225),
    "swapon": (167, 224), "symlink": (88, None), "symlinkat": (266, 36), "sync": (162, 81),
    "sync_file_range": (277, 84), "syncfs": (306, 267), "sysfs": (139, None), "sysinfo": (99, 179),
    "syslog": (103, 116), "tee": (276, 77), "tgkill": (234, 131), "time": (201, None), "timer_create": (222, 107),
    "timer_delete": (226, 111), "timer_getoverrun": (225, 109), "timer_gettime": (224, 108),
    "timer_settime": (223, 110), "timerfd_create": (283, 85), "timerfd_gettime": (287, 87),
    "timerfd_settime": (286, 86), "times": (100, 153), "tkill": (200, 130), "truncate": (76, 45),
    "tuxcall": (184, None), "umask": (95, 166), "umount2": (166, 39), "uname": (63, 160), "unlink": (87, None),
    "unlinkat": (263, 35), "unshare": (272, 97), "uselib": (134, None), "userfaultfd": (323, 282),
    "ustat": (136, None), "utime": (132, None), "utimensat": (280, 88), "utimes": (235, None), "vfork": (58, None),
    "vhangup": (153, 58), "vmsplice": (278, 75), "vserver": (236, None), "wait4": (61, 260), "waitid": (247, 95),
    "write": (1, 64), "writev": (20, 66),}
SYSCALLS.update({  # newer than libseccomp 2.5: the kernel's table (one number on every architecture since 424)
    "statmount": (457, 457), "listmount": (458, 458), "lsm_get_self_attr": (459, 459),
    "lsm_set_self_attr": (460, 460), "lsm_list_modules": (461, 461), "mseal": (462, 462), "setxattrat": (463, 463),
    "getxattrat": (464, 464), "listxattrat": (465, 465), "removexattrat": (466, 466), "open_tree_attr": (467, 467),
    "file_getattr": (468, 468), "file_setattr": (469, 469), "uretprobe": (335, None),})

ALLOWED: dict[str, tuple[str, ...]] = {
    "processes, threads and identity": (
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "set_tid_address",
        "set_robust_list", "rseq", "futex", "futex_waitv", "arch_prctl", "prctl", "getpid", "getppid", "gettid",
        "getpgid", "getpgrp", "getsid", "setpgid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
        "getresuid", "getresgid", "setuid", "setgid", "setgroups", "setreuid", "setregid", "setresuid",
        "setresgid", "setfsuid", "setfsgid", "getrlimit", "setrlimit", "prlimit64", "getrusage", "getpriority",
        "setpriority", "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
        "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr", "sched_setattr",
        "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getcpu", "membarrier",
        "pidfd_open", "pidfd_send_signal",
    ),
    "signals, clocks and fixed-size event descriptors": (
        "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend",
        "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "pause",
        "alarm", "getitimer", "setitimer", "restart_syscall", "nanosleep", "clock_nanosleep", "clock_gettime",
        "clock_getres", "gettimeofday", "time", "times", "timerfd_create", "timerfd_settime", "timerfd_gettime",
        "signalfd", "signalfd4", "eventfd", "eventfd2",
    ),
    "memory of the process (RLIMIT_AS)": (
        "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "pkey_alloc", "pkey_free",
        "pkey_mprotect",
    ),
    "files, directories, pipes (the jail's view; /tmp capped in bytes and inodes)": (
        "open", "openat", "openat2", "creat", "close", "close_range", "read", "write", "readv", "writev", "pread64",
        "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "lseek", "dup", "dup2", "dup3", "ioctl", "flock",
        "fsync", "fdatasync", "fadvise64", "readahead", "fallocate", "truncate", "ftruncate", "sendfile",
        "copy_file_range", "splice", "tee", "pipe", "pipe2", "poll", "ppoll", "select", "pselect6", "stat", "fstat",
        "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink",
        "readlinkat", "getcwd", "chdir", "fchdir", "getdents", "getdents64", "mkdir", "mkdirat", "rmdir", "unlink",
        "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "mknod",
        "mknodat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "fchownat", "lchown", "umask",
        "utime", "utimes", "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
        "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
        "fremovexattr",
    ),
    "system information": ("uname", "sysinfo", "getrandom"),
}
"""Calls a program may make, whatever their arguments, by what they touch."""

ARGUMENT_CHECKED: dict[str, str] = {
    "clone": "allowed without any CLONE_NEW* flag (threads, fork, posix_spawn); else EPERM",
    "clone3": "ENOSYS: its flags are in memory a filter cannot read, so glibc falls back to clone",
    "fcntl": "allowed for the commands in FCNTL_COMMANDS; range locks, leases, F_SETPIPE_SZ, F_NOTIFY, owners: EPERM",
}

FCNTL_COMMANDS: dict[str, int] = {
    "F_DUPFD": 0, "F_GETFD": 1, "F_SETFD": 2, "F_GETFL": 3, "F_SETFL": 4, "F_GETLK": 5, "F_OFD_GETLK": 36,
    "F_DUPFD_CLOEXEC": 1030, "F_GETPIPE_SZ": 1032, "F_GET_SEALS": 1034,
}
"""``fcntl`` commands allowed: descriptor flags, duplication, queries. Not ``F_SETLK``/``F_OFD_SETLK``
(every locked byte range is a kernel object, unbounded in number), not ``F_SETPIPE_SZ`` (pipe buffers
stay at their default 64 KiB), not leases, ``F_NOTIFY`` or signal ownership."""

REFUSED: dict[str, tuple[str, ...]] = {
    "sockets: a socket's buffers (~208-416 KiB each, descriptors in flight) are kernel memory no limit of the "
    "job counts, and internet sockets leave state in a shared jail's network namespace (TIME_WAIT ports); "
    "the jail has no network, and asyncio's event loop (a socketpair) is the one stdlib use lost": (
        "socket", "socketpair", "accept", "accept4", "bind", "connect", "listen", "getpeername", "getsockname",
        "getsockopt", "setsockopt", "recvfrom", "recvmsg", "recvmmsg", "sendto", "sendmsg", "sendmmsg", "shutdown",
    ),
    "budgets shared with the host or the caller's account: legacy AIO (fs.aio-max-nr, host-wide), epoll "
    "watches (per user, 4% of RAM, not bounded by descriptors), inotify/fanotify (per user), POSIX timers, "
    "locked memory, and sync/syncfs (flush the host's filesystems)": (
        "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "epoll_create",
        "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_wait", "epoll_wait_old", "epoll_pwait",
        "epoll_pwait2", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init",
        "fanotify_mark", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
        "mlock", "mlock2", "mlockall", "munlock", "munlockall", "sync", "syncfs", "sync_file_range",
    ),
    "memory that neither RLIMIT_AS nor the /tmp size counts": (
        "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
        "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
        "mq_getsetattr", "memfd_create", "memfd_secret", "vmsplice", "remap_file_pages",
    ),
    "keyrings: shared with the caller (its session keyring); a uid's user keyring outlives the job": (
        "add_key", "request_key", "keyctl",
    ),
    "namespaces, mounts and root changes: a new user namespace hands out capabilities and mounts": (
        "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "open_tree_attr",
        "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "statmount", "listmount",
    ),
    "other processes": (
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
        "process_mrelease", "get_robust_list",
    ),
    "sessions: every process of a job stays in its session, so one scheduler autogroup per job": ("setsid",),
    "kernel surface no test program needs (CPython and its standard library never call these)": (
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "open_by_handle_at", "name_to_handle_at", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
        "landlock_restrict_self", "personality", "modify_ldt", "set_thread_area", "get_thread_area",
        "lookup_dcookie", "map_shadow_stack", "futex_wake", "futex_wait", "futex_requeue", "cachestat", "mseal",
        "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "setxattrat", "getxattrat", "listxattrat",
        "removexattrat", "file_getattr", "file_setattr", "uretprobe", "capget", "capset", "ioprio_get",
        "ioprio_set", "mbind", "get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages",
        "move_pages",
    ),
    "administration: needs capabilities the jail never has": (
        "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "create_module", "query_module", "get_kernel_syms", "acct", "swapon", "swapoff", "sethostname",
        "setdomainname", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "syslog", "quotactl",
        "quotactl_fd", "vhangup", "iopl", "ioperm", "_sysctl", "sysfs", "ustat", "uselib", "nfsservctl",
    ),
    "not implemented by Linux": ("afs_syscall", "getpmsg", "putpmsg", "security", "tuxcall", "vserver"),
}
"""Every other call of the table, by the reason it is refused (EPERM)."""

# Every CLONE_NEW* flag clone() accepts (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
# NEWNET; CLONE_NEWTIME shares its bit with clone()'s exit signal and is clone3/unshare only).
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_ARCHES = {  # machine: (AUDIT_ARCH_* value the kernel reports, column in SYSCALLS)
    "x86_64": (0xC000003E, 0),  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    "aarch64": (0xC00000B7, 1),  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
}
_X32_BIT = 0x40000000  # x86_64 syscall numbers with this bit set are the x32 ABI

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_ABS_W, _JA, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x05, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LOW, _OFF_ARG1_LOW = 0, 4, 16, 24  # struct seccomp_data, little-endian


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


def actions(arch: str) -> dict[int, str]:
    """Syscall number: "allow", "eperm", "enosys", "clone" or "fcntl", for every number of ``arch``'s
    table (numbers it does not know get "enosys" in the filter)."""
    column = _ARCHES[arch][1]
    out: dict[int, str] = {}
    for names, action in [(n, "allow") for n in ALLOWED.values()] + [(n, "eperm") for n in REFUSED.values()]:
        for name in names:
            nr = SYSCALLS[name][column]
            if nr is not None:
                out[nr] = action
    for name, action in (("clone", "clone"), ("clone3", "enosys"), ("fcntl", "fcntl")):
        out[SYSCALLS[name][column]] = action  # type: ignore[index]
    return out


def build_filter(arch: str | None = None) -> Filter:
    """The filter for ``arch`` (default: this machine); raises
    :class:`UnsupportedArchitecture` for one without a table."""
    arch = arch or host_arch()
    if arch not in _ARCHES:
        raise UnsupportedArchitecture(f"no seccomp syscall table for {arch!r} (have: {sorted(_ARCHES)})")
    audit_arch, column = _ARCHES[arch]
    prog = [
        (_LD_ABS_W, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, audit_arch),  # the right ABI: skip the kill
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_ABS_W, 0, 0, _OFF_NR),
    ]
    prog += _search(_runs(actions(arch), kill_from=_X32_BIT if arch == "x86_64" else None))
    assert len(prog) < 4096, len(prog)
    program = b"".join(struct.pack("<HBBI", *insn) for insn in prog)
    return Filter(arch=arch, program=program, keyctl_nr=SYSCALLS["keyctl"][column])  # type: ignore[arg-type]


def _runs(by_number: dict[int, str], kill_from: int | None) -> list[tuple[int, str]]:
    """The number line from 0 as (first number, action) runs of one action each."""
    runs: list[tuple[int, str]] = [(0, by_number.get(0, "enosys"))]
    for nr in range(1, max(by_number) + 2):
        action = by_number.get(nr, "enosys")
        if action != runs[-1][1]:
            runs.append((nr, action))
    if kill_from is not None:
        runs.append((kill_from, "kill"))
    return runs


def _search(runs: list[tuple[int, str]]) -> list[tuple[int, int, int, int]]:
    """Instructions deciding the call number in the accumulator: a binary search over ``runs``
    (unsigned ``>=`` tests), each leaf its run's action. Jumps go forward only; a jump
    past 255 instructions goes through a ``ja`` (32-bit offset)."""
    if len(runs) == 1:
        return _leaf(runs[0][1])
    mid = len(runs) // 2
    low, high = _search(runs[:mid]), _search(runs[mid:])
    if len(low) < 256:
        return [(_JGE_K, len(low), 0, runs[mid][0])] + low + high
    return [(_JGE_K, 0, 1, runs[mid][0]), (_JA, 0, 0, len(low))] + low + high


def _leaf(action: str) -> list[tuple[int, int, int, int]]:
    eperm, allow = (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM), (_RET_K, 0, 0, _RET_ALLOW)
    if action == "allow":
        return [allow]
    if action == "eperm":
        return [eperm]
    if action == "enosys":
        return [(_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    if action == "kill":
        return [(_RET_K, 0, 0, _RET_KILL_PROCESS)]
    if action == "clone":  # every CLONE_NEW* bit is in the low word of the flags
        return [(_LD_ABS_W, 0, 0, _OFF_ARG0_LOW), (_JSET_K, 0, 1, CLONE_NEW_FLAGS), eperm, allow]
    assert action == "fcntl", action  # the kernel reads the command as an unsigned int: the low word
    commands = sorted(FCNTL_COMMANDS.values())
    tests = [(_JEQ_K, len(commands) - i, 0, k) for i, k in enumerate(commands)]
    return [(_LD_ABS_W, 0, 0, _OFF_ARG1_LOW), *tests, eperm, allow]
