"""Rejection sampling: k completions per training prompt, the verified ones kept as SFT data.

Stage 3 of DeepSeek-R1 (and RFT, Yuan et al. 2023, "Scaling Relationship on Learning
Mathematical Reasoning with Large Language Models"): sample from a strong model, keep what the
verifier accepts, and fine-tune a fresh model on it. Yuan et al. find that the gain grows with
the number of *distinct* correct reasoning paths per problem, so survivors are deduplicated
(identical texts are one path) and at most `rft.max_per_prompt` are kept per prompt, the
shortest or a seeded random choice. Distillation (`rlvr distill`) makes its data the same way
from a teacher.

A completion survives when the correctness verdict is full marks (1.0) and it ended on its own
(a verified completion cut at max_new_tokens never learned to stop; it is counted, not kept).
Each kept row is the problem's data row with the completion as its solution, plus where it came
from, so the rows load back through the same DataConfig as the problems did. Sampling goes through
the `rollout.Sampler` RL and evaluation use (under rft's `Sampling`: `cfg.rft.sampling(...)`), and
judging through evaluation's (stages/judging.py).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import DataConfig, RFTConfig
from rlvr.data import Example, format_prompt
from rlvr.metrics import PhaseBar
from rlvr.reward import RewardTerm, route_of
from rlvr.rollout import ToolSettings, make_sampler
from rlvr.sampling import Sampling
from rlvr.stages.judging import judge


@dataclass
class Traces:
    rows: list[dict]  # the kept completions as data rows (DataConfig's field names)
    report: dict  # counts overall and per level, and the prompts no completion survived for


def choose_prompts(examples: list[Example], how_many: int, seed: int) -> list[Example]:
    """`how_many` distinct training problems (all when 0), a seeded choice in their original order.

    A training set may repeat a problem (the lab's has 200 distinct one-operator problems among
    its 20,000); each is sampled once, so "at most m distinct traces per prompt" holds per problem."""
    first: dict[str, Example] = {}
    for e in examples:
        first.setdefault(e.prompt, e)
    distinct = list(first.values())
    if not how_many or how_many >= len(distinct):
        return distinct
    picked = sorted(random.Random(f"rft-prompts:{seed}").sample(range(len(distinct)), how_many))
    return [distinct[i] for i in picked]


def select_survivors(candidates: list[tuple[int, str, int]], m: int, how: str, rng: random.Random) -> list[tuple[int, str, int]]:
    """At most m distinct (sample index, text, tokens) of one prompt's verified completions: the
    first of identical texts stands for them all; then the m shortest (ties: sampling order) or a
    random m, returned in sampling order.

    >>> select_survivors([(0, "a+b", 3), (1, "ab", 2), (2, "ab", 2), (3, "abcd", 4)], 2, "shortest", random.Random(0))
    [(0, 'a+b', 3), (1, 'ab', 2)]
    """
    distinct = list({text.strip(): (i, text, n) for i, text, n in reversed(candidates)}.values())[::-1]
    if len(distinct) > m:
        distinct = sorted(distinct, key=lambda c: (c[2], c[0]))[:m] if how == "shortest" else rng.sample(distinct, m)
    return sorted(distinct)


@torch.no_grad()
def rejection_sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    data_cfg: DataConfig,
    cfg: RFTConfig,
    sampling: Sampling,
    correctness: RewardTerm,
    bar: PhaseBar,
    *,
    source: str,
    seed: int,
    engine: str = "auto",
    others: list[RewardTerm] = (),
    tools: ToolSettings | None = None,
) -> Traces:
    """Sample cfg.samples completions of every example as `sampling` says (`cfg.rft.sampling(...)`),
    judge them with the correctness term (on routed data each row's own term, among `others`:
    reward.route_field), and keep the survivors (see the module docstring). `source` names the
    model in every row."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    pick = random.Random(f"rft-select:{seed}")
    k, per_batch = cfg.samples, max(1, cfg.batch_size // cfg.samples)
    sampler = make_sampler(model, tokenizer, sampling, engine, tools=tools, data_cfg=data_cfg)  # tools: a tool run's conversations
    prompts = [format_prompt(tokenizer, e, data_cfg) for e in examples]
    order = sorted(range(len(examples)), key=lambda i: len(prompts[i]))  # similar lengths decode together
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    kept: dict[int, list[dict]] = {}
    for start in range(0, len(order), per_batch):
        rows = order[start : start + per_batch]
        batch = [examples[i] for i in rows]
        completions = sampler.sample([prompts[i] for i in rows], k, generator, examples=batch)
        texts, lengths, truncated = completions.texts, completions.lengths, completions.rollouts.truncated_B.tolist()
        per_row = [e for e in batch for _ in range(k)]
        routes = {route_of(e, correctness.route_field) for e in per_row} - {None}
        verdicts = judge(completions, per_row, correctness, [t for t in others if t.name in routes], tokenizer, data_cfg).verdicts
        for j, (row, e) in enumerate(zip(rows, batch)):
            level = "all" if e.level is None else str(e.level)
            mine = range(j * k, (j + 1) * k)  # this prompt's k rows of the batch
            verified = [i for i in mine if verdicts[i] == 1.0]
            ended = [i for i in verified if not truncated[i]]
            chosen = select_survivors([(i - j * k, texts[i], lengths[i]) for i in ended], cfg.max_per_prompt, cfg.select, pick)
            for tally in (counts[level], counts["total"]):
                tally["prompts"] += 1
                tally["sampled"] += k
                tally["verified"] += len(verified)
                tally["verified_but_cut"] += len(verified) - len(ended)
                tally["distinct_verified"] += len({texts[i].strip() for i in ended})
                tally["kept"] += len(chosen)
                tally["prompts_without_survivor"] += not chosen
            trace = completions.trace  # a tool run's survivors keep their conversations (tool calls and results)
            kept[row] = [as_data_row(e, data_cfg, text, source_model=source, sample=s, completion_tokens=n,
                                     **({"conversation": trace.conversations[j * k + s]} if trace is not None else {}))
                         for s, text, n in chosen]
        bar.advance()
    no_survivor = [examples[i].prompt for i in range(len(examples)) if not kept.get(i)]
    total = dict(counts.pop("total", {}))
    report = {
        "source": source, "samples_per_prompt": k, "max_per_prompt": cfg.max_per_prompt, "select": cfg.select,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "max_new_tokens": sampling.max_new_tokens, "seed": seed,
        **{name: total.get(name, 0) for name in ("prompts", "sampled", "verified", "verified_but_cut", "distinct_verified", "kept", "prompts_without_survivor")},
        "by_level": {level: dict(c) for level, c in sorted(counts.items()) if level != "all"},
        "prompts_without_survivor_first": no_survivor[:20],
    }
    return Traces([r for i in range(len(examples)) for r in kept.get(i, [])], report)


def as_data_row(e: Example, cfg: DataConfig, solution: str | None = None, **extra) -> dict:
    """The problem as a data row that loads back with `cfg` (its own fields, then prompt, answer,
    level, and `solution` when given, else none), plus `extra` fields."""
    row = dict(e.info) if isinstance(e.info, dict) else {}
    prompt = [{"role": role, "content": content} for role, content in e.messages] if e.messages is not None else e.prompt
    row.update({cfg.prompt_field: prompt, cfg.answer_field: e.answer})  # the answer as extracted: it loads back with answer_format plain
    row.pop(cfg.solution_field, None)
    if solution is not None:
        row[cfg.solution_field] = solution
    if e.level is not None:
        row[cfg.level_field] = e.level
    return {**row, **extra}
