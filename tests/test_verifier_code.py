"""The sandboxed Python verifier: correct programs pass; every known hack scores 0 and
leaves the host unharmed (canary files and variable intact, no process left behind).

The tests run as whatever user runs pytest; CI runs them as root, the hard case.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.verifiers.code import extract_program, parse_tests, python_code, run_python_tests
from rlvr.verifiers.code.sandbox import Limits, SandboxUnavailable, UnsandboxedCodeWarning, _UID_BASE
from rlvr.verifiers.registry import get_verifier

if shutil.which("bwrap") is None and not os.environ.get("CI"):
    pytest.skip("bubblewrap is not installed (CI installs it: make test)", allow_module_level=True)

FAST = Limits(test_s=0.5, total_s=8.0)
ADD_TESTS = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]}
SUM_TESTS = {"io": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 7", "stdout": "12"}]}


def fenced(source: str) -> str:
    return "Here is my solution.\n```python\n" + textwrap.dedent(source).strip("\n") + "\n```\n"


def sandbox_processes() -> list[str]:
    """Live processes running as one of this process's sandbox uids (only meaningful as root,
    where jobs get one). Zombies are dead: their reaper is the host's init, not the verifier."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uid = int(text.split("\nUid:")[1].split()[0])
        state = text.split("\nState:")[1].split()[0]
        if 0 <= uid - (_UID_BASE + os.getpid() * 1000) < 1000 and state != "Z":  # this process's jobs' uids
            found.append(f"{status.parent.name} uid={uid} state={state}")
    return found


def secret_holder() -> subprocess.Popen:
    """A host process whose environment holds the canary secret."""
    env = {**os.environ, "RLVR_CANARY": "canary-secret-77"}
    return subprocess.Popen(["sleep", "60"], env=env)


