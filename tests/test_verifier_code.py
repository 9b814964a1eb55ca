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

from rlvr.verifiers import get_verifier, python_code
from rlvr.verifiers.code import extract_program, parse_tests, run_python_tests
from rlvr.verifiers.sandbox import Limits, SandboxUnavailable, UnsandboxedCodeWarning, _UID_BASE

if shutil.which("bwrap") is None and not os.environ.get("CI"):
    pytest.skip("bubblewrap is not installed (CI installs it: make test)", allow_module_level=True)

FAST = Limits(test_s=0.5, total_s=8.0)
ADD_TESTS = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]}
SUM_TESTS = {"io": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 7", "stdout": "12"}]}


def fenced(source: str) -> str:
    return "Here is my solution.\n```python\n" + textwrap.dedent(source).strip("\n") + "\n```\n"


def sandbox_processes() -> list[str]:
    """Live processes running as a sandbox uid (only meaningful as root, where jobs get
    one). Zombies are dead: their reaper is the host's init, not the verifier."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uid = int(text.split("\nUid:")[1].split()[0])
        state = text.split("\nState:")[1].split()[0]
        if _UID_BASE <= uid < _UID_BASE + 10_000 * 100 and state != "Z":
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
    assert python_code(fenced("print(' 1\\n2\\n3')"), tests) == 0.0  # leading space matters
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
    start = time.perf_counter()
    for _ in range(5):
        assert python_code(ADD, ADD_TESTS) == 1.0
    per_program = (time.perf_counter() - start) / 5
    assert per_program < 0.5, f"{per_program:.2f}s per program"  # ~0.04 s on 2 cores


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
    start = time.perf_counter()
    report = run_python_tests(fenced(source), ATTACK_TESTS, limits=FAST)
    elapsed = time.perf_counter() - start
    assert report.score == 0.0, report
    assert elapsed < FAST.total_s + 1.0
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
    for name, test in (("read the environment", ATTACK_TESTS["asserts"][2]), ("network", ATTACK_TESTS["asserts"][4])):
        source = textwrap.dedent(ATTACKS[name]).strip("\n").replace("__PORT__", str(port))
        with pytest.warns(UnsandboxedCodeWarning):
            assert python_code(fenced(source), {"asserts": [test]}, limits=FAST, sandbox="none") == 1.0, name
    server.close()
    holder.kill()
    holder.wait()
