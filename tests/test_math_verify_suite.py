"""A peer's suite: Math-Verify's own regression cases, judged by boxed_math.

huggingface/Math-Verify (Apache-2.0) tests its verifier on (gold, prediction, expected) triples
written from real model outputs (its tests/test_all.py, test_numina_cases.py,
test_open_thoughts.py). scripts/extract_math_verify_cases.py reads them with ``ast`` into
tests/data/math_verify_cases.jsonl (its first line carries source, commit and license) and
decides how each one reaches boxed_math: cases whose answer Math-Verify has to find in prose,
or whose gold is not one answer, are not kept; the others are.

Every kept case must get Math-Verify's verdict, except those listed in DELIBERATE: the ones
where rlvr is strict on purpose, each under a category that names the rule in
docs/verifiers.md. A listed case that starts to agree fails too, so the list stays honest.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from rlvr.verifiers.math import boxed_math

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "math_verify_cases.jsonl"
SCRIPT = REPO / "scripts" / "extract_math_verify_cases.py"

# Why rlvr scores 0 where Math-Verify scores 1 (there is no case the other way round).
CATEGORIES = {
    "several-boxes": "every box must hold the same answer (hedging guard): one box per part "
                     "of a multi-part answer is several answers",
    "float": "no float tolerance: a decimal approximation is not the exact gold (nor the reverse)",
    "unsolved": "a relation stating a value (a name, then a constant: x < 1) is a solution and "
                "is compared side by side, never up to a constant factor: -x > -1 restates the "
                "question instead of solving it",
    "approximation": "an answer containing \\approx states an approximation, not the answer",
    "relation-chain": "a chain of relations is compared side by side as a whole; its last side "
                      "is not taken as the answer (a false step in the chain stays in the answer)",
    "double-escaped": "doubled backslashes (\\\\frac, \\\\le) are TeX line breaks, not commands: "
                      "the text is escaped twice, not TeX as written",
    "decimal-comma": "a comma is a list or thousands separator, never a decimal point "
                     "(1000,99 is not 1000.99)",
    "not-a-unit": "a word outside the unit table stays in the answer, so it matches nothing "
                  "(28 percentage is not 28\\%; 28 percent and 28 pct are)",
    "last-box": "the last box is the answer; a value written after it, unboxed, is not read",
    "brackets": "brackets carry meaning: a bare list is not the tuple (1,3)",
    "repeated-item": "lists and sets are multisets: a repeated solution is an extra item",
    "identity": "only exact rewrites (expand, cancel, radsimp, sqrtdenest) prove equality; "
                "no sympy.simplify, so trigonometric identities are not proven",
    "needs-solving": "the candidate equals the gold only after solving or knowing the question "
                     "(a condition on |z| vs a set of z; labelled values vs tuples in the "
                     "question's variable order)",
    "labels-lost": "values without the labels of a gold of several labelled parts lose which "
                   "is which (AB=4,CD=5 vs 4, 5 would also accept 5, 4)",
}

DELIBERATE = {
    # several boxes
    "test_all.py:873": "several-boxes",  # \boxed{-2} and \boxed{1} for 1,-2
    "test_numina_cases.py:69": "several-boxes",  # \boxed{(1, 2)}, \boxed{(2, 1)}, ...
    "test_open_thoughts.py:69": "several-boxes",  # \boxed{(2, 2)} and \boxed{(6, 2)}
    "test_open_thoughts.py:74": "several-boxes",
    "test_open_thoughts.py:79": "several-boxes",
    "test_open_thoughts.py:89": "several-boxes",  # \boxed{k = 45} and \boxed{n = 2}
    "test_open_thoughts.py:99": "several-boxes",  # \boxed{1} and \boxed{2} and \boxed{3}
    "test_open_thoughts.py:104": "several-boxes",
    "test_open_thoughts.py:129": "several-boxes",
    "test_open_thoughts.py:134": "several-boxes",
    "test_open_thoughts.py:139": "several-boxes",
    "test_open_thoughts.py:144": "several-boxes",
    # float tolerance
    "test_all.py:565": "float",  # 0.0833333333333333 for \frac{1}{12}
    "test_all.py:586": "float",  # pmatrix of 0.33, 0.2 for 1/3, 1/5 (precision 2)
    "test_all.py:605": "float",  # (0.6,2.6667] for (\frac{3}{5},\frac{8}{3}]
    "test_all.py:922": "float",  # \sqrt{17} for the gold 4.123105625617661
    # a value stated unsolved
    "test_all.py:429": "unsolved",  # -x > -1 for x < 1
    "test_all.py:441": "unsolved",  # -x >= -1 for x <= 1
    # approximations
    "test_all.py:405": "approximation",  # x = 5+5+1 = 1/3 \approx 11 for x = 1/3
    "test_all.py:417": "approximation",  # x\approx11 for 11
    "test_all.py:423": "approximation",  # x=1/3\approx1.3 for 1/3
    # relation chains
    "test_all.py:388": "relation-chain",  # x = 5+5+1 = 7 =11 for x = 11
    "test_all.py:399": "relation-chain",
    "test_all.py:452": "relation-chain",  # 0 for the gold 1 = \zzz = x = 0
    "test_all.py:461": "relation-chain",  # z = 3+3 = 2 for z = 1 + 1 = 2
    "test_all.py:462": "relation-chain",
    # doubly escaped TeX
    "test_all.py:211": "double-escaped",  # \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}
    "test_all.py:675": "double-escaped",  # gold \\left(\\frac{1}{5},\\frac{1}{6}\\right)
    "test_all.py:681": "double-escaped",
    "test_all.py:748": "double-escaped",
    "test_all.py:888": "double-escaped",  # gold -2 \\le x \\le 7
    "test_all.py:894": "double-escaped",
    "test_all.py:901": "double-escaped",  # -2 \\le x \\le 7 for x \in [-2,7]
    # decimal comma
    "test_all.py:70": "decimal-comma",  # 1000,99 for 1000.99
    "test_all.py:71": "decimal-comma",  # 1.22 for 1,22
    "test_all.py:87": "decimal-comma",  # 0.111 for 0,111
    # a word that is not a unit
    "test_all.py:175": "not-a-unit",  # 28 percentage for 28\%
    # the last box is the answer
    "test_all.py:810": "last-box",  # \boxed{255} ... "The final answer is $10,455$"
    # brackets
    "test_all.py:754": "brackets",  # {1,3} (renders 1,3) for (1,3)
    # multisets
    "test_numina_cases.py:9": "repeated-item",  # (3,17,3,7) listed twice
    "test_numina_cases.py:96": "repeated-item",
    # identities
    "test_all.py:569": "identity",  # \sec^2(y) for \tan^2(y)+1
    # solving or the question
    "test_numina_cases.py:24": "needs-solving",  # z \in [-3/2,-1] \cup [1,3/2] for 1\leq|z|\leq 3/2
    "test_numina_cases.py:54": "needs-solving",  # (5,2),(7,2) for p=5,q=2;p=7,q=2
    # labels
    "test_numina_cases.py:34": "labels-lost",  # 4, 5 for AB=4,CD=5
    "test_numina_cases.py:111": "labels-lost",  # -5, \frac{14}{3} for x = -5,\ p = \frac{14}{3}
}


def _records() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = DATA.read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


HEADER, CASES = _records()
KEPT = [case for case in CASES if case["rlvr"]["kept"]]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("extract_math_verify_cases", SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_data_names_its_source_and_license() -> None:
    assert HEADER["source"] == "https://github.com/huggingface/Math-Verify"
    assert "Apache-2.0" in HEADER["license"] and len(HEADER["commit"]) == 40
    assert HEADER["cases"] == len(CASES) and HEADER["kept"] == len(KEPT)
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert {case["expected"] for case in CASES} == {0, 1}


def test_data_is_what_the_script_derives() -> None:
    """The stored rlvr inputs are the script's rule applied to Math-Verify's strings, so the
    data file and the documented feeding rule cannot drift apart."""
    script = _script()
    for case in CASES:
        gold, _ = script.rlvr_gold(case["gold"])
        completion, _ = script.rlvr_completion(case["prediction"])
        assert (gold, completion) == (case["rlvr"]["gold"], case["rlvr"]["completion"]), case["id"]


def test_deliberate_list_is_well_formed() -> None:
    kept_ids = {case["id"] for case in KEPT}
    assert set(DELIBERATE) <= kept_ids, sorted(set(DELIBERATE) - kept_ids)
    assert set(DELIBERATE.values()) == set(CATEGORIES), "every category used and explained"


@pytest.mark.parametrize("case", KEPT, ids=[case["id"] for case in KEPT])
def test_case_agrees_with_math_verify_or_is_deliberate(case: dict[str, Any]) -> None:
    gold, completion = case["rlvr"]["gold"], case["rlvr"]["completion"]
    verdict = int(boxed_math(completion, gold))
    expected = case["expected"]
    category = DELIBERATE.get(case["id"])
    shown = f"boxed_math({completion[-300:]!r}, {gold!r})"
    if category is None:
        try:
            boxed_math.check_answer(gold)  # type: ignore[attr-defined]
        except ValueError as refused:
            pytest.fail(f"{case['id']}: check_answer refuses the gold {gold!r}: {refused}")
        assert verdict == expected, f"{case['id']}: {shown} = {verdict}, Math-Verify says {expected}"
    else:
        assert verdict != expected, (
            f"{case['id']} is listed as deliberate ({category}) but now agrees with Math-Verify: "
            "remove it from DELIBERATE"
        )
