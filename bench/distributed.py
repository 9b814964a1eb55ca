"""The Ray backend against the local one, and the overheads that decide how it scales.

    .venv/bin/python bench/distributed.py                 # both parts, ~10 min on 2 cores
    .venv/bin/python bench/distributed.py --part steps --steps 20 --repeats 2
    .venv/bin/python bench/distributed.py --part overheads --sizes 0.8M 6M 25M 100M

Part `steps`: RL steps of the lab (its SFT model, its batch of 16 prompts x 8 samples) with
  - local: one process, run.threads=2;
  - ray sync: 2 rollout workers x 1 CPU (1 torch thread each) + a reward worker + the learner (2 threads);
  - ray async: the same with distributed.mode=async, max_staleness=1, algo.tis_cap=2.
Runs are interleaved (local, sync, async, local, ...) so drift of the machine hits all alike; each
is `rlvr lab` on that model (sft.steps=0) in a subprocess, read back from its metrics.jsonl. The first step (warm-up: Ray
workers compile their kernels, allocate) is left out of the medians.

Part `overheads`: for tiny Qwen3 models of 0.8M to ~100M parameters, on a local Ray instance
with two rollout workers holding the model: bytes per weight sync (full weights; LoRA rank 16
adapters for comparison), the learner's ray.put, a worker's load (fetch + copy into its model),
the whole synchronous sync to both workers; the same put + fetch with torch tensors pickled as they are
(the first version) against raw bytes (interleaved); and the round-trip latency of an empty actor call
(task dispatch). Medians of repeated measurements.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFIGS = {
    "local": ["run.threads=2"],
    "ray sync": ["run.threads=2", "distributed.backend=ray", "distributed.rollout_workers=2", "distributed.cpus_per_worker=1"],
    "ray async": ["run.threads=2", "distributed.backend=ray", "distributed.rollout_workers=2", "distributed.cpus_per_worker=1",
                  "distributed.mode=async", "distributed.max_staleness=1", "algo.tis_cap=2.0"],
}
PARTS = ["time/generate", "time/verify", "time/update", "time/weight_sync", "time/rollout_workers", "time/reward_workers",
         "time/weight_load", "time/dispatch", "time/ray_wait"]


def sft_model(work: Path) -> Path:
    """The lab's SFT model (the lab with train.steps=0), made once."""
    run_dir = work / "sft"
    if not (run_dir / "model" / "config.json").exists():
        subprocess.run([sys.executable, "-m", "rlvr.cli", "lab", "--quiet", "train.steps=0", f"run.output_dir={json.dumps(str(run_dir))}"],
                       check=True, cwd=ROOT)
    return run_dir / "model"


def rl_run(model: Path, name: str, repeat: int, steps: int, work: Path) -> list[dict]:
    run_dir = work / f"{name.replace(' ', '_')}-{repeat}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run each time (an old one would be refused)
    cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"model.path={json.dumps(str(model))}", "sft.steps=0",
           f"train.steps={steps}", "checkpoint.every=0", f"run.output_dir={json.dumps(str(run_dir))}",
           *CONFIGS[name]]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    print(f"  {name} #{repeat}: {wall:.0f} s wall for {steps} steps", file=sys.stderr)
    return records


def part_steps(args) -> str:
    work = Path(args.out)
    model = sft_model(work)
    records: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for repeat in range(args.repeats):
        for name in CONFIGS:
            records[name] += rl_run(model, name, repeat, args.steps, work)[1:]  # step 1: warm-up
    lines = ["| backend | s/step (median) | " + " | ".join(p.removeprefix("time/") for p in PARTS) + " | reward/mean |",
             "|---|---|" + "---|" * len(PARTS) + "---|"]
    base = statistics.median(r["time/step"] for r in records["local"])
    for name, rs in records.items():
        step = statistics.median(r["time/step"] for r in rs)
        cells = [f"{statistics.mean(r.get(p, 0.0) for r in rs):.3f}" if any(p in r for r in rs) else "-" for p in PARTS]
        reward = statistics.mean(r["reward/mean"] for r in rs)
        lines.append(f"| {name} | {step:.3f} ({step / base:.2f}x) | " + " | ".join(cells) + f" | {reward:.3f} |")
    return "\n".join(lines)


