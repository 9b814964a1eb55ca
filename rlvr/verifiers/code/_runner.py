"""Runs inside the sandbox: executes an untrusted program on the tests, reports raw results.

Standard library only, and never imported by rlvr: the host starts it as a script with
a JSON job on stdin and reads one JSON line per probe on stdout. It judges nothing:
a probe is one call into the program (``f(2)``), and the host evaluates each assert
around the values reported here (see judge.py); expected values and the
functions a test judges with never enter the sandbox.

Trust split inside the sandbox. This runner forks a child for the untrusted code; the
child drops to an unprivileged uid (when the sandbox gives it the capability to),
sets its resource limits, loses every descriptor but its own pipe, and only then runs
the program. So the program can corrupt the child's own reports (it runs in the same
process) but cannot reach the runner's stdout, and the runner kills a child that
overruns its per-test time.

Job: {"mode": "asserts" | "io", "program": str, "setup": str, "probes": [probe, ...],
"inputs": [stdin, ...], "typing_names": [name, ...], "uid": int | null, "limits": {...}}
("typing_names": names of ``typing`` bound before an asserts job's program runs). A probe is
an expression of the program (``"f(2)"``, evaluated in its namespace) or ``{"call": expr, "args": tokens, "kwargs":
tokens}``: the program's callable ``expr`` called on data the host encoded in the same flat
tokens as the results (``rlvr.verifiers.code.results.encode_value``; decoded here by ``_untag``).
Lines out: {"id": i, "value": [flat tokens]} | {"id": i, "error": NAME} (asserts) and
{"id": i, "stdout": str, "truncated": bool, "exit": int, "error"?: NAME} (io), where
"exit" is the exit code, minus the signal number when killed, -1 when timed out.
"""

import json
import os
import resource
import select
import signal
import sys
import time

_MAX_NODES = 100_000  # values larger than this are not reported (an error instead)
_MAX_DEPTH = 100
_IN_OWN_PID_NAMESPACE = False  # set from the job: true only under bwrap
_SECCOMP = None  # (prctl, address of the filter's sock_fprog, what keeps it alive), from the job
_SERVED = False  # a job of a shared sandbox (see _serve)
_SERVER_IS_INIT = False
_JOB_UID = None


# ------------------------------------------------------------------- child side


def _confine(job):
    """Drop privileges and set limits; runs in the child before any untrusted code."""
    limits = job["limits"]
    uid = job.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from uid 0, this also clears every capability
    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["processes"]),
        ("RLIMIT_MSGQUEUE", 0),
        ("RLIMIT_SIGPENDING", _SIGNALS_QUEUED),  # queued signals are kernel memory: a few, not ~100,000
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    if _SECCOMP is not None:  # last: from here on the refused calls fail (see seccomp.py)
        prctl, fprog = _SECCOMP[:2]
        if prctl(38, 1, 0, 0, 0) != 0 or prctl(22, 2, fprog, 0, 0) != 0:  # NO_NEW_PRIVS; SECCOMP, FILTER
            raise OSError("cannot install the seccomp filter")


def _redirect(stdin_fd, stdout_fd, keep):
    """Make fds 0/1/2 the given ones (stderr to /dev/null) and close every other fd."""
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(stdin_fd if stdin_fd is not None else null, 0)
    os.dup2(stdout_fd if stdout_fd is not None else null, 1)
    os.dup2(null, 2)
    top = max(1024, os.sysconf("SC_OPEN_MAX"))
    if keep >= 3:
        os.closerange(3, keep)
        os.closerange(keep + 1, top)
    else:
        os.closerange(3, top)
    sys.stdin = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)


_SCALARS = {type(None): "N", int: "i", float: "f", complex: "c", str: "s", bytes: "b"}
_CONTAINER_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "z", dict: "d"}
_BASES = (int, float, complex, str, bytes, dict, list, tuple, set, frozenset)  # bool has no subclasses
_VIEWS = {type({}.keys()): "K", type({}.values()): "V", type({}.items()): "W"}


