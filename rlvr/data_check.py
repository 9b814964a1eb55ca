"""`rlvr data-check [CONFIG] [overrides]`: what in the data would cap or fake a run, before one starts.

    rlvr data-check                               the lab's own task
    rlvr data-check my_run.toml --max-majority 0.1

Bad data does not crash a run; it quietly caps it or lets it score for free. Over the config's
train and held-out splits (`load_splits`, exactly what a run reads) this counts:

- **overlap**: held-out prompts also in training, compared exactly and after normalising (case,
  whitespace, and numbers: `3.50` and `3.5`, `007` and `7` are one number). Held-out accuracy on
  those measures memory, not skill;
- **gold in prompt**: rows whose gold answer appears in their own prompt as a whole number or word
  (`... 2 + 0 ...` with gold `2`): any reward that finds the answer anywhere pays for an echo;
- **unmatchable golds**: golds the configured correctness term can never match (its check_answer);
- **majority baseline**: the share of held-out problems whose gold is the most common one, the
  accuracy of always saying it;
- **duplicates** within each split (the threshold is on held-out's: a generated training stream
  repeats small problems by design), and rows per level and per source (a `source` field, or the
  mix's task).

Each share has a threshold (the options below); above one, the exit status is 1 and the line says
which. `rlvr train` and `rlvr lab` print the one-line summary (`summary_line`) when they start.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from rlvr.data import Example

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_SPACE = re.compile(r"\s+")


def normalized(text: str) -> str:
    """Case-folded, whitespace collapsed, every number in its shortest form.

    >>> normalized("What is  007 + 3.50?\\n") == normalized("what is 7 + 3.5?")
    True
    """
    def number(match: re.Match) -> str:
        value = float(match.group(0))
        return str(int(value)) if value.is_integer() else repr(value)

    return _SPACE.sub(" ", _NUMBER.sub(number, text.casefold())).strip()


def gold_in_prompt(prompt: str, answer: str) -> bool:
    """The gold answer stands in the prompt as a whole token (numbers compared by value, words whole).

    >>> gold_in_prompt("What is 12 + 0?", "12"), gold_in_prompt("What is 112 + 3?", "12"), gold_in_prompt("x", "")
    (True, False, False)
    """
    gold = normalized(answer)
    if not gold:
        return False
    return re.search(r"(?<![\w.])" + re.escape(gold) + r"(?![\w]|\.\d)", normalized(prompt)) is not None


@dataclass(frozen=True)
class Thresholds:
    max_overlap: float = 0.0  # share of held-out prompts also in training (normalised)
    # share of rows (both splits) whose gold stands in their prompt: arithmetic's small numbers recur as operands
    # (the lab: 30%, '9+7*0=' -> 9), so the default only catches data where it is the rule; set it lower for text tasks
    max_gold_in_prompt: float = 0.5
    max_unmatchable: float = 0.0  # share of rows whose gold the correctness term cannot match
    max_majority: float = 0.2  # held-out share of the most common gold
    max_duplicates: float = 0.0  # share of held-out prompts that repeat an earlier one (normalised); training's are reported
    # (a generated stream repeats small problems by design: the lab's training split, 10%)


def source_of(example: Example) -> str:
    info = example.info if isinstance(example.info, dict) else {}
    return str(info.get("source") or info.get("task") or "data")


def data_report(train: Sequence[Example], held_out: Sequence[Example], answer_ok: Callable[[Example], object] | None = None) -> dict:
    """Every count of the module doc, as plain numbers (shares of the rows they are over). `answer_ok(example)`: True
    when the correctness term can match the row's gold (`rlvr.reward.answer_check`), else its reason."""
    train_exact = {e.prompt for e in train}
    train_norm = {normalized(e.prompt) for e in train}
    exact = sum(e.prompt in train_exact for e in held_out)
    near = sum(normalized(e.prompt) in train_norm for e in held_out)
    rows = [*train, *held_out]
    in_prompt = [e for e in rows if gold_in_prompt(e.prompt, e.answer)]
    unmatchable = [e for e in rows if answer_ok is not None and answer_ok(e) is not True]
    golds = Counter(normalized(e.answer) for e in held_out)
    top, top_count = golds.most_common(1)[0] if golds else ("", 0)

    def duplicates(split: Sequence[Example]) -> int:
        return len(split) - len({normalized(e.prompt) for e in split})

    def share(count: int, total: int) -> float:
        return count / total if total else 0.0

    return {
        "rows": {"train": len(train), "held_out": len(held_out)},
        "overlap": {"exact": exact, "normalized": near, "share": share(near, len(held_out))},
        "gold_in_prompt": {"count": len(in_prompt), "share": share(len(in_prompt), len(rows)), "examples": [e.prompt for e in in_prompt[:3]]},
        "unmatchable": {"count": len(unmatchable), "share": share(len(unmatchable), len(rows)),
                        "examples": [e.answer for e in unmatchable[:3]]},
        "majority": {"answer": top, "share": share(top_count, len(held_out))},
        "duplicates": {"train": duplicates(train), "held_out": duplicates(held_out), "share": share(duplicates(held_out), len(held_out))},
        "by_level": {split: dict(sorted(Counter(str(e.level) for e in rows_).items())) for split, rows_ in (("train", train), ("held_out", held_out))},
        "by_source": {split: dict(sorted(Counter(source_of(e) for e in rows_).items())) for split, rows_ in (("train", train), ("held_out", held_out))},
    }


def failures(report: dict, limits: Thresholds) -> list[str]:
    """Each share above its threshold, as a line naming the option that sets it."""
    checks = [("overlap", "held-out prompts also in training", limits.max_overlap, "--max-overlap"),
              ("gold_in_prompt", "rows whose gold answer stands in their own prompt", limits.max_gold_in_prompt, "--max-gold-in-prompt"),
              ("unmatchable", "golds the correctness term can never match", limits.max_unmatchable, "--max-unmatchable"),
              ("majority", f"held-out problems whose gold is the most common one ({report['majority']['answer']!r})", limits.max_majority,
               "--max-majority"),
              ("duplicates", "held-out prompts repeating an earlier one", limits.max_duplicates, "--max-duplicates")]
    return [f"{key}: {report[key]['share']:.1%} of {what}, above {option} = {limit:g}"
            for key, what, limit, option in checks if report[key]["share"] > limit]


def summary_line(report: dict) -> str:
    """One line: what a run prints when it starts."""
    r = report
    return (f"data: {r['rows']['train']} train / {r['rows']['held_out']} held-out rows; overlap {r['overlap']['normalized']} "
            f"({r['overlap']['share']:.1%}), gold in prompt {r['gold_in_prompt']['share']:.1%}, unmatchable golds "
            f"{r['unmatchable']['count']}, majority answer {r['majority']['share']:.1%}, duplicates {r['duplicates']['train']} train / "
            f"{r['duplicates']['held_out']} held-out (rlvr data-check)")
