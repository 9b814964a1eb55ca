"""The Ray backend on a multi-node cluster on this machine (ray.cluster_utils.Cluster): three
nodes with fake resources, the lab's toy task, a few RL steps in each mode.

What a user relies on: one rollout worker trains exactly what the local backend trains; a given
number of workers is deterministic run to run; async with max_staleness = 0 is the synchronous
loop; async with staleness 1 samples by weights one update old (and says so); a worker killed
mid-step is replaced and its work redone exactly; a killed driver resumes exactly; workers that
cannot be placed fail fast with what is missing. Learner ranks: one trains exactly what the
driver's learner does; their weights reach the workers alike by collective and object store; a
rank killed mid-update, or its node lost, is formed again and the run ends where the unharmed one does.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from conftest import SOLVABLE  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.metrics import Reporter, read_jsonl_records  # noqa: E402
from rlvr.pipeline import run  # noqa: E402

# The SOLVABLE toy (SFT to about one problem in five, so RL has signal); 3 RL steps of 4 prompts x 4 samples.
FAST = SOLVABLE + ["eval.samples=0", "task.num_eval=8", "train.steps=3", "checkpoint.every=1"]


@pytest.fixture(scope="module")
def cluster():
    """A head without workers' resources and two nodes advertising a `rollout` resource."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20})
    for _ in range(2):
        c.add_node(num_cpus=1, resources={"rollout": 1}, object_store_memory=80 * 2**20)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def ray_args(cluster, workers=2, **extra) -> list[str]:
    # A worker starts in ~10 s alone; under `make test` the other xdist process shares the 2 cores.
    args = ["distributed.backend=ray", f"distributed.address={json.dumps(cluster.address)}", f"distributed.rollout_workers={workers}",
            "distributed.resources={rollout = 1}", "distributed.startup_timeout_s=180"]
    return args + [f"distributed.{k}={v}" for k, v in extra.items()]


def lab(run_dir: Path, args: list[str]) -> Path:
    run(load_config(overrides=FAST + args + [f"run.output_dir={json.dumps(str(run_dir))}"]), Reporter(enabled=False), "lab")
    return run_dir


def comparable(run_dir: Path) -> list[dict]:
    """The metrics without wall-clock times and the backend's own (the only values allowed to differ)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "distributed/")) and k != "rollout/tokens_per_s"}
            for r in read_jsonl_records(run_dir / "metrics.jsonl")]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "model" / "model.safetensors")


def assert_same_run(a: Path, b: Path) -> None:
    assert comparable(a) == comparable(b)
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> list[str]:
    """FAST's cold start (its SFT) trained once; the runs below start RL from it, as a recipe's RL
    stage starts from its SFT stage's model. SFT runs in the driver on either backend, so what
    they compare is the RL alone, at ~4 s less each."""
    cold_start = lab(tmp_path_factory.mktemp("cold_start") / "run", ["train.steps=0"]) / "model"
    return [f"model.path={json.dumps(str(cold_start))}", "sft.steps=0"]


@pytest.fixture(scope="module")
def sync2(cluster, start, tmp_path_factory):
    """A synchronous run with two rollout workers on two nodes."""
    return lab(tmp_path_factory.mktemp("sync2") / "run", start + ray_args(cluster))


def test_rlvr_check_compares_one_rollout_worker_with_the_local_learner(cluster, start):
    """`rlvr check` on a Ray config: a worker on another node samples, token for token, what the local learner samples."""
    from rlvr.commands.check import run_checks

    overrides = FAST + start + ray_args(cluster, workers=2)
    report = run_checks(load_config(overrides=overrides), config_path=None, overrides=overrides,
                        skip={"resume", "padding", "micro_batches", "token_budget", "engine"})
    found = {f.name: f for f in report.findings}
    assert found["ray"].status == "pass" and "1 rollout worker: the same" in found["ray"].measured, found["ray"]
    assert not report.failed, report.findings


@pytest.mark.parametrize("variant", [[], ["model.lora_rank=4"], ["algo.preset=dapo"]], ids=["full", "lora", "dapo"])
def test_one_rollout_worker_trains_exactly_what_the_local_backend_does(cluster, start, tmp_path, variant):
    """Full weights, LoRA adapters (only they travel), and DAPO's dynamic sampling (several rounds a step)."""
    local = lab(tmp_path / "local", start + ["rollout.seeding=group"] + variant)
    remote = lab(tmp_path / "ray", start + ray_args(cluster, workers=1) + variant)
    assert_same_run(local, remote)
    records = read_jsonl_records(remote / "metrics.jsonl")
    assert all(r["distributed/staleness_max"] == 0 for r in records)
    assert sum(r["loss/active_frac"] > 0 for r in records) >= 2, "too few steps updated: the equality would say little"
    summary = json.loads((remote / "summary.json").read_text())
    trainable_bytes = 4 * summary["trainable_parameters"]  # fp32
    assert all(r["distributed/weight_sync_bytes"] == trainable_bytes for r in records)
    if variant == ["model.lora_rank=4"]:
        assert trainable_bytes < summary["parameters"]  # the adapters, not the model
    if variant == ["algo.preset=dapo"]:
        assert any(r["sampling/rounds"] > 1 for r in records)