def _tag(value, lazy=(1.0, 1 << 18)):
    """Plain data as a flat list of tokens, prefix order: a container is its tag and length,
    then its items (a dict: key, value, key, ...). Flat, so the host decodes it without
    recursion. Exact types only: a subclass of one (an ``int`` with a custom ``__eq__``, a
    ``Counter``) is sent as its base type's value, and any other object is refused, except the
    values a test converts (``list(gen())``, ``sorted(d.keys())``, ``x == Fraction(1, 2)``):
    ``range``, dict views, ``deque``, ``Fraction``, ``Decimal`` and iterators (see _tag_other).
    The host's ``rlvr.verifiers.code.results.encode_value`` is its twin for built-in data (this file
    imports nothing of rlvr): both write the same tokens, tested token for token."""
    out, todo, nodes = [], [(value, 0)], 0
    while todo:
        item, depth = todo.pop()
        nodes += 1
        if nodes > _MAX_NODES or depth > _MAX_DEPTH:
            raise ValueError("value too large")
        t = type(item)
        if t is bool:
            out.append("T" if item else "F")
        elif t in _SCALARS:
            out.append(_SCALARS[t])
            if t is int:
                out.append(format(item, "x"))  # hex: no int->str digit limit
            elif t is float:
                out.append(item.hex())
            elif t is complex:
                out += [item.real.hex(), item.imag.hex()]
            elif t is str:
                out.append(item)
            elif t is bytes:
                out.append(item.hex())
        elif t in _CONTAINER_TAGS:
            if nodes + len(item) * (2 if t is dict else 1) > _MAX_NODES:
                raise ValueError("value too large")
            out += [_CONTAINER_TAGS[t], len(item)]
            members = [x for kv in item.items() for x in kv] if t is dict else list(item)
            todo.extend((m, depth + 1) for m in reversed(members))
        else:
            base = next((b for b in _BASES if isinstance(item, b)), None)
            if base is not None:
                # A subclass of built-in data (Counter, defaultdict, OrderedDict, an int subclass)
                # goes as its base type's plain value: its methods, __eq__ included, stay here.
                nodes -= 1
                todo.append((_plain(base, item), depth))
                continue
            header, members = _tag_other(item, _MAX_NODES - nodes, lazy)
            out += header
            todo.extend((m, depth + 1) for m in reversed(members))
    return out


def _plain(base, item):
    """The data a subclass of a built-in type holds, read by the base type's own code: never by
    the subclass's conversions (``__str__``, ``__int__``, ``__float__``, ``__iter__``, ``keys``...),
    which could say anything (``S("zzz")`` whose ``__str__`` says "hello" compares unequal to
    "hello" in Python, and so must here). A ``class C(str, Enum)`` member is its value, 'a'."""
    if base is dict:
        collections = sys.modules.get("collections")
        if collections is not None and type(item) is collections.OrderedDict:
            return dict(item)  # its own order (move_to_end), by its own C code
        return dict(dict.items(item))
    if base in (list, tuple, set, frozenset):
        return base(base.__iter__(item))
    return _PLAIN_SCALARS[base](item)


_PLAIN_SCALARS = {int: int.__index__, float: float.__float__, complex: complex.__complex__, str: str.__str__,
                  bytes: bytes.__bytes__}


