"""Held-out evaluation: greedy accuracy, and from N samples per problem pass@k, maj@k and mean@N.

Greedy decoding gives one completion per problem: accuracy overall and per difficulty level, the
share of completions that show their work (any text before the final box) and the mean length,
so a gain can be traced to a change of behaviour. With `eval.samples = N` each problem also gets
N sampled completions (at `eval.temperature`), from which, per problem and then averaged:

- pass@k: the chance that at least one of k samples is correct, by the unbiased estimator of
  Chen et al. 2021 (`estimators.pass_at_k`), not "any of the first k";
- maj@k: the correctness of the majority answer of k samples (self-consistency), the answers
  being the correctness verifier's canonical spellings (`answer_key`), ties split evenly;
- mean@N: the mean verdict of the N samples (its expectation is the same for every k <= N).

Every figure comes with a 95% interval from a bootstrap over problems. A sample counts as
correct for pass@k when its verdict is full marks (1.0); mean@N and greedy accuracy average the
verdicts themselves (partial credit counts). A missing verdict (None, error, timeout) is wrong
and counted.

Decoding is batched (prompts sorted by length, each prompt prefilled once for its N samples) on
the rollout engine, with its own seeded generator: an evaluation never draws from the training
RNG, so evaluating during RL changes nothing else in a run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import DataConfig, EvalConfig, atomic_write_text
from rlvr.data import Example, chat_prompts, format_prompt
from rlvr.metrics import PhaseBar
from rlvr.reward import RewardTerm
from rlvr.rollout import completion_id_lists, decode_completions, encode_prompts, generate
from rlvr.stages.estimators import bootstrap_intervals, maj_at_k, pass_at_k
from rlvr.verifiers.math import extract_last_boxed


def shows_work(completion: str) -> bool:
    """True when there is text before the final box (a bare `\\boxed{42}` shows none)."""
    head, sep, _ = completion.rpartition("\\boxed")
    return bool(sep) and bool(head.strip())


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
    verdicts: list[float | None]


def _decode_and_judge(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, examples: list[Example], prompts: list[str], data_cfg: DataConfig,
    correctness: RewardTerm, *, max_new_tokens: int, group_size: int, generator: torch.Generator | None, temperature: float,
    top_p: float, engine: str,
) -> _Decoded:
    """`group_size` completions of each prompt (greedy when there is no generator), judged."""
    device = next(model.parameters()).device
    ids, mask = encode_prompts(tokenizer, prompts, device)
    out = generate(
        model, ids, mask, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
        greedy=generator is None, temperature=temperature, top_p=top_p, generator=generator, group_size=group_size, engine=engine,
    )
    per_row = [e for e in examples for _ in range(group_size)]
    texts, lengths = decode_completions(tokenizer, out), out.lengths_B.tolist()
    messages = chat_prompts(tokenizer, per_row, data_cfg)
    verdicts = correctness.score(
        [p for p in prompts for _ in range(group_size)], texts, per_row, lengths, prompt_messages=messages, completion_ids=completion_id_lists(out),
    )
    return _Decoded(texts, lengths, verdicts.values)


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    data_cfg: DataConfig,
    cfg: EvalConfig,
    correctness: RewardTerm,
    bar: PhaseBar,
    engine: str = "auto",
    seed: int = 0,
) -> EvalResult:
    """Greedy completions of `examples` and, with cfg.samples = N, N sampled ones each, judged by
    the correctness term (`reward.correctness`: `rlvr.reward.correctness_term`). `seed` seeds the
    sampling generator (the same seed gives every model the same random numbers)."""
    if cfg.max_problems:
        examples = examples[: cfg.max_problems]
    device = next(model.parameters()).device
    prompts = [format_prompt(tokenizer, e.prompt, data_cfg) for e in examples]
    # Decode similar lengths together: less padding, fewer wasted positions.
    order = sorted(range(len(examples)), key=lambda i: len(prompts[i]))
    greedy_verdicts: list[float | None] = [None] * len(examples)
    texts, lengths = [""] * len(examples), [0] * len(examples)
    for start in range(0, len(order), cfg.batch_size):
        rows = order[start : start + cfg.batch_size]
        d = _decode_and_judge(model, tokenizer, [examples[i] for i in rows], [prompts[i] for i in rows], data_cfg, correctness,
                              max_new_tokens=cfg.max_new_tokens, group_size=1, generator=None, temperature=1.0, top_p=1.0, engine=engine)
        for row, text, length, verdict in zip(rows, d.texts, d.lengths, d.verdicts):
            texts[row], lengths[row], greedy_verdicts[row] = text, length, verdict
        bar.advance()
    correct = [v or 0.0 for v in greedy_verdicts]
    missing = sum(v is None for v in greedy_verdicts)
    n = max(len(examples), 1)
    result = EvalResult(
        accuracy=sum(correct) / n,
        by_level=_by_level(examples, correct),
        shows_work=sum(shows_work(t) for t in texts) / n,
        mean_length=sum(lengths) / n,
        num_problems=len(examples),
        samples=[
            {"prompt": e.prompt, "completion": t, "answer": e.answer, "reward": c, "level": e.level}
            for e, t, c in zip(examples, texts, correct)
        ],
    )
    columns: dict[str, list[float]] = {"accuracy": correct}
    if cfg.samples:
        missing += _sample(model, tokenizer, examples, prompts, order, data_cfg, cfg, correctness, bar, engine, seed, device, result, columns)
    result.missing = missing
    result.intervals = {k: list(v) for k, v in bootstrap_intervals(columns, rounds=cfg.bootstrap_rounds, seed=seed).items()}
    return result


def _sample(model, tokenizer, examples, prompts, order, data_cfg, cfg: EvalConfig, correctness, bar, engine, seed, device,
            result: EvalResult, columns: dict[str, list[float]]) -> int:
    """The N sampled completions of every problem and the figures computed from them (filled
    into `result` and `columns`); returns the number of missing verdicts."""
    N, ks = cfg.samples, cfg.ks()
    generator = torch.Generator(device=device).manual_seed(seed)
    key_of, declared = answer_key_fn(correctness)
    verdicts: list[list[float | None]] = [[] for _ in examples]
    rows_out: list[list[dict]] = [[] for _ in examples]
    per_batch = max(1, cfg.batch_size // N)
    for start in range(0, len(order), per_batch):
        rows = order[start : start + per_batch]
        d = _decode_and_judge(model, tokenizer, [examples[i] for i in rows], [prompts[i] for i in rows], data_cfg, correctness,
                              max_new_tokens=cfg.max_new_tokens, group_size=N, generator=generator, temperature=cfg.temperature,
                              top_p=cfg.top_p, engine=engine)
        for j, row in enumerate(rows):
            for s in range(N):
                text, length, verdict = d.texts[j * N + s], d.lengths[j * N + s], d.verdicts[j * N + s]
                verdicts[row].append(verdict)
                rows_out[row].append({"problem": row, "sample": s, "completion": text, "reward": verdict, "answer_key": key_of(text),
                                      "length": length})
        bar.advance()

    per_problem: dict[str, list[float | None]] = defaultdict(list)
    any_key = False
    for row, vs in enumerate(verdicts):
        scores = [v or 0.0 for v in vs]
        solved = sum(v == 1.0 for v in scores)
        for k in ks:
            per_problem[f"pass@{k}"].append(pass_at_k(N, solved, k))
        votes: dict[str, list[float]] = defaultdict(list)
        for r, score in zip(rows_out[row], scores):
            if r["answer_key"] is not None:
                votes[r["answer_key"]].append(score)
        any_key = any_key or bool(votes)
        groups = [(len(v), sum(v) / len(v)) for v in votes.values()]
        unanswered = N - sum(len(v) for v in votes.values())
        for k in ks:
            per_problem[f"maj@{k}"].append(maj_at_k(groups, unanswered, k))
        per_problem[f"mean@{N}"].append(sum(scores) / N)
    if not (declared or any_key):  # no verifier answer and not one box: there is nothing to vote on
        for k in ks:
            per_problem[f"maj@{k}"] = [None] * len(examples)
    result.samples_per_problem, result.temperature = N, cfg.temperature
    result.sampled = {name: _mean(values) for name, values in per_problem.items()}
    result.sampled_by_level = {
        level: {name: _mean([values[i] for i in idx]) for name, values in per_problem.items()} for level, idx in _level_rows(examples).items()
    }
    columns.update({name: values for name, values in per_problem.items() if None not in values})  # type: ignore[misc]
    all_rows = [r for rows in rows_out for r in rows]
    result.sampled_mean_length = sum(r["length"] for r in all_rows) / max(len(all_rows), 1)
    result.sampled_rows = [{"prompt": examples[r["problem"]].prompt, "answer": examples[r["problem"]].answer,
                            "level": examples[r["problem"]].level, **r} for r in all_rows]
    return sum(v is None for vs in verdicts for v in vs)


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
    """One line: greedy accuracy with its interval, and the sampled figures."""
    def with_interval(name: str) -> str:
        value, interval = result.figure(name), result.intervals.get(name)
        if value is None:
            return f"{name} n/a"
        return f"{name} {value:.1%}" + (f" [{interval[0]:.1%}, {interval[1]:.1%}]" if interval else "")

    parts = [with_interval("accuracy")] + [with_interval(name) for name in result.sampled]
    return "  ".join(parts)