@pytest.fixture
def canaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A canary file, a canary environment variable and a listening socket on the host."""
    canary = tmp_path / "canary.txt"
    canary.write_text("canary-original")
    monkeypatch.setenv("RLVR_CANARY", "canary-secret-77")
    holder = secret_holder()  # /proc/PID/environ shows only a process's initial environment
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield {"file": canary, "dir": tmp_path, "port": server.getsockname()[1]}
    holder.kill()
    holder.wait()
    try:
        conn, _ = server.accept()
        conn.close()
        pytest.fail("the sandbox reached a host socket")
    except BlockingIOError:
        pass
    server.close()
    assert canary.read_text() == "canary-original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt"]
    assert os.environ["RLVR_CANARY"] == "canary-secret-77"
    if os.geteuid() == 0:
        assert sandbox_processes() == []


# ------------------------------------------------------------------ honest programs

ADD = fenced("def add(a, b):\n    return a + b")
SUM = fenced("a, b = map(int, input().split())\nprint(a + b)")


def test_correct_programs_pass() -> None:
    assert python_code(ADD, ADD_TESTS) == 1.0
    assert python_code(SUM, SUM_TESTS) == 1.0


def test_reward_is_the_fraction_passed_or_all_or_nothing() -> None:
    half = fenced("def add(a, b):\n    return a + b if a > 0 else 1")
    assert python_code(half, ADD_TESTS) == pytest.approx(2 / 3)
    assert python_code(half, ADD_TESTS, all_or_nothing=True) == 0.0
    assert get_verifier("python_code_all_or_nothing")(ADD, json.dumps(ADD_TESTS)) == 1.0


def test_registry_passes_the_tests_as_json_text() -> None:
    assert get_verifier("python_code")(ADD, json.dumps(ADD_TESTS)) == 1.0
    assert get_verifier("python_code")(SUM, json.dumps(SUM_TESTS)) == 1.0


def test_per_test_results_are_typed() -> None:
    program = fenced(
        """
        def f(x):
            if x == 0:
                raise ZeroDivisionError
            return [x, x]
        """
    )
    tests = {"asserts": ["assert f(1) == [1, 1]", "assert f(0) == []", "assert f(2) == (2, 2)", "assert f(3)"]}
    report = run_python_tests(program, tests, limits=FAST)
    assert [(r.passed, r.detail) for r in report.results] == [
        (True, "ok"),
        (False, "ZeroDivisionError"),
        (False, "assertion failed"),  # a list is not a tuple, as in Python
        (True, "ok"),
    ]
    assert report.score == 0.5 and report.status == "ok"


@pytest.mark.parametrize(
    ("test", "passes"),
    [
        ("assert f() == {'a': (1, 2.5), 'b': {3}}", True),
        ("assert f()['b'] != {4}", True),
        ("assert 0 < len(f()) <= 2", True),
        ("assert 'a' in f()", True),
        ("assert 'z' not in f()", True),
        ("assert not f()['c']", False),  # KeyError
        ("assert f()['a'][1] == 2.5", True),
        ("assert f()['a'][1] == 2.4999999", False),  # no tolerance unless the test has one
        ("assert f().get('x') is None", True),
        ("assert not f().get('x')", True),
        ("assert f()['a'] < 'x'", False),  # TypeError, as in Python
    ],
)
def test_assert_forms(test: str, passes: bool) -> None:
    program = fenced("def f():\n    return {'a': (1, 2.5), 'b': {3}}")
    assert python_code(program, {"asserts": [test]}, limits=FAST) == float(passes)


def test_io_comparison_is_line_by_line() -> None:
    tests = {"io": [{"stdin": "", "stdout": "1\n2\n3\n"}]}
    assert python_code(fenced("print('1  \\n2\\n3')\nprint()"), tests) == 1.0  # trailing space, blank tail
    assert python_code(fenced("print(1)"), tests) == 0.0  # only the first expected line
    assert python_code(fenced("print('1\\n2\\n3\\n4')"), tests) == 0.0  # an extra line
    assert python_code(fenced("print(' 1\\n2\\n3')"), tests) == 1.0  # each line stripped, as LiveCodeBench and APPS judge
    assert python_code(fenced("print('1\\n\\n2\\n3')"), tests) == 0.0  # a blank line inside counts
    assert python_code(fenced("print('1\\n2\\n3')\nraise SystemExit(3)"), tests) == 0.0  # non-zero exit


def test_program_extraction() -> None:
    assert extract_program("```py\nx = 1\n```") == "x = 1\n"
    assert extract_program("```python\nx = 1\n```\n```python3\nx = 2\n```") == "x = 2\n"
    assert extract_program("```python\nx = 1\n") is None  # unclosed fence
    assert extract_program("```\nx = 1\n```") is None  # untagged: not declared Python
    assert extract_program("def add(a, b): return a + b") is None
    assert python_code("def add(a, b):\n    return a + b", ADD_TESTS) == 0.0


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        {"asserts": []},
        {"asserts": ["x = 1"]},
        {"asserts": ["assert f() == 1\nassert g()"]},
        {"asserts": ["assert f(("]},
        {"asserts": [1]},
        {"io": [{"stdin": "1"}]},
        {"io": [{"stdout": "1", "expected": "2"}]},
        {"asserts": ["assert f()"], "io": []},
        {"tests": []},
    ],
)
def test_malformed_specs_raise_not_score(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_tests(bad)  # type: ignore[arg-type]


def test_missing_bwrap_refuses_unless_opted_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("RLVR_CODE_SANDBOX", raising=False)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        python_code(ADD, ADD_TESTS)
    with pytest.warns(UnsandboxedCodeWarning):
        assert python_code(ADD, ADD_TESTS, sandbox="none") == 1.0
    monkeypatch.setenv("RLVR_CODE_SANDBOX", "none")
    with pytest.warns(UnsandboxedCodeWarning):
        assert python_code(fenced("def add(a, b):\n    return -1"), ADD_TESTS) == 0.0


def test_small_programs_are_fast() -> None:
    # Five sandboxes in a row; how fast (~0.05 s each on 2 cores) is bench/time_bounds.py's and bench/sandbox.py's.
    for _ in range(5):
        assert python_code(ADD, ADD_TESTS) == 1.0


# ---------------------------------------------------------------- adversarial programs

SECRET_ANSWER = "answer-8c1f"
ATTACKS = {
    "infinite loop": "def add(a, b):\n    while True:\n        pass",
    "infinite loop at import": "while True:\n    pass",
    "sleep forever": "import time\ndef add(a, b):\n    time.sleep(10**6)",
    "memory bomb": "def add(a, b):\n    x = bytearray(2**36)\n    return len(x)",
    "growing memory": "def add(a, b):\n    x = []\n    while True:\n        x.append('x' * 10**6)",
    "fork bomb": """
        import os
        def add(a, b):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """,
    "setsid grandchild": """
        import os, signal, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                time.sleep(3600)
            os._exit(0)
        def add(a, b):
            return 0
        """,
    "output flood": "def add(a, b):\n    while True:\n        print('x' * 10000)",
    "huge file": """
        def add(a, b):
            for path in ('/tmp/huge', 'huge'):
                try:
                    with open(path, 'wb') as f:
                        for _ in range(1024):
                            f.write(b'x' * 2**20)
                except BaseException:
                    pass
            return 0
        """,
    "exit at import": "import sys\nsys.exit(0)",
    "os._exit at import": "import os\nos._exit(0)",
    "exit before the tests": "import sys\ndef add(a, b):\n    sys.exit(0)",
    "os._exit before the tests": "import os\ndef add(a, b):\n    os._exit(0)",
    "always-equal object": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
        """,
    "int subclass equal to everything": """
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
        """,
    "patch the test machinery": """
        import builtins, json, os, sys
        class Never(Exception):
            pass
        builtins.AssertionError = Never
        json.dumps = lambda *a, **k: '{"id": 0, "value": ["bool", true]}'
        json.dumps.__code__ = (lambda *a, **k: '{"id": 0, "value": ["int", "5"]}').__code__
        forged = b'{"loaded": true}\\n' + b''.join(b'{"id": %d, "value": ["bool", true]}\\n' % i for i in range(10))
        for fd in range(0, 64):
            try:
                os.write(fd, forged)
            except OSError:
                pass
        for name, mod in list(sys.modules.items()):
            for attr in ('_tag', 'send', '_emit'):
                if hasattr(mod, attr):
                    setattr(mod, attr, lambda *a, **k: None)
        def add(a, b):
            return 0
        """,
    "search the stack and gc for answers": """
        import gc, inspect, sys
        def add(a, b):
            for obj in gc.get_objects():
                for x in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):
                    if isinstance(x, str) and x.startswith('answer-'):
                        return x
            frame = sys._getframe()
            while frame is not None:
                for value in frame.f_locals.values():
                    if isinstance(value, str) and 'answer-' in value:
                        return value
                frame = frame.f_back
            return 0
        """,
    "segfault": "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)",
    "kill the parent": """
        import os, signal
        for pid in (os.getppid(), 1, __HOST_PID__):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        def add(a, b):
            return 0
        """,
    "read the environment": """
        import os, glob
        def add(a, b):
            found = os.environ.get('RLVR_CANARY')
            for path in glob.glob('/proc/*/environ'):
                try:
                    for var in open(path, 'rb').read().split(b'\\0'):
                        if var.startswith(b'RLVR_CANARY='):
                            found = var.split(b'=', 1)[1].decode()
                except OSError:
                    pass
            return found or 0
        """,
    "touch files outside": """
        import os, shutil
        def add(a, b):
            for path in (__CANARY_FILE__, '/work/main/README.md', '/usr/bin/python3', '/etc/passwd'):
                for action in (lambda: open(path, 'w').write('pwned'), lambda: os.remove(path),
                               lambda: shutil.rmtree(os.path.dirname(path))):
                    try:
                        action()
                    except OSError:
                        pass
            try:
                open(__CANARY_DIR__ + '/dropped.txt', 'w').write('x')
            except OSError:
                pass
            try:
                return open(__CANARY_FILE__).read()
            except OSError:
                return 0
        """,
    "network": """
        import socket
        def add(a, b):
            for host in ('127.0.0.1', '1.1.1.1'):
                try:
                    socket.create_connection((host, __PORT__ if host == '127.0.0.1' else 80), timeout=0.2)
                    return 'connected'
                except OSError:
                    pass
            return 0
        """,
    "one megabyte of source": "# " + "x" * 1_000_000 + "\ndef add(a, b):\n    return a + b",
}
# Every test here expects a value the attack cannot compute without the answers.
ATTACK_TESTS = {
    "asserts": [
        "assert add(2, 3) == 5",
        f"assert add(0, 0) == {SECRET_ANSWER!r}",
        "assert add(1, 1) == 'canary-secret-77'",
        "assert add(1, 2) == 'canary-original'",
        "assert add(2, 2) == 'connected'",
    ]
}
# Attacks that spend every test's whole time (or memory): two tests show that each test gets its
# own limit after the one before overran and that the job ends within its bound; three more
# would only repeat the hang (~0.5 s each).
HANGS_EVERY_TEST = {"infinite loop", "sleep forever", "growing memory", "output flood", "fork bomb"}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_score_zero_and_leave_the_host_unharmed(name: str, canaries: dict) -> None:
    source = textwrap.dedent(ATTACKS[name]).strip("\n")
    source = (
        source.replace("__HOST_PID__", str(os.getpid()))
        .replace("__CANARY_DIR__", repr(str(canaries["dir"])))
        .replace("__CANARY_FILE__", repr(str(canaries["file"])))
        .replace("__PORT__", str(canaries["port"]))
    )
    if name == "one megabyte of source":
        source = ATTACKS[name]
    tests = {"asserts": ATTACK_TESTS["asserts"][:2]} if name in HANGS_EVERY_TEST else ATTACK_TESTS
    report = run_python_tests(fenced(source), tests, limits=FAST)  # within FAST.total_s: bench/time_bounds.py
    assert report.score == 0.0, report
    assert os.getpid() > 0 and python_code(ADD, ADD_TESTS) == 1.0  # the host still works