def _tag_other(item, room, lazy):
    """(tokens, members) of a value tests convert; the members follow in prefix order.
    ``R`` start stop step; ``Q`` numerator denominator; ``D`` text; ``K``/``V``/``W`` a dict
    view's keys, values or (key, value) pairs flattened; ``q`` a deque; ``I`` an iterator read to
    its end, ``J`` one cut when the value budget is spent, after ``lazy`` = (seconds, bytes) or at an error
    (an infinite generator never ends; reading past the cut fails the test on the host). Modules are looked up, never imported:
    a program that returns a Fraction has imported fractions."""
    t = type(item)
    if t is range:
        return ["R", format(item.start, "x"), format(item.stop, "x"), format(item.step, "x")], []
    fractions, decimal, collections = (sys.modules.get(m) for m in ("fractions", "decimal", "collections"))
    if fractions is not None and isinstance(item, fractions.Fraction):
        return ["Q", format(item.numerator, "x"), format(item.denominator, "x")], []
    if decimal is not None and isinstance(item, decimal.Decimal):
        return ["D", decimal.Decimal.__str__(item)], []
    view = next((tag for kind, tag in _VIEWS.items() if isinstance(item, kind)), None)
    if view is not None or (collections is not None and isinstance(item, collections.deque)):
        members = list(item) if view != "W" else [x for kv in item for x in kv]
        if len(members) > room:
            raise ValueError("value too large")
        return [view or "q", len(members) // (2 if view == "W" else 1)], members
    if callable(getattr(t, "__next__", None)):
        members, ended, used, size, stop = [], False, 0, 0, time.monotonic() + lazy[0]
        while used < room and size < lazy[1] and time.monotonic() < stop:
            try:
                member = next(item)
            except StopIteration:
                ended = True
                break
            except Exception:  # an error past the items a test reads is no error of those items
                break
            members.append(member)
            used += 1 + (len(member) * (2 if type(member) is dict else 1) if type(member) in _CONTAINER_TAGS else 0)
            size += _rough_size(member)
        return ["I" if ended else "J", len(members)], members
    raise TypeError("not plain data: " + t.__name__)


def _rough_size(value):
    """About how many bytes ``value``'s tokens take in a line (shallow: a container's items count
    16 bytes each): what keeps an iterator's items within the line the runner passes on."""
    t = type(value)
    if t is str or t is bytes:
        return 8 + 2 * len(value)
    if t is int:
        return 8 + value.bit_length() // 4
    return 8 + 16 * len(value) if t in _CONTAINER_TAGS else 24


def _untag(tokens):
    """The host's data arguments (a probe ``{"call", "args", "kwargs"}``) from flat tokens:
    the inverse of _tag for built-in scalars and containers, without recursion.

    A twin of ``rlvr.verifiers.code.results.decode_value`` (this file is standard library only and
    never imports rlvr); the host's tokens are trusted, so no bounds here. The two encoders
    and both decoders are kept in step by tests/test_judge_classes.py's round-trip test."""
    pos = 0

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    stack = []  # [tag, items expected, items]
    while True:
        tag = take()
        if tag in ("l", "t", "S", "z", "d"):
            count = take()
            stack.append([tag, count * (2 if tag == "d" else 1), []])
            value = _OPEN
        elif tag == "N":
            value = None
        elif tag in ("T", "F"):
            value = tag == "T"
        elif tag == "i":
            value = int(take(), 16)
        elif tag == "f":
            value = float.fromhex(take())
        elif tag == "c":
            value = complex(float.fromhex(take()), float.fromhex(take()))
        elif tag == "s":
            value = take()
        elif tag == "b":
            value = bytes.fromhex(take())
        else:
            raise ValueError("bad argument token")
        while True:  # close every container this value completes
            if value is not _OPEN:
                if not stack:
                    return value
                stack[-1][2].append(value)
            if not stack or len(stack[-1][2]) < stack[-1][1]:
                break
            kind, _, items = stack.pop()
            value = dict(zip(items[0::2], items[1::2])) if kind == "d" else _BUILD[kind](items)


_OPEN = object()
_BUILD = {"l": list, "t": tuple, "S": set, "z": frozenset}


class _Quitter:
    """``exit``/``quit`` as ``site`` defines them (the runner starts Python with -S, which skips
    site): raise SystemExit with the code."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Use %s() or Ctrl-D (i.e. EOF) to exit" % self.name

    def __call__(self, code=None):
        raise SystemExit(code)


def _program_builtins():
    """The builtins a program sees: Python's own, plus ``exit`` and ``quit``."""
    import builtins

    builtins.exit, builtins.quit = _Quitter("exit"), _Quitter("quit")
    return builtins


def _probe_value(probe, namespace):
    """A probe's value: an expression of the program (source), or a call of one of the
    program's callables on the host's data arguments ``{"call", "args", "kwargs"}``."""
    if isinstance(probe, str):
        return eval(compile(probe, "test.py", "eval"), namespace)
    fn = eval(compile(probe["call"], "test.py", "eval"), namespace)
    kwargs = _untag(probe["kwargs"]) if probe.get("kwargs") else {}
    return fn(*(_untag(probe["args"]) if probe.get("args") else ()), **kwargs)


def _asserts_child(job, start, out_fd):
    """Load the program and the setup, then evaluate probes from ``start`` on."""
    write, dumps = os.write, json.dumps  # bound before the program can patch them
    limits = job["limits"]  # an iterator's items may take a quarter of the test's time and of its line
    lazy = (limits["test_s"] / 4, limits["output_bytes"] // 4)

    def send(obj):
        write(out_fd, (dumps(obj) + "\n").encode())

    namespace = {"__name__": "solution", "__builtins__": _program_builtins()}
    try:
        if job.get("typing_names"):  # LeetCode's and HumanEval's harnesses import them for the program
            import typing

            namespace.update({name: getattr(typing, name) for name in job["typing_names"] if name in typing.__all__})
        exec(compile(job["program"], "solution.py", "exec"), namespace)
        if job.get("setup"):
            exec(compile(job["setup"], "setup.py", "exec"), namespace)
    except BaseException as err:  # SystemExit at import included (exit() too): it is a failure
        send({"load_error": type(err).__name__})
        return
    send({"loaded": True})
    for i in range(start, len(job["probes"])):
        try:
            send({"id": i, "value": _tag(_probe_value(job["probes"][i], namespace), lazy)})
        except BaseException as err:
            send({"id": i, "error": type(err).__name__})


def _io_child(job, i):
    """Run the program as ``__main__`` with test ``i``'s stdin; ``exit()``, ``quit()`` and
    ``sys.exit`` end it with their code (none: 0)."""
    code = 0
    try:
        exec(compile(job["program"], "solution.py", "exec"), {"__name__": "__main__", "__builtins__": _program_builtins()})
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
    except BaseException:
        code = 1
    try:
        sys.stdout.flush()
    except BaseException:
        code = code or 1
    return code


def _spawn(job, target, stdin_fd=None):
    """Fork a confined child running ``target(out_fd)``; returns (pid, read end)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(read_fd)
            if job["mode"] == "io":
                _redirect(stdin_fd, write_fd, keep=-1)
                _confine(job)
                code = target(1)
            else:
                _redirect(None, None, keep=write_fd)
                _confine(job)
                target(write_fd)
                code = 0
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)
    os.close(write_fd)
    if stdin_fd is not None:
        os.close(stdin_fd)
    return pid, read_fd


def _kill(pid, leftovers=True):
    """Kill and reap a test's child (not yet reaped, so its pid cannot be reused), and what it
    left running unless ``leftovers`` is false (a served job's last test: the server clears
    the whole jail next)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    if leftovers:
        _kill_leftovers()


def _kill_leftovers():
    """Inside the sandbox's PID namespace, kill everything a test started.

    ``kill(-1)`` reaches every process but init and the caller: in our own PID
    namespace that is exactly the untrusted processes (a fork bomb, a ``setsid``
    grandchild), so the next test starts clean. Outside one it would hit the whole
    host account, hence the checks. A job of a shared sandbox (``_serve``) runs below the
    server, which ``kill(-1)`` would reach: there the job's own uid does the killing (one
    helper process dropped to it reaches exactly the job's processes) or, with one uid for
    all, the server is init and out of reach anyway.
    """
    if not _IN_OWN_PID_NAMESPACE:
        return
    if os.getpid() <= 2 or (_SERVED and _JOB_UID is None and os.getpid() != 1 and _SERVER_IS_INIT):
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    elif _SERVED and _JOB_UID is not None:
        _as_uid(_JOB_UID, lambda: os.kill(-1, signal.SIGKILL))


def _as_uid(uid, action):
    """Run ``action`` in a child that dropped to ``uid`` (None: as is); wait for it."""
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):  # not the result stream: a process of the uid could reach it
                os.dup2(null, fd)
            os.closerange(3, max(1024, os.sysconf("SC_OPEN_MAX")))
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            action()
        except BaseException:
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)


