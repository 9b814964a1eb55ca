"""Held-out evaluation: greedy accuracy, and from N samples per problem pass@k, maj@k and mean@N.

Greedy decoding gives one completion per problem: accuracy overall and per difficulty level, the
share of completions that show their work (any text before the final box) and the mean length,
so a gain can be traced to a change of behaviour. With `eval.samples = N` each problem also gets
N sampled completions (at `eval.temperature`), from which, per problem and then averaged:

- pass@k: the chance that at least one of k samples is correct, by the unbiased estimator of
  Chen et al. 2021 (`estimators.pass_at_k`), not "any of the first k";
- maj@k: the correctness of the majority answer of k samples (self-consistency), the answers
  being the correctness verifier's canonical spellings (`answer_key`), ties split evenly, an
  answer's correctness the share of its samples with full marks;
- mean@N: the mean verdict of the N samples (its expectation is the same for every k <= N).

Every figure comes with a 95% interval from a bootstrap over problems. A sample counts as
correct for pass@k and maj@k when its verdict is full marks (1.0); mean@N and greedy accuracy
average the verdicts themselves (partial credit counts). A missing verdict (None, error, timeout) is wrong
and counted.

Decoding is batched (prompts sorted by length, each prompt prefilled once for its N samples) on
the rollout engine, through the `rollout.Sampler` RL samples with, under eval's `Sampling`
(`cfg.eval.sampling(...)`; its `as_greedy()` for the greedy completions), with its own seeded
generator: an evaluation never draws from the training RNG, so evaluating during RL changes
nothing else in a run. Completions are judged as rejection sampling judges them (stages/judging.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import ConfigError, DataConfig, EvalConfig, ThinkingConfig
from rlvr.files import atomic_write_text
from rlvr.data import Example, format_prompt
from rlvr.metrics import PhaseBar
from rlvr.reward import RewardTerm
from rlvr.rollout import ToolSettings, ToolTrace, make_sampler
from rlvr.rollout.sampler import opens_thinking
from rlvr.sampling import InvalidSampling, Sampling
from rlvr.stages.estimators import bootstrap_intervals, maj_at_k, pass_at_k
from rlvr.stages.judging import judge
from rlvr.verifiers.math import extract_last_boxed


def thinking_block(completion: str, open_tag: str, close_tag: str, opened: bool = False) -> str | None:
    """The content of a completion's thinking block when it is well formed: exactly one block
    (opened in the completion, or already by the prompt when `opened`), closed, not empty, and an
    answer after it; else None.

    >>> thinking_block("<think>7+6=13</think>\\boxed{13}", "<think>", "</think>"), thinking_block("<think>a</think>", "<think>", "</think>")
    ('7+6=13', None)
    """
    text = completion if opened else completion.lstrip()
    if not opened:
        if not text.startswith(open_tag) or text.count(open_tag) != 1:
            return None
        text = text[len(open_tag):]
    elif open_tag in text:
        return None
    if text.count(close_tag) != 1:
        return None
    thought, _, answer = text.partition(close_tag)
    return thought if thought.strip() and answer.strip() else None


def shows_work(completion: str) -> bool:
    """True when there is text before the final box (a bare `\\boxed{42}` shows none, nor one
    after an empty thinking block, `<think></think>\\boxed{42}`); for an answer that is a program
    (no box), when its last ```python block holds a comment line (the code lab's worked form)."""
    head, sep, _ = completion.rpartition("\\boxed")
    if sep:
        return bool(head.replace("<think>", "").replace("</think>", "").strip())
    from rlvr.verifiers.code import extract_program  # start-up time: loads the code verifier, for program answers only

    program = extract_program(completion)
    return program is not None and any(line.lstrip().startswith("#") for line in program.splitlines())


@dataclass
class EvalResult:
    accuracy: float  # greedy
    by_level: dict[str, float]
    shows_work: float
    mean_length: float  # completion tokens, EOS included
    num_problems: int
    missing: int = 0  # verdicts the verifier could not give (scored as wrong), greedy and sampled
    samples_per_problem: int = 0  # N
    temperature: float | None = None
    sampled: dict[str, float | None] = field(default_factory=dict)  # "pass@k", "maj@k" (None: no answers to vote on), "mean@N"
    sampled_by_level: dict[str, dict[str, float | None]] = field(default_factory=dict)
    intervals: dict[str, list[float]] = field(default_factory=dict)  # 95% bootstrap over problems: "accuracy" and each sampled figure
    sampled_mean_length: float | None = None
    terms: dict[str, dict[str, float | None]] = field(default_factory=dict)  # other reward terms: mean over "greedy" / "samples"
    well_formed: float | None = None  # greedy completions whose thinking block is well formed (None: no thinking in this evaluation)
    thinking_length: float | None = None  # mean tokens inside the closed thinking blocks of the greedy completions
    budget: int | None = None  # the thinking budget the completions were decoded under (thinking.budget), None: none
    length_by_level: dict[str, float] = field(default_factory=dict)  # mean greedy completion length per level
    by_mode: dict[str, dict[str, float | None]] = field(default_factory=dict)  # problems with a mode (the fused task): greedy figures per mode
    sampled_by_mode: dict[str, dict[str, float | None]] = field(default_factory=dict)
    tools: dict[str, float] = field(default_factory=dict)  # runs with tools: the greedy conversations' tools/* figures
    without_tools: dict | None = None  # runs with tools (eval.tool_control): greedy accuracy with no tool offered
    samples: list[dict] = field(default_factory=list)  # one greedy completion per problem, with its verdict
    sampled_rows: list[dict] = field(default_factory=list)  # every sampled completion, with its verdict and answer

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("samples", "sampled_rows")}

    def figure(self, name: str) -> float | None:
        """'accuracy' or a sampled figure such as 'pass@4'."""
        return self.accuracy if name == "accuracy" else self.sampled.get(name)


def answer_key_fn(correctness: RewardTerm) -> tuple[Callable[[str], str | None], bool]:
    """How completions are grouped into votes for maj@k: the verifier's declared `answer_key`
    (boxed_math: canonical spelling), else the stripped content of the last box. The flag says
    whether the verifier declared one."""
    declared = getattr(correctness.reward, "answer_key", None) if correctness.reward is not None else None
    if declared is not None:
        return declared, True

    def last_box(completion: str) -> str | None:
        box = extract_last_boxed(completion)
        return "".join(box.split()) or None if box is not None else None

    return last_box, False


@dataclass
class _Decoded:
    texts: list[str]
    lengths: list[int]
    verdicts: list[float | None]  # the correctness term's
    terms: dict[str, list[float | None]]  # every other term's, by name
    trace: ToolTrace | None = None  # a run with tools: the conversations


class _Evaluation:
    """What one `evaluate` call shares: the model, the problems in decoding order, the terms."""

    def __init__(self, model, tokenizer, examples: list[Example], data_cfg: DataConfig, cfg: EvalConfig, correctness: RewardTerm,
                 others: list[RewardTerm], bar: PhaseBar, sampling: Sampling, engine: str, thinking: ThinkingConfig | None,
                 tools: ToolSettings | None = None) -> None:
        self.tokenizer, self.examples, self.data_cfg, self.cfg = tokenizer, examples, data_cfg, cfg
        self.correctness, self.others, self.bar = correctness, others, bar
        self.device = next(model.parameters()).device
        self.prompts = [format_prompt(tokenizer, e, data_cfg) for e in examples]
        self.order = sorted(range(len(examples)), key=lambda i: len(self.prompts[i]))  # similar lengths decode together
        try:  # before any decoding: a thinking budget's tags as this tokenizer spells them
            self.greedy = make_sampler(model, tokenizer, sampling.as_greedy(), engine, tools=tools, data_cfg=data_cfg)
            self.sampler = make_sampler(model, tokenizer, sampling, engine, tools=tools, data_cfg=data_cfg)
        except InvalidSampling as err:
            raise ConfigError(f"thinking.forced: {err.why}") from None
        self.opens = [thinking is not None and opens_thinking(p, thinking.open, thinking.close) for p in self.prompts]

    def decode(self, rows: list[int], group_size: int, generator: torch.Generator | None) -> _Decoded:
        """`group_size` completions of each of `rows` (greedy without a generator), judged by every term."""
        sampler = self.greedy if generator is None else self.sampler
        completions = sampler.sample([self.prompts[i] for i in rows], group_size, generator, examples=[self.examples[i] for i in rows])
        judged = judge(completions, [self.examples[i] for i in rows for _ in range(group_size)], self.correctness, self.others,
                       self.tokenizer, self.data_cfg)
        self.bar.advance()
        return _Decoded(completions.texts, completions.lengths, judged.verdicts, judged.terms, completions.trace)

    def batches(self, per_batch: int):
        for start in range(0, len(self.order), per_batch):
            yield self.order[start : start + per_batch]


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    data_cfg: DataConfig,
    cfg: EvalConfig,
    correctness: RewardTerm,
    bar: PhaseBar,
    sampling: Sampling,
    engine: str = "auto",
    seed: int = 0,
    others: list[RewardTerm] | None = None,
    thinking: ThinkingConfig | None = None,
    tools: ToolSettings | None = None,
) -> EvalResult:
    """Greedy completions of `examples` and, with cfg.samples = N, N sampled ones each, judged by
    the correctness term (`reward.correctness`: `rlvr.reward.correctness_term`). `sampling`: how
    they are drawn (`cfg.eval.sampling(rollout.stop, thinking)`: stop strings, a thinking budget;
    greedy for the one completion per problem). `seed` seeds the sampling generator (the same seed
    gives every model the same random numbers). `others`: more reward terms whose mean over the
    greedy and the sampled completions is reported (`terms`). `thinking`: the thinking tags, for
    the share of well-formed blocks and their length. `tools`: the run's tool settings
    (`ToolSettings.from_config(cfg.rollout)`; None: single-turn). With tools, the greedy conversations' tools/*
    figures are reported (`tools`, each sample's `conversation`), and with eval.tool_control the
    greedy accuracy of the same model with no tool offered (`without_tools`)."""
    if cfg.max_problems:
        examples = examples[: cfg.max_problems]
    run = _Evaluation(model, tokenizer, examples, data_cfg, cfg, correctness, list(others or []), bar, sampling, engine, thinking, tools)
    greedy_verdicts: list[float | None] = [None] * len(examples)
    texts, lengths = [""] * len(examples), [0] * len(examples)
    term_values: dict[str, list[float | None]] = {t.name: [None] * len(examples) for t in run.others}
    traces: list[tuple[list[int], ToolTrace]] = []
    for rows in run.batches(cfg.batch_size):
        d = run.decode(rows, 1, None)
        for j, row in enumerate(rows):
            texts[row], lengths[row], greedy_verdicts[row] = d.texts[j], d.lengths[j], d.verdicts[j]
            for name, values in d.terms.items():
                term_values[name][row] = values[j]
        if d.trace is not None:
            traces.append((rows, d.trace))
    correct = [v or 0.0 for v in greedy_verdicts]
    n = max(len(examples), 1)
    result = EvalResult(
        accuracy=sum(correct) / n,
        by_level=_by_level(examples, correct),
        shows_work=sum(shows_work(t) for t in texts) / n,
        mean_length=sum(lengths) / n,
        num_problems=len(examples),
        missing=sum(v is None for v in greedy_verdicts),
        samples=[
            {"prompt": e.prompt, "completion": t, "answer": e.answer, "reward": c, "level": e.level}
            for e, t, c in zip(examples, texts, correct)
        ],
        terms={name: {"greedy": present_mean(values)} for name, values in term_values.items()},
    )
    for row, sample in enumerate(result.samples):
        sample.update({name: values[row] for name, values in term_values.items()})
    if traces:
        result.tools = ToolTrace.concat([t for _, t in traces]).metrics()
        for rows, trace in traces:
            for j, row in enumerate(rows):
                result.samples[row]["conversation"] = trace.conversations[j]
        if cfg.tool_control:
            control = evaluate(model, tokenizer, examples, data_cfg, dataclasses.replace(cfg, samples=0, tool_control=False), correctness,
                               PhaseBar(None, None), sampling, engine, seed, None, thinking, tools=None)
            result.without_tools = {"accuracy": control.accuracy, "by_level": control.by_level, "mean_length": control.mean_length}
    if thinking is not None:
        blocks = [thinking_block(t, thinking.open, thinking.close, opened) for t, opened in zip(texts, run.opens)]
        if any(opened for opened in run.opens) or any(thinking.open in t or thinking.close in t for t in texts):
            result.well_formed = sum(b is not None for b in blocks) / n
            closed = [len(tokenizer.encode(b, add_special_tokens=False)) for b in blocks if b is not None]
            result.thinking_length = sum(closed) / len(closed) if closed else None
        result.budget = sampling.budget.tokens if sampling.budget is not None else None
        for sample, block in zip(result.samples, blocks):
            sample["thinking"] = block
    result.length_by_level = _by_level(examples, [float(v) for v in lengths])
    for mode, idx in _mode_rows(examples).items():
        blocks = [result.samples[i].get("thinking") for i in idx]
        result.by_mode[mode] = {
            "problems": len(idx), "accuracy": sum(correct[i] for i in idx) / len(idx), "mean_length": sum(lengths[i] for i in idx) / len(idx),
            "shows_work": sum(shows_work(texts[i]) for i in idx) / len(idx),
            "thinking_length": present_mean([len(tokenizer.encode(b, add_special_tokens=False)) if b is not None else None for b in blocks]),
            **{name: present_mean([values[i] for i in idx]) for name, values in term_values.items()},
        }
    columns: dict[str, list[float]] = {"accuracy": correct}
    if cfg.samples:
        _sample(run, seed, result, columns)
    result.intervals = {k: list(v) for k, v in bootstrap_intervals(columns, rounds=cfg.bootstrap_rounds, seed=seed).items()}
    return result


def _sample(run: _Evaluation, seed: int, result: EvalResult, columns: dict[str, list[float]]) -> None:
    """The N sampled completions of every problem and the figures computed from them, filled into
    `result` and `columns` (the per-problem values the intervals resample)."""
    examples, cfg = run.examples, run.cfg
    N, ks = cfg.samples, cfg.ks()
    generator = torch.Generator(device=run.device).manual_seed(seed)
    key_of, declared = answer_key_fn(run.correctness)
    rows_out: list[list[dict]] = [[] for _ in examples]
    for rows in run.batches(max(1, cfg.batch_size // N)):
        d = run.decode(rows, N, generator)
        for j, row in enumerate(rows):
            for s in range(N):
                i = j * N + s
                rows_out[row].append({"problem": row, "sample": s, "completion": d.texts[i], "reward": d.verdicts[i],
                                      "answer_key": key_of(d.texts[i]), "length": d.lengths[i],
                                      **{name: values[i] for name, values in d.terms.items()}})

    per_problem: dict[str, list[float | None]] = defaultdict(list)
    any_key = False
    for rows in rows_out:
        scores = [r["reward"] or 0.0 for r in rows]
        solved = sum(v == 1.0 for v in scores)
        votes: dict[str, list[float]] = defaultdict(list)  # answer -> whether each of its samples had full marks
        for r, score in zip(rows, scores):
            if r["answer_key"] is not None:
                votes[r["answer_key"]].append(float(score == 1.0))
        any_key = any_key or bool(votes)
        groups = [(len(v), sum(v) / len(v)) for v in votes.values()]
        unanswered = N - sum(len(v) for v in votes.values())
        for k in ks:
            per_problem[f"pass@{k}"].append(pass_at_k(N, solved, k))
        for k in ks:
            per_problem[f"maj@{k}"].append(maj_at_k(groups, unanswered, k))
        per_problem[f"mean@{N}"].append(sum(scores) / N)
    if not (declared or any_key):  # no verifier answer and not one box: there is nothing to vote on
        for k in ks:
            per_problem[f"maj@{k}"] = [None] * len(examples)
    result.samples_per_problem, result.temperature = N, run.sampler.sampling.temperature
    result.sampled = {name: _mean(values) for name, values in per_problem.items()}
    result.sampled_by_level = {
        level: {name: _mean([values[i] for i in idx]) for name, values in per_problem.items()} for level, idx in _level_rows(examples).items()
    }
    result.sampled_by_mode = {
        mode: {name: _mean([values[i] for i in idx]) for name, values in per_problem.items()} for mode, idx in _mode_rows(examples).items()
    }
    columns.update({name: values for name, values in per_problem.items() if None not in values})  # type: ignore[misc]
    for term in run.others:  # each other term's mean over the samples, and per problem for its interval
        per_problem_mean = [present_mean([r[term.name] for r in rows]) for rows in rows_out]
        result.terms[term.name]["samples"] = present_mean([r[term.name] for rows in rows_out for r in rows])
        if all(v is not None for v in per_problem_mean):
            columns[f"{term.name} (samples)"] = per_problem_mean  # type: ignore[assignment]
    all_rows = [r for rows in rows_out for r in rows]
    result.missing += sum(r["reward"] is None for r in all_rows)
    result.sampled_mean_length = sum(r["length"] for r in all_rows) / max(len(all_rows), 1)
    result.sampled_rows = [{"prompt": examples[r["problem"]].prompt, "answer": examples[r["problem"]].answer,
                            "level": examples[r["problem"]].level, **r} for r in all_rows]


def present_mean(values: list[float | None]) -> float | None:
    """The mean of the values that are there (a term's None: it did not apply to that row), or None if none are."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _mean(values: list[float | None]) -> float | None:
    """The mean, or None when any value is None (a figure that does not exist) or there are none."""
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def _level_rows(examples: list[Example]) -> dict[str, list[int]]:
    levels: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        if e.level is not None:
            levels[str(e.level)].append(i)
    return dict(sorted(levels.items()))


def _mode_rows(examples: list[Example]) -> dict[str, list[int]]:
    """The rows of each mode, for problems that carry one (info["mode"]: the fused task's think / no_think)."""
    modes: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        mode = e.info.get("mode") if isinstance(e.info, dict) else None
        if mode is not None:
            modes[str(mode)].append(i)
    return dict(modes)


def _by_level(examples: list[Example], values: list[float]) -> dict[str, float]:
    return {level: sum(values[i] for i in idx) / len(idx) for level, idx in _level_rows(examples).items()}


def num_batches(num_examples: int, cfg: EvalConfig) -> int:
    """How many decoding batches `evaluate` runs (its progress bar's length)."""
    n = min(num_examples, cfg.max_problems) if cfg.max_problems else num_examples
    greedy = -(-n // cfg.batch_size)
    return greedy + (-(-n // max(1, cfg.batch_size // cfg.samples)) if cfg.samples else 0)


def write_eval(run_dir: Path, name: str, result: EvalResult) -> None:
    """eval_<name>.jsonl (the greedy completion of every problem) and, when sampled,
    eval_<name>_samples.jsonl (every sampled completion), each written atomically."""
    atomic_write_text(run_dir / f"eval_{name}.jsonl", "".join(json.dumps(row) + "\n" for row in result.samples))
    if result.sampled_rows:
        atomic_write_text(run_dir / f"eval_{name}_samples.jsonl", "".join(json.dumps(row) + "\n" for row in result.sampled_rows))


def percent(value: float | None) -> str:
    """A figure for a table: '84.2%', or 'n/a' for one that does not exist."""
    return "n/a" if value is None else f"{value:.1%}"


def key_figures(names) -> list[str]:
    """Of some sampled figures' names, the few a table shows: pass@1, and pass@k and maj@k at the largest k.

    >>> key_figures(["pass@1", "pass@2", "pass@8", "maj@1", "maj@8", "mean@8"])
    ['pass@1', 'pass@8', 'maj@8']
    """
    names = list(dict.fromkeys(names))
    ks = [int(n.split("@")[1]) for n in names if n.startswith("pass@")]
    if not ks:
        return []
    return list(dict.fromkeys(n for n in ("pass@1", f"pass@{max(ks)}", f"maj@{max(ks)}") if n in names))


def headline(result: EvalResult) -> str:
    """One line: greedy accuracy with its interval, the key sampled figures, the other terms' means."""
    def with_interval(name: str) -> str:
        value, interval = result.figure(name), result.intervals.get(name)
        if value is None:
            return f"{name} n/a"
        return f"{name} {value:.1%}" + (f" [{interval[0]:.1%}, {interval[1]:.1%}]" if interval else "")

    parts = [with_interval("accuracy")] + [with_interval(name) for name in key_figures(result.sampled)]
    if result.tools:
        parts.append(f"tool calls {result.tools['tools/call_rate']:.0%} of problems ({result.tools['tools/failed_frac']:.0%} of calls failed)")
    if result.without_tools is not None:
        parts.append(f"without tools {result.without_tools['accuracy']:.1%}")
    for term, means in result.terms.items():
        parts += [f"{term} {where} {value:.3f}" for where, value in means.items() if value is not None]
    return "  ".join(parts)
