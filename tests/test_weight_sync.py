"""The weight path to Ray's rollout workers: the collective group alone (processes forked here, no
Ray), then through RayLearner on a small local Ray instance.

What a user relies on: weights broadcast by the collective land in the workers bit for bit as the
object store's copy does, and sample the same tokens; a worker whose model differs is refused with
the reason on every side, never a hung broadcast; a restarted worker is sent the weights again;
the policy reaches the workers as its config and tensors, never as a pickled module.
"""

import gc
import io
import os
import pickle
import time

import pytest
import torch
import torch.multiprocessing as mp

from rlvr.config import ConfigError, load_config
from rlvr.distributed.weight_sync import (
    Entry, ManifestMismatch, WeightSyncError, WeightSyncGroup, WeightSyncHost, manifest_of, manifest_problems,
)

# Processes and a Ray instance: integration (conftest's INTEGRATION_FILES lists whole files), one xdist group so one Ray starts.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("weight_sync")]


def small_model(out: int = 3, seed: int = 1) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, out), torch.nn.Linear(out, 2))


def rollout_model(out: int = 3, seed: int = 1) -> torch.nn.Module:
    """How a rollout worker may hold it: bf16, one tensor in fp32 (as peft keeps LoRA adapters under a bf16 model)."""
    model = small_model(out, seed).to(torch.bfloat16)
    model[1].bias.data = model[1].bias.data.float()
    return model


# ---------------------------------------------------------------- the group alone (forked processes)


def _receive(address: str, rank: int, out: int, results) -> None:
    """A receiver: its own model (other values), joined, one sync taken; what it holds is reported."""
    torch.set_num_threads(1)
    try:
        model = rollout_model(out, seed=100 + rank)
        group = WeightSyncGroup.receiver(address, rank, 3, model, timeout_s=60)
        nbytes = group.receive(model)
        # as bytes: a tensor put on a queue is shared by a file descriptor that dies with this process
        saved = io.BytesIO()
        torch.save(model.state_dict(), saved)
        results.put((rank, nbytes, saved.getvalue()))
    except Exception as err:  # noqa: BLE001 - reported to the test
        results.put((rank, type(err).__name__, str(err)))
    # Leave without finalizers: objects forked from pytest's process (its threads do not exist
    # here) must not be torn down in this one.
    results.close()
    results.join_thread()
    os._exit(0)


def run_group(source: torch.nn.Module, receiver_out: dict[int, int], named=None, bucket_mb: float = 16.0, events: list | None = None):
    """Rank 0 here, ranks 1 and 2 forked (fork: no re-import, the group forms in ~0.1 s), the
    manifest in the receivers' dtypes. Returns (what the source did: bytes sent or the error,
    {rank: receiver's result}); `events` records each broadcast the source makes."""
    ctx = mp.get_context("fork")
    gc.collect()  # a group left from an earlier test, forked into a child, would hang it in its destructor
    host, group = WeightSyncHost(timeout_s=60), None
    results = ctx.Queue()
    procs = [ctx.Process(target=_receive, args=(host.address, r, receiver_out[r], results)) for r in (1, 2)]
    for p in procs:
        p.start()
    try:
        group = host.source(3, manifest_of(rollout_model().named_parameters()), bucket_mb=bucket_mb)
        if events is not None:
            broadcast = group._broadcast
            group._broadcast = lambda t: (events.append(("broadcast", t.numel())), broadcast(t))
        outcome = group.send(named if named is not None else source.named_parameters())
    except Exception as err:  # noqa: BLE001 - compared by the test
        outcome = err
    finally:
        if group is not None:
            group.close()
    received = dict((r, rest) for r, *rest in (results.get(timeout=60) for _ in procs))
    for p in procs:
        p.join(timeout=30)
    return outcome, received


@pytest.mark.parametrize("bucket_mb", [16.0, 0.0], ids=["one bucket", "one tensor a broadcast"])
def test_a_group_sends_a_lazy_stream_cast_to_the_rollout_dtypes(bucket_mb):
    """Every tensor arrives bit for bit in its receiver's dtype (bf16, one fp32), whether small
    tensors share a broadcast (their bytes padded so each can be viewed in place) or not; the
    source takes each tensor from its stream only when it is about to send it."""
    source, events = small_model(), []

    def lazily():  # a sharded learner gathers each parameter just before yielding it
        for name, p in source.named_parameters():
            events.append(("yield", name))
            yield name, p.detach().clone()

    sent, received = run_group(source, {1: 3, 2: 3}, lazily(), bucket_mb, events)
    expected = {k: v.to(rollout_model().state_dict()[k].dtype) for k, v in source.state_dict().items()}
    assert sent == sum(v.numel() * v.element_size() for v in expected.values()) == (12 + 3 + 6) * 2 + 2 * 4
    for rank in (1, 2):
        nbytes, saved = received[rank]
        held = torch.load(io.BytesIO(saved))
        assert nbytes == sent and held.keys() == expected.keys()
        assert all(held[k].dtype == expected[k].dtype and torch.equal(held[k], expected[k]) for k in expected)
    kinds = [kind for kind, _ in events]
    if bucket_mb == 0:  # lazy: tensor k is asked for only after tensor k - 1 went out
        assert kinds == ["yield", "broadcast"] * 4
    else:  # one bucket of the four, each padded to 16 bytes: 24 + 16 + 16 + 16 bytes
        assert kinds == ["yield"] * 4 + ["broadcast"] and events[-1] == ("broadcast", 32 + 16 + 16 + 16)


