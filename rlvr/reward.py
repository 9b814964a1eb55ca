"""(2) Scoring a batch of completions: reward terms, weights, missing rewards, per-term metrics.

The reward of a completion is the weighted sum of its terms (`reward.functions` with
`reward.weights`, plus DAPO's overlong term when `reward.overlong_buffer_frac > 0`). Each term is
resolved and called as :mod:`rlvr.verifiers.contract` says (the same way the worker pool and
`rlvr audit-reward` call it): a per-item verifier `f(completion, answer, **fields)` once per
completion, a TRL-batched function `f(prompts, completions, **columns)` once per batch (a
`reward_model:<where>` term is one: rlvr.verifiers.reward_model; so is `judge`, an LLM judge:
rlvr.verifiers.judge, whose cache hits, calls, retries and malformed replies are logged as
reward/judge/<counter>).

Missing values follow TRL: a term that returns None (or NaN) for a row does not score that row,
and the row's reward is the weighted sum of the terms that do (multi-task data: a code term
returns None on math rows). A row no term scores has a missing reward (NaN), which the advantage
step leaves out of its group statistics and the loss leaves out entirely. Two differences from
TRL, both towards not training on a half-computed reward: a term that *fails* on a row (raises,
returns junk or an infinity, times out) makes that row missing whatever the other terms say; and
only terms of non-zero weight count as scoring a row (a weight-0 term is a metric, and the
overlong term is shaping, not a verdict). Every None, error and timeout is counted per term.

The correctness term (`reward.correctness`, default the first) is what held-out accuracy and
dynamic sampling read: `correctness_term(terms)`, `Scores.correct_B`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from rlvr.algorithms import overlong_penalty
from rlvr.config import ConfigError, RewardConfig
from rlvr.data import Example
from rlvr.errors import RunStopped
from rlvr.verifiers.contract import (Item, Reward, as_reward, batch_columns, run_awaitable, chat_completions, example_fields, is_timeout,
                                    resolve_reward, reward_from_callable)
from rlvr.verifiers.pool import PoolTiming, VerifierPool
from rlvr.verifiers.reward_model import NAME as REWARD_MODEL_NAME, is_reward_model


RESERVED_NAMES = {"overlong", "mean", "std", "missing", "frac_groups_all_equal", "kl_sequence"}


class RewardError(RunStopped):
    """Too many rewards are missing for the run to mean anything, or a reward's workers failed."""


@dataclass
class TermScores:
    values: list[float | None]  # None = this term did not score the row (returned None/NaN, or failed)
    errors: int = 0
    first_error: str | None = None
    timeouts: int = 0
    failed: set[int] = field(default_factory=set)  # rows where the term raised, returned junk or timed out
    pool: PoolTiming | None = None  # the worker pool's timing when one scored the term (reward.workers > 0)
    counts: dict[str, int] = field(default_factory=dict)  # what the function counted (take_counts: a judge's cache_hits, calls, ...)

    @staticmethod
    def of_rows(values: list[float | None], errors: list[str | None]) -> "TermScores":
        """Rows with an error failed: a timeout (a TimeoutError the function raised or returned) counts in
        `timeouts`, any other in `errors`."""
        failed = {i for i, e in enumerate(errors) if e}
        timeouts = sum(is_timeout(e) for e in errors)
        return TermScores(values, len(failed) - timeouts, next((e for e in errors if e), None), timeouts, failed)


