"""The CPU lab under every algorithm preset, from one shared cold start per seed.

    .venv/bin/python bench/presets.py                       # presets x seeds 0 1, two runs at a time
    .venv/bin/python bench/presets.py --seeds 0 --presets dapo gspo --jobs 1 -- train.steps=100

Per seed it runs `rlvr lab train.steps=0 sft.save_model=true` once (the SFT cold start is the
same for every preset and is most of the lab's time), then `rlvr lab model.path=<that model>
sft.steps=0 algo.preset=P` for each preset, each a subprocess in its own run directory (exactly
what a user gets from the CLI). Every preset thus starts from the same weights and is judged on
the same held-out problems; the table is read back from each run's summary.json.

`--jobs 2` runs two presets side by side with one thread each (a 2-core machine): wall times are
then those of a shared machine; use `--jobs 1` for a machine doing nothing else.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PRESETS = ["grpo", "rloo", "dr_grpo", "dapo", "gspo"]


def lab(run_dir: Path, args: list[str], threads: int) -> dict:
    if not (run_dir / "summary.json").exists():
        cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"run.output_dir={json.dumps(str(run_dir))}", f"run.threads={threads}", *args]
        started = time.perf_counter()
        with open(run_dir.with_suffix(".log"), "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
        print(f"{run_dir.name}: {time.perf_counter() - started:.0f} s wall", file=sys.stderr)
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--out", type=Path, default=Path("runs/presets"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="dotted config overrides passed to every preset run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    threads = 1 if args.jobs > 1 else 0

    def cold_start(seed: int) -> dict:
        return lab(args.out / f"sft-seed{seed}", [f"run.seed={seed}", "train.steps=0", "sft.save_model=true"], threads)

    def preset_run(job: tuple[str, int]) -> dict:
        preset, seed = job
        model = args.out / f"sft-seed{seed}" / "sft"
        return lab(args.out / f"{preset}-seed{seed}",
                   [f"run.seed={seed}", f"model.path={json.dumps(str(model))}", "sft.steps=0", f"algo.preset={preset}", *args.overrides], threads)

    with ThreadPoolExecutor(args.jobs) as pool:
        starts = dict(zip(args.seeds, pool.map(cold_start, args.seeds)))
        jobs = [(p, s) for s in args.seeds for p in args.presets]
        results = dict(zip(jobs, pool.map(preset_run, jobs)))

    print("| preset | seed | before RL | after RL | gain (points) | per level before → after | shows work | RL wall s (s/step) |")
    print("|---|---|---|---|---|---|---|---|")
    for (preset, seed), s in results.items():
        before, after = s["eval"]["before_rl"], s["eval"]["after_rl"]
        assert before["accuracy"] == starts[seed]["eval"]["after_sft"]["accuracy"], "the saved cold start must evaluate identically"
        levels = " / ".join(f"{before['by_level'][k]:.0%}→{after['by_level'][k]:.0%}" for k in sorted(after["by_level"]))
        print(
            f"| {preset} | {seed} | {before['accuracy']:.1%} | {after['accuracy']:.1%} | {s['gain_points']:+.1f} | {levels} | "
            f"{before['shows_work']:.0%}→{after['shows_work']:.0%} | {s['seconds']['rl']:.0f} ({s['seconds']['rl'] / max(s['rl_steps'], 1):.2f}) |"
        )
    for seed, s in starts.items():
        print(f"\ncold start seed {seed}: SFT {s['seconds']['sft']:.0f} s, held-out {s['eval']['after_sft']['accuracy']:.1%}", end="")
    print()


if __name__ == "__main__":
    main()
