"""Run the CPU lab on several seeds and tabulate held-out accuracy before and after GRPO.

    .venv/bin/python bench/lab_seeds.py                 # seeds 0 1 2, one after another
    .venv/bin/python bench/lab_seeds.py --seeds 0 1 2 --out runs/seeds -- algo.beta=0.04

Each seed runs `rlvr lab` as a subprocess in its own run directory (so a result is exactly what a
user gets from the README command); the table is read back from each run's summary.json.
Runs are sequential by default so the wall times are those of a machine doing nothing else.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def run_seed(seed: int, out: Path, overrides: list[str]) -> dict:
    run_dir = out / f"seed{seed}"
    if not (run_dir / "summary.json").exists():
        cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"run.seed={seed}", f"run.output_dir={json.dumps(str(run_dir))}", *overrides]
        started = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"seed {seed}: {time.perf_counter() - started:.0f} s wall", file=sys.stderr)
    return json.loads((run_dir / "summary.json").read_text())


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
    parser.add_argument("overrides", nargs="*", help="dotted config overrides passed to every run")
    args = parser.parse_args()
    summaries = {seed: run_seed(seed, args.out, args.overrides) for seed in args.seeds}
    print("| seed | after SFT | after GRPO | gain (points) | per level (1 / 2 / 3) | shows work | mean length | seconds SFT / GRPO / total |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, s in summaries.items():
        print(row(seed, s))


if __name__ == "__main__":
    main()