@dataclass
class RewardTerm:
    name: str  # the metrics key: reward/<name>
    weight: float
    fn: Callable[..., Any] | None
    batched: bool  # True: TRL signature, one call per batch (as the contract detects it)
    pool: VerifierPool | None = None  # worker processes with a hard per-item timeout
    correctness: bool = False  # the term that judges correctness (reward.correctness)
    reward: Reward | None = None  # how `fn` is called; built from `fn` when not given
    route_field: str = ""  # reward.route_field: rows naming another term there are not this term's to score

    def __post_init__(self) -> None:
        if self.reward is None and self.fn is not None:
            self.reward = reward_from_callable(self.fn, self.name)
        if self.reward is not None and self.reward.batched != self.batched:
            kind = "TRL-batched" if self.reward.batched else "per item"
            raise ValueError(f"reward term {self.name!r}: its signature makes it {kind}, not batched={self.batched}")

    def score(
        self,
        prompts: list[str],
        completions: list[str],
        examples: list[Example],
        lengths: list[int],
        *,
        prompt_messages: list[list[dict[str, str]]] | None = None,
        completion_ids: list[list[int]] | None = None,
        conversation: Conversation | None = None,
    ) -> TermScores:
        """This term on every completion. `prompt_messages`, `completion_ids` and `conversation`: see
        score_completions. On routed data (reward.route_field) a row that names another term gets None:
        not scored here, and not missing either (its own term scores it)."""
        mine = [i for i, e in enumerate(examples) if route_of(e, self.route_field) in (None, self.name)]
        if len(mine) < len(examples):
            def pick(items):
                return [items[i] for i in mine] if items is not None else None
            part = self._score(pick(prompts), pick(completions), pick(examples), pick(lengths), pick(prompt_messages), pick(completion_ids),
                               conversation.select(mine) if conversation is not None else None) \
                if mine else TermScores([], pool=PoolTiming() if self.pool is not None else None)  # pooled: its time/verify/ keys every step
            scores = _scatter(part, mine, len(examples))
        else:
            scores = self._score(prompts, completions, examples, lengths, prompt_messages, completion_ids, conversation)
        take_counts = getattr(self.reward, "take_counts", None)
        if take_counts is not None:  # what the function counted while it scored (a judge: cache hits, calls, retries, malformed)
            scores.counts = dict(take_counts())
        return scores

    def _score(self, prompts, completions, examples, lengths, prompt_messages, completion_ids, conversation=None) -> TermScores:
        extra = conversation.columns() if conversation is not None else {}
        if self.batched:
            assert self.reward is not None
            chat = prompt_messages is not None
            if conversation is not None:  # TRL: a tool rollout's completion is its messages, and environments= reach the function
                chat_rows = conversation.messages
                extra = {**extra, **({"environments": conversation.environments} if conversation.environments is not None else {})}
            else:
                chat_rows = chat_completions(completions) if chat else completions
            try:
                values, errors = self.reward.call_batch(
                    prompt_messages if chat else prompts, chat_rows if chat or conversation is not None else completions,
                    {**batch_columns(examples, lengths), **extra}, completion_ids,
                )
            except Exception as err:  # the whole call failed: every row of the batch
                message = f"{type(err).__name__}: {err}"
                return TermScores([None] * len(completions), len(completions), message, failed=set(range(len(completions))))
            return TermScores.of_rows(values, errors)
        rows = [{**example_fields(e), **{k: v[i] for k, v in extra.items()}} for i, e in enumerate(examples)]
        if self.pool is not None:
            items = [Item(e.answer, row) for e, row in zip(examples, rows)]
            try:
                result = self.pool.score(completions, items)
            except RuntimeError as err:  # the workers cannot run at all (not one bad item)
                raise RewardError(f"reward term {self.name!r}: {err}") from None
            failed = {i for i, f in enumerate(result.failed) if f}
            first = result.messages[0] if result.messages else None
            return TermScores(list(result.scores), result.errors, first, result.timeouts, failed, result.timing())
        assert self.reward is not None
        values, errors = self.reward.score_items(completions, [e.answer for e in examples], rows)
        return TermScores.of_rows(values, errors)


