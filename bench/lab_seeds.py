"""Run the CPU lab on several seeds and tabulate held-out accuracy before and after GRPO.

    .venv/bin/python bench/lab_seeds.py                 # seeds 0 1 2, one after another
    .venv/bin/python bench/lab_seeds.py --seeds 0 1 2 --out runs/seeds -- algo.beta=0.04
    .venv/bin/python bench/lab_seeds.py --seeds 0 1 2 3 4 --parallel 2 --isa avx2 --out runs/seeds-avx2

Each seed runs `rlvr lab` as a subprocess in its own run directory (so a result is exactly what a
user gets from the README command); the table is read back from each run's summary.json.
Runs are sequential by default so the wall times are those of a machine doing nothing else;
`--parallel 2` runs two side by side, one torch thread each (the table says so).

`--isa avx2` runs the labs as a CPU without AVX-512 would: torch's kernels dispatched for AVX2
(ATEN_CPU_CAPABILITY), oneDNN and MKL capped at AVX2. Float results then differ in the last bits
as they do between machines of this kind, which is what decides a gain close to a line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


ISA_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "native": {}}


def start_seed(seed: int, out: Path, overrides: list[str], isa: str) -> subprocess.Popen | None:
    run_dir = out / f"seed{seed}"
    if (run_dir / "summary.json").exists():
        return None
    cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"run.seed={seed}", f"run.output_dir={json.dumps(str(run_dir))}", *overrides]
    return subprocess.Popen(cmd, env={**os.environ, **ISA_ENV[isa]})


def run_seeds(seeds: list[int], out: Path, overrides: list[str], parallel: int, isa: str) -> dict[int, dict]:
    """Every seed's summary.json, running at most `parallel` labs at a time."""
    pending, running = list(seeds), []
    while pending or running:
        while pending and len(running) < parallel:
            seed = pending.pop(0)
            proc = start_seed(seed, out, overrides, isa)
            if proc is not None:
                running.append((seed, proc, time.perf_counter()))
        if running:
            seed, proc, started = running.pop(0)
            if proc.wait() != 0:
                sys.exit(f"seed {seed}: rlvr lab failed (exit {proc.returncode})")
            print(f"seed {seed}: {time.perf_counter() - started:.0f} s wall", file=sys.stderr)
    return {seed: json.loads((out / f"seed{seed}" / "summary.json").read_text()) for seed in seeds}


def row(seed: int, s: dict) -> str:
    before, after = s["eval"]["after_sft"], s["eval"]["after_rl"]
    levels = " / ".join(f"{before['by_level'][k]:.0%}→{after['by_level'][k]:.0%}" for k in sorted(after["by_level"]))
    return (
        f"| {seed} | {before['accuracy']:.1%} | {after['accuracy']:.1%} | {s['gain_points']:+.1f} | {levels} | "
        f"{before['shows_work']:.0%}→{after['shows_work']:.0%} | {before['mean_length']:.1f}→{after['mean_length']:.1f} | "
        f"{s['seconds']['sft']:.0f} / {s['seconds']['rl']:.0f} / {s['seconds']['total']:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/seeds"))
    parser.add_argument("--parallel", type=int, default=1, help="labs side by side (each then gets run.threads=1)")
    parser.add_argument("--isa", choices=sorted(ISA_ENV), default="native", help="avx2: run as a CPU without AVX-512 would")
    parser.add_argument("overrides", nargs="*", help="dotted config overrides passed to every run")
    args = parser.parse_args()
    overrides = (["run.threads=1"] if args.parallel > 1 else []) + args.overrides
    summaries = run_seeds(args.seeds, args.out, overrides, args.parallel, args.isa)
    flags = {f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags") for f in line.split()[2:]}
    print(f"CPU: avx512f {'yes' if 'avx512f' in flags else 'no'}, avx512_bf16 {'yes' if 'avx512_bf16' in flags else 'no'}, avx2 "
          f"{'yes' if 'avx2' in flags else 'no'}; kernels: {args.isa}; {args.parallel} lab(s) at a time")
    levels = " / ".join(sorted(next(iter(summaries.values()))["eval"]["after_rl"]["by_level"]))
    print(f"| seed | after SFT | after GRPO | gain (points) | per level ({levels}) | shows work | mean length | seconds SFT / GRPO / total |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, s in summaries.items():
        print(row(seed, s))
    gains = [s["gain_points"] for s in summaries.values()]
    print(f"\ngain: min {min(gains):+.1f}, mean {sum(gains) / len(gains):+.1f} points over {len(gains)} seeds")


if __name__ == "__main__":
    main()