def test_two_workers_are_deterministic_and_async_with_staleness_0_is_the_sync_loop(cluster, start, sync2, tmp_path):
    again = lab(tmp_path / "async0", start + ray_args(cluster, mode="async", max_staleness=0))
    assert_same_run(sync2, again)


def test_async_samples_with_weights_one_update_old_and_corrects_for_it(cluster, start, sync2, tmp_path):
    stale = lab(tmp_path / "async1", start + ray_args(cluster, mode="async", max_staleness=1) + ["algo.tis_cap=2.0"])
    records = read_jsonl_records(stale / "metrics.jsonl")
    # round 1 and 2 are both sampled by the first weights; from then on every round is one update old
    assert [r["distributed/staleness_max"] for r in records] == [0, 1, 1]
    assert all("loss/tis_weight_mean" in r for r in records)
    assert weights(stale).keys() == weights(sync2).keys()
    assert any(not torch.equal(weights(stale)[k], weights(sync2)[k]) for k in weights(stale))


def learner_args(cluster, ranks: int) -> list[str]:
    # One rollout worker: the learner ranks' bundles (0.5 CPU each) may be packed onto a rollout
    # node, whose one CPU a second rollout worker would need.
    return ray_args(cluster, workers=1, learner_workers=ranks, cpus_per_learner=0.5)


@pytest.fixture(scope="module")
def driver_run(cluster, start, tmp_path_factory):
    """A run whose learner is in the driver, with one rollout worker."""
    return lab(tmp_path_factory.mktemp("driver") / "run", start + ray_args(cluster, workers=1))


@pytest.fixture(scope="module")
def two_ranks_run(cluster, start, tmp_path_factory):
    """A run whose learner is two FSDP2 ranks."""
    return lab(tmp_path_factory.mktemp("rank2") / "run", start + learner_args(cluster, 2))


