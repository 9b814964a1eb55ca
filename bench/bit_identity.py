"""Old code vs this tree: every preset computes bit-identical advantages, losses and gradients.

    .venv/bin/python bench/bit_identity.py --base 1e13f43              # the math, on random batches (~20 s)
    .venv/bin/python bench/bit_identity.py --base 1e13f43 --runs       # ... and toy `rlvr lab` runs (~5 min)

Written for the surrogate seam (registries under policy_loss and compute_advantages, and
`algo.estimator` read as `algo.baseline` + `algo.std_scale`); the check is against any revision.
`--base` is checked out with `git archive` into a temporary directory, never into this tree.

1. Config: each case (every preset, the default, old `algo.estimator` / `std_scale = "auto"`
   overrides on their own and on top of presets, an old-style preset file, and each old config
   saved by the old `to_toml` and read back by the new loader) is resolved by the old and the new
   `load_config`; every other algo field must be equal.
2. Math: for each case, on random batches (missing rewards, ragged lengths, stale old log-probs so
   that the clip ranges bind, a reference, micro-batches with the whole batch's normaliser), the
   old `compute_advantages` / `policy_loss` called as the old loop and update called them, and the
   new ones called as they call them now, must give equal tensors bit for bit (torch.equal):
   advantages, loss, gradient, every metric.
3. `--runs`: `rlvr lab` at toy size (sft 0, 3 RL steps, num_iterations 2 at a learning rate high enough that the clip ranges bind, a dense reward) under
   every preset and a few old spellings, in the old tree and in this one: metrics.jsonl (all but time/* and
   wall-clock rates) and the saved weights must be equal.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zlib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlvr import config as new_config  # noqa: E402
from rlvr.algorithms import compute_advantages, loss_normalizer, policy_loss  # noqa: E402

PRESETS = ["grpo", "rloo", "dr_grpo", "dapo", "gspo"]
ESTIMATORS = ["grpo", "dr_grpo", "rloo"]
NEW_ONLY = {"baseline", "surrogate"}  # fields the old config did not have
OLD_ONLY = {"estimator"}


def old_tree(base: str, into: Path) -> Path:
    """`git archive base` of the whole tree, unpacked under `into`."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", base], check=True, capture_output=True).stdout
    tarfile.open(fileobj=io.BytesIO(data)).extractall(into)
    return into


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def config_cases(tmp: Path) -> list[tuple[str, str | None, list[str]]]:
    """(label, config file or None, overrides)."""
    mine = tmp / "mine.toml"
    mine.write_text('[algo]\nestimator = "rloo"\ndual_clip = 3.0\n')  # an old-style preset file of a user's
    user = tmp / "user.toml"
    user.write_text('[algo]\npreset = "dr_grpo"\nestimator = "grpo"\nclip_high = 0.3\n')
    cases = [("default", None, [])]
    cases += [(p, None, [f"algo.preset={p}"]) for p in PRESETS]
    cases += [(f"estimator={e}", None, [f"algo.estimator={e}"]) for e in ESTIMATORS]
    cases += [(f"estimator={e} std={s}", None, [f"algo.estimator={e}", f"algo.std_scale={s}"])
              for e in ESTIMATORS for s in ("group", "batch", "none", "auto")]
    cases += [(f"{p} + estimator={e}", None, [f"algo.preset={p}", f"algo.estimator={e}"]) for p in PRESETS for e in ESTIMATORS]
    cases += [(f"{p} + std=auto", None, [f"algo.preset={p}", "algo.std_scale=auto"]) for p in PRESETS]
    cases += [(f"std={s} + {p}", None, [f"algo.std_scale={s}", f"algo.preset={p}"]) for p in PRESETS for s in ("batch", "auto")]
    cases += [("user preset file", None, [f"algo.preset={mine}"]), ("user file", str(user), []),
              ("user file + auto", str(user), ["algo.std_scale=auto"])]
    cases += [("kitchen sink", None, ["algo.dual_clip=3.0", "algo.entropy_coef=0.01", "algo.beta=0.02", "algo.kl_estimator=k2",
                                      "algo.aggregation=token_mean", "algo.ratio_level=sequence", "algo.clip_high=0.28"])]
    return cases