IO_ATTACKS = {
    "print only the first expected line": "print(1)",
    "exit before printing": "import sys\nsys.exit(0)\nprint('1\\n2\\n3')",
    "output flood": "while True:\n    print('1\\n2\\n3')",
    "sleep forever": "import time\ntime.sleep(10**6)",
    "crash after printing": "print('1\\n2\\n3', flush=True)\nimport os\nos.kill(os.getpid(), 11)",
}


@pytest.mark.parametrize("name", sorted(IO_ATTACKS))
def test_io_attacks_score_zero(name: str, canaries: dict) -> None:
    tests = {"io": [{"stdin": "", "stdout": "1\n2\n3\n"}]}
    assert python_code(fenced(IO_ATTACKS[name]), tests, limits=FAST) == 0.0


def test_expected_values_never_enter_the_sandbox() -> None:
    # The attack above searches everything it can reach; this checks the job itself.
    spec = parse_tests({"asserts": [f"assert add(1, 2) == {SECRET_ANSWER!r}", "assert add(3, 4) > 6"]})
    assert SECRET_ANSWER not in json.dumps(spec.probes)
    assert spec.probes == ("add(1, 2)", "add(3, 4)")


def test_a_hanging_test_does_not_sink_the_others() -> None:
    program = fenced("import time\ndef add(a, b):\n    if a == -1:\n        time.sleep(100)\n    return a + b")
    report = run_python_tests(program, ADD_TESTS, limits=FAST)
    assert [r.detail for r in report.results] == ["ok", "Timeout", "ok"]


def test_the_probes_are_real_without_the_sandbox() -> None:
    # Control: the same environment and network attacks do score outside bwrap, so
    # the zeros above come from the sandbox, not from attacks that never worked.
    holder = secret_holder()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    source = textwrap.dedent(ATTACKS["read the environment"]).strip("\n")
    with pytest.warns(UnsandboxedCodeWarning):
        assert python_code(fenced(source), {"asserts": [ATTACK_TESTS["asserts"][2]]}, limits=FAST, sandbox="none") == 1.0
    # The network attack: even without bwrap the seccomp filter refuses internet sockets, so it
    # is shown to work here, unconfined, in this process.
    namespace: dict = {}
    exec(textwrap.dedent(ATTACKS["network"]).strip("\n").replace("__PORT__", str(port)), namespace)
    assert namespace["add"](2, 2) == "connected"
    with pytest.warns(UnsandboxedCodeWarning):
        source = textwrap.dedent(ATTACKS["network"]).strip("\n").replace("__PORT__", str(port))
        assert python_code(fenced(source), {"asserts": [ATTACK_TESTS["asserts"][4]]}, limits=FAST, sandbox="none") == 0.0
    server.close()
    holder.kill()
    holder.wait()


# ------------------------------------------ the sandbox shares nothing (issue 19)
# Each attack below worked before: it read the caller's keys, left keys for the next
# job, unshared a user namespace, opened a pty, imported pip, saw the checkout path.

import ctypes  # noqa: E402
import errno  # noqa: E402
import secrets  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402

from rlvr.verifiers.code import sandbox as sandbox_module  # noqa: E402
from rlvr.verifiers.code.seccomp import (  # noqa: E402
    ALLOWED, ARGUMENT_CHECKED, CLONE_NEW_FLAGS, FCNTL_COMMANDS, REFUSED, SYSCALLS, UnsupportedArchitecture, build_filter, host_arch,
)

ARCH = host_arch()
NR = {name: nrs[0 if ARCH == "x86_64" else 1] for name, nrs in SYSCALLS.items()}


def run_bpf(program: bytes, nr: int, arch: int, arg0: int = 0, arg1: int = 0) -> int:
    """The seccomp action of a classic BPF filter for one call (the opcodes it uses)."""
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, arg0, arg1, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        elif code == 0x05:  # ja k
            pc += k
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


EPERM_ACTION, ENOSYS_ACTION, ALLOW, KILL = 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS, 0x7FFF0000, 0x80000000
ALLOWED_NAMES = {name for names in ALLOWED.values() for name in names}
REFUSED_NAMES = {name for names in REFUSED.values() for name in names}


@pytest.mark.parametrize(("arch", "audit_arch", "column"), [("x86_64", 0xC000003E, 0), ("aarch64", 0xC00000B7, 1)])
def test_seccomp_filter_decides_each_call(arch: str, audit_arch: int, column: int) -> None:
    # Every number of the table, every number past it, and the argument-checked calls.
    program = build_filter(arch).program
    known = {}
    for name, nrs in SYSCALLS.items():
        nr = nrs[column]
        if nr is None:
            continue
        known[nr] = name
        if name in ALLOWED_NAMES:
            assert run_bpf(program, nr, audit_arch) == ALLOW, name
        elif name in REFUSED_NAMES:
            assert run_bpf(program, nr, audit_arch) == EPERM_ACTION, name
    for nr in range(0, 1100):  # numbers the table does not know (newer calls): ENOSYS, so libc falls back
        if nr not in known:
            assert run_bpf(program, nr, audit_arch) == ENOSYS_ACTION, nr
    clone = SYSCALLS["clone"][column]
    assert run_bpf(program, clone, audit_arch, arg0=0x10000000 | 17) == EPERM_ACTION  # CLONE_NEWUSER
    for bit in range(32):
        if CLONE_NEW_FLAGS >> bit & 1:
            assert run_bpf(program, clone, audit_arch, arg0=1 << bit) == EPERM_ACTION
    assert run_bpf(program, clone, audit_arch, arg0=0x01200011) == ALLOW  # fork: CHILD_SETTID|CLEARTID|SIGCHLD
    assert run_bpf(program, clone, audit_arch, arg0=0x003D0F00) == ALLOW  # a pthread
    assert run_bpf(program, SYSCALLS["clone3"][column], audit_arch) == ENOSYS_ACTION
    fcntl_nr = SYSCALLS["fcntl"][column]
    for command in range(0, 1100):
        expected = ALLOW if command in FCNTL_COMMANDS.values() else EPERM_ACTION
        assert run_bpf(program, fcntl_nr, audit_arch, arg1=command) == expected, command
    assert run_bpf(program, 39, 0x40000003) == KILL  # i386 (int 0x80) calls
    assert run_bpf(program, 0xFFFFFFFF, 0x40000003) == KILL
    if arch == "x86_64":
        for nr in (0, 39, 0x1FF, 0xFFFFFFFF):
            assert run_bpf(program, 0x40000000 | nr, audit_arch) == KILL  # x32 calls


def test_the_lists_cover_the_whole_syscall_table_once() -> None:
    # The class fix: every call is allowed or refused by a named rule, none by omission.
    named = [n for names in ALLOWED.values() for n in names] + [n for names in REFUSED.values() for n in names]
    named += list(ARGUMENT_CHECKED)
    assert len(named) == len(set(named)), sorted(n for n in set(named) if named.count(n) > 1)
    assert set(named) == set(SYSCALLS)


def libseccomp_names(audit_arch: int) -> dict[str, int]:
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        pytest.skip("libseccomp is not installed")
    resolve = lib.seccomp_syscall_resolve_num_arch
    resolve.argtypes, resolve.restype = [ctypes.c_uint32, ctypes.c_int], ctypes.c_void_p
    out = {}
    for nr in range(1100):
        name = resolve(audit_arch, nr)
        if name:
            out[ctypes.string_at(name).decode()] = nr
    return out