def test_learner_ranks_train_what_the_driver_s_learner_does(cluster, start, driver_run, two_ranks_run, tmp_path, monkeypatch):
    """distributed.learner_workers through a whole run: one learner rank (a Ray actor) trains
    exactly what the learner in the driver does (metrics, final weights); two FSDP2 ranks take the
    same first step up to summation order (the samples of step 1 are drawn before any update, so
    they are equal; later steps sample from weights that differ in the last bits, and may not be),
    write sharded checkpoints, and their final model is gathered into the run's model directory."""
    from rlvr.commands.export import export_checkpoint
    from rlvr.sharded_checkpoint import read_manifest

    import rlvr.pipeline

    in_driver = driver_run
    seen = {}
    make_learner, rl_train = rlvr.pipeline.make_learner, rlvr.pipeline.rl_train

    def making(model, *args):
        seen["model"] = model
        return make_learner(model, *args)

    def training(learner, *args, **kwargs):  # while the ranks train, the driver holds no copy of the policy
        seen["freed"] = all(p.is_meta for p in seen["model"].parameters()) and learner.policy is None
        return rl_train(learner, *args, **kwargs)

    monkeypatch.setattr(rlvr.pipeline, "make_learner", making)
    monkeypatch.setattr(rlvr.pipeline, "rl_train", training)
    one_rank = lab(tmp_path / "rank1", start + learner_args(cluster, 1))
    assert seen["freed"]
    assert_same_run(in_driver, one_rank)
    two = two_ranks_run
    first_a, first_b = comparable(in_driver)[0], comparable(two)[0]
    assert first_a["loss/active_frac"] > 0, "step 1 updated nothing: the comparison would say little"
    assert first_a.keys() == first_b.keys()
    for key, value in first_a.items():
        if key.startswith("loss/") and value is not None:  # rounding in a sum of a few hundred fp32 terms, relative to the metric's size
            assert first_b[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        else:
            assert first_b[key] == value, key
    step = two / "checkpoints" / "step-000003"
    assert not (step / "model.safetensors").exists() and read_manifest(step)["world_size"] == 2
    export_checkpoint(two, tmp_path / "export")
    exported, final = load_file(tmp_path / "export" / "model.safetensors"), weights(two)
    assert all(torch.equal(exported[k], final[k]) for k in final)  # the run's model is the ranks' last weights


def test_learner_ranks_publish_by_collective_exactly_what_the_object_store_carries(cluster, start, two_ranks_run, tmp_path):
    """Weights gathered from two FSDP2 shards and broadcast by rank 0 to the rollout worker
    (distributed.weight_sync = collective) train the same run as rank 0's packed copy through the
    object store, bit for bit."""
    broadcast = lab(tmp_path / "collective", start + learner_args(cluster, 2) + ["distributed.weight_sync=collective"])
    assert_same_run(two_ranks_run, broadcast)
    records = read_jsonl_records(broadcast / "metrics.jsonl")
    assert all("time/weight_send" in r for r in records) and not any("time/weight_put" in r for r in records)


@pytest.mark.parametrize("kill_at, sync", [
    ("learner_update@2", "object_store"),  # step 2: the group re-forms from step 1's checkpoint
    # step 1: no checkpoint yet, the group starts over; the new rank 0 forms a new weight group
    pytest.param("learner_update@1", "collective", marks=pytest.mark.slow),
])
def test_a_learner_rank_killed_mid_update_is_replaced_and_the_run_ends_where_the_unharmed_one_does(
        cluster, start, two_ranks_run, tmp_path, monkeypatch, kill_at, sync):
    """One of two FSDP2 ranks SIGKILLs itself as its update begins, while the other waits for it
    in the update's first collective: the group is stopped and formed anew, the steps after the
    last checkpoint are redone, and metrics and final weights are those of the unharmed run."""
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("RLVR_KILL_AT", kill_at)
    monkeypatch.setenv("RLVR_KILL_ONCE", str(tmp_path / "marks"))
    with pytest.warns(RuntimeWarning, match="a learner rank died.*re-forming the learner"):
        killed = lab(tmp_path / "killed", start + learner_args(cluster, 2) + [f"distributed.weight_sync={sync}"])
    assert list((tmp_path / "marks").iterdir()), "the fault was never injected"
    assert_same_run(two_ranks_run, killed)
    assert sum(r["distributed/learner_restarts"] for r in read_jsonl_records(killed / "metrics.jsonl")) == 1


def test_a_learner_rank_s_node_lost_mid_run_is_replaced_on_another_node(cluster, start, driver_run, tmp_path):
    """The node holding the only learner rank leaves the cluster once step 1 is written (its
    processes gone, as when a machine is lost): the rank is formed again on the other node that
    advertises the learners' resource, the steps after the last checkpoint are redone, and the run
    ends where the unharmed one does (one rank trains exactly what the driver's learner does)."""
    import threading
    import time

    from ray._private.state import actors

    spares = [cluster.add_node(num_cpus=1, resources={"learner": 1}, object_store_memory=80 * 2**20) for _ in range(2)]
    cluster.wait_for_nodes()
    run_dir, errors = tmp_path / "moved", []

    def train():
        try:
            lab(run_dir, start + learner_args(cluster, 1) + ["distributed.learner_resources={learner = 1}"])
        except BaseException as err:  # noqa: BLE001 - reported by the test's thread
            errors.append(err)

    thread = threading.Thread(target=train)
    thread.start()
    try:
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert thread.is_alive(), f"the run ended before step 1 was written: {errors}"
            time.sleep(0.02)
        node = next(a["Address"]["NodeID"] for a in actors().values() if a["ActorClassName"] == "LearnerRank" and a["State"] == "ALIVE")
        lost = next(n for n in spares if n.node_id == node)
        cluster.remove_node(lost)
        spares.remove(lost)
        thread.join(timeout=600)
    finally:
        for n in spares:
            cluster.remove_node(n)
    assert not errors, errors
    assert_same_run(driver_run, run_dir)
    assert sum(r["distributed/learner_restarts"] for r in read_jsonl_records(run_dir / "metrics.jsonl")) == 1


@pytest.mark.parametrize("target", [
    "rollout_generate@3",
    # A reward worker holds no weights and is restarted by the same Ray options (max_restarts,
    # max_task_retries) as the rollout worker above, whose restart must also restore its weights.
    pytest.param("reward_score@2", marks=pytest.mark.slow),
])
def test_a_worker_killed_mid_step_is_replaced_and_its_work_redone(cluster, start, sync2, tmp_path, monkeypatch, target):
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("RLVR_KILL_AT", target)  # the worker SIGKILLs itself there, once (RLVR_KILL_ONCE)
    monkeypatch.setenv("RLVR_KILL_ONCE", str(tmp_path / "marks"))
    killed = lab(tmp_path / "killed", start + ray_args(cluster))
    assert list((tmp_path / "marks").iterdir()), "the fault was never injected"
    assert_same_run(sync2, killed)
    assert sum(r["distributed/worker_restarts"] for r in read_jsonl_records(killed / "metrics.jsonl")) == 1


def test_workers_that_cannot_be_placed_fail_fast_with_what_is_missing(cluster, tmp_path):
    from rlvr.distributed.ray_learner import DistributedError

    with pytest.raises(DistributedError, match=r"GPU.*needs 2, has 0"):  # the cluster has no GPU at all
        lab(tmp_path / "gpu", ray_args(cluster, gpus_per_worker=1))
    # enough CPUs in total (3) but no node has 2 free: cannot be placed, found out within the timeout
    args = ray_args(cluster, workers=1, cpus_per_worker=2, startup_timeout_s=5)
    with pytest.raises(DistributedError, match="did not start within distributed.startup_timeout_s = 5 s"):
        lab(tmp_path / "big", [a for a in args if "resources=" not in a and "startup_timeout_s=180" not in a])


@pytest.mark.slow
def test_a_killed_driver_resumes_an_async_run_exactly(cluster, tmp_path):
    """The driver SIGKILLed after saving step 2, with round 3 already sampled by older weights: the
    resume trains on that saved round and ends where the uninterrupted run does."""
    args = FAST + ray_args(cluster, mode="async", max_staleness=1) + ["algo.tis_cap=2.0"]

    def cli(run_dir, kill_at=None, resume=False):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_KILL")}
        if kill_at:
            env["RLVR_KILL_AT"] = kill_at
        cmd = [sys.executable, "-m", "rlvr.cli", "lab", "--quiet"]
        cmd += ["--resume", str(run_dir)] if resume else [*args, f"run.output_dir={json.dumps(str(run_dir))}"]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent)

    whole = tmp_path / "whole"
    assert cli(whole).returncode == 0
    broken = tmp_path / "broken"
    died = cli(broken, kill_at="step_saved@2")
    assert died.returncode == -9, died.stderr[-2000:]
    saved = torch.load(broken / "checkpoints" / "step-000002" / "trainer.pt", weights_only=True)
    assert [(p["round"], p["version"]) for p in saved["ray"]["pending"]] == [(2, 1)]  # round 3 (index 2), sampled by v1
    resumed = cli(broken, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(whole, broken)
    # the resumed driver's new workers are not restarts (the saved round's were the killed driver's)
    assert all(r["distributed/worker_restarts"] == 0 for r in read_jsonl_records(broken / "metrics.jsonl"))


def test_weights_travel_as_raw_bytes_and_come_back_exactly_in_every_dtype():
    from rlvr.distributed.workers import pack_weights, unpack_weights, weights_nbytes

    w = {"a": torch.randn(3, 4), "b": torch.randn(5).to(torch.bfloat16), "c": torch.randn(2, 2, 2).half()}
    packed = pack_weights(w)
    back = unpack_weights(ray.get(ray.put(packed)) if ray.is_initialized() else packed)
    assert all(back[k].dtype == w[k].dtype and torch.equal(back[k], w[k]) for k in w)
    assert weights_nbytes(packed) == 12 * 4 + 5 * 2 + 8 * 2


def test_a_reward_worker_runs_the_sandboxed_code_verifier_on_another_node(cluster):
    """Verification of code runs in a reward worker's process (its own sandbox), not the driver's."""
    from rlvr.distributed.workers import RewardWorker, rollouts_to_dict
    from rlvr.data import Example
    from rlvr.rollout import Rollouts

    cfg = load_config(overrides=['reward.functions=["python_code"]'])
    tests = json.dumps({"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]})
    texts = ["```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return a - b\n```",
             "```python\nimport os\nos.system('touch /tmp/pwned')\ndef add(a, b):\n    return 5\n```"]
    n = len(texts)
    rollouts = Rollouts(torch.ones(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long), torch.ones(n, 2, dtype=torch.long),
                        torch.ones(n, 2, dtype=torch.long), torch.zeros(n, dtype=torch.bool), 0.0)
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    try:
        worker = ray.remote(RewardWorker).options(resources={"rollout": 1}).remote(cfg)
        out = ray.get(worker.score.remote({"rollouts": rollouts_to_dict(rollouts), "texts": texts}, ["p"] * n,
                                          [Example("p", tests)] * n, None), timeout=120)
        assert out["pid"] != os.getpid()
        assert out["scores"].total_B.tolist() == [1.0, 0.0, 0.5]
        ray.get(worker.close.remote())
    finally:
        ray.shutdown()
    assert not Path("/tmp/pwned").exists()


def test_a_reward_worker_scores_a_reward_model_and_a_judge_as_the_driver_does(cluster, tmp_path):
    """reward.functions with a reward model (a directory the test writes) and an LLM judge (a server in this test): a
    reward worker in its own process resolves both from the config it is given and scores exactly what the driver's
    terms score, a judge failure a missing reward there too."""
    import threading

    from test_judge import FakeJudge
    from test_reward_model import write_reward_model
    from rlvr.distributed.workers import RewardWorker, rollouts_to_dict
    from rlvr.data import Example
    from rlvr.reward import build_reward_terms, close_reward_terms, score_completions
    from rlvr.rollout import Rollouts

    judge = FakeJudge()
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    rm = write_reward_model(tmp_path / "rm")
    cfg = load_config(overrides=[f'reward.functions=["boxed_math", "reward_model:{rm}", "judge"]', "reward.weights=[1.0, 0.1, 0.5]",
                                 f'reward.judge.url="{judge.url}"', 'reward.judge.model="j"', 'reward.judge.rubric="{completion}"',
                                 "reward.judge.scale=[0.0, 10.0]", "reward.judge.retries=0", "reward.judge.timeout_s=1.0"])
    texts = ["\\boxed{4} say: 9", "\\boxed{5} say: 1", "\\boxed{4} BADJSON"]
    n = len(texts)
    examples = [Example("2+2=", "4")] * n
    rollouts = Rollouts(torch.ones(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long), torch.ones(n, 2, dtype=torch.long),
                        torch.ones(n, 2, dtype=torch.long), torch.zeros(n, dtype=torch.bool), 0.0)
    terms = build_reward_terms(cfg.reward)
    try:
        here = score_completions(terms, cfg.reward, ["2+2="] * n, texts, examples, [2] * n, 8)
    finally:
        close_reward_terms(terms)
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    try:
        worker = ray.remote(RewardWorker).options(resources={"rollout": 1}).remote(cfg)
        out = ray.get(worker.score.remote({"rollouts": rollouts_to_dict(rollouts), "texts": texts}, ["2+2="] * n, examples, None), timeout=180)
        ray.get(worker.close.remote())
    finally:
        ray.shutdown()
        judge.shutdown()
        judge.server_close()
    there = out["scores"]
    assert out["pid"] != os.getpid()
    assert there.terms["reward_model"].values == pytest.approx(here.terms["reward_model"].values, rel=1e-5, abs=1e-6)
    assert there.terms["judge"].values[:2] == pytest.approx([0.9, 0.1]) and there.terms["judge"].values[2] is None
    assert torch.isnan(there.total_B[2]) and there.total_B[:2].tolist() == pytest.approx(here.total_B[:2].tolist(), rel=1e-5, abs=1e-6)


def test_a_worker_whose_set_up_fails_reports_the_error_itself(cluster):
    """A reward function a worker's node cannot build is a ConfigError there too, not 'the actor died'."""
    from rlvr.config import ConfigError
    from rlvr.distributed.workers import RewardWorker

    cfg = load_config()
    cfg.reward.functions = ["no_such_verifier"]
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    try:
        worker = ray.remote(RewardWorker).remote(cfg)
        with pytest.raises(ConfigError, match="no_such_verifier"):
            ray.get(worker.ready.remote(), timeout=60)
    finally:
        ray.shutdown()


def test_an_address_nobody_answers_on_fails_at_once(tmp_path):
    from rlvr.distributed.ray_learner import DistributedError

    with pytest.raises(DistributedError, match="no Ray cluster answers there"):
        lab(tmp_path / "nowhere", ["distributed.backend=ray", "distributed.address=127.0.0.1:9", "train.steps=1", "sft.steps=1"])


def test_tool_conversations_on_a_rollout_worker_train_exactly_what_the_local_backend_does(cluster, tmp_path):
    """Multi-turn rollouts with a tool on a Ray rollout worker (the examples travel with the prompts, the
    conversations and their tool calls come back with the rollouts, the reward worker scores them): the same run
    as the local backend's, step for step."""
    from test_tool_runs import TOOL_TOY

    toy = [a for a in TOOL_TOY if not a.startswith(("train.steps", "eval.samples"))] + ["train.steps=2", "eval.samples=0",
                                                                                        "rollout.seeding=group"]
    cold = tmp_path / "cold"
    run(load_config(overrides=toy + ["train.steps=0", f"run.output_dir={json.dumps(str(cold))}"]), Reporter(enabled=False), "lab")
    start = [f"model.path={json.dumps(str(cold / 'model'))}", "sft.steps=0"]
    runs = {}
    for name, extra in (("local", []), ("ray", ray_args(cluster, workers=1))):
        runs[name] = tmp_path / name
        run(load_config(overrides=toy + start + extra + [f"run.output_dir={json.dumps(str(runs[name]))}"]), Reporter(enabled=False), "lab")
    assert_same_run(runs["local"], runs["ray"])
    records = read_jsonl_records(runs["ray"] / "metrics.jsonl")
    assert all("tools/call_rate" in r and r["tools/turns"] >= 1 for r in records)  # conversations, equal call for call above
    samples = read_jsonl_records(runs["ray"] / "samples.jsonl")
    assert all(isinstance(s["conversation"], list) for s in samples)


def test_an_environment_that_cannot_travel_between_ray_processes_is_named():
    import threading

    from rlvr.distributed.workers import _check_travels
    from rlvr.errors import UsageError

    class Holds:
        def __init__(self):
            self.lock = threading.Lock()

    _check_travels([object(), None])  # plain state travels
    with pytest.raises(UsageError, match="rollout.environment: a .*Holds instance cannot travel between Ray processes"):
        _check_travels([Holds()])