def loss_kwargs_old(algo, L):  # as rlvr/update.py at the base revision passed them
    return dict(ratio_level=algo.ratio_level, clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip or None,
                aggregation=algo.aggregation, max_completion_length=L, kl_coef=algo.beta if algo.kl_in == "loss" else 0.0,
                kl_estimator=algo.kl_estimator, entropy_coef=algo.entropy_coef)


def loss_kwargs_new(algo, L):  # as rlvr/update.py passes them now
    return dict(loss_kwargs_old(algo, L), surrogate=algo.surrogate)


def random_batch(gen: torch.Generator, G: int):
    N = int(torch.randint(1, 5, (1,), generator=gen))
    B, T = N * G, int(torch.randint(1, 9, (1,), generator=gen))
    rewards = torch.randint(0, 3, (B,), generator=gen).float() / 2
    rewards[torch.rand(B, generator=gen) < 0.15] = float("nan")
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
    logp = -torch.rand(B, T, generator=gen) * 4
    old = logp + (torch.rand(B, T, generator=gen) - 0.5) * 0.8  # ratios in about [0.67, 1.5]: every clip range binds somewhere
    ref = logp + (torch.rand(B, T, generator=gen) - 0.5)
    ent = torch.rand(B, T, generator=gen) * 2
    logp = torch.where(mask.bool(), logp, torch.full_like(logp, 30.0))  # junk in padding must not leak (finite: NaN != NaN)
    return rewards, mask, logp, old, ref, ent, T


def loss_grad(fn, logp, old, adv, mask, ref, ent, kwargs, normalizer=None):
    logp = logp.clone().requires_grad_(True)
    entropy = (ent * logp.exp()) if kwargs["entropy_coef"] else None  # any function of logp: only its graph matters
    loss, metrics = fn(logp, old, adv, mask, ref_logp=ref if kwargs["kl_coef"] else None, entropy=entropy, normalizer=normalizer, **kwargs)
    loss.backward()
    return loss.detach(), logp.grad, {k: v.detach() for k, v in metrics.items()}


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return torch.equal(a, b)


def check_math(old_cfg_mod, old_adv, old_loss, tmp: Path, batches: int) -> int:
    failures, compared = 0, 0
    for label, path, overrides in config_cases(tmp):
        old_cfg = old_cfg_mod.load_config(path, overrides)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", new_config.ConfigDeprecationWarning)
            new_cfg = new_config.load_config(path, overrides)
            saved = tmp / "saved.toml"
            saved.write_text(old_cfg_mod.to_toml(old_cfg))  # a run directory's config.toml from the old code
            resaved = new_config.load_config(saved)
        a, n = old_cfg.algo, new_cfg.algo
        same_fields = {k: v for k, v in vars(a).items() if k not in OLD_ONLY | {"std_scale"}} == \
            {k: v for k, v in vars(n).items() if k not in NEW_ONLY | {"std_scale"}}
        if not same_fields or resaved.algo != n or n.surrogate != "ppo_clip":
            print(f"FAIL {label}: config fields differ\n  old {a}\n  new {n}\n  resaved {resaved.algo}")
            failures += 1
        gen = torch.Generator().manual_seed(zlib.crc32(label.encode()))
        for _ in range(batches):
            G = int(torch.randint(2, 6, (1,), generator=gen))
            rewards, mask, logp, old_logp, ref, ent, T = random_batch(gen, G)
            old_std = None if a.std_scale == "auto" else a.std_scale
            adv_old = old_adv.compute_advantages(rewards, G, a.estimator, old_std, a.adv_eps)
            adv_new = compute_advantages(rewards, G, baseline=n.baseline, std_scale=n.std_scale, eps=n.adv_eps)
            include = torch.isfinite(rewards).unsqueeze(1)
            m = mask * include
            results = []
            for fn, normalizer, kw, adv in ((old_loss.policy_loss, old_loss.loss_normalizer, loss_kwargs_old(a, T), adv_old),
                                            (policy_loss, loss_normalizer, loss_kwargs_new(n, T), adv_new)):
                whole = loss_grad(fn, logp, old_logp, adv, m, ref, ent, kw)
                norm = normalizer(m, kw["aggregation"], T)  # the whole batch's, for a micro-batch of its first half
                half = m.shape[0] // 2
                part = loss_grad(fn, logp[:half], old_logp[:half], adv[:half], m[:half], ref[:half], ent[:half], kw, normalizer=norm)
                results.append((whole, part))
            compared += 1
            if not (torch.equal(adv_old, adv_new) and same_tuple(results[0], results[1])):
                print(f"FAIL {label}: G={G} T={T}\n  adv old {adv_old}\n  adv new {adv_new}")
                failures += 1
                break
    print(f"math: {len(config_cases(tmp))} config cases x {batches} batches, {compared} compared, {failures} failures")
    return failures