def part_overheads(args) -> str:
    import ray
    import torch

    from rlvr.config import Config, ModelConfig, TinyModelConfig
    from rlvr.distributed.workers import RolloutWorker, initial_tensors, pack_weights, policy_spec, trainable_weights, weights_nbytes
    from rlvr.models import add_lora, build_char_tokenizer, build_tiny_model, count_parameters

    shapes = {"0.8M": (192, 2, 512), "6M": (384, 4, 1024), "25M": (640, 6, 1792), "100M": (1024, 8, 3072)}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    tok = build_char_tokenizer()
    rows = ["| model | parameters | bytes / sync | LoRA r16 bytes | ray.put (ms) | worker load (ms) | sync to 2 workers (ms) "
            "| pickled tensors: put + fetch (ms) | raw bytes: put + fetch (ms) |",
            "|---|---|---|---|---|---|---|---|---|"]

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self, x=None):
            return x

        def fetch(self, refs):  # seconds to fetch an object into this process
            t0 = time.perf_counter()
            ray.get(refs[0])
            return time.perf_counter() - t0

    echo = Echo.remote()
    ray.get(echo.ping.remote())
    latencies = []
    for _ in range(300):
        t0 = time.perf_counter()
        ray.get(echo.ping.remote())
        latencies.append(time.perf_counter() - t0)
    dispatch_ms = statistics.median(latencies) * 1e3
    for label in args.sizes:
        hidden, layers, inter = shapes[label]
        tiny = TinyModelConfig(hidden_size=hidden, num_layers=layers, intermediate_size=inter, num_heads=max(2, hidden // 64),
                               num_kv_heads=max(1, hidden // 128))
        model = build_tiny_model(tok, tiny, seed=0)
        params = count_parameters(model)
        lora = add_lora(build_tiny_model(tok, tiny, seed=0), ModelConfig(lora_rank=16))
        lora_bytes = sum(t.numel() * t.element_size() for t in trainable_weights(lora).values())
        cfg = Config()
        actor = ray.remote(RolloutWorker).options(num_cpus=1)
        workers = [actor.remote(policy_spec(model), ray.put(pack_weights(initial_tensors(model))), tok, cfg, 1, "cpu") for _ in range(2)]
        ray.get([w.ready.remote() for w in workers])
        puts, loads, syncs = [], [], []
        for version in range(1, args.syncs + 1):
            t0 = time.perf_counter()
            weights = pack_weights(trainable_weights(model))
            ref = ray.put(weights)
            t1 = time.perf_counter()
            worker_s = ray.get([w.load.remote(version, [ref]) for w in workers])
            t2 = time.perf_counter()
            puts.append(t1 - t0)
            loads.append(max(worker_s))
            syncs.append(t2 - t0)
            del ref
        nbytes = weights_nbytes(weights)
        formats = {"pickled": lambda: {k: v.clone() for k, v in trainable_weights(model).items()},  # what ray.put of torch tensors does
                   "raw": lambda: pack_weights(trainable_weights(model))}
        transfer = {name: [] for name in formats}
        for _ in range(args.syncs):  # the two formats interleaved
            for name, make in formats.items():
                t0 = time.perf_counter()
                ref = ray.put(make())
                put_s = time.perf_counter() - t0
                transfer[name].append(put_s + ray.get(echo.fetch.remote([ref])))
                del ref
        rows.append(f"| {label} | {params / 1e6:.1f}M | {nbytes / 2**20:.1f} MiB | {lora_bytes / 2**20:.2f} MiB | "
                    f"{statistics.median(puts) * 1e3:.1f} | {statistics.median(loads) * 1e3:.1f} | {statistics.median(syncs) * 1e3:.1f} | "
                    f"{statistics.median(transfer['pickled']) * 1e3:.1f} | {statistics.median(transfer['raw']) * 1e3:.1f} |")
        for w in workers:
            ray.kill(w)
    ray.shutdown()
    return "\n".join(rows) + f"\n\nEmpty actor call round trip (task dispatch): {dispatch_ms:.2f} ms median of 300."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["steps", "overheads", "all"], default="all")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sizes", nargs="+", default=["0.8M", "6M", "25M", "100M"])
    parser.add_argument("--syncs", type=int, default=7)
    parser.add_argument("--out", default="runs/bench_distributed")
    args = parser.parse_args()
    if args.part in ("overheads", "all"):
        print(part_overheads(args), flush=True)
    if args.part in ("steps", "all"):
        print(part_steps(args), flush=True)


if __name__ == "__main__":
    main()
