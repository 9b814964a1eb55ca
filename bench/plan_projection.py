"""The learner plan's projection for 7B and 32B Llama-like models on 4 nodes x 8 GPUs of 80 GB:
full fine-tuning and LoRA, learner_workers W in {1, 8, 32} (FSDP), what fits, the weight sync
time, and what the plan refuses (issue 35; docs/distributed.md).

    .venv/bin/python bench/plan_projection.py
    .venv/bin/python bench/plan_projection.py --micro-batch 8 --prompt 1024 --new-tokens 4096 --no-checkpointing

Nothing is loaded or trained: rlvr.distributed.plan works the bytes out from the shapes
(rlvr.distributed.plan.SHAPES) and the config, exactly as `rlvr train --dry-run` does for a run.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from rlvr.config import Config, ConfigError
from rlvr.distributed.plan import GiB, SHAPES, Setup, plan, refuse_if_unfit

MODES = {  # name -> config changes
    "full": {"run.dtype": "float32", "run.autocast": "bfloat16", "model.lora_rank": 0, "algo.beta": 0.0},
    "full, beta 0.04": {"run.dtype": "float32", "run.autocast": "bfloat16", "model.lora_rank": 0, "algo.beta": 0.04},
    "LoRA r=16": {"run.dtype": "bfloat16", "run.autocast": "none", "model.lora_rank": 16, "algo.beta": 0.04},
}


def config(mode: dict, W: int, a: argparse.Namespace) -> Config:
    cfg = Config()
    changes = {**mode, "distributed.backend": "ray", "distributed.learner_workers": W, "distributed.learner_strategy": "fsdp",
               "distributed.rollout_workers": 1, "distributed.gpus_per_learner": 1.0, "distributed.device_memory_gb": a.gpu_gib,
               "distributed.sync_bandwidth_gbs": a.bandwidth, "train.micro_batch_size": a.micro_batch,
               "rollout.max_new_tokens": a.new_tokens, "model.gradient_checkpointing": a.checkpointing}
    for key, value in changes.items():
        section, name = key.split(".")
        setattr(getattr(cfg, section), name, value)
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=512, help="longest prompt, tokens")
    parser.add_argument("--new-tokens", type=int, default=1536, help="rollout.max_new_tokens")
    parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--gpu-gib", type=float, default=80.0)
    parser.add_argument("--bandwidth", type=float, default=10.0, help="distributed.sync_bandwidth_gbs")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 8, 32])
    a = parser.parse_args()
    console = Console(width=200)
    table = Table(title=f"per rank, GiB: micro-batch {a.micro_batch} x ({a.prompt} + {a.new_tokens}) tokens, gradient checkpointing "
                        f"{'on' if a.checkpointing else 'off'}, {a.gpu_gib:g} GiB devices, sync at {a.bandwidth:g} GB/s",
                  title_justify="left")
    for column in ("model", "mode", "W", "weights", "grads", "Adam", "ref", "gathered", "activ.", "logits", "device", "fits",
                   "sync GB", "sync s"):
        table.add_column(column, justify="left" if column in ("model", "mode", "fits") else "right")
    refusals = []
    for shape in SHAPES.values():
        for mode_name, mode in MODES.items():
            for W in a.ranks:
                p = plan(shape, Setup.from_config(config(mode, W, a), a.prompt), int(a.gpu_gib * GiB))
                d = p.device
                cells = [d.get(k, 0) / GiB for k in ("weights", "gradients", "optimizer state", "KL reference")]
                cells += [(d.get("gathered units", 0) + d.get("autocast weight copies", 0)) / GiB, d["activations"] / GiB,
                          d["logits"] / GiB, p.device_total / GiB]
                table.add_row(shape.name, mode_name, str(W), *(f"{x:.1f}" for x in cells), "yes" if p.fits else "[red]no",
                              f"{p.sync_bytes / 1e9:.2f}", f"{p.sync_seconds:.2f}")
                if not p.fits:
                    try:
                        refuse_if_unfit(p)
                    except ConfigError as err:
                        refusals.append(f"{shape.name}, {mode_name}, W={W}: {err}")
    console.print(table)
    console.print("\nrefused (the ConfigError `rlvr train --dry-run` and the run's start give):")
    for line in refusals:
        console.print(f"- {line}", soft_wrap=True)


if __name__ == "__main__":
    main()