def same_tuple(x, y) -> bool:
    return all(same(p, q) for a, b in zip(x, y) for p, q in zip(a, b))


TOY = ["model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "task.num_train=200",
       "task.num_eval=20", "eval.max_new_tokens=12", "rollout.max_new_tokens=12", "rollout.group_size=4", "rollout.prompts_per_step=4",
       "train.micro_batch_size=6", "run.threads=1", "sft.steps=0", "train.steps=3", "train.lr=2e-2", "train.warmup_steps=1",
       "algo.num_iterations=2", 'reward.functions=["toyreward:digit_share"]']
REWARD = '''def digit_share(prompts, completions, **columns):
    """A dense toy reward: the share of digits in the completion (every group has signal)."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]
'''


def check_runs(old_root: Path, tmp: Path) -> int:
    from safetensors.torch import load_file

    (tmp / "toyreward.py").write_text(REWARD)
    runs = [[f"algo.preset={p}"] for p in PRESETS] + [["algo.estimator=rloo"], ["algo.preset=gspo", "algo.std_scale=auto"],
                                                      ["algo.dual_clip=3.0", "algo.entropy_coef=0.01", "algo.beta=0.02"]]
    failures = 0
    for args in runs:
        out = {}
        for tree, root in (("old", old_root), ("new", ROOT)):
            run_dir = tmp / f"{tree}-{'-'.join(a.replace('/', '_') for a in args)}"
            env = {**os.environ, "PYTHONPATH": f"{root}:{tmp}"}
            cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet", f"run.output_dir={json.dumps(str(run_dir))}", *TOY, *args]
            subprocess.run(cmd, check=True, env=env, cwd=tmp, capture_output=True)
            records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            out[tree] = ([{k: v for k, v in r.items() if not (k.startswith("time/") or k.endswith("per_s"))} for r in records],
                         load_file(str(run_dir / "model" / "model.safetensors")))
        (m_old, w_old), (m_new, w_new) = out["old"], out["new"]
        ok = m_old == m_new and w_old.keys() == w_new.keys() and all(torch.equal(w_old[k], w_new[k]) for k in w_old)
        print(f"run {' '.join(args)}: {'identical' if ok else 'DIFFERENT'} (reward/mean {[r['reward/mean'] for r in m_new]})")
        failures += not ok
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the revision to compare with (e.g. 1e13f43)")
    parser.add_argument("--batches", type=int, default=30, help="random batches per config case")
    parser.add_argument("--runs", action="store_true", help="also compare toy `rlvr lab` runs of every preset")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        old_root = old_tree(args.base, tmp / "old")
        old_cfg = load_module("old_rlvr_config", old_root / "rlvr" / "config.py")
        old_adv = load_module("old_rlvr_advantage", old_root / "rlvr" / "algorithms" / "advantage.py")
        old_loss = load_module("old_rlvr_loss", old_root / "rlvr" / "algorithms" / "loss.py")
        failures = check_math(old_cfg, old_adv, old_loss, tmp, args.batches)
        if args.runs:
            failures += check_runs(old_root, tmp)
    print("bit-identical" if not failures else f"{failures} FAILURES")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