@dataclass(frozen=True)
class Conversation:
    """What reward terms see of multi-turn rollouts (rollout/multiturn.py's ToolTrace, as plain data):
    each row's completion as chat messages, its tool calls and turns, its environment."""

    messages: list[list[dict[str, Any]]]
    tool_calls: list[list[dict[str, Any]]]  # {"name", "arguments", "outcome"} per call
    turns: list[int]
    environments: list[Any] | None = None
    reward_kinds: tuple[str, ...] = ()  # the run's environment classes with get_reward(): a term each, every step

    @staticmethod
    def of(trace: Any) -> Conversation | None:
        if trace is None:
            return None
        return Conversation(trace.conversations, trace.call_records(), trace.turns, trace.environments, trace.reward_kinds)

    def select(self, rows: list[int]) -> Conversation:
        return Conversation([self.messages[i] for i in rows], [self.tool_calls[i] for i in rows], [self.turns[i] for i in rows],
                            [self.environments[i] for i in rows] if self.environments is not None else None, self.reward_kinds)

    def columns(self) -> dict[str, list[Any]]:
        """The columns a function may ask for by name (per item: a parameter `tool_calls` or `turns`)."""
        return {"tool_calls": self.tool_calls, "turns": self.turns}

    def environment_rewards(self) -> dict[str, list[float | None]]:
        """TRL's rule: an environment class with get_reward() is a reward term named after the class, of weight 1,
        scoring the rows whose environment is exactly that class (None elsewhere)."""
        if self.environments is None:
            return {}
        return {kind: [_get_reward(e) if type(e).__name__ == kind else None for e in self.environments] for kind in self.reward_kinds}


def _get_reward(environment: Any) -> Any:
    """An environment's reward, or what it raised (counted as that row's error, never the run's end)."""
    try:
        value = environment.get_reward()
        return run_awaitable(value) if inspect.isawaitable(value) else value
    except Exception as err:  # noqa: BLE001 - a user's environment may fail in any way
        return err


def build_reward_terms(cfg: RewardConfig) -> list[RewardTerm]:
    """Resolve `reward.functions` (after importing `reward.imports`) and run each verifier's
    preflight (python_code: the sandbox runs a known-good program), before any model loads.
    Raises ConfigError naming the entry. With reward.workers > 0 each per-item verifier gets a
    worker pool: call `close_reward_terms`."""
    weights = cfg.weights or [1.0] * len(cfg.functions)
    rewards = resolve_rewards(cfg)
    names = metric_names([reward.name for reward in rewards])
    chosen = _correctness_index(cfg, names)
    preflown: set[int] = set()
    for i, reward in enumerate(rewards):
        check = getattr(reward, "preflight", None)
        if check is not None and id(check) not in preflown:
            preflown.add(id(check))
            try:
                check()
            except Exception as err:
                raise ConfigError(f"reward.functions[{i}] = {cfg.functions[i]!r} cannot run here: {type(err).__name__}: {err}") from None
    terms: list[RewardTerm] = []
    try:
        for i, (reward, name, weight) in enumerate(zip(rewards, names, weights)):
            pool = VerifierPool(reward, workers=cfg.workers, timeout_s=cfg.timeout_s) if cfg.workers and not reward.batched else None
            terms.append(RewardTerm(name, float(weight), reward.fn, reward.batched, pool, correctness=i == chosen, reward=reward,
                                    route_field=cfg.route_field))
    except BaseException:
        close_reward_terms(terms)
        raise
    return terms


def term_names(cfg: RewardConfig) -> list[str]:
    """The metric names of reward.functions' terms: what a row's route (reward.route_field) must name."""
    return [r.name for r in resolve_rewards(cfg)]


def resolve_rewards(cfg: RewardConfig) -> list[Reward]:
    """`reward.functions` resolved by the contract, after `reward.imports`; ConfigError naming the entry."""
    return [resolve_reward(spec, cfg.imports, where=f"reward.functions[{i}]", config=cfg) for i, spec in enumerate(cfg.functions)]


def _correctness_index(cfg: RewardConfig, names: list[str]) -> int:
    if not cfg.correctness:
        return 0
    for i, (spec, name) in enumerate(zip(cfg.functions, names)):
        if cfg.correctness in (spec, name):
            return i
    raise ConfigError(f"reward.correctness: {cfg.correctness!r} is neither an entry of reward.functions {cfg.functions} nor a term name {names}")


def metric_names(names: list[str]) -> list[str]:
    """Each term's metrics key (reward/<name>): its reward's name, or name_<i> where an earlier term
    has that name or the step's own reward/ metrics use it (reward/mean, reward/std, ...).

    >>> metric_names(["boxed_math", "mean", "boxed_math"])
    ['boxed_math', 'mean_1', 'boxed_math_2']
    """
    keys: list[str] = []
    for i, name in enumerate(names):
        keys.append(f"{name}_{i}" if name in keys or name in RESERVED_NAMES else name)
    return keys


