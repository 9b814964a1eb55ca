"""Where the lab's cold-start SFT time goes, and what each batch shape costs (issue 18).

    .venv/bin/python bench/sft_speed.py                  # the lab's SFT step, 40 steps per shape, 3 rounds
    .venv/bin/python bench/sft_speed.py --steps 20 --rounds 2 --threads 1

Each shape trains the same freshly built lab model on the same stream of (prompt, target) pairs
(the lab's worked/bare mixture, batch 64), and the shapes take turns round after round, so drift
of the machine falls on all of them. Printed per shape: milliseconds per optimizer step (median
over rounds), positions computed per step (rows x longest row, summed over micro-batches) and
the share of them that is padding, forwards per step, and the time split into tokenizing,
forward + backward, and clipping + optimizer step.

Shapes:
- `separate, 16 rows`: the layout SFT used until issue 18 (and the RL update uses): a left-padded
  prompt block followed by a right-padded target block, 16 rows per forward, rows sorted by
  target length.
- `joined, 16 rows`: each row's prompt and target as one right-padded sequence, sorted by length.
- `joined, N tokens`: the same, micro-batches cut by a budget of N positions (sft.micro_batch_tokens).

The floor is the step's real work (no padding) at this machine's matmul throughput, as in
bench/_floor.py: 6 FLOPs per weight of the decoder blocks per real token (forward + backward),
plus the output layer at the target positions.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import torch

from rlvr.optim import new_adamw
from rlvr.algorithms import aggregate
from rlvr.config import Config
from rlvr.data import format_prompt
from rlvr.logprobs import completion_logprobs
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.runtime import configure_cpu_math
from rlvr.tasks import load_splits
from rlvr.rollout import encode_prompts
from rlvr.stages.sft import encode_targets, pad_right, sft_backward
from rlvr.tasks.arithmetic import sft_targets
from rlvr.batching import token_budget_batches

from _floor import Shape, model_gflops, peak_gflops


def separate_backward(model, tokenizer, prompts, targets, rows_per_forward):
    """The pre-issue-18 SFT step: a left-padded prompt block and a right-padded target block."""
    target_ids = encode_targets(tokenizer, targets)
    n_tokens = sum(len(ids) for ids in target_ids)
    order = sorted(range(len(prompts)), key=lambda i: len(target_ids[i]))
    for start in range(0, len(order), rows_per_forward):
        rows = order[start : start + rows_per_forward]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [prompts[i] for i in rows], torch.device("cpu"))
        ids_BT, mask_BT = pad_right([target_ids[i] for i in rows], tokenizer.pad_token_id, torch.device("cpu"))
        loss = aggregate(-completion_logprobs(model, prompt_ids, prompt_mask, ids_BT, mask_BT), mask_BT, "token_mean", normalizer=n_tokens)
        loss.backward()


def positions(tokenizer, prompts, targets, layout: str, rows: int, tokens: int) -> tuple[int, int, int]:
    """(positions computed, real positions, forwards) of one step under a shape."""
    p = [len(tokenizer.encode(x, add_special_tokens=False)) for x in prompts]
    t = [len(ids) for ids in encode_targets(tokenizer, targets)]
    real = sum(p) + sum(t)
    if layout == "separate":
        order = sorted(range(len(p)), key=lambda i: t[i])
        groups = [order[s : s + rows] for s in range(0, len(order), rows)]
        return sum(len(g) * (max(p[i] for i in g) + max(t[i] for i in g)) for g in groups), real, len(groups)
    lengths = torch.tensor([a + b for a, b in zip(p, t)])
    groups = [g.tolist() for g in token_budget_batches(torch.argsort(lengths, stable=True), lengths, rows, tokens)]
    return sum(len(g) * max(int(lengths[i]) for i in g) for g in groups), real, len(groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="timed optimizer steps per shape per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--budgets", type=int, nargs="+", default=[256, 384, 512, 768])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    configure_cpu_math()
    cfg = Config()
    train, _ = load_splits(cfg)
    tokenizer = build_char_tokenizer()
    shapes = [("separate", 16, 0), ("joined", 16, 0)] + [("joined", 64, b) for b in args.budgets]
    names = [f"{layout}, {f'{tokens} tokens' if tokens else f'{rows} rows'}" for layout, rows, tokens in shapes]
    models = [build_tiny_model(tokenizer, cfg.model.tiny, seed=0) for _ in shapes]
    optimizers = [new_adamw(list(m.parameters()), lr=cfg.sft.lr) for m in models]  # the AdamW SFT builds
    timings = {n: {"step": [], "encode": [], "fwd_bwd": [], "optimizer": []} for n in names}
    work = {n: [0, 0, 0] for n in names}
    pairs = ((format_prompt(tokenizer, e, cfg.data), t) for e, t in sft_targets(train, cfg.sft.batch_size, cfg.sft.worked_fraction, 0))
    batches = [list(itertools.islice(pairs, cfg.sft.batch_size)) for _ in range(args.steps + 5)]
    for r in range(args.rounds + 1):  # round 0 warms up and is not counted
        for k in (range(len(shapes)) if r % 2 == 0 else reversed(range(len(shapes)))):
            (layout, rows, tokens), name, model, opt = shapes[k], names[k], models[k], optimizers[k]
            model.train()
            sums = {"step": 0.0, "encode": 0.0, "fwd_bwd": 0.0, "optimizer": 0.0}
            for batch in batches[: args.steps if r else 5]:
                prompts, targets = [p for p, _ in batch], [t for _, t in batch]
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                if layout == "separate":
                    separate_backward(model, tokenizer, prompts, targets, rows)
                else:
                    sft_backward(model, tokenizer, prompts, targets, rows, micro_batch_tokens=tokens)
                t1 = time.perf_counter()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                t2 = time.perf_counter()
                e0 = time.perf_counter()
                if layout == "separate":  # timed apart: the same calls the step made
                    [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
                else:
                    tokenizer(prompts, add_special_tokens=False)
                encode_targets(tokenizer, targets)
                encode = time.perf_counter() - e0
                sums["step"] += t2 - t0
                sums["fwd_bwd"] += t1 - t0 - encode
                sums["encode"] += encode
                sums["optimizer"] += t2 - t1
                if r == 1:
                    done = positions(tokenizer, prompts, targets, layout, rows, tokens)
                    work[name] = [a + b for a, b in zip(work[name], done)]
            if r:
                for key, value in sums.items():
                    timings[name][key].append(value / args.steps * 1e3)

    real_per_step = work[names[0]][1] / args.steps
    targets_per_step = sum(len(ids) for b in batches[: args.steps] for ids in encode_targets(tokenizer, [t for _, t in b])) / args.steps
    shape = Shape.from_config(models[0].config)
    rows_per_forward = int(real_per_step / (work[names[-1]][2] / args.steps))
    peak, best = model_gflops(shape, rows=rows_per_forward), peak_gflops()
    flops = 3 * shape.forward_flops(real_per_step, 0, targets_per_step)  # forward + backward (2x); attention's scores left out
    print(f"lab SFT step: batch {cfg.sft.batch_size}, {real_per_step:.0f} real positions per step, {args.threads} threads, "
          f"{args.steps} steps x {args.rounds} rounds per shape; matmul at the model's shapes on {rows_per_forward} rows "
          f"{peak:.0f} GFLOP/s (1024^2 square: {best:.0f}); "
          f"floor {flops / peak / 1e6:.1f} ms per step ({flops / 1e9:.1f} GFLOP)")
    print("| shape | ms per step | x floor | positions computed | padding | forwards | tokenize | forward + backward | clip + optimizer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        t = {k: statistics.median(v) for k, v in timings[name].items()}
        computed, real, forwards = (x / args.steps for x in work[name])
        print(f"| {name} | {t['step']:.1f} | {t['step'] / (flops / peak / 1e6):.1f} | {computed:.0f} | {1 - real / computed:.0%} | "
              f"{forwards:.1f} | {t['encode']:.1f} | {t['fwd_bwd']:.1f} | {t['optimizer']:.1f} |")


if __name__ == "__main__":
    main()
