"""A batch of programs (`run_python_tests_batch`, `python_code_batched`): each gets the verdict it
gets alone, none can see or touch what another left (files, directories it locked, processes it
started) or read another's source, and a hanging one costs only its own tests. (Several programs
in one sandbox failed the sibling check; docs/verifiers.md says why it is not done.)"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from rlvr.verifiers import get_verifier
from rlvr.verifiers.code import run_python_tests, run_python_tests_batch
from rlvr.verifiers.sandbox import Limits

if shutil.which("bwrap") is None and not os.environ.get("CI"):
    pytest.skip("bubblewrap is not installed (CI installs it: make test)", allow_module_level=True)

FAST = Limits(test_s=1.0, total_s=8.0)
ADD = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
SUM = {"io": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 7", "stdout": "12"}]}


def fenced(source: str) -> str:
    return "```python\n" + textwrap.dedent(source).strip("\n") + "\n```"


RIGHT = fenced("def add(a, b):\n    return a + b")
WRONG = fenced("def add(a, b):\n    return a - b")
SUMS = fenced("a, b = map(int, input().split())\nprint(a + b)")


def test_a_batch_gives_every_program_the_verdict_it_gets_alone():
    items = [(RIGHT, ADD), (WRONG, ADD), ("no code at all", ADD), (SUMS, SUM), (fenced("def add(a, b):\n    raise ValueError"), ADD),
             (fenced("import sys\nsys.exit(3)"), SUM)] * 3
    alone = [run_python_tests(c, t, limits=FAST) for c, t in items]
    together = run_python_tests_batch([c for c, _ in items], [t for _, t in items], limits=FAST)
    assert [r.score for r in together] == [r.score for r in alone] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0] * 3
    assert [r.results for r in together] == [r.results for r in alone]
    batched = get_verifier("python_code_batched")
    gold = [json.dumps(t) for t in (ADD, ADD, SUM, ADD)]  # a data file's tests reach the verifier as JSON text
    assert batched(["p"] * 4, [RIGHT, WRONG, SUMS, "none"], gold) == [1.0, 0.0, 1.0, 0.0]


LEAVES_SRC = '''
    import os, subprocess, time
    os.makedirs("/tmp/locked/deeper", exist_ok=True)
    with open("/tmp/locked/deeper/secret", "w") as fh:
        fh.write("the answer is 5")
    os.chmod("/tmp/locked/deeper/secret", 0)
    os.chmod("/tmp/locked/deeper", 0)
    os.chmod("/tmp/locked", 0o500)
    open("/tmp/top", "w").write("5")
    if os.fork() == 0:  # a process that outlives the program and writes while the next one runs
        os.close(1)
        time.sleep(0.4)
        open("/tmp/late", "w").write("5")
        os._exit(0)
    def add(a, b):
        return a + b
'''
LEAVES_TRACES = fenced(LEAVES_SRC)

# Passes only in a sandbox as fresh as the first program found it: nothing in /tmp, no other
# untrusted process alive.
FINDS_SRC = '''
    import os, time
    time.sleep(0.6)  # past the moment the previous program's leftover would write
    def leftovers():
        return sorted(os.listdir("/tmp"))
    def strangers():
        me = os.getpid()
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) > 2 and int(pid) != me:
                try:
                    out.append(open(f"/proc/{pid}/cmdline").read())
                except OSError:
                    pass
        return out
'''
FINDS_NOTHING = fenced(FINDS_SRC)
CLEAN = {"asserts": ["assert leftovers() == []", "assert strangers() == []"]}


def test_a_program_finds_nothing_another_left_behind():
    limits = Limits(test_s=2.0, total_s=10.0)
    reports = run_python_tests_batch([LEAVES_TRACES, FINDS_NOTHING, LEAVES_TRACES, FINDS_NOTHING], [ADD, CLEAN, ADD, CLEAN], limits=limits)
    assert [r.score for r in reports] == [1.0, 1.0, 1.0, 1.0], [r.results for r in reports]
    # the control: within one program the traces are there, so the check above can fail
    control = run_python_tests(fenced(textwrap.dedent(LEAVES_SRC) + "\n" + textwrap.dedent(FINDS_SRC)),
                               {"asserts": ["assert leftovers() == []"]}, limits=limits)
    assert control.score == 0.0


SIBLING = fenced('''
    import sys
    def add(a, b):
        frame = sys._getframe()
        while frame is not None:  # the runner's job, if this process holds one with other programs in it
            job = frame.f_locals.get("job")
            if isinstance(job, dict) and "jobs" in job:
                ns = {}
                for other in job["jobs"]:
                    if "_getframe" not in other["program"]:
                        exec(other["program"], ns)
                return ns["add"](a, b)
            frame = frame.f_back
        return None
''')


def test_a_program_cannot_run_a_siblings_solution():
    reports = run_python_tests_batch([SIBLING, RIGHT, SIBLING], [ADD, ADD, ADD], limits=FAST)
    assert [r.score for r in reports] == [0.0, 1.0, 0.0]


def test_a_hanging_program_costs_only_its_own_tests():
    hangs = fenced("def add(a, b):\n    while True:\n        pass")
    reports = run_python_tests_batch([RIGHT, hangs, RIGHT, SUMS], [ADD, ADD, ADD, SUM], limits=FAST)
    assert [r.score for r in reports] == [1.0, 0.0, 1.0, 1.0]
    assert all(not r.passed for r in reports[1].results)
