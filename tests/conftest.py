import os

import pytest
import torch

# The suite never downloads. huggingface_hub reads this once, when it is imported; the commands that
# tests/warm_cli.py forks inherit the server's import, so it is set here, before anything imports it.
os.environ["HF_HUB_OFFLINE"] = "1"

# As every run does (see rlvr.runtime.configure_cpu_math): denormal floats make CPU training
# math up to ~100x slower and change nothing that matters.
torch.set_flush_denormal(True)

# The tiers (README, "Tests"). Files that train a model, run the CLI or start processes are
# `integration`, excluded from `make test-fast`, and so is every test that trains through the
# tiny_grpo fixture; every other test, a new file's included, is fast unless it carries
# @pytest.mark.integration itself.
INTEGRATION_FILES = {
    "test_audit.py", "test_cli.py", "test_code_datasets.py", "test_code_task.py", "test_console.py", "test_data_sources.py",
    "test_distributed.py", "test_end_to_end.py", "test_evaluate.py", "test_golden.py", "test_gym.py", "test_import_gguf.py",
    "test_labs.py", "test_learner_group.py", "test_loop.py", "test_lora.py", "test_preset_runs.py", "test_recipe.py", "test_report.py",
    "test_resume.py", "test_rft.py", "test_sharded_checkpoint.py", "test_thinking.py", "test_trackers.py", "test_verify_pool.py",
    "test_test_groups.py", "test_weight_sync.py", "test_vllm.py", "test_vllm_server.py", "test_tool_runs.py",
}

# Fixtures that build something several tests read (a trained run, a Ray cluster). Under
# `make test` (-n 2 --dist loadgroup) every worker would build its own copy of a fixture one of its
# tests needs; putting the tests that read one in one xdist group builds it once. Most expensive
# first: a test that reads two joins the group of the first.
SHARED_FIXTURES = ["cluster", "tool_run", "learner_cluster", "learners", "uninterrupted", "whole", "solvable_run", "toy_run", "reported_run", "think_run", "sharded_runs"]


def pytest_ignore_collect(collection_path, config):
    """With integration deselected (make test-fast) those files are not even imported: Ray, the
    trackers and the browser driver cost ~10 s of imports in each process."""
    if collection_path.name in INTEGRATION_FILES and "not integration" in (config.getoption("markexpr") or ""):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks to form the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in INTEGRATION_FILES or "tiny_grpo" in item.fixturenames:
            item.add_marker(pytest.mark.integration)
        shared = next((name for name in SHARED_FIXTURES if name in item.fixturenames), None)
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared))
        if getattr(config.option, "loadgroup", False):
            _name_its_group(item)


def _name_its_group(item) -> None:
    """xdist's loadgroup scheduler sends together the tests whose node ids end in the same
    "@group"; its worker hook writes that suffix into `item._nodeid`, which pytest 9 no longer
    reads (a node's id is `item._id`), so no test was grouped and every xdist worker built its own
    copy of each shared run. Write it where this pytest reads it (checked by
    tests/test_test_groups.py)."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
    suffix = "@" + "_".join(names)
    if not names or item.nodeid.endswith(suffix):  # not "@" in the id: a parameter may hold one (a kill point "generate@3")
        return
    grouped = item.nodeid + suffix
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id  # pytest >= 9: the structured id

        item._id = coerce_node_id(grouped)
    else:
        item._nodeid = grouped


@pytest.fixture(autouse=True)
def _units_take_their_share_of_the_cores(request):
    """A unit test runs on one torch thread per core it has under xdist (2 cores, 2 workers: 1).
    torch's OpenMP threads spin while they wait; two workers each spinning two threads on two
    cores made small tensor ops of one test wait on the other's spinning (one unit test 1 s alone,
    23 s beside another). Integration tests keep the default: their long runs gain from both
    cores when the other worker is idle (measured: one thread for every test made `make test`
    53 s slower)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "integration" in request.node.keywords:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(before, (os.cpu_count() or 1) // workers)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def tiny_grpo(tmp_path):
    """Run `rl_train` (through a LocalLearner) on the tiny model built from seed 0, writing into tmp_path.

    tiny_grpo(cfg, name, reward_fn) -> (records, model, weights before training); reward_fn(completion, answer) -> float.
    """
    from rlvr.learner import LocalLearner
    from rlvr.loop import rl_train
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.reward import RewardTerm
    from rlvr.tasks.arithmetic import make_splits

    class Bar:
        def advance(self, info=""):
            pass

    def train(cfg, name, reward_fn):
        tokenizer = build_char_tokenizer()
        model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        train_set, _ = make_splits(cfg.task, 0)
        records = rl_train(LocalLearner(model, tokenizer, cfg), train_set, cfg, [RewardTerm(name, 1.0, reward_fn, batched=False)], tmp_path, Bar())
        return records, model, before

    return train


# A toy lab a tiny model learns in seconds (operands 0..3, 1-2 operators): after 150 SFT steps it
# solves about one held-out problem in five, so sampled completions pass the real boxed_math
# verifier often enough for rejection sampling, distillation and recipes to have data.
SOLVABLE = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1", "task.num_train=300", "task.num_eval=20", "task.min_ops=1", "task.max_ops=2",
    "task.max_operand=3", "task.max_value=-1",
    "eval.max_new_tokens=12", "rollout.max_new_tokens=12", "rollout.group_size=4", "rollout.prompts_per_step=4",
    "train.micro_batch_size=8", "run.threads=1", "sft.steps=150", "sft.batch_size=16", "sft.lr=5e-3", "sft.worked_fraction=0.5",
    "train.steps=4", "train.lr=1e-3", "train.warmup_steps=1", "eval.samples=4",
]


@pytest.fixture(scope="session")
def solvable_run(tmp_path_factory):
    """A finished lab run (SFT + 4 RL steps) on the SOLVABLE toy task."""
    import json

    from rlvr.config import load_config
    from rlvr.metrics import Reporter
    from rlvr.pipeline import run

    run_dir = tmp_path_factory.mktemp("solvable") / "run"
    run(load_config(overrides=SOLVABLE + [f"run.output_dir={json.dumps(str(run_dir))}"]), Reporter(enabled=False), "lab")
    return run_dir
