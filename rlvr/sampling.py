"""How completions are drawn: one frozen settings object, checked once, for every stage that samples.

RL rollouts, held-out evaluation and rejection sampling each build one `Sampling` from their config
section, once per run (`cfg.rollout.sampling()`, `cfg.eval.sampling(...)`, `cfg.rft.sampling(...)`),
and hand it to the sampler (`rlvr/rollout/sampler.py`), which hands it to `rollout.generate`. A bad
value is refused when the object is built, by the name of its field (`InvalidSampling`); the config
turns that into an error naming the key the user wrote (`rollout.top_p: must be in (0, 1]`).

Nothing here imports torch: reading a config must stay cheap.

>>> Sampling(max_new_tokens=8, top_p=0.9).as_greedy()
Sampling(max_new_tokens=8, temperature=1.0, top_p=0.9, top_k=0, min_p=0.0, greedy=True, stop=(), budget=None)
>>> Sampling(max_new_tokens=8, temperature=0)
Traceback (most recent call last):
...
rlvr.sampling.InvalidSampling: temperature: must be > 0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


class InvalidSampling(ValueError):
    """A sampling setting out of its range; `field` names it (`stop[1]` for one of the stop strings)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


@dataclass(frozen=True)
class BudgetForcing:
    """A thinking budget (s1's budget forcing, Muennighoff et al. 2025; Qwen3's thinking budget):
    after `tokens` thinking tokens inside `open` ... `close`, `forced` is written (it contains
    `close`) and the model answers from there. Enforced per row by `rollout.controls.ThinkingBudget`."""

    open: str
    close: str
    forced: str
    tokens: int


@dataclass(frozen=True)
class Sampling:
    """What a sampler draws: how many tokens at most, from which distribution, and what ends or
    steers a completion besides EOS."""

    max_new_tokens: int  # longest completion; longer ones are cut (Rollouts.truncated_B)
    temperature: float = 1.0  # logits are divided by it (the update scores at the same temperature)
    top_p: float = 1.0  # nucleus mass kept (1.0 = off)
    top_k: int = 0  # keep the k most likely tokens (0 = off)
    min_p: float = 0.0  # drop tokens below min_p times the most likely one's probability (0 = off; Nguyen et al. 2024)
    greedy: bool = False  # the most likely token at every step (the four settings above then do nothing)
    stop: tuple[str, ...] = ()  # a completion also ends when it ends with one of these (kept in it, as EOS is)
    budget: BudgetForcing | None = None  # a thinking budget; None: thinking runs free

    def __post_init__(self) -> None:
        # A list from a config file becomes a tuple, so the object stays hashable and frozen.
        object.__setattr__(self, "stop", tuple(self.stop))
        _check(self.max_new_tokens > 0, "max_new_tokens", "must be > 0")
        _check(self.temperature > 0, "temperature", "must be > 0")
        _check(0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]")
        _check(self.top_k >= 0, "top_k", "must be >= 0")
        _check(0.0 <= self.min_p < 1.0, "min_p", "must be in [0, 1)")
        for i, stop in enumerate(self.stop):
            _check(bool(stop), f"stop[{i}]", "is empty")

    def as_greedy(self) -> "Sampling":
        """The same limits and controls, decoded greedily (evaluation's one completion per problem)."""
        return dataclasses.replace(self, greedy=True)


def _check(ok: bool, field: str, why: str) -> None:
    if not ok:
        raise InvalidSampling(field, why)