def _exit_status(pid, deadline):
    """Exit code of ``pid`` (-signal when killed), or -1 after killing it at ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if status >= 0 else 1
        if time.monotonic() > deadline:
            _kill(pid)
            return -1
        time.sleep(0.002)


# ------------------------------------------------------------------ runner side


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _run_asserts(job):
    limits = job["limits"]
    n, start = len(job["probes"]), 0
    while start < n:
        pid, fd = _spawn(job, lambda out_fd, s=start: _asserts_child(job, s, out_fd))
        buffer, expected = b"", start
        deadline = time.monotonic() + limits["test_s"]  # the load gets one test's time
        loaded = False
        while expected < n:
            wait = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(wait, 0))[0] if wait > 0 else []
            if not ready:  # this test (or the load) ran out of time
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # the child exited (or was killed) before reporting everything
            buffer += chunk
            if len(buffer) > limits["output_bytes"]:
                break
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line)
                except (ValueError, RecursionError):  # the child is untrusted
                    msg = None
                if not isinstance(msg, dict):
                    continue
                if "load_error" in msg and not loaded:
                    for i in range(expected, n):
                        _emit({"id": i, "error": "LoadError:" + str(msg["load_error"])[:100]})
                    expected = n
                    break
                if msg.get("loaded") is True and not loaded:
                    loaded = True
                elif loaded and msg.get("id") == expected and ("value" in msg or "error" in msg):
                    if "value" in msg:
                        _emit({"id": expected, "value": msg["value"]})
                    else:
                        _emit({"id": expected, "error": str(msg["error"])[:100]})
                    expected += 1
                else:
                    continue  # noise does not buy time: only progress resets the clock
                deadline = time.monotonic() + limits["test_s"]
        _kill(pid, leftovers=not (_SERVED and expected >= n))
        os.close(fd)
        if expected >= n:
            return
        if not loaded:  # every restart would load the same program the same way
            for i in range(expected, n):
                _emit({"id": i, "error": "LoadFailed"})
            return
        _emit({"id": expected, "error": "Timeout" if time.monotonic() >= deadline else "Died"})
        start = expected + 1


def _run_io(job):
    limits = job["limits"]
    cap = limits["output_bytes"]
    for i, stdin_text in enumerate(job["inputs"]):
        stdin_fd = os.memfd_create("stdin")  # private to the runner and this child
        os.write(stdin_fd, stdin_text.encode())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        pid, fd = _spawn(job, lambda _fd, i=i: _io_child(job, i), stdin_fd=stdin_fd)
        deadline = time.monotonic() + limits["test_s"]
        out, error = b"", None
        while True:
            wait = deadline - time.monotonic()
            ready = select.select([fd], [], [], wait)[0] if wait > 0 else []
            if not ready:
                error = "Timeout"
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > cap:
                error = "OutputLimit"
                break
        os.close(fd)
        code = _exit_status(pid, deadline if error is None else 0)
        if not (_SERVED and i == len(job["inputs"]) - 1):  # a served job's last: the server clears next
            _kill_leftovers()
        if code == -1 and error is None:
            error = "Timeout"
        result = {"id": i, "stdout": out[:cap].decode("utf-8", "replace"), "truncated": len(out) > cap, "exit": code}
        if error:
            result["error"] = error
        _emit(result)


def _start_up(job):
    """Before any test: cap the jail's ``/tmp`` in inodes and give up the capability that
    took, leave the caller's session keyring, hide this process from the children
    (non-dumpable: no ``/proc/<runner>/fd`` even for the same uid) and load the seccomp
    filter that ``_confine`` installs in each child.

    ``job["tmp_inodes"]``: the inode cap (bwrap only; null without a jail of our own).
    ``job["seccomp"]``: ``{"filter": hex of struct sock_filter[], "keyctl": syscall
    number}`` from ``seccomp.py``, or null (only without bwrap, on an unknown arch)."""
    global _SECCOMP
    seccomp = job.get("seccomp")
    if seccomp is None and job.get("tmp_inodes") is None:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if job.get("tmp_inodes") is not None:
        _cap_tmp_inodes(libc, prctl, int(job["tmp_inodes"]))
    if seccomp is None:
        return
    # KEYCTL_JOIN_SESSION_KEYRING with no name: a new anonymous session keyring.
    if libc.syscall(seccomp["keyctl"], 1, None) < 0 and ctypes.get_errno() != 38:  # ENOSYS: no keyrings
        _refuse("cannot join a new session keyring, errno %d" % ctypes.get_errno())
    if prctl(4, 0, 0, 0, 0) != 0 or prctl(21, 0, 0, 0, 0) < 0:  # SET_DUMPABLE 0; GET_SECCOMP works
        _refuse("no prctl(PR_SET_DUMPABLE) or no seccomp in this kernel")
    program = bytes.fromhex(seccomp["filter"])
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _SECCOMP = (prctl, ctypes.addressof(fprog), (buffer, fprog))


_SIGNALS_QUEUED = 64  # RLIMIT_SIGPENDING of the untrusted processes
_CAP_SETPCAP, _CAP_SYS_ADMIN = 8, 21


def _cap_tmp_inodes(libc, prctl, inodes):
    """Remount the jail's ``/tmp`` with ``nr_inodes``, then drop ``CAP_SYS_ADMIN`` (and
    ``CAP_SETPCAP``, which dropping it from the bounding set takes) for good.

    bwrap's ``--size`` caps a tmpfs in bytes only; every empty file or directory still costs
    ~1 KiB of unreclaimable kernel memory (inode, dentry), 3 million of them in a 64 MiB
    tmpfs here. This process is the first to run in the jail (bwrap gave it the two
    capabilities for this alone) and reads nothing untrusted before it is done: any failure
    ends the job before a program runs."""
    import ctypes

    ms_remount, ms_nosuid, ms_nodev = 32, 2, 4  # keep bwrap's nosuid,nodev; size and mode stay as they are
    if libc.mount(b"tmpfs", b"/tmp", None, ms_remount | ms_nosuid | ms_nodev, b"nr_inodes=%d" % inodes) != 0:
        _refuse("cannot cap /tmp at %d inodes, errno %d" % (inodes, ctypes.get_errno()))
    for cap in (_CAP_SYS_ADMIN, _CAP_SETPCAP):  # PR_CAPBSET_DROP: out of reach even through exec
        if prctl(24, cap, 0, 0, 0) != 0:
            _refuse("cannot drop capability %d from the bounding set, errno %d" % (cap, ctypes.get_errno()))
    prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL (bwrap's user namespace mode sets them)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) x 2 words
    if libc.capget(header, data) != 0:
        _refuse("capget failed, errno %d" % ctypes.get_errno())
    keep = ~((1 << _CAP_SYS_ADMIN) | (1 << _CAP_SETPCAP)) & 0xFFFFFFFF
    for word in range(3):
        data[word] &= keep
    if libc.capset(header, data) != 0:
        _refuse("capset failed, errno %d" % ctypes.get_errno())


def _refuse(reason):
    sys.stderr.write("rlvr-runner: " + reason + "\n")
    sys.exit(3)


def _read_message(fd):
    """One length-prefixed message (``b"%d\\n" % len`` then the bytes) from ``fd``, read
    exactly, never past its end; None at end of input."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return None
        header += byte
        if len(header) > 20:
            raise ValueError("bad message header")
    size, data = int(header), b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _serve(header):
    """A sandbox shared by several programs, one after another, none seeing another's traces.

    This process never reads a job: for job ``n`` it forks a child first, says
    ``{"ready": n}``, and only then does the host write the job to stdin, which that child
    alone reads; so every job's process starts as a copy of one that never held a program.
    Nor does it ever read what a program could have chosen (file names, process names, exit
    codes): after the job it kills and reaps every other process (statuses unread) and a
    throwaway child checks and clears the jail, answering only yes or no, so nothing of a job
    enters the memory the next job's process is copied from. A jail that cannot be cleared
    ends (the host starts a fresh one). Stdout carries only this process's and the jobs' own
    lines: a program's processes never hold it (see _redirect).
    """
    global _SERVED, _SERVER_IS_INIT, _JOB_UID
    if not _IN_OWN_PID_NAMESPACE:  # kill(-1) would reach the whole account, not the jail
        _refuse("a shared sandbox needs its own PID namespace")
    _SERVED, _SERVER_IS_INIT = True, os.getpid() == 1
    import socket  # noqa: F401  (imported before any job, for the checks after each: _no_unix_sockets)

    uid_base = header.get("uid_base")
    import gc

    # Every job's process is a fork of this one: objects that a collection walks (and so writes
    # to) are copied page by page into each child. Frozen, they are never walked (measured: ~22
    # -> ~17 ms a job); the collector still runs on what a job allocates, as in a sandbox of its own.
    gc.collect()
    gc.freeze()
    for n in range(header["jobs"]):
        uid = None if uid_base is None else uid_base + n
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setsid()  # a session, so a scheduler autogroup, of the job's own
                _JOB_UID = uid
                job = _read_message(0)
                if job is None:
                    os._exit(0)
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)  # the stream the next job comes through is not this job's
                os.close(null)
                job.update(limits=header["limits"], uid=uid)
                (_run_io if job["mode"] == "io" else _run_asserts)(job)
                sys.stdout.flush()
            except BaseException:
                code = 1
            os._exit(code)
        _emit({"ready": n})
        _, status = os.waitpid(pid, 0)  # the job's process: trusted code, its status is ours
        _emit({"finished": n, "exit": os.waitstatus_to_exitcode(status)})  # the job's clock stops here
        status = None
        if not _clear(uid):
            _emit({"unclean": n})
            return
        _emit({"done": n})