def test_seccomp_numbers_match_libseccomp() -> None:
    # Both directions: our numbers are libseccomp's, and every call libseccomp knows is in our table.
    for column, audit_arch in ((0, 0xC000003E), (1, 0xC00000B7)):
        theirs = libseccomp_names(audit_arch)
        for name, nr in theirs.items():
            assert SYSCALLS.get(name, (None, None))[column] == nr, (name, column)
        for name, nrs in SYSCALLS.items():
            if name in theirs or nrs[column] is None:
                continue
            assert nrs[column] > max(theirs.values()) or name == "uretprobe", (name, column)  # newer than the library


# Docker's default seccomp profile (moby/moby profiles/seccomp/default.json): the calls it allows to a
# container without added capabilities, on x86_64 and aarch64 (clone without CLONE_NEW*, socket but AF_VSOCK,
# personality with a few values, arch_prctl/modify_ldt on amd64, ptrace/process_vm_* from kernel 4.8).
DOCKER_DEFAULT_ALLOWS = set("""
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown clock_adjtime clock_getres clock_gettime
clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit exit_group
faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchownat fcntl fdatasync fgetxattr
flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_waitv futimesat getcpu getcwd
getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid getpriority
getrandom getresgid getresuid getrlimit get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid
gettimeofday getuid getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy
io_getevents io_pgetevents ioprio_get ioprio_set io_setup io_submit io_uring_enter io_uring_register io_uring_setup kill
landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr
lremovexattr lseek lsetxattr lstat madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock
mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget
msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat open openat openat2 pause pidfd_open
pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg
remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending
rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_getaffinity
sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop
semtimedop sendfile sendmmsg sendmsg sendto setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid
setresgid setresuid setreuid setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setxattr
shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair splice stat statfs statx symlink symlinkat
sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime
timer_settime timerfd_create timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat utime
utimensat utimes vfork vmsplice wait4 waitid write writev
process_vm_readv process_vm_writev ptrace socket personality arch_prctl modify_ldt clone
""".split())


def test_every_difference_from_dockers_default_profile_is_documented() -> None:
    ours = ALLOWED_NAMES | {"clone", "fcntl"}
    assert DOCKER_DEFAULT_ALLOWS <= set(SYSCALLS)
    assert ours - DOCKER_DEFAULT_ALLOWS == {"fchmodat2"}  # fchmodat with flags (6.6), newer than the profile's list
    docs = (Path(__file__).parents[1] / "docs" / "verifiers.md").read_text()
    section = docs[docs.index("<!-- seccomp-vs-docker -->") : docs.index("<!-- /seccomp-vs-docker -->")]
    for name in sorted(DOCKER_DEFAULT_ALLOWS - ours) + ["fchmodat2"]:
        assert f"`{name}`" in section, f"docs/verifiers.md does not say why {name} differs from Docker's profile"
    assert DOCKER_DEFAULT_ALLOWS - ours <= REFUSED_NAMES


def test_a_program_gets_no_socket_of_any_kind() -> None:
    program = fenced("""
        import socket
        def made():
            out = {}
            for name, make in [("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                               ("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
                               ("unix_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
                               ("pair", socket.socketpair)]:
                try:
                    make()
                    out[name] = "made"
                except PermissionError:
                    out[name] = "refused"
            return out
    """)
    expected = {"inet": "refused", "unix": "refused", "unix_dgram": "refused", "pair": "refused"}
    report = run_python_tests(program, {"asserts": [f"assert made() == {expected!r}"]})
    assert report.score == 1.0, report.results


def test_unknown_architecture_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnsupportedArchitecture):
        build_filter("mips64")
    monkeypatch.setattr("platform.machine", lambda: "mips64")
    sandbox_module._host_filter.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="seccomp"):
            python_code(ADD, ADD_TESTS)
    finally:
        sandbox_module._host_filter.cache_clear()


LIBC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(nr, *args):
    '''errno of a raw system call, 0 when it succeeded.'''
    ctypes.set_errno(0)
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return ctypes.get_errno() if libc.syscall(nr, *args) == -1 else 0
"""


def syscall_program(body: str, **numbers: int) -> str:
    """A program with ``call(nr, ...)`` and the given syscall numbers as globals."""
    consts = "".join(f"{name.upper()} = {nr}\n" for name, nr in numbers.items())
    return fenced(LIBC + consts + textwrap.dedent(body))


REFUSED_CALLS = """
def setsid_in_child():
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            os._exit(0)
        except OSError as err:
            os._exit(err.errno)
    return os.waitpid(child, 0)[1] >> 8

