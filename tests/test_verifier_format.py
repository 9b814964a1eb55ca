"""The think-format verifier: exactly one <think>...</think> block, then an answer."""

from __future__ import annotations

import pytest

from rlvr.verifiers.format import think_format
from rlvr.verifiers.registry import get_verifier

GOOD = [
    "<think>2 + 2 = 4</think> The answer is 4.",
    "<think>\nstep 1\nstep 2\n</think>\n\\boxed{4}",
    "  \n<think>x</think>4",  # leading whitespace before the block
]
BAD = [
    "",
    "The answer is 4.",  # no block
    "4 <think>why</think> 4",  # text before the block
    "<think>a</think>",  # no answer
    "<think>a</think>   \n ",  # blank answer
    "<think></think> 4",  # empty reasoning
    "<think> \n </think> 4",  # blank reasoning
    "<think>a</think> 4 <think>b</think> 5",  # two blocks
    "<think>a <think>b</think> c</think> 4",  # nested
    "<think>a</think> 4 </think>",  # stray close
    "<think>a 4",  # unclosed
    "</think> 4 <think>a",  # reversed
    "<THINK>a</THINK> 4",  # the tags are case-sensitive
    "<think >a</think> 4",
    None,
    b"<think>a</think> 4",
]


@pytest.mark.parametrize("completion", GOOD)
def test_well_formed_scores_one(completion: str) -> None:
    assert think_format(completion, "ignored") == 1.0


@pytest.mark.parametrize("completion", BAD)
def test_malformed_scores_zero(completion: object) -> None:
    assert think_format(completion, "4") == 0.0  # type: ignore[arg-type]


def test_registered_and_ignores_the_answer() -> None:
    verifier = get_verifier("think_format")
    assert verifier("<think>a</think> 5", "4") == 1.0  # form only, never correctness


# ----------------------------------------------------------------------------- brevity


def test_brevity_pays_only_right_answers_and_shorter_ones_more() -> None:
    from rlvr.verifiers.conciseness import brevity

    worked, bare, long = "7+6=13\n\\boxed{13}", "\\boxed{13}", "Let me think. " * 20 + "\\boxed{13}"
    assert brevity(bare, "13") > brevity(worked, "13") > brevity(long, "13") > 0.0  # a long honest answer still scores
    assert brevity(bare, "13") == pytest.approx(64 / (64 + len(bare)))
    for wrong in ("\\boxed{12}", "", "13", "\\boxed{13} or \\boxed{12}", None):
        assert brevity(wrong, "13") == 0.0  # type: ignore[arg-type]  # wrong, unboxed, hedged: nothing, however short
    assert get_verifier("brevity") is brevity and max(brevity("\\boxed{1}", "1", budget=b) for b in (1, 64, 10**6)) <= 1.0