_CLEAN, _ALIVE, _DIRTY = 0, 2, 3


def _clear(uid, patience_s=2.0):
    """Kill and reap every process but init and this one until a checker finds the jail clean
    (see _check); False if it is not after ``patience_s``."""
    import ctypes

    waitpid = ctypes.CDLL(None, use_errno=True).waitpid
    waitpid.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    deadline = time.monotonic() + patience_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        while waitpid(-1, None, os.WNOHANG) > 0:  # orphans too, as init; their statuses unread
            pass
        verdict = _in_child(lambda: _check(uid))
        if verdict == _CLEAN:
            return True
        if verdict != _ALIVE or time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def _in_child(action):
    """Exit code of ``action()`` run in a child (1 if it raised): what the child read dies with it."""
    pid = os.fork()
    if pid == 0:
        try:
            code = action()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _check(uid):
    """In a throwaway child: _ALIVE while a process but init, the server and this one lives (or
    is a zombie the server has yet to reap);
    else empty /tmp as the job's uid and _CLEAN if nothing is left there nor in the jail's
    unix sockets (one bound by a program outlives it while an fd of it is in flight), _DIRTY if
    something is."""
    server = os.getppid()
    keep = {1, server, os.getpid()}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            state, parent = _state(int(name))
            if state not in ("Z", "") or (state == "Z" and parent == server):  # a zombie the server is to reap
                return _ALIVE
    if os.listdir("/tmp"):
        _as_uid(uid, _empty_tmp)
        if os.listdir("/tmp"):
            return _DIRTY
    return _CLEAN if _no_unix_sockets() else _DIRTY