def test_a_mismatched_model_is_refused_on_every_side_with_the_reason():
    error, received = run_group(small_model(), {1: 3, 2: 5})  # rank 2's first layer is 5 wide
    assert isinstance(error, ManifestMismatch)
    assert "rank 2: 0.weight: shape (5, 4) here, (3, 4) sent" in str(error)
    assert received[2][0] == "ManifestMismatch" and "0.weight: shape (5, 4) here, (3, 4) sent" in received[2][1]
    assert received[1][0] == "ManifestMismatch" and "refused by rank 2" in received[1][1]  # told, not left waiting


def test_a_source_that_strays_from_the_manifest_fails_every_side_at_once():
    source = small_model()
    strayed = ((name.replace("1.", "9."), p) for name, p in source.named_parameters())  # the third tensor is misnamed
    t0 = time.perf_counter()
    error, received = run_group(source, {1: 3, 2: 3}, strayed, bucket_mb=0)
    assert isinstance(error, WeightSyncError) and "the manifest says 1.weight (2, 3), the source gave 9.weight" in str(error)
    assert all(received[r][0] == "WeightSyncError" for r in (1, 2))  # the source closed the group: not left waiting
    assert time.perf_counter() - t0 < 30  # the group's timeout is 60 s


def test_manifest_problems_name_each_difference():
    model = small_model().to(torch.bfloat16)  # no process: the check each receiver makes before joining
    manifest = [Entry("0.weight", (3, 4), "bfloat16"), Entry("0.bias", (3,), "float32"), Entry("1.weight", (9, 9), "bfloat16"),
                Entry("2.weight", (1,), "bfloat16")]
    assert manifest_problems(manifest, model) == [
        "0.bias: dtype bfloat16 here, float32 sent", "1.weight: shape (2, 3) here, (9, 9) sent", "2.weight: not a parameter of this model"]
    assert manifest_problems(manifest_of(model.named_parameters()), model) == []


def test_auto_takes_the_collective_path_only_for_gpu_workers_and_collective_async_is_refused():
    from rlvr.distributed.ray_learner import weight_sync_mode

    dc = load_config(overrides=["distributed.backend=ray"]).distributed
    assert weight_sync_mode(dc) == "object_store"  # CPU: the object store's shared memory beats gloo over TCP (bench/weight_sync.py)
    dc.gpus_per_worker = 1
    assert weight_sync_mode(dc) == "collective"  # NCCL
    dc.mode = "async"
    assert weight_sync_mode(dc) == "object_store"  # workers load between their rounds
    dc.max_staleness = 0  # nothing in flight: the synchronous loop
    assert weight_sync_mode(dc) == "collective"
    dc.learner_workers = 2  # learner ranks on CPU would send over gloo: the object store
    assert weight_sync_mode(dc) == "object_store"
    dc.gpus_per_learner = 1
    assert weight_sync_mode(dc) == "collective"
    with pytest.raises(ConfigError, match="distributed.weight_sync: = 'collective' cannot serve async mode.*rounds in flight"):
        load_config(overrides=["distributed.backend=ray", "distributed.mode=async", "distributed.weight_sync=collective"])
    load_config(overrides=["distributed.backend=ray", "distributed.mode=async", "distributed.max_staleness=0", "distributed.weight_sync=collective"])


# ---------------------------------------------------------------- through RayLearner (a local Ray instance)

TINY = ["model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
        "model.tiny.num_kv_heads=1", "rollout.group_size=2", "rollout.max_new_tokens=8", "run.threads=1"]
RAY = ["distributed.backend=ray", "distributed.rollout_workers=2", "distributed.reward_workers=1", "distributed.startup_timeout_s=180",
       "distributed.weight_sync=collective"]


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4,  # a private instance: never join a cluster another test started
              include_dashboard=False, logging_level="ERROR")  # logical CPUs: the 2 learners' 2 rollout workers each
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def learners(ray_instance):
    """The RayLearners built so far, by variant, closed with the module. Built on first use and kept,
    whatever order the tests run in (under xdist a parametrised module fixture may be built anew
    each time the variant changes: ~25 s a build)."""
    built: dict = {}
    yield built
    for learner in built.values():
        learner.close()


