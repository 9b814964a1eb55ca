"""Distillation against RL for a small student: is it better to distill the RL'd lab model into a
smaller model, or to run the whole method (cold-start SFT + RL) on the small model itself?

    .venv/bin/python bench/distill_vs_rl.py --teacher runs/lab0                       # 1-layer student
    .venv/bin/python bench/distill_vs_rl.py --teacher runs/lab0 --student hidden_size=96,num_heads=2,num_kv_heads=1,intermediate_size=256
    .venv/bin/python bench/distill_vs_rl.py --teacher runs/lab0 --kl 0.5             # also: distillation with the token-level term

The teacher is a finished lab run (`rlvr lab`: the 2-layer model after cold-start SFT + GRPO).
Arms, run one after another with nothing else on the machine, each as the user would type it:

  (a) distill   `rlvr distill --teacher T --student tiny:<shape>`: the teacher's verified traces
                (rft.samples per training prompt, deduplicated) SFT a fresh student;
  (a') distill + KL (with --kl): the same with distill.kl_coef, the teacher's distribution on each token;
  (b) SFT + RL  `rlvr lab model.tiny.<shape>`: the lab's own recipe on the student.

Every arm uses the same SFT settings (sft.*, 3,000 steps by default) and is evaluated on the same
600 held-out problems (greedy, and pass@k / maj@k from eval.samples = 8). Prints the table with
each arm's wall time (the sampling of the traces counts against distillation).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def rlvr(args: list[str], out: Path) -> float:
    """Run one arm unless its result exists; returns its wall seconds (from a marker file)."""
    marker = out / "bench_seconds.json"
    if marker.is_file():
        return json.loads(marker.read_text())["seconds"]
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlvr.cli", *args, "--quiet"], check=True)
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"seconds": seconds}))
    return seconds


def figures(evaluation: dict) -> str:
    s = evaluation["sampled"]
    n = max(int(k.split("@")[1]) for k in s if k.startswith("pass@"))
    return f"{evaluation['accuracy']:.1%} | {s['pass@1']:.1%} | {s[f'pass@{n}']:.1%} | {s[f'maj@{n}']:.1%} | {evaluation['mean_length']:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", type=Path, required=True, help="a finished lab run directory")
    parser.add_argument("--student", default="num_layers=1", help="model.tiny settings of the student, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("runs/distill-vs-rl"))
    parser.add_argument("--kl", type=float, default=0.0, help="also run distillation with this distill.kl_coef")
    parser.add_argument("overrides", nargs="*", help="dotted settings for every arm (e.g. sft.steps=2000)")
    args = parser.parse_args()
    shape = [f"model.tiny.{item}" for item in args.student.split(",") if item]
    common = ["eval.samples=8", "sft.steps=3000", *args.overrides]  # a recipe's RL stage as teacher has sft.steps = 0
    arms: dict[str, tuple[Path, float]] = {}
    out = args.out / "distill"
    arms["(a) distill"] = (out, rlvr(["distill", "--teacher", str(args.teacher), "--student", f"tiny:{args.student}", *common, "--out", str(out)], out))
    if args.kl:
        out = args.out / f"distill-kl{args.kl}"
        arms[f"(a') distill + KL {args.kl}"] = (out, rlvr(["distill", "--teacher", str(args.teacher), "--student", f"tiny:{args.student}",
                                                         "--kl-coef", str(args.kl), *common, "--out", str(out)], out))
    out = args.out / "sft-rl"
    out.mkdir(parents=True, exist_ok=True)
    arms["(b) SFT + RL"] = (out, rlvr(["lab", *shape, *common, f"run.output_dir={json.dumps(str(out / 'run'))}"], out))

    teacher = json.loads((args.teacher / "summary.json").read_text())
    print(f"student: model.tiny {args.student}; teacher {args.teacher} ({teacher['parameters'] / 1e6:.2f}M parameters)")
    print("| arm | parameters | held-out greedy | pass@1 | pass@8 | maj@8 | mean length | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| teacher (2 layers, SFT + RL) | {teacher['parameters'] / 1e6:.2f}M | {figures(teacher['eval']['after_rl'])} | |")
    for name, (path, seconds) in arms.items():
        summary = json.loads(((path / "run") if name.startswith("(b)") else path).joinpath("summary.json").read_text())
        final = summary["eval"]["after_rl" if name.startswith("(b)") else "after_sft"]
        print(f"| {name} | {summary['parameters'] / 1e6:.2f}M | {figures(final)} | {seconds:.0f} |")
        if name.startswith("(b)"):
            print(f"| (b) after its SFT only | | {figures(summary['eval']['after_sft'])} | |")


if __name__ == "__main__":
    main()