def _no_unix_sockets(patience_s=0.2):
    """Whether the jail's network namespace holds no unix socket. Sockets that only a cycle of
    in-flight descriptors keeps alive go at the kernel's next collection, which closing a unix
    socket starts; so: close one, look again, for a moment."""
    import socket

    deadline = time.monotonic() + patience_s
    while True:
        with open("/proc/net/unix", "rb") as f:
            if len(f.read().splitlines()) <= 1:  # the header line only
                return True
        if time.monotonic() > deadline:
            return False
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close()
        time.sleep(0.005)


def _state(pid):
    """(state letter, parent pid) of a process; ("", 0) if it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return "", 0


def _empty_tmp():
    """Remove everything under /tmp, making directories traversable first (a program may
    have left one with mode 0)."""
    def remove(path):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                for name in os.listdir(path):
                    remove(os.path.join(path, name))
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            pass

    for name in os.listdir("/tmp"):
        remove(os.path.join("/tmp", name))


def main():
    global _IN_OWN_PID_NAMESPACE
    serve = sys.argv[1:] == ["serve"]
    job = _read_message(0) if serve else json.loads(sys.stdin.buffer.read())
    _IN_OWN_PID_NAMESPACE = job.get("pid_namespace") is True
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _start_up(job)
    if serve:
        _serve(job)
    else:
        (_run_io if job["mode"] == "io" else _run_asserts)(job)


if __name__ == "__main__":
    main()
