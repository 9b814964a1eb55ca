"""Sharded checkpoints of learner ranks (rlvr.sharded_checkpoint): gloo ranks on CPU,
the tiny model under FSDP2 (each decoder layer, then the root) after AdamW steps.

What a user relies on: a checkpoint written by W ranks resumes bit for bit in W ranks, in 1 rank
or in 2 (DCP reshards), and in a process without any group; `rlvr export` of a run whose step
checkpoints are sharded writes a Hugging Face directory that generates the ranks' greedy text,
LoRA adapters merged as for a one-process run; a broken checkpoint fails naming the file.

The ranks are forked from the test process (start_method="fork"): it has already imported torch
and transformers, so a rank starts in ~1 s instead of ~8 s of imports. Three jobs in order:
W=1 writes `one`; W=2 writes `two`, `ddp` and `lora`, reloads `two` and reshards `one` 1 -> 2;
W=1 reshards `two` 2 -> 1. Each rank asserts; a failure comes back as the rank's traceback.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from rlvr.checkpoint import CheckpointError, load_weights, save_checkpoint, step_name
from rlvr.commands.export import export_checkpoint
from rlvr.config import ModelConfig, TinyModelConfig, load_config, save_config
from rlvr.sharded_checkpoint import (MANIFEST, SHARDED_DIR, gather_to_hf, is_sharded, load_full_weights, load_policy_weights, load_sharded, read_manifest,
                                                 save_sharded)
from rlvr.models import add_lora, build_char_tokenizer, build_tiny_model, merged, save_pretrained

TINY = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, max_positions=64)
LORA = ModelConfig(lora_rank=4)
PROMPT = "12+3="


# ----------------------------------------------------------------------------- what each rank runs


def tiny(lora: bool = False):
    model = build_tiny_model(build_char_tokenizer(), TINY, seed=0)
    return add_lora(model, LORA) if lora else model


def shard(model, world: int):
    """FSDP2 as a learner rank wraps it: every transformer block, then the root (embeddings, norm, head)."""
    mesh = init_device_mesh("cpu", (world,))
    blocks = set(getattr(model, "get_base_model", lambda: model)()._no_split_modules)
    for module in [m for m in model.modules() if type(m).__name__ in blocks]:
        fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def optimizer(model):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)


def train(model, opt, steps: int, seed: int):
    """Steps on a fixed batch, the same on every rank (which ranks see does not matter here: the
    checkpoint is compared with the state the ranks hold, whatever it is)."""
    ids = torch.randint(3, 60, (2, 10), generator=torch.Generator().manual_seed(seed))
    for _ in range(steps):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        opt.param_groups[0]["lr"] *= 0.5  # as a schedule would: the checkpoint must bring the rate back too


def trained(world: int, steps: int, lora: bool = False, sharded: bool = True):
    model = tiny(lora)
    model = shard(model, world) if sharded else model
    opt = optimizer(model)
    train(model, opt, steps, seed=steps)
    return model, opt


def full_state(model, opt) -> dict:
    """Collective: the gathered parameters and AdamW's first moments, keyed by name."""
    model_sd, optim_sd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return {"model": {k: v.clone() for k, v in model_sd.items()},
            "exp_avg": {k: s["exp_avg"].clone() for k, s in optim_sd["state"].items()},
            "step": {k: float(s["step"]) for k, s in optim_sd["state"].items()}, "lr": [g["lr"] for g in optim_sd["param_groups"]]}


def assert_same(got: dict, want: dict, what: str):
    for part in ("model", "exp_avg"):
        assert got[part].keys() == want[part].keys(), (what, part)
        different = [k for k in want[part] if not torch.equal(got[part][k], want[part][k])]
        assert not different, f"{what}: {part} differs at {different[:3]}"
    assert (got["step"], got["lr"]) == (want["step"], want["lr"]), what


def greedy(model, tokenizer) -> str:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
    return tokenizer.decode(out[0, ids.shape[1]:])


def job_one(rank: int, world: int, d: Path):
    model, opt = trained(world, steps=2)
    save_sharded(d / "one", model, opt)
    ref = full_state(model, opt)
    torch.save(ref, d / "one.ref")


