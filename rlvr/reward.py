"""(2) Scoring a batch of completions: reward terms, weights, missing rewards, per-term metrics.

The reward of a completion is the weighted sum of its terms (`reward.functions` with
`reward.weights`, plus DAPO's overlong term when `reward.overlong_buffer_frac > 0`). A term is

- a registered verifier, `f(completion, answer) -> float`, called once per completion, or
- any function with TRL's reward signature, named by import path (`mypkg.rewards:brevity`):
  `f(prompts, completions, **columns) -> list[float | None]`, called once per batch with the
  columns `answer`, `solution`, `level`, `completion_lengths` and the example's extra fields.

A value that is None, NaN or inf, or a call that raises, makes that term *missing* for that
completion; a completion with any missing term (of non-zero weight) has a missing reward (NaN),
which the advantage step leaves out of its group statistics and the loss leaves out entirely.
Every missing value and every error is counted per term, never scored as 0 in silence.
"""

from __future__ import annotations

import importlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rlvr.algorithms import overlong_penalty
from rlvr.config import ConfigError, RewardConfig
from rlvr.data import Example
from rlvr.verifiers import VERIFIERS
from rlvr.verifiers.pool import VerifierPool


RESERVED_NAMES = {"overlong", "mean", "std", "missing", "frac_groups_all_equal", "kl_sequence"}


class RewardError(RuntimeError):
    """Too many rewards are missing for the run to mean anything."""


@dataclass
class TermScores:
    values: list[float | None]  # None = missing
    errors: int = 0
    first_error: str | None = None
    timeouts: int = 0


@dataclass
class RewardTerm:
    name: str  # the metrics key: reward/<name>
    weight: float
    fn: Callable[..., Any]
    batched: bool  # True: TRL signature, one call per batch
    pool: VerifierPool | None = None  # worker processes with a hard per-item timeout

    def score(self, prompts: list[str], completions: list[str], examples: list[Example], lengths: list[int]) -> TermScores:
        if self.batched:
            return self._score_batched(prompts, completions, examples, lengths)
        if self.pool is not None:
            result = self.pool.score(completions, [e.answer for e in examples])
            values = []
            for v in result.scores:
                try:
                    values.append(_as_reward(v))
                except TypeError:
                    values.append(None)
                    result.errors += 1
            first = result.messages[0] if result.messages else None
            return TermScores(values, result.errors, first, result.timeouts)
        out = TermScores([])
        for completion, example in zip(completions, examples):
            try:
                out.values.append(_as_reward(self.fn(completion, example.answer)))
            except Exception as err:  # a verifier that raises on one sample must not stop the run
                out.values.append(None)
                out.errors += 1
                out.first_error = out.first_error or f"{type(err).__name__}: {err}"
        return out

    def _score_batched(self, prompts, completions, examples, lengths) -> TermScores:
        columns: dict[str, list[Any]] = {
            "answer": [e.answer for e in examples],
            "solution": [e.solution for e in examples],
            "level": [e.level for e in examples],
            "completion_lengths": list(lengths),
        }
        for key in sorted({k for e in examples for k in e.info} - {"prompts", "completions"}):  # TRL's own arguments win
            columns.setdefault(key, [e.info.get(key) for e in examples])
        try:
            raw = self.fn(prompts=prompts, completions=completions, **columns)
            if len(raw) != len(completions):
                raise ValueError(f"returned {len(raw)} rewards for {len(completions)} completions")
            values = [_as_reward(v) for v in raw]
        except Exception as err:
            return TermScores([None] * len(completions), len(completions), f"{type(err).__name__}: {err}")
        return TermScores(values)


