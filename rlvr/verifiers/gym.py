"""reasoning-gym's own scorers as a verifier (PyPI `reasoning-gym`: procedural generators for
100+ verifiable tasks, each with its scorer).

A row from `data.source = "reasoning_gym"` (rlvr/tasks/gym.py) carries its task and the
generator's metadata; the completion's last `\\boxed{}` is handed to that task's `score_answer`
exactly as written (no box: 0). The scorer is the task's own: some give partial credit (e.g.
basic_arithmetic scores "-4.0" for "-4" at 0.5), and held-out accuracy counts full marks only. A
row without reasoning-gym metadata is not this verifier's to judge (None).
"""

from __future__ import annotations

import functools
from typing import Any

from rlvr.verifiers.math import extract_last_boxed


@functools.lru_cache(maxsize=None)
def _scorer(task: str):
    try:
        import reasoning_gym
    except ImportError:
        raise RuntimeError("the reasoning_gym verifier needs the reasoning-gym package: pip install 'rlvr[gym]'") from None
    return reasoning_gym.get_score_answer_fn(task)


def reasoning_gym(completion: str, answer: str, **fields: Any) -> float | None:
    """The row's own reasoning-gym task scores the completion's last \\boxed{} (0 without one).
    `fields`: the row's (its `metadata` and `question` from the generator)."""
    metadata = fields.get("metadata")
    if not isinstance(metadata, dict) or "source_dataset" not in metadata:
        return None
    boxed = extract_last_boxed(completion)
    if boxed is None:
        return 0.0
    entry = {"question": fields.get("question", ""), "answer": answer, "metadata": metadata}
    return float(_scorer(metadata["source_dataset"])(answer=boxed.strip(), entry=entry))