def job_two(rank: int, world: int, d: Path):
    model, opt = trained(world, steps=1)
    save_sharded(d / "two", model, opt)
    ref, text = full_state(model, opt), greedy(model, build_char_tokenizer())  # generate is collective under FSDP: every rank runs it
    if rank == 0:
        torch.save({**ref, "text": text}, d / "two.ref")
    # same world size: the state, and the next step from it, bit for bit (so the optimizer's step count and moments came back)
    again = shard(tiny(), world)
    again_opt = optimizer(again)
    manifest = load_sharded(d / "two", again, again_opt)
    assert manifest["world_size"] == 2 and manifest["strategy"] == "fsdp"
    assert_same(full_state(again, again_opt), ref, "W=2 -> W=2")
    train(model, opt, 1, seed=9)
    train(again, again_opt, 1, seed=9)
    assert_same(full_state(again, again_opt), full_state(model, opt), "the step after resuming")
    # 1 -> 2: the checkpoint one rank wrote, split over two
    resharded = shard(tiny(), world)
    resharded_opt = optimizer(resharded)
    assert load_sharded(d / "one", resharded, resharded_opt)["world_size"] == 1
    assert_same(full_state(resharded, resharded_opt), torch.load(d / "one.ref"), "W=1 -> W=2")
    # replicated ranks (ddp): both call save_sharded, DCP writes each tensor once
    replica, replica_opt = trained(world, steps=1, sharded=False)
    save_sharded(d / "ddp", replica, replica_opt)
    # LoRA under FSDP2: adapters train, the frozen base is saved too
    lora, lora_opt = trained(world, steps=1, lora=True)
    save_sharded(d / "lora", lora, lora_opt)
    lora_ref = full_state(lora, lora_opt)
    if rank == 0:
        torch.save(lora_ref, d / "lora.ref")


def job_back_to_one(rank: int, world: int, d: Path):
    model = shard(tiny(), world)
    opt = optimizer(model)
    load_sharded(d / "two", model, opt)
    ref = torch.load(d / "two.ref")
    assert_same(full_state(model, opt), ref, "W=2 -> W=1")


def _rank_main(rank: int, world: int, store: str, job, d: Path):
    torch.set_num_threads(1)  # two ranks on two shared cores
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        job(rank, world, d)
    finally:
        dist.destroy_process_group()


def ranks(job, world: int, d: Path):
    store = d / f"store-{job.__name__}"  # a FileStore: no port to pick or collide on
    mp.start_processes(_rank_main, args=(world, str(store), job, d), nprocs=world, start_method="fork")


# ----------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sharded")
    ranks(job_one, 1, d)
    ranks(job_two, 2, d)
    ranks(job_back_to_one, 1, d)
    return d


def distcp_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.distcp"))


def test_ranks_resume_and_reshard_bit_for_bit(sharded_runs):
    """The ranks asserted it (W=2 -> 2 and the step after, 1 -> 2, 2 -> 1); here what they wrote."""
    two, one = read_manifest(sharded_runs / "two"), read_manifest(sharded_runs / "one")
    assert (two["world_size"], two["strategy"], one["world_size"]) == (2, "fsdp", 1)
    assert len(list((sharded_runs / "two" / SHARDED_DIR).glob("*.distcp"))) == 2  # each rank wrote its own file
    assert two["tensors"]["model.embed_tokens.weight"] == {"shape": [len(build_char_tokenizer()), 32], "dtype": "float32"}  # global shape
    # the two checkpoints differ (2 steps vs 1), so loading the wrong one could not pass
    a, b = torch.load(sharded_runs / "one.ref"), torch.load(sharded_runs / "two.ref")
    assert not torch.equal(a["model"]["model.norm.weight"], b["model"]["model.norm.weight"])


def test_a_process_without_a_group_resumes_the_ranks_checkpoint(sharded_runs):
    """W=2 -> a learner in one process (learner_workers = 0): the same model and optimizer state."""
    model = tiny()
    opt = optimizer(model)
    assert load_sharded(sharded_runs / "two", model, opt)["world_size"] == 2
    assert_same(full_state(model, opt), torch.load(sharded_runs / "two.ref"), "W=2 -> no group")


def test_replicated_ranks_write_each_tensor_once(sharded_runs):
    """DDP ranks each hold everything; DCP deduplicates, so the checkpoint is one copy (measured)."""
    manifest = read_manifest(sharded_runs / "ddp")
    assert (manifest["world_size"], manifest["strategy"]) == (2, "ddp")
    one_copy = distcp_bytes(sharded_runs / "one" / SHARDED_DIR)  # the same model + AdamW state from one rank
    assert distcp_bytes(sharded_runs / "ddp" / SHARDED_DIR) < 1.1 * one_copy