def correctness_name(cfg: RewardConfig) -> str:
    """The metrics key of the term that judges correctness, as `build_reward_terms` names it, read
    from the config alone: nothing is imported, so a report still draws for a run whose reward
    module is gone. A reward's name is its registered name, an import path's function name, or reward_model."""
    names = [REWARD_MODEL_NAME if is_reward_model(spec) else spec.partition(":")[2].strip().split(".")[-1] if ":" in spec else spec
             for spec in cfg.functions]
    keys = metric_names(names)
    return keys[_correctness_index(cfg, keys)]


def correctness_term(terms: list[RewardTerm]) -> RewardTerm:
    """The term that judges correctness (`reward.correctness`; the first when none is marked)."""
    return next((t for t in terms if t.correctness), terms[0])


def other_terms(terms: list[RewardTerm]) -> list[RewardTerm]:
    """Every term but the correctness term (evaluation reports their means beside accuracy)."""
    judge = correctness_term(terms)
    return [t for t in terms if t is not judge]


def answer_check(cfg: RewardConfig) -> Callable[[str], bool | str] | None:
    """The gold-answer check data loading applies (`rlvr.data.read_jsonl`'s `answer_ok`), or None.

    When the correctness term declares one (`check_answer`: boxed_math, python_code), a gold
    answer must pass the check of at least one term that declares one (on multi-task data each
    row belongs to some term: boxed_math + python_code accepts both kinds of row); otherwise the
    row is refused with each term's reason. A correctness term without a check checks nothing."""
    rewards = resolve_rewards(cfg)
    names = [r.name for r in rewards]
    if getattr(rewards[_correctness_index(cfg, names)], "check_answer", None) is None:
        return None
    checks = {r.name: r.check_answer for r in rewards if getattr(r, "check_answer", None) is not None}

    def check(answer: str, route: str | None = None) -> bool | str:
        """`route`: the row's own term (reward.route_field): only its check applies (none: nothing to check)."""
        if route is not None:
            if route not in names:
                return f"names reward term {route!r} in its {cfg.route_field!r} field, but reward.functions has {names}"
            if route not in checks:
                return True
            try:
                checks[route](answer)
                return True
            except ValueError as err:
                return str(err)
        reasons = []
        for name, check_answer in checks.items():
            try:
                check_answer(answer)
                return True
            except ValueError as err:
                reasons.append(str(err) if len(checks) == 1 else f"{name}: {err}")
        return "; ".join(reasons)

    check.route_field = cfg.route_field  # type: ignore[attr-defined]  (read by rlvr.data.parse_record)
    return check


def close_reward_terms(terms: list[RewardTerm]) -> None:
    for term in terms:
        if term.pool is not None:
            term.pool.close()