@pytest.fixture(params=["full", "lora"])
def learner(request, learners):
    """A RayLearner (collective sync, 2 rollout workers) on the tiny model, full weights or LoRA adapters."""
    from rlvr.distributed.ray_learner import RayLearner
    from rlvr.models import add_lora
    from rlvr.runtime import tiny_lab_model

    if request.param not in learners:
        cfg = load_config(overrides=TINY + RAY + (["model.lora_rank=4"] if request.param == "lora" else []))
        policy, tokenizer = tiny_lab_model(cfg)
        if cfg.model.lora_rank:
            policy = add_lora(policy, cfg.model)
        learners[request.param] = RayLearner(policy, tokenizer, cfg)
    assert learners[request.param].weight_sync == "collective"
    return learners[request.param]


def held(learner) -> list[dict[str, torch.Tensor]]:
    from rlvr.distributed.workers import unpack_weights

    return [{k: v.clone() for k, v in unpack_weights(w).items()} for w in learner._get([w.held_weights.remote() for w in learner.rollout])]


def samples(learner) -> list[dict[str, torch.Tensor]]:
    """Round 0 of the same prompts from every worker, under the weights it holds now."""
    from rlvr.data import format_prompt
    from rlvr.tasks.arithmetic import make_splits

    cfg = learner.cfg
    prompts = [format_prompt(learner.tokenizer, e, cfg.data) for e in make_splits(cfg.task, 0)[0][:2]]
    out = learner._get([w.generate.remote(prompts, 0, 0, learner.version, [learner.versions.get(learner.version)]) for w in learner.rollout])
    return [{k: v for k, v in s["rollouts"].items() if k in ("completion_ids_BT", "sample_logp_BT")} for s in out]


def perturb(policy: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """New values for what trains (as an update would make); returns them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return {n: p.detach().clone() for n, p in policy.named_parameters()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_the_policy_reaches_workers_as_config_and_tensors_not_a_module(learner):
    class NoModules(pickle.Pickler):
        def reducer_override(self, obj):
            assert not isinstance(obj, torch.nn.Module), f"a {type(obj).__name__} is passed to the rollout workers"
            return NotImplemented

    NoModules(io.BytesIO()).dump(learner.rollout_args)  # everything the actor constructor is given, nested objects included
    NoModules(io.BytesIO()).dump(learner._get([learner.rollout_args[1]])[0])  # and what its object store reference holds
    policy = {n: p.detach() for n, p in learner.policy.named_parameters()}
    assert all(same(w, policy) for w in held(learner))  # rebuilt by each worker, every tensor and dtype exactly


def test_collective_and_object_store_give_the_workers_the_same_weights_and_samples(learner):
    policy = learner.policy
    first = perturb(policy, seed=1)
    learner.weight_sync = "object_store"
    try:
        out = learner._sync_weights()
    finally:
        learner.weight_sync = "collective"
    by_store, store_samples = held(learner), samples(learner)
    assert all(same(w, first) for w in by_store)

    perturb(policy, seed=2)  # the workers take other weights in between, so the next sync has something to change
    learner._sync_weights()
    assert all(not same(w, first) for w in held(learner))

    with torch.no_grad():
        for n, p in policy.named_parameters():
            p.copy_(first[n])
    metrics = learner._sync_weights()
    assert all(same(w, first) for w in held(learner)) and all(same(w, s) for w, s in zip(held(learner), by_store))
    assert all(same(a, b) for a, b in zip(samples(learner), store_samples, strict=True))  # tokens and their log-probs
    trainable = sum(p.numel() * p.element_size() for p in policy.parameters() if p.requires_grad)
    assert metrics["distributed/weight_sync_bytes"] == out["distributed/weight_sync_bytes"] == trainable
    assert metrics["time/weight_sync"] > 0 and "time/weight_send" in metrics


def test_a_resume_sends_the_workers_the_checkpoint_weights(learner):
    state = learner.trainer_state()
    restored = perturb(learner.policy, seed=4)  # what load_policy puts in place before load_trainer_state
    learner.load_trainer_state(state)
    assert learner.version == state["ray"]["version"] and all(same(w, restored) for w in held(learner))


def test_a_restarted_worker_is_sent_the_weights_again(learner, ray_instance):
    """A worker killed after a broadcast restarts holding version 0 and in no group: asked for the
    current version it says so, and the driver re-forms the group, resends, and redoes the round."""
    from rlvr.tasks.arithmetic import make_splits

    if learner.cfg.model.lora_rank:
        pytest.skip("the restart path does not depend on what trains; the full-weights case covers it")
    now = perturb(learner.policy, seed=3)
    learner._sync_weights()
    generation, version = learner.weight_generation, learner.version
    ray_instance.kill(learner.rollout[1], no_restart=False)
    gen = learner.generate(make_splits(learner.cfg.task, 0)[0][:4])
    assert learner.weight_generation == generation + 1 and learner.version == version
    assert all(same(w, now) for w in held(learner))
    assert gen.rollouts.completion_ids_BT.shape[0] == 4 * learner.cfg.rollout.group_size
