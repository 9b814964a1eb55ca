"""Peak memory and trainable parameters: full fine-tuning vs LoRA, the same RL steps.

    .venv/bin/python bench/lora_memory.py                    # ~76M-parameter model, beta 0.04
    .venv/bin/python bench/lora_memory.py --hidden 384 --layers 6 --micro-batch 64 --new-tokens 64

Each configuration runs `rlvr lab` (no SFT, a few GRPO steps) in its own child process; the
child's peak resident set size comes from wait4(). With beta > 0 full fine-tuning keeps a frozen
copy of the model as the KL reference plus AdamW's two moments for every weight; LoRA keeps
neither (the reference is the same weights with the adapters off; moments only for adapters).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run(args: list[str]) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"run.output_dir={json.dumps(str(out))}", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
        return usage.ru_maxrss / 1024, json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    a = parser.parse_args()
    common = [
        f"model.tiny.hidden_size={a.hidden}", f"model.tiny.num_layers={a.layers}", f"model.tiny.intermediate_size={a.hidden * 3}",
        "model.tiny.num_heads=4", "model.tiny.num_kv_heads=2", "sft.steps=0", f"train.steps={a.steps}", f"algo.beta={a.beta}",
        "task.num_eval=8", "eval.max_new_tokens=8", "train.save_model=false", "run.threads=2",
        f"train.micro_batch_size={a.micro_batch}", f"rollout.max_new_tokens={a.new_tokens}", "rollout.prompts_per_step=4", "rollout.group_size=4",
    ]
    rows = []
    for name, extra in (("full fine-tuning", []), (f"LoRA rank {a.rank}", [f"model.lora_rank={a.rank}"])):
        rss, summary = run(common + extra)
        rows.append((name, summary["parameters"], summary["trainable_parameters"], rss))
    print(f"| setting | parameters | trainable | peak RSS MiB |  (hidden {a.hidden}, {a.layers} layers, beta {a.beta}, {a.steps} steps)")
    print("|---|---|---|---|")
    for name, params, trainable, rss in rows:
        print(f"| {name} | {params / 1e6:.2f}M | {trainable / 1e6:.3f}M | {rss:.0f} |")
    print(f"LoRA / full peak RSS: {rows[1][3] / rows[0][3]:.2f}")


if __name__ == "__main__":
    main()