@dataclass
class Scores:
    total_B: torch.Tensor  # weighted sum per completion (reward.aggregation); NaN where missing
    terms: dict[str, TermScores] = field(default_factory=dict)
    correct_B: torch.Tensor | None = None  # the correctness term's scores; NaN where it gave none

    def metrics(self) -> dict[str, float | int | None]:
        """reward/<term> (mean over present values), reward/<term>/missing, /errors and /timeouts, and
        what the term's function counts (reward/<term>/<counter>: an LLM judge's cache_hits, calls,
        retries, malformed); for a term scored in worker processes (reward.workers > 0) also
        time/verify/<term>/seconds, /items_per_s and /slowest_item_s (`PoolTiming`)."""
        out: dict[str, float | int | None] = {}
        for name, t in self.terms.items():
            present = [v for v in t.values if v is not None]
            out[f"reward/{name}"] = sum(present) / len(present) if present else None
            out[f"reward/{name}/missing"] = len(t.values) - len(present)
            out[f"reward/{name}/errors"] = t.errors
            out[f"reward/{name}/timeouts"] = t.timeouts
            out.update({f"reward/{name}/{counter}": n for counter, n in t.counts.items()})
        for name, t in self.terms.items():  # after every reward/ key: the line reads as before with time/verify/ appended
            if t.pool is not None:
                out.update(t.pool.metrics(f"time/verify/{name}"))
        return out

    @staticmethod
    def merge(parts: list["Scores"]) -> "Scores":
        """Scores of several generation rounds as one (for the step's metrics)."""
        correct = [p.correct_B for p in parts]
        merged = Scores(torch.cat([p.total_B for p in parts]), correct_B=None if any(c is None for c in correct) else torch.cat(correct))
        for name in dict.fromkeys(n for p in parts for n in p.terms):  # a term missing from a part scored none of its rows
            ts = [p.terms.get(name) or TermScores([None] * len(p.total_B)) for p in parts]
            offsets = [sum(len(t.values) for t in ts[:k]) for k in range(len(ts))]
            timings = [t.pool for t in ts if t.pool is not None]
            merged.terms[name] = TermScores(
                [v for t in ts for v in t.values], sum(t.errors for t in ts), next((t.first_error for t in ts if t.first_error), None),
                sum(t.timeouts for t in ts), {offset + i for t, offset in zip(ts, offsets) for i in t.failed},
                sum(timings, PoolTiming()) if timings else None,
                {counter: sum(t.counts.get(counter, 0) for t in ts) for counter in dict.fromkeys(c for t in ts for c in t.counts)},
            )
        return merged

    def problems(self) -> str:
        return "; ".join(
            f"{name}: {sum(v is None for v in t.values)} not scored, {t.errors} errors, {t.timeouts} timeouts"
            + (f" (first: {t.first_error})" if t.first_error else "")
            for name, t in self.terms.items()
            if t.errors or any(v is None for v in t.values)
        )


def _scatter(part: TermScores, rows: list[int], n: int) -> TermScores:
    """A term's scores of some rows placed among n rows; the others are None (not its to score)."""
    values: list[float | None] = [None] * n
    for row, value in zip(rows, part.values):
        values[row] = value
    return TermScores(values, part.errors, part.first_error, part.timeouts, {rows[i] for i in part.failed}, part.pool, part.counts)


def score_completions(
    terms: list[RewardTerm],
    cfg: RewardConfig,
    prompts: list[str],
    completions: list[str],
    examples: list[Example],
    lengths: list[int],
    max_new_tokens: int,
    *,
    prompt_messages: Sequence[list[dict[str, str]]] | None = None,
    completion_ids: Sequence[list[int]] | None = None,
    trace: Any = None,
    group_size: int | None = None,
) -> Scores:
    """Every term on every completion, combined by weight (missing values: see the module doc).

    `prompts` are the texts the model was conditioned on. When they went through a chat template,
    pass `prompt_messages` (`rlvr.data.chat_prompts`): TRL-batched terms then get the messages as
    `prompts` and each completion as `[{"role": "assistant", "content": text}]`, as TRL passes
    them. `completion_ids` (`rlvr.rollout.completion_id_lists`: EOS included, no padding) reach
    batched terms as TRL's `completion_ids`. Per-item verifiers always get the completion text.

    `trace` (multi-turn rollouts: rollout.multiturn.ToolTrace): batched terms get each completion as
    its messages (assistant turns with their tool_calls, tool results) and `environments=`; every
    term may ask for the `tool_calls` and `turns` columns; an environment with get_reward() adds its
    term (weight 1). The completion text per-item verifiers get is the model's own turns: a tool's
    output is never judged as the model's answer.

    With reward.aggregation = "normalize_then_sum" (GDPO) the total is the weighted sum of each term
    normalised within its group of `group_size` rows (which the call must hold whole).
    """
    n = len(completions)
    total_B = torch.zeros(n)
    scored_B = torch.zeros(n, dtype=torch.bool)
    failed_B = torch.zeros(n, dtype=torch.bool)
    scores = Scores(total_B)
    gdpo = cfg.aggregation == "normalize_then_sum"
    if gdpo and not group_size:
        raise ValueError("reward.aggregation = 'normalize_then_sum' normalises each term within its group: pass group_size")

    def term_values(values: list[float | None]) -> torch.Tensor:  # each row's contribution before its weight
        values_B = torch.tensor([float("nan") if v is None else v for v in values])
        return group_normalized(values_B, group_size) if gdpo else values_B

    messages = list(prompt_messages) if prompt_messages is not None else None
    ids = list(completion_ids) if completion_ids is not None else None
    conversation = Conversation.of(trace)
    for term in terms:
        t = term.score(prompts, completions, examples, lengths, prompt_messages=messages, completion_ids=ids, conversation=conversation)
        scores.terms[term.name] = t
        present_B = torch.tensor([v is not None for v in t.values], dtype=torch.bool)
        values_B = term_values(t.values)
        if term.weight != 0.0:
            total_B += torch.where(present_B, term.weight * values_B, 0.0)
            scored_B |= present_B
            if t.failed:
                failed_B[sorted(t.failed)] = True
    for kind, values in (conversation.environment_rewards() if conversation is not None else {}).items():
        t = _environment_scores(values)
        name = kind if kind not in scores.terms else f"{kind}.get_reward"  # never over a configured term's metrics
        scores.terms[name] = t
        present_B = torch.tensor([v is not None for v in t.values], dtype=torch.bool)
        total_B += torch.where(present_B, term_values(t.values), 0.0)
        scored_B |= present_B
        if t.failed:
            failed_B[sorted(t.failed)] = True
    if cfg.overlong_buffer_frac > 0:
        buffer = max(1, round(cfg.overlong_buffer_frac * max_new_tokens))
        penalty_B = overlong_penalty(torch.tensor(lengths), max_new_tokens, buffer, cfg.overlong_penalty)
        scores.terms["overlong"] = TermScores(penalty_B.tolist())
        total_B += group_normalized(penalty_B, group_size) if gdpo else penalty_B
    total_B[~scored_B | failed_B] = float("nan")
    if terms:  # the correctness term judges, or on routed data each row's own term
        judge = correctness_term(terms)
        verdicts = routed_verdicts({name: t.values for name, t in scores.terms.items()}, examples, judge)
        scores.correct_B = torch.tensor([float("nan") if v is None else v for v in verdicts])
    return scores


