"""Evaluation speed: `rlvr eval`'s decoding of N samples per held-out problem against the
straightforward way, transformers' own `model.generate`, on the same model and problems.

    .venv/bin/python bench/eval_speed.py --model runs/lab0/model            # 600 problems x 8 samples, 3 rounds
    .venv/bin/python bench/eval_speed.py --model runs/lab0/model --samples 16 --rounds 5

Per round, alternating which goes first (the machine's speed drifts; interleaving puts the drift
on both): (a) `rlvr.stages.evaluate.evaluate` with eval.samples = N: greedy plus N samples per
problem, batched by prompt length, each prompt prefilled once for its N samples, on the static
engine, verified by boxed_math, with pass@k / maj@k and bootstrap intervals; (b) the same greedy
and sampled completions from `model.generate` (do_sample, num_return_sequences = N, the same
batch sizes), decoded and verified the same way. Prints median seconds of each and the ratio.
Both sample at temperature 1; they draw from different random streams, so accuracies agree only
within sampling noise (printed too).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.config import load_config
from rlvr.data import format_prompt
from rlvr.metrics import PhaseBar
from rlvr.models import load_model, load_tokenizer
from rlvr.reward import RewardTerm
from rlvr.stages.evaluate import evaluate
from rlvr.tasks.arithmetic import make_splits
from rlvr.verifiers.math import boxed_math


def with_generate(model, tokenizer, problems, cfg) -> tuple[float, float]:
    """Greedy and sampled completions through transformers' model.generate; (greedy accuracy, mean sampled accuracy)."""
    prompts = [format_prompt(tokenizer, e.prompt, cfg.data) for e in problems]
    order = sorted(range(len(problems)), key=lambda i: len(prompts[i]))
    tokenizer.padding_side = "left"
    greedy, sampled = 0.0, 0.0
    N = cfg.eval.samples
    for greedy_pass, per_batch in ((True, cfg.eval.batch_size), (False, max(1, cfg.eval.batch_size // N))):
        for start in range(0, len(order), per_batch):
            rows = order[start : start + per_batch]
            enc = tokenizer([prompts[i] for i in rows], return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(
                    **enc, max_new_tokens=cfg.eval.max_new_tokens, do_sample=not greedy_pass, temperature=None if greedy_pass else 1.0,
                    top_p=None, top_k=None, num_return_sequences=1 if greedy_pass else N, eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            answers = [problems[i].answer for i in rows for _ in range(1 if greedy_pass else N)]
            score = sum(boxed_math(t, a) for t, a in zip(texts, answers))
            if greedy_pass:
                greedy += score
            else:
                sampled += score
    return greedy / len(problems), sampled / (N * len(problems))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model directory, e.g. runs/lab0/model (a lab run's final policy)")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    cfg = load_config(overrides=[f"eval.samples={args.samples}"])
    model, tokenizer = load_model(args.model).eval(), load_tokenizer(args.model)
    _, problems = make_splits(cfg.task, cfg.run.seed)
    term = RewardTerm("boxed_math", 1.0, boxed_math, batched=False, correctness=True)
    times: dict[str, list[float]] = {"rlvr evaluate": [], "model.generate": []}
    accuracy: dict[str, tuple[float, float]] = {}
    for round_ in range(args.rounds):
        for name in (list(times) if round_ % 2 == 0 else list(reversed(times))):
            started = time.perf_counter()
            if name == "rlvr evaluate":
                result = evaluate(model, tokenizer, problems, cfg.data, cfg.eval, term, PhaseBar(None, None), cfg.eval.sampling(cfg.rollout.stop, cfg.thinking),
                                  seed=round_)
                accuracy[name] = (result.accuracy, result.sampled[f"mean@{args.samples}"])
            else:
                torch.manual_seed(round_)
                accuracy[name] = with_generate(model, tokenizer, problems, cfg)
            times[name].append(time.perf_counter() - started)
    print(f"{len(problems)} problems x (1 greedy + {args.samples} samples), {args.rounds} rounds, {args.threads} threads, model {args.model}")
    print("| | median s | all rounds (s) | greedy accuracy | mean sampled accuracy |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {', '.join(f'{t:.2f}' for t in ts)} | {accuracy[name][0]:.1%} | {accuracy[name][1]:.1%} |")
    ratio = statistics.median(times["rlvr evaluate"]) / statistics.median(times["model.generate"])
    print(f"| rlvr / generate | {ratio:.2f} | | | |")


if __name__ == "__main__":
    main()