def _as_reward(value: Any) -> float | None:
    """A finite float, or None for a missing reward (None, NaN, inf). Anything else is an error."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()  # a NumPy scalar (np.float32(0.5), np.bool_(True), ...)
    if not isinstance(value, numbers.Real):  # bool is a Real: True = 1.0, as TRL's reward functions may return
        raise TypeError(f"a reward must be a number or None, got {type(value).__name__}")
    value = float(value)
    return value if math.isfinite(value) else None


def build_reward_terms(cfg: RewardConfig) -> list[RewardTerm]:
    """Resolve `reward.functions` (registry names or import paths) before any work starts.
    With reward.workers > 0 each registered verifier gets a worker pool: `close_reward_terms`."""
    weights = cfg.weights or [1.0] * len(cfg.functions)
    terms, seen = [], set()
    for i, (spec, weight) in enumerate(zip(cfg.functions, weights)):
        if spec in VERIFIERS:
            name, fn, batched = spec, VERIFIERS[spec], False
        else:
            module_name, attr = spec.split(":")
            try:
                fn = getattr(importlib.import_module(module_name.strip()), attr.strip())
            except (ImportError, AttributeError) as err:
                raise ConfigError(f"reward.functions[{i}]: cannot import {spec!r}: {err}") from None
            if not callable(fn):
                raise ConfigError(f"reward.functions[{i}]: {spec!r} is not callable")
            name, batched = attr.strip(), True
        if name in seen or name in RESERVED_NAMES:  # reward/<name> must not overwrite the step's own reward/ metrics
            name = f"{name}_{i}"
        seen.add(name)
        pool = VerifierPool(spec, workers=cfg.workers, timeout_s=cfg.timeout_s) if cfg.workers and not batched else None
        terms.append(RewardTerm(name, float(weight), fn, batched, pool))
    return terms


def close_reward_terms(terms: list[RewardTerm]) -> None:
    for term in terms:
        if term.pool is not None:
            term.pool.close()


@dataclass
class Scores:
    total_B: torch.Tensor  # weighted sum per completion; NaN where missing
    terms: dict[str, TermScores] = field(default_factory=dict)

    def metrics(self) -> dict[str, float | int | None]:
        """reward/<term> (mean over present values), reward/<term>/missing and /errors."""
        out: dict[str, float | int | None] = {}
        for name, t in self.terms.items():
            present = [v for v in t.values if v is not None]
            out[f"reward/{name}"] = sum(present) / len(present) if present else None
            out[f"reward/{name}/missing"] = len(t.values) - len(present)
            out[f"reward/{name}/errors"] = t.errors
            out[f"reward/{name}/timeouts"] = t.timeouts
        return out

    @staticmethod
    def merge(parts: list["Scores"]) -> "Scores":
        """Scores of several generation rounds as one (for the step's metrics)."""
        merged = Scores(torch.cat([p.total_B for p in parts]))
        for name in parts[0].terms:
            ts = [p.terms[name] for p in parts]
            merged.terms[name] = TermScores(
                [v for t in ts for v in t.values], sum(t.errors for t in ts), next((t.first_error for t in ts if t.first_error), None),
                sum(t.timeouts for t in ts),
            )
        return merged

    def problems(self) -> str:
        return "; ".join(
            f"{name}: {sum(v is None for v in t.values)} missing, {t.errors} errors, {t.timeouts} timeouts"
            + (f" (first: {t.first_error})" if t.first_error else "")
            for name, t in self.terms.items()
            if t.errors or any(v is None for v in t.values)
        )


def score_completions(
    terms: list[RewardTerm],
    cfg: RewardConfig,
    prompts: list[str],
    completions: list[str],
    examples: list[Example],
    lengths: list[int],
    max_new_tokens: int,
) -> Scores:
    """Every term on every completion, combined by weight."""
    scores = Scores(torch.zeros(len(completions)))
    for term in terms:
        t = term.score(prompts, completions, examples, lengths)
        scores.terms[term.name] = t
        if term.weight != 0.0:
            values = torch.tensor([float("nan") if v is None else v for v in t.values])
            scores.total_B += term.weight * values  # NaN (missing) stays NaN
    if cfg.overlong_buffer_frac > 0:
        buffer = max(1, round(cfg.overlong_buffer_frac * max_new_tokens))
        penalty_B = overlong_penalty(torch.tensor(lengths), max_new_tokens, buffer, cfg.overlong_penalty)
        scores.terms["overlong"] = TermScores(penalty_B.tolist())
        scores.total_B += penalty_B
    return scores