def clone_new_user():
    pid = libc.syscall(CLONE, ctypes.c_long(0x10000000 | 17), 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return ctypes.get_errno() if pid == -1 else 0

CALLS = {
    'add_key': lambda: call(ADD_KEY, b'user', b'rlvr-probe', b'x', 1, -3),  # into @s
    'keyctl': lambda: call(KEYCTL, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of @s
    'request_key': lambda: call(REQUEST_KEY, b'user', b'rlvr-probe', None, 0),
    'unshare': lambda: call(UNSHARE, 0x10000000),  # CLONE_NEWUSER
    'setns': lambda: call(SETNS, 0, 0),
    'clone': clone_new_user,
    'clone3': lambda: call(CLONE3, None, 0),
    'setsid': setsid_in_child,
    'shmget': lambda: call(SHMGET, 0, 1 << 20, 0o600),  # IPC_PRIVATE
    'msgget': lambda: call(MSGGET, 0, 0o600),
    'semget': lambda: call(SEMGET, 0, 1, 0o600),
    'memfd_create': lambda: call(MEMFD_CREATE, b'x', 0),
    'inotify_init1': lambda: call(INOTIFY_INIT1, 0),
    'mount': lambda: call(MOUNT, b'none', b'/tmp', b'tmpfs', 0, None),
    'ptrace': lambda: call(PTRACE, 16, os.getppid(), 0, 0),  # PTRACE_ATTACH
    'userfaultfd': lambda: call(USERFAULTFD, 0),
    'io_uring_setup': lambda: call(IO_URING_SETUP, 1, ctypes.create_string_buffer(120)),
    # issue 33: kernel memory and budgets no limit of the job counts
    'io_setup': lambda: call(IO_SETUP, 1, ctypes.byref(ctypes.c_ulong(0))),  # legacy AIO: fs.aio-max-nr is host-wide
    'epoll_create1': lambda: call(EPOLL_CREATE1, 0),
    'timer_create': lambda: call(TIMER_CREATE, 1, None, ctypes.byref(ctypes.c_int(0))),  # CLOCK_MONOTONIC
    'mlock': lambda: call(MLOCK, ctypes.create_string_buffer(4096), 4096),
    'socket': lambda: call(SOCKET, 1, 1, 0),  # AF_UNIX, SOCK_STREAM
    'socketpair': lambda: call(SOCKETPAIR, 1, 1, 0, ctypes.byref((ctypes.c_int * 2)())),
    'fanotify_init': lambda: call(FANOTIFY_INIT, 0, 0),
    'mq_open': lambda: call(MQ_OPEN, b'/rlvr', 0o100, 0o600, None),
    'seccomp': lambda: call(SECCOMP, 0, 0, None),  # SECCOMP_SET_MODE_STRICT
    'fcntl_setpipe_sz': lambda: fcntl_on_pipe(1031, 1 << 20),  # F_SETPIPE_SZ: a 1 MiB pipe buffer
    'fcntl_setlk': lambda: fcntl_on_pipe(6, ctypes.create_string_buffer(32)),  # F_SETLK: a range lock
    'fcntl_ofd_setlk': lambda: fcntl_on_pipe(37, ctypes.create_string_buffer(32)),  # F_OFD_SETLK
    'fcntl_setlease': lambda: fcntl_on_pipe(1024, 0),  # F_SETLEASE
    'fcntl_notify': lambda: fcntl_on_pipe(1026, 0),  # F_NOTIFY (dnotify)
}

def fcntl_on_pipe(command, arg):
    r, w = os.pipe()
    try:
        return call(FCNTL, r, command, arg)
    finally:
        os.close(r); os.close(w)

def refused(names=tuple(CALLS)):
    out = {name: CALLS[name]() for name in names}
    out['status'] = sorted(line for line in open('/proc/self/status').read().splitlines()
                           if line.startswith(('Seccomp:', 'NoNewPrivs:')))
    return out
"""
REFUSED_IN_JAIL = ["add_key", "keyctl", "request_key", "unshare", "setns", "clone", "clone3", "shmget", "msgget",
                   "semget", "memfd_create", "inotify_init1", "mount", "ptrace", "userfaultfd", "io_uring_setup",
                   "io_setup", "epoll_create1", "timer_create", "mlock", "socket", "socketpair", "fanotify_init",
                   "mq_open", "seccomp", "fcntl"]
FCNTL_REFUSED = ["fcntl_setpipe_sz", "fcntl_setlk", "fcntl_ofd_setlk", "fcntl_setlease", "fcntl_notify"]
HARMLESS = ["keyctl", "clone", "clone3", "setsid", "memfd_create", "inotify_init1", "io_setup", "epoll_create1", "timer_create",
            "mlock", "socket", "socketpair", "fcntl_setpipe_sz", "unshare"]  # no trace left once the child exits; unshare last


def test_refused_system_calls_fail_inside_and_work_outside() -> None:
    # Keyrings, namespaces, sessions, SysV IPC, memfd...: EPERM (clone3: ENOSYS, so libc
    # falls back to clone) under the filter. Outside it, the calls that leave nothing
    # behind succeed, so the EPERMs come from the filter, not from missing privileges.
    program = syscall_program(REFUSED_CALLS, **{n: NR[n] for n in REFUSED_IN_JAIL})
    expected = {name: errno.EPERM for name in REFUSED_IN_JAIL + FCNTL_REFUSED if name != "fcntl"}
    expected |= {"clone3": errno.ENOSYS, "setsid": errno.EPERM, "status": ["NoNewPrivs:\t1", "Seccomp:\t2"]}
    report = run_python_tests(program, {"asserts": [f"assert refused() == {expected!r}"]}, limits=FAST)
    assert report.score == 1.0, report
    namespace: dict = {}
    exec(extract_program(program), namespace)  # the control, in a plain child of pytest
    child = os.fork()
    if child == 0:
        out = namespace["refused"](HARMLESS)
        os._exit(0 if out["clone3"] == errno.EINVAL and all(out[n] == 0 for n in HARMLESS if n != "clone3") else 1)
    assert os.waitpid(child, 0)[1] == 0


def test_honest_process_management_still_works() -> None:
    program = fenced(
        """
        import os, subprocess, tempfile, threading
        def work():
            results = []
            t = threading.Thread(target=lambda: results.append(sum(range(10))))
            t.start(); t.join()
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            results.append(os.waitpid(pid, 0)[1] >> 8)
            results.append(subprocess.run(['/bin/echo', 'hi'], capture_output=True, text=True).stdout)
            with tempfile.TemporaryFile() as f:
                f.write(b'abc'); f.seek(0); results.append(f.read())
            results.append(len(open('/dev/urandom', 'rb').read(8)))
            return results
        """
    )
    assert python_code(program, {"asserts": ["assert work() == [45, 7, 'hi\\n', b'abc', 8]"]}) == 1.0


KEY_SPEC_SESSION, KEY_SPEC_USER, KEY_SPEC_USER_SESSION = -3, -4, -5


def host_libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


@pytest.fixture
def host_key():
    """A secret key in pytest's own session keyring, revoked afterwards."""
    libc, secret = host_libc(), "keyring-secret-" + secrets.token_hex(4)
    description = "rlvr-canary-" + secrets.token_hex(4)
    key = libc.syscall(NR["add_key"], b"user", description.encode(), secret.encode(), ctypes.c_size_t(len(secret)),
                       ctypes.c_long(KEY_SPEC_SESSION))
    if key < 0:
        pytest.skip(f"no keyrings here (errno {ctypes.get_errno()})")
    yield {"description": description, "secret": secret}
    libc.syscall(NR["keyctl"], ctypes.c_long(21), ctypes.c_long(key))  # KEYCTL_INVALIDATE


STEAL_KEY = """
def steal():
    found = []
    buf = ctypes.create_string_buffer(256)
    for ring in (-3, -4, -5):  # @s, @u, @us
        key = libc.syscall(KEYCTL, ctypes.c_long(10), ctypes.c_long(ring), b'user', DESCRIPTION, ctypes.c_long(0))
        if key > 0:
            n = libc.syscall(KEYCTL, ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_long(256))  # KEYCTL_READ
            found.append(buf.raw[:max(n, 0)].decode())
    for line in open('/proc/keys').read().splitlines():
        if DESCRIPTION.decode() in line:
            found.append(line)
    return found[0] if found else 'nothing'
"""


def test_the_callers_keyring_is_out_of_reach(host_key: dict) -> None:
    program = syscall_program(STEAL_KEY, keyctl=NR["keyctl"]).replace(
        "KEYCTL = ", f"DESCRIPTION = {host_key['description'].encode()!r}\nKEYCTL = ")
    report = run_python_tests(program, {"asserts": [f"assert steal() == {host_key['secret']!r}",
                                                    "assert steal() == 'nothing'"]}, limits=FAST)
    assert [r.passed for r in report.results] == [False, True], report
    namespace: dict = {}
    exec(extract_program(program), namespace)  # control: a plain process steals it
    assert namespace["steal"]() == host_key["secret"]


def key_users() -> dict[int, int]:
    """Keys held per uid on the whole host (``/proc/key-users``)."""
    out = {}
    for line in Path("/proc/key-users").read_text().splitlines():
        uid, rest = line.split(":", 1)
        out[int(uid)] = int(rest.split()[1].split("/")[0])
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs get a uid of their own only as root")
def test_no_key_is_left_for_the_next_job_of_the_same_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    uid = _UID_BASE + os.getpid() * 1000 + 999
    monkeypatch.setattr(sandbox_module, "_sandbox_uid", lambda: uid)
    description = "rlvr-left-" + secrets.token_hex(4)
    plant = syscall_program(
        f"""
        def plant():
            for ring in (-4, -5, -3):  # @u and @us outlive the job; @s is the runner's
                call(ADD_KEY, b'user', {description.encode()!r}, b'for the next job', 16, ring)
            return 0
        """, add_key=NR["add_key"])
    look = syscall_program(
        f"""
        def look():  # KEYCTL_SEARCH in @u and @us, and /proc/keys (masked: empty)
            found = [call(KEYCTL, 10, ring, b'user', {description.encode()!r}, 0) == 0 for ring in (-4, -5)]
            return any(found) or {description!r} in open('/proc/keys').read()
        """, keyctl=NR["keyctl"])
    assert python_code(plant, {"asserts": ["assert plant() == 0"]}, limits=FAST) == 1.0
    assert python_code(look, {"asserts": ["assert look() == True"]}, limits=FAST) == 0.0
    assert python_code(look, {"asserts": ["assert look() == False"]}, limits=FAST) == 1.0
    # The host's view, which nothing in a job can mask: the uid holds no key, not even the
    # user keyrings a lookup creates (before the fix: the planted keys, for good).
    assert key_users().get(uid, 0) == 0


def test_dev_has_no_pty_and_no_shared_memory() -> None:
    program = fenced(
        """
        import os
        def dev():
            return sorted(os.listdir('/dev'))
        def opened(path):
            try:
                os.close(os.open(path, os.O_RDWR))
                return 'opened'
            except OSError as err:
                return err.errno
        def openpty():
            try:
                os.openpty()
                return 'opened'
            except OSError as err:
                return err.errno
        def shared_memory():
            from multiprocessing import shared_memory
            try:
                shared_memory.SharedMemory(create=True, size=1 << 20)
                return 'created'
            except OSError as err:
                return err.errno
        """
    )
    tests = {"asserts": [
        "assert dev() == ['fd', 'full', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']",
        "assert openpty() == 2", "assert opened('/dev/ptmx') == 2", "assert opened('/dev/pts/ptmx') == 2",
        "assert opened('/dev/tty') == 2", "assert shared_memory() == 2", "assert opened('/dev/null') == 'opened'",
    ]}
    report = run_python_tests(program, tests, limits=FAST)
    assert report.score == 1.0, report


def base_interpreter_package() -> tuple[Path, str] | None:
    """A third-party package installed for the base interpreter: (its directory, name)."""
    import site
    import sysconfig

    dirs = [sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"],
            *site.getsitepackages([sys.base_prefix])]
    for d in map(Path, dirs):
        names = ["pip"] + sorted(p.name for p in d.iterdir()) if d.is_dir() else []
        for name in names:
            if name.isidentifier() and (d / name / "__init__.py").is_file():
                return d, name
    return None


def test_third_party_packages_cannot_be_imported(tmp_path: Path) -> None:
    found = base_interpreter_package()
    if found is None:
        pytest.skip("no third-party package installed for the base interpreter")
    site, package = found
    base = os.path.realpath(sys.base_prefix)
    jail_site = "/opt/python" + str(site)[len(base):] if str(site).startswith(base + "/") else str(site)
    program = fenced(
        f"""
        import glob, importlib, sys
        def smuggle():
            for path in [{str(site)!r}, {jail_site!r}, '/usr/lib/python3/dist-packages',
                         *glob.glob('/usr/local/lib/python3*/*-packages'), *glob.glob('/opt/python/lib/python3*/*-packages'),
                         *glob.glob('/usr/share/python-wheels/*.whl'), *glob.glob('/opt/python/lib/python3*/ensurepip/_bundled/*.whl')]:
                sys.path.append(path)
            try:
                importlib.import_module({package!r})
                return 'imported'
            except ImportError:
                return 'standard library only'
        """
    )
    tests, limits = {"asserts": ["assert smuggle() == 'imported'"]}, Limits(test_s=5.0, total_s=10.0)
    assert python_code(program, tests, limits=limits) == 0.0
    with pytest.warns(UnsandboxedCodeWarning):  # control: the same program without bwrap imports it
        assert python_code(program, tests, limits=limits, sandbox="none") == 1.0


def test_no_host_path_is_visible_in_the_jail(tmp_path: Path) -> None:
    repo = str(Path(__file__).resolve().parents[1])
    program = fenced(
        f"""
        import os
        NEEDLES = ({repo!r}, {str(tmp_path)!r})
        def leaks():
            texts = [open('/proc/self/mountinfo').read()]
            for pid in os.listdir('/proc'):
                for name in ('cmdline', 'environ', 'cwd', 'root', 'exe'):
                    try:
                        path = f'/proc/{{pid}}/{{name}}'
                        texts.append(os.readlink(path) if name in ('cwd', 'root', 'exe') else open(path, 'rb').read().decode('utf-8', 'replace'))
                    except (OSError, ValueError):
                        pass
            stack, walked = ['/'], 0
            while stack:
                try:
                    entries = list(os.scandir(stack.pop()))
                except OSError:
                    continue  # unreadable to the sandbox uid: it shows nothing either
                for entry in entries:
                    walked += 1
                    texts.append(entry.path)
                    if entry.is_symlink():
                        texts.append(os.readlink(entry.path))
                    elif entry.is_dir() and entry.path != '/proc':
                        stack.append(entry.path)
            return walked > 10000, [t[:200] for t in texts if any(needle in t for needle in NEEDLES)]
        """
    )
    report = run_python_tests(program, {"asserts": ["assert leaks() == (True, [])"]}, limits=Limits(test_s=15.0, total_s=20.0))
    assert report.score == 1.0, report


def job_cgroup_dirs() -> list[Path]:
    """This process's job cgroups (there should be none between jobs)."""
    from rlvr.verifiers.code import cgroups

    return [d for parent, _, _ in cgroups._usable_parents() for d in parent.glob(f"rlvr-{os.getpid()}-*")]


def cgroup_controllers() -> set[str]:
    from rlvr.verifiers.code import cgroups

    return {c for _, controllers, _ in cgroups._usable_parents() for c in controllers}


MEMORY_HOG = """
import os
def hog(children, mb):
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            block = b'x' * (mb << 20)  # touched: resident, not just reserved
            os._exit(0 if len(block) else 1)
        pids.append(pid)
    return sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
"""


@pytest.mark.skipif("memory" not in cgroup_controllers(), reason="no writable memory cgroup here")
def test_a_job_cannot_exceed_its_memory_in_many_processes() -> None:
    # 3 processes x 100 MiB: each is far under RLIMIT_AS (512 MiB), all together over the
    # job's 192 MiB, so the memory cgroup ends some of them; with 2 GiB they all finish.
    tests = {"asserts": ["assert hog(3, 100) == 3"]}
    tight = Limits(test_s=5.0, total_s=10.0, job_memory_mb=192, cgroups=True)
    assert python_code(fenced(MEMORY_HOG), tests, limits=tight) == 0.0
    assert python_code(fenced(MEMORY_HOG), tests, limits=Limits(test_s=5.0, total_s=10.0, job_memory_mb=2048, cgroups=True)) == 1.0
    assert job_cgroup_dirs() == []


@pytest.mark.skipif(not cgroup_controllers(), reason="no writable cgroup here")
def test_each_job_runs_in_cgroups_of_its_own_that_go_with_it() -> None:
    from rlvr.verifiers.code import cgroups

    seen: list[list[str]] = []
    real_create = cgroups.create

    def create(*args: object) -> cgroups.JobCgroups | None:
        job = real_create(*args)  # type: ignore[arg-type]
        assert job is not None
        seen.append([str(d) for d in job.dirs])
        return job

    with_cgroups = Limits(test_s=FAST.test_s, total_s=FAST.total_s, cgroups=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cgroups, "create", create)
        assert python_code(ADD, ADD_TESTS, limits=with_cgroups) == 1.0
        assert python_code(ADD, ADD_TESTS, limits=with_cgroups) == 1.0
        assert python_code(ADD, ADD_TESTS, limits=FAST) == 1.0  # off by default: no third job's cgroups
    assert len(seen) == 2 and len(seen[0]) == len(cgroups._usable_parents()) and seen[0] != seen[1]
    assert not any(Path(d).exists() for dirs in seen for d in dirs)
    assert job_cgroup_dirs() == []


def test_bwrap_jobs_create_no_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bwrap job made a temp dir")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    assert python_code(ADD, ADD_TESTS) == 1.0


CPU_HOG = """
import os
def add(a, b):
    for _ in range(64):  # up to the process limit, each in a session of its own if it could
        try:
            if os.fork() == 0:
                try:
                    os.setsid()
                except OSError:
                    pass
                while True:
                    pass
        except OSError:
            break
    while True:
        pass
"""


@pytest.mark.slow
def test_honest_jobs_keep_their_pace_beside_a_cpu_hog() -> None:
    # A hog fills its process limit with spinners; 4 honest jobs at a time keep scoring
    # 1.0 and their mean time stays within 3x of the same jobs without the hog. Before
    # setsid was refused (and without cgroups) each spinner was a scheduler autogroup of
    # its own and the honest jobs took ~5x longer on 2 cores.
    from concurrent.futures import ThreadPoolExecutor

    def honest(_: int) -> tuple[float, float]:
        start = time.perf_counter()
        return python_code(ADD, ADD_TESTS, limits=FAST), time.perf_counter() - start

    with ThreadPoolExecutor(4) as pool:
        alone = list(pool.map(honest, range(12)))
    hog: list[float] = []
    with ThreadPoolExecutor(1) as hog_pool:
        hog_done = hog_pool.submit(lambda: hog.append(python_code(fenced(CPU_HOG), ADD_TESTS, limits=Limits(total_s=8.0))))
        time.sleep(1.0)  # the spinners are up
        with ThreadPoolExecutor(4) as pool:
            beside = list(pool.map(honest, range(12)))
        hog_done.result()
    assert hog == [0.0]
    assert [score for score, _ in alone + beside] == [1.0] * 24
    mean = lambda runs: sum(t for _, t in runs) / len(runs)  # noqa: E731
    assert mean(beside) < 3 * mean(alone), (mean(alone), mean(beside))


def test_results_cannot_be_forged_through_other_processes_descriptors() -> None:
    # Run by an ordinary user, the program shares its uid with everything in the jail;
    # bwrap's init used to hold the host's result pipe as its fd 1 (/proc/1/fd/1): a
    # forged line claiming exit status 0 reached the host beside the runner's own.
    program = textwrap.dedent(
        """
        import os, sys
        forged = b'{"id": 0, "stdout": "1\\\\n2\\\\n3\\\\n", "truncated": false, "exit": 0}\\n'
        for pid in os.listdir('/proc'):
            if pid.isdigit() and int(pid) != os.getpid():
                for fd in ('0', '1', '2'):
                    try:
                        with open(f'/proc/{pid}/fd/{fd}', 'wb') as f:
                            f.write(forged)
                    except OSError:
                        pass
        sys.exit(1)
        """
    )
    run = sandbox_module.run_job({"mode": "io", "program": program, "inputs": [""]}, FAST)
    assert [(line["id"], line["exit"]) for line in run.lines] == [(0, 1)], run


# ------------------------------ kernel memory and host budgets (issue 33)
# Each worked before: empty files in /tmp took ~750 MiB of unreclaimable slab (the tmpfs was capped
# in bytes only), filled unix-socket buffers ~1 GiB beyond the job's memory, io_setup the host's
# whole AIO budget, and the first job of a process walked /usr on its own clock.

HONEST_STDLIB = fenced(
    """
    import bisect, collections, concurrent.futures, datetime, decimal, fractions, functools, hashlib, heapq, io, itertools
    import json, math, mmap, os, pathlib, pickle, queue, random, re, select, shutil, signal, statistics, subprocess, sys
    import tempfile, threading, time, zlib, base64, array, struct, string, textwrap, copy, dataclasses, enum, typing

    def work():
        out = {}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            out['threads'] = sum(pool.map(lambda x: x * x, range(10)))
        q = queue.Queue(); t = threading.Thread(target=lambda: q.put(7)); t.start(); t.join(); out['queue'] = q.get()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b'x'); os._exit(3)
        p = select.poll(); p.register(r, select.POLLIN)
        out['poll'] = len(p.poll(2000)); out['select'] = len(select.select([r], [], [], 2)[0])
        out['read'] = os.read(r, 1); out['status'] = os.waitpid(pid, 0)[1] >> 8
        os.set_blocking(r, False); out['blocking'] = os.get_blocking(r); os.close(r); os.close(w)
        fired = []
        signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
        signal.setitimer(signal.ITIMER_REAL, 0.01); time.sleep(0.2); out['alarm'] = fired
        m = mmap.mmap(-1, 1 << 20); m[:3] = b'abc'; out['mmap'] = m[:3]; m.close()
        with tempfile.NamedTemporaryFile() as f:
            f.write(b'hello'); f.flush()
            with mmap.mmap(f.fileno(), 0) as fm:
                out['file_mmap'] = fm[:5]
        out['python'] = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True, timeout=10).stdout
        cat = subprocess.Popen(['/bin/cat'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        out['communicate'] = cat.communicate(b'meow', timeout=5)[0]
        d = tempfile.mkdtemp()
        pathlib.Path(d, 'a.txt').write_text('x'); shutil.copy2(os.path.join(d, 'a.txt'), os.path.join(d, 'b.txt'))
        os.mkfifo(os.path.join(d, 'fifo')); out['files'] = sorted(os.listdir(d)); shutil.rmtree(d)
        out['misc'] = [json.dumps({'a': 1}), re.sub('a', 'b', 'aa'), statistics.mean([1, 2, 3]), str(fractions.Fraction(1, 3) + 1),
                       str(decimal.Decimal('1.1') + 1), hashlib.sha256(b'').hexdigest()[:8], zlib.crc32(b'a'),
                       base64.b64encode(b'a').decode(), pickle.loads(pickle.dumps([1])), datetime.date(2020, 1, 1).isoformat(),
                       heapq.nsmallest(2, [3, 1, 2]), bisect.bisect([1, 2, 3], 2), random.Random(1).randint(1, 9),
                       len(os.urandom(8)), os.cpu_count() > 0, math.comb(5, 2)]
        sys.setrecursionlimit(10000)
        depth = lambda n: 0 if n == 0 else 1 + depth(n - 1)
        out['recursion'] = depth(3000)
        return out
    """
)
HONEST_EXPECTED = {
    "threads": 285, "queue": 7, "poll": 1, "select": 1, "read": b"x", "status": 3, "blocking": False, "alarm": [1],
    "mmap": b"abc", "file_mmap": b"hello", "python": "42\n", "communicate": b"meow", "files": ["a.txt", "b.txt", "fifo"],
    "misc": ['{"a": 1}', "bb", 2, "4/3", "2.1", "e3b0c442", 3904355907, "YQ==", [1], "2020-01-01", [1, 2], 2, 3, 8, True, 10],
    "recursion": 3000,
}


def test_honest_programs_using_the_standard_library_keep_working() -> None:
    # Under the allow list: threads, fork, pipes, poll/select, signals and timers, mmap, subprocess
    # (a Python child too), tempfile, shutil, FIFOs and the common modules.
    report = run_python_tests(HONEST_STDLIB, {"asserts": [f"assert work() == {HONEST_EXPECTED!r}"]},
                              limits=Limits(test_s=10.0, total_s=30.0))
    assert report.score == 1.0, report.results


def test_asyncio_is_the_standard_library_use_lost_with_sockets() -> None:
    # The decision, pinned: asyncio's event loop makes a socketpair (its self-pipe), which is refused.
    program = fenced("""
        import asyncio
        async def two():
            return 2
        def run():
            try:
                return asyncio.run(two())
            except PermissionError:
                return 'refused'
    """)
    assert run_python_tests(program, {"asserts": ["assert run() == 'refused'"]}).score == 1.0


FILL_TMP = """
import os, shutil

def fill(make, limit=100_000, clean=True):
    n = 0
    try:
        while n < limit:
            make(n)
            n += 1
    except OSError:
        pass
    for name in os.listdir('/tmp') if clean else ():
        path = '/tmp/' + name
        (shutil.rmtree if os.path.isdir(path) and not os.path.islink(path) else os.unlink)(path)
    return n

def slab_kib():
    return int(open('/proc/meminfo').read().split('SUnreclaim:')[1].split()[0])

def kinds():
    open('/tmp/base', 'w').close()
    out = {'file': fill(lambda n: open('/tmp/f%d' % n, 'w').close()), 'dir': fill(lambda n: os.mkdir('/tmp/d%d' % n)),
           'symlink': fill(lambda n: os.symlink('x', '/tmp/s%d' % n)), 'fifo': fill(lambda n: os.mkfifo('/tmp/p%d' % n))}
    open('/tmp/base', 'w').close()
    out['hardlink'] = fill(lambda n: os.link('/tmp/base', '/tmp/h%d' % n))
    return out

_measured = []

def files_and_slab_growth():
    if _measured:  # once per process: the second assert reads the first one's numbers
        return _measured[0]
    before = slab_kib()
    n = fill(lambda n: open('/tmp/f%d' % n, 'w').close(), clean=False)  # the files stay while the slab is read
    _measured.append((n, slab_kib() - before))
    return _measured[0]
"""


def test_tmp_is_capped_in_inodes_for_every_kind_of_entry() -> None:
    # Files, directories, symlinks, FIFOs and hard links each take an inode of the tmpfs.
    limits = Limits(tmp_files=600, test_s=10.0)
    report = run_python_tests(fenced(FILL_TMP), {"asserts": ["assert max(kinds().values()) < 600"]}, limits=limits)
    assert report.score == 1.0, report.results


def test_empty_files_cannot_grow_kernel_slab() -> None:
    # Without the cap: 100,000 files here (the loop's bound; ~3 million and ~750 MiB of slab unbounded).
    report = run_python_tests(fenced(FILL_TMP), {"asserts": ["assert files_and_slab_growth()[0] < 4096",
                                                             "assert files_and_slab_growth()[1] < 64 * 1024"]},
                              limits=Limits(test_s=10.0))
    assert [r.passed for r in report.results] == [True, True], report.results


def test_the_package_walk_is_not_on_the_first_jobs_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # A cold /usr took 24.8 s once: here a walk slowed to 2 s, with a 1.5 s job limit (the job
    # itself takes ~0.1 s).
    real = sandbox_module._package_dirs
    calls = []

    def slow_walk():
        calls.append(1)
        time.sleep(2.0)
        return real()

    monkeypatch.setattr(sandbox_module, "_package_dirs", slow_walk)
    run = sandbox_module.run_job({"mode": "io", "program": "print(6 * 7)", "inputs": [""]}, Limits(total_s=1.5))
    assert calls and run.status == "ok" and run.lines[0]["stdout"] == "42\n", run
    assert run.wall_s < 1.5


def test_warm_up_does_the_walk_and_builds_the_filter_ahead() -> None:
    sandbox_module._package_dirs.cache_clear()
    sandbox_module._host_filter.cache_clear()
    sandbox_module.warm_up()
    assert sandbox_module._package_dirs.cache_info().currsize == 1
    assert sandbox_module._host_filter.cache_info().currsize == 1


def test_the_runner_keeps_no_capability_it_needed_for_the_inode_cap() -> None:
    # CAP_SYS_ADMIN (remount) and CAP_SETPCAP are gone from every set of every process in the jail
    # (the runner's bounding set too: it held them for the remount).
    program = textwrap.dedent("""
        import os
        for pid in sorted(p for p in os.listdir('/proc') if p.isdigit()):
            try:
                status = open('/proc/%s/status' % pid).read()
            except OSError:
                continue
            caps = {l.split(':')[0]: int(l.split()[1], 16) for l in status.splitlines() if l.startswith('Cap')}
            if 'Name:\tbwrap' in status:  # bwrap's own init (as root): no capability, a full bounding set as before
                del caps['CapBnd']
            print(pid, any(v & ((1 << 21) | (1 << 8)) for v in caps.values()))
    """)
    run = sandbox_module.run_job({"mode": "io", "program": program, "inputs": [""]}, FAST)
    lines = run.lines[0]["stdout"].split()
    assert len(lines) >= 4 and lines[1::2] == ["False"] * (len(lines) // 2), run


def test_queued_signals_are_limited_to_a_few() -> None:
    # Queued real-time signals are kernel memory charged to the uid: 64, not the default ~100,000.
    program = fenced("""
        import resource
        def pending():
            return resource.getrlimit(resource.RLIMIT_SIGPENDING)
    """)
    assert run_python_tests(program, {"asserts": ["assert pending() == (64, 64)"]}).score == 1.0