def run_dir(root: Path, source: Path, lora: bool = False) -> Path:
    """A run directory as `rlvr lab` leaves it, its step-1 checkpoint holding the ranks' shards."""
    run = root / ("lora-run" if lora else "run")
    shape = [f"model.tiny.{k}={getattr(TINY, k)}" for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")]
    cfg = load_config(overrides=shape + ([f"model.lora_rank={LORA.lora_rank}"] if lora else []))
    run.mkdir(parents=True)
    save_config(cfg, run / "config.toml")
    save_pretrained(tiny(), build_char_tokenizer(), run / "init")
    save_checkpoint(run / "checkpoints", step_name(1), weights=lambda d: shutil.copytree(source / SHARDED_DIR, d / SHARDED_DIR),
                    trainer=None, state={"step": 1}, config_text=(run / "config.toml").read_text())
    return run


def test_export_of_a_sharded_run_generates_the_ranks_greedy_text(sharded_runs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = run_dir(tmp_path, sharded_runs / "two")
    assert is_sharded(run / "checkpoints" / step_name(1)) and not (run / "checkpoints" / step_name(1) / "model.safetensors").exists()
    export_checkpoint(run, tmp_path / "out")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tmp_path / "out"), AutoTokenizer.from_pretrained(tmp_path / "out")
    ref = torch.load(sharded_runs / "two.ref")
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in ref["model"].items())
    assert greedy(model, tokenizer) == ref["text"] and len(ref["text"]) == 12
    # the same without the run around it: a checkpoint, a skeleton of the model, the tokenizer
    gathered = gather_to_hf(run / "checkpoints" / step_name(1), tmp_path / "gathered", tiny(), build_char_tokenizer())
    assert greedy(AutoModelForCausalLM.from_pretrained(gathered), AutoTokenizer.from_pretrained(gathered)) == ref["text"]


def test_export_of_a_sharded_lora_run_merges_the_adapters(sharded_runs, tmp_path):
    from transformers import AutoModelForCausalLM

    run = run_dir(tmp_path, sharded_runs / "lora", lora=True)
    export_checkpoint(run, tmp_path / "out")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    policy = tiny(lora=True)  # what a one-process LoRA run's export does with the same weights
    policy.load_state_dict(torch.load(sharded_runs / "lora.ref")["model"])
    want = merged(policy).state_dict()
    assert exported.keys() == want.keys() and all(torch.equal(exported[k], want[k]) for k in want)
    gathered = gather_to_hf(run / "checkpoints" / step_name(1), tmp_path / "gathered", tiny(lora=True), build_char_tokenizer())
    assert all(torch.equal(v, want[k]) for k, v in AutoModelForCausalLM.from_pretrained(gathered).state_dict().items())
    assert any(k.endswith("lora_B.default.weight") and v.abs().sum() > 0 for k, v in torch.load(sharded_runs / "lora.ref")["model"].items())


def test_a_broken_sharded_checkpoint_names_what_is_wrong(sharded_runs, tmp_path):
    run = run_dir(tmp_path, sharded_runs / "two")
    step = run / "checkpoints" / step_name(1)
    manifest = step / SHARDED_DIR / MANIFEST
    text = manifest.read_text()
    manifest.write_text(json.dumps({k: v for k, v in json.loads(text).items() if k != "tensors"}))
    with pytest.raises(CheckpointError, match=f"{manifest}: incomplete manifest \\(no tensors\\)"):
        export_checkpoint(run, tmp_path / "out")
    manifest.unlink()
    with pytest.raises(CheckpointError, match=f"{manifest} is missing"):
        export_checkpoint(run, tmp_path / "out")
    manifest.write_text(text)
    with pytest.raises(CheckpointError, match="holds a plain model, the model to load it into has LoRA adapters"):
        load_full_weights(step, tiny(lora=True))
    small = build_tiny_model(build_char_tokenizer(), TinyModelConfig(hidden_size=16, num_layers=2, num_heads=4, num_kv_heads=2), seed=0)
    with pytest.raises(CheckpointError, match=r"do not fit the model .*other shapes: \['lm_head.weight \(\d+, 32\) vs \(\d+, 16\)"):
        load_policy_weights(step, small)
    with pytest.raises(CheckpointError, match="no model.safetensors \\(a checkpoint of learner ranks holds sharded/"):
        load_weights(step, tiny())  # the one-file reader names the other kind
    shutil.rmtree(step / SHARDED_DIR)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_policy_weights(step, tiny())