def group_normalized(values_B: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """GDPO's per-term step (TRL's normalize_then_sum): each value minus its group's mean, over its group's
    (unbiased) std + eps, both over the group's present values; a missing value (NaN) stays missing, and a group
    of one present value, or all equal, gives 0.

    >>> group_normalized(torch.tensor([1.0, 0.0, 0.0, float("nan")]), 2)
    tensor([ 0.7070, -0.7070,  0.0000,     nan])
    """
    v_NG = values_B.view(-1, group_size)
    present = torch.isfinite(v_NG)
    n = present.sum(dim=1, keepdim=True)
    zeroed = torch.where(present, v_NG, 0.0)
    mean = zeroed.sum(dim=1, keepdim=True) / n.clamp(min=1)
    var = torch.where(present, (v_NG - mean) ** 2, 0.0).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)
    out = (v_NG - mean) / (var.sqrt() + eps)
    return torch.where(present, out, float("nan")).view(-1)


def _environment_scores(raw: list[Any]) -> TermScores:
    values: list[float | None] = []
    errors: list[str | None] = []
    for value in raw:
        if isinstance(value, BaseException):
            values.append(None)
            errors.append(f"get_reward() raised {type(value).__name__}: {value}"[:300])
            continue
        try:
            values.append(None if value is None else as_reward(value))
            errors.append(None)
        except (TypeError, ValueError) as err:
            values.append(None)
            errors.append(f"get_reward() returned {value!r}: {err}")
    return TermScores.of_rows(values, errors)


def route_of(example: Example, route_field: str) -> str | None:
    """The reward term a row names as its own judge (reward.route_field), or None."""
    route = example.info.get(route_field) if route_field and isinstance(example.info, dict) else None
    return route if isinstance(route, str) else None


def routed_verdicts(values: dict[str, list[float | None]], examples: Sequence[Example], judge: RewardTerm) -> list[float | None]:
    """Each row's correctness: the judge's value, or on a row that names its own term, that term's
    (a reasoning-gym row is judged by its task's scorer, a code row by python_code)."""
    out = []
    for i, example in enumerate(examples):
        route = route_of(example, judge.route_field)
        out.append(values[route][i] if route in values else values[judge.name][i])
    return out
