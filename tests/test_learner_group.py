"""Learner ranks (rlvr/distributed/learner_group.py, learner_rank.py) against the learner in one
process, on the tiny model and one rollout batch, two updates each.

What a user relies on: one rank trains exactly what the local learner trains, whichever strategy;
two DDP ranks train exactly what one process computes when it accumulates each rank's share alone
and adds the two in rank order (and a per-rank normaliser, the bug that sharing makes easy, is
caught); two FSDP ranks train what one process does up to the order of float additions, each
holding half of the parameters and optimizer state; LoRA adapters train on FSDP ranks alike; a
group the cluster cannot place fails at once, naming what is missing.

Ray runs here with three logical CPUs on the machine's cores: a one-rank and a two-rank group
(one CPU and one torch thread per rank) are started once and live side by side, and every test
starts its learner afresh on them (`LearnerGroup.reset`), which costs a second where new ranks
cost several.
"""

import copy
import dataclasses
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from rlvr.algorithms import loss_normalizer  # noqa: E402
from rlvr.config import ConfigError, load_config  # noqa: E402
from rlvr.distributed.learner_group import DistributedError, LearnerGroup, placement_shortfall  # noqa: E402
from rlvr.learner import LocalLearner  # noqa: E402
from rlvr.models import add_lora, build_char_tokenizer, build_tiny_model  # noqa: E402
from rlvr.rollout import encode_prompts, generate  # noqa: E402
from rlvr.runtime import apply_run_settings  # noqa: E402
from rlvr.sampling import Sampling  # noqa: E402
from rlvr.update import Share, UpdateMetrics, forking_tokens, guarded_step, plan_micro_batches, run_update  # noqa: E402

BASE = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64", "model.tiny.num_heads=4",
    "model.tiny.num_kv_heads=2", "run.threads=1", "rollout.max_new_tokens=8", "train.lr=1e-3", "train.warmup_steps=1",
    "train.micro_batch_size=3", "train.weight_decay=0.01", "algo.beta=0.05",  # a KL term in the loss: the reference is used
    "distributed.backend=ray", "distributed.cpus_per_learner=1", "distributed.startup_timeout_s=120",
]
STEPS = 2


def config(world: int, strategy: str, *extra: str):
    return load_config(overrides=BASE + [f"distributed.learner_workers={world}", f"distributed.learner_strategy={strategy}", *extra])


@pytest.fixture(scope="module")
def learner_cluster():
    """A Ray instance of this test module's own (`address="local"`: not another test's cluster)."""
    ray.init(address="local", num_cpus=3, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def initial_policy(cfg, tokenizer):
    """The tiny model from seed 0, with LoRA adapters drawn from seed 3 when cfg asks for them."""
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
    if cfg.model.lora_rank:
        torch.manual_seed(3)
        model = add_lora(model, cfg.model)
    return model


@pytest.fixture(scope="module")
def batch(tokenizer):
    """16 completions (4 prompts x 4) sampled from the initial model, advantages with one flat group."""
    cfg = config(1, "fsdp")
    apply_run_settings(cfg)  # one thread here too: the local learner must compute as a rank does
    model = initial_policy(cfg, tokenizer).eval()
    prompts = [p for p in ["1+2=", "3*4-5=", "7=", "9-8*7+6="] for _ in range(4)]
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    rollouts = generate(model, ids, mask, Sampling(max_new_tokens=8), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                        generator=torch.Generator().manual_seed(1))
    advantages_B = torch.linspace(-1.0, 1.0, 16)
    advantages_B[:4] = 0.0
    return rollouts, advantages_B


@pytest.fixture(scope="module")
def one_rank(learner_cluster, tokenizer):
    cfg = config(1, "fsdp")
    group = LearnerGroup(initial_policy(cfg, tokenizer), cfg, device="cpu")
    yield group
    group.close()


@pytest.fixture(scope="module")
def two_ranks(learner_cluster, tokenizer):
    cfg = config(2, "fsdp")
    group = LearnerGroup(initial_policy(cfg, tokenizer), cfg, device="cpu")
    yield group
    group.close()


def comparable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith("time/")}


def weights_of(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def train_local(cfg, tokenizer, batch):
    batch = batch if len(batch) == 3 else (*batch, None)
    learner = LocalLearner(initial_policy(cfg, tokenizer), tokenizer, cfg)
    metrics = [comparable(learner.update(*batch)) for _ in range(STEPS)]
    with learner.evaluation_policy() as policy:
        return metrics, weights_of(policy), learner.reference_kl(batch[0])


def train_group(group, cfg, tokenizer, batch):
    batch = batch if len(batch) == 3 else (*batch, None)
    group.reset(initial_policy(cfg, tokenizer), cfg)
    metrics = [comparable(group.update(*batch)) for _ in range(STEPS)]
    with group.evaluation_policy() as policy:
        return metrics, weights_of(policy), group.reference_kl(batch[0])


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("strategy, extra", [("fsdp", []), ("ddp", []), ("fsdp", ["model.gradient_checkpointing=true"])],
                         ids=["fsdp", "ddp", "fsdp-checkpointing"])
def test_one_rank_trains_exactly_what_the_local_learner_does(one_rank, tokenizer, batch, strategy, extra):
    """Two passes a step (old log-probs frozen), the KL reference in the loss and in reward_kl,
    truncated importance weights against the sampler's log-probs: every metric and weight equal;
    with gradient checkpointing too (each block's forward redone in backward, inside FSDP's unit)."""
    cfg = config(1, strategy, "algo.num_iterations=2", "algo.tis_cap=2.0", *extra)
    local_metrics, local_weights, local_kl = train_local(cfg, tokenizer, batch)
    metrics, weights, kl = train_group(one_rank, cfg, tokenizer, batch)
    assert metrics == local_metrics
    assert all(torch.equal(weights[k], local_weights[k]) for k in local_weights)
    assert torch.equal(kl, local_kl)
    assert max_difference(weights, weights_of(initial_policy(cfg, tokenizer))) > 1e-4, "the updates changed nothing"


def ddp_by_hand(cfg, tokenizer, batch, *, per_rank_normalizer: bool = False):
    """What two DDP ranks should compute, in this process: each rank's share of the plan (parts
    r, r+2, ...) accumulated alone, the two gradients added in rank order, then one step. With
    `per_rank_normalizer` each share is normalised by its own rows instead of the whole batch's:
    the bug the test must be able to see."""
    rollouts, advantages_B = batch
    learner = LocalLearner(initial_policy(cfg, tokenizer), tokenizer, cfg)  # its optimizer, scheduler and reference
    trainable = [p for group in learner.optimizer.param_groups for p in group["params"]]
    # Gradients are collected with a step that cannot move anything (SGD at lr 0) and no clipping
    # (max_norm = inf multiplies them by exactly 1): run_update's passes, their gradients kept.
    collect = torch.optim.SGD(trainable, lr=0.0)
    collect_scheduler = torch.optim.lr_scheduler.LambdaLR(collect, lambda s: 1.0)
    no_clip = dataclasses.replace(learner.settings, max_grad_norm=0.0)
    metrics = []
    for _ in range(STEPS):
        plan = plan_micro_batches(rollouts, advantages_B, None, learner.settings)
        logs, grads = [], []
        for r in range(2):
            parts = plan.parts[r::2]
            own = plan
            if per_rank_normalizer:
                rows = torch.cat(parts)
                own = dataclasses.replace(plan, normalizer=loss_normalizer(
                    rollouts.completion_mask_BT[rows] * plan.include_B[rows].unsqueeze(1), cfg.algo.aggregation, cfg.rollout.max_new_tokens))
            logs.append(run_update(learner.policy, collect, collect_scheduler, rollouts, advantages_B, no_clip, own, Share(parts, len(parts)),
                                   reference=learner.reference))
            grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in trainable])
        for p, g0, g1 in zip(trainable, *grads):
            p.grad = g0 + g1
        total = torch.tensor(logs[0].loss) + torch.tensor(logs[1].loss)
        log = UpdateMetrics.merged(logs)
        log.grad_norm, stepped = guarded_step(learner.optimizer, learner.scheduler, trainable, learner.settings.max_grad_norm, total)
        log.loss, log.skipped = float(total), int(not stepped)
        metrics.append(comparable(log.summary(learner.settings, plan, learner.scheduler.get_last_lr()[0])))
    return metrics, weights_of(learner.policy)


def test_two_ddp_ranks_sum_their_gradients_in_rank_order_bit_for_bit(two_ranks, tokenizer, batch):
    cfg = config(2, "ddp")
    metrics, weights, _ = train_group(two_ranks, cfg, tokenizer, batch)
    expected_metrics, expected = ddp_by_hand(cfg, tokenizer, batch)
    assert metrics == expected_metrics
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    # The negative control: normalising each share by its own rows moves the weights far beyond
    # rounding, and the loss, so the comparison above would have caught it.
    wrong_metrics, wrong = ddp_by_hand(cfg, tokenizer, batch, per_rank_normalizer=True)
    assert max_difference(wrong, expected) > 1e-5
    assert wrong_metrics[0]["loss/policy"] != pytest.approx(expected_metrics[0]["loss/policy"], rel=1e-3)


@pytest.fixture(scope="module")
def fsdp_run(two_ranks, tokenizer, batch):
    """Two FSDP ranks and the local learner, two steps each, on 15 of the 16 rows (one left out by
    the include mask) in micro-batches of 3: five micro-batches, so rank 0 runs three, rank 1 two
    and a zero-weight forward, and the two sum the gradients in another order than one process."""
    cfg = config(2, "fsdp")
    include_B = torch.ones(16, dtype=torch.bool)
    include_B[5] = False
    local = train_local(cfg, tokenizer, (*batch, include_B))
    sharded = train_group(two_ranks, cfg, tokenizer, (*batch, include_B))
    assert local[0][0]["loss/forwards"] == 5 and local[0][0]["loss/excluded"] == 1
    return local, sharded, two_ranks.memory(), weights_of(initial_policy(cfg, tokenizer))


# Tolerances for FSDP vs one process, from what differs: only the order of float additions. FSDP
# sums each micro-batch's gradient over the ranks (reduce-scatter) and accumulates those sums,
# one process accumulates the micro-batches one by one, and the gradient norm is a sum of
# per-shard sums of squares; the ranks' metric sums are added rank by rank. So everything agrees
# to float32 rounding. Measured over eight settings (micro-batches of 1, 3, 5 and 6 rows, LoRA,
# two passes a step, a row left out): the loss, gradient norm and log-prob metrics within 2e-7
# relative, rollout/logp_mismatch_mean within 1.3e-6 and loss/kl within 6e-6 (the KL of a policy
# one step from its reference: a small difference of nearly equal log-probs); 1e-4 is 18x the
# worst. Weights: AdamW's step is lr x m / (sqrt(v) + eps), scale-free, so a relative rounding
# difference d in a gradient element moves its weight by about lr x d; measured at most 2.3e-7
# after two steps. 2e-6 is 9x that and 1/500 of one step (lr = 1e-3), so a missing or doubled
# micro-batch, or a gradient divided by W, cannot pass (the loss or the gradient norm would also
# be off by far more than 1e-4).
METRIC_RTOL, WEIGHT_ATOL = 1e-4, 2e-6


def assert_close_runs(local, sharded, initial) -> None:
    (local_metrics, local_weights, local_kl), (metrics, weights, kl) = local, sharded
    for got, want in zip(metrics, local_metrics):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=METRIC_RTOL, abs=1e-9), key
    assert max_difference(weights, local_weights) <= WEIGHT_ATOL
    assert max_difference(local_weights, initial) > 100 * WEIGHT_ATOL, "the updates changed too little to compare"
    torch.testing.assert_close(kl, local_kl, rtol=METRIC_RTOL, atol=1e-8)


def test_two_fsdp_ranks_train_what_the_local_learner_does_up_to_float_rounding(fsdp_run):
    local, sharded, _, initial = fsdp_run
    assert_close_runs(local, sharded, initial)


def test_each_fsdp_rank_holds_half_of_the_parameters_and_optimizer_state(fsdp_run):
    """Measured: the bytes of each rank's parameter shards (DTensor.to_local) and of its optimizer
    state tensors, against the whole model's parameters in fp32."""
    _, _, memory, initial = fsdp_run
    whole = sum(t.nbytes for t in initial.values())
    for rank in memory:
        assert rank["parameters"] / whole == pytest.approx(0.5, abs=0.02)
        assert rank["optimizer"] / (2 * whole) == pytest.approx(0.5, abs=0.02)  # AdamW: two moments per weight (+ a step count)
        assert rank["reference"] / whole == pytest.approx(0.5, abs=0.02)  # the KL reference is sharded the same way


def test_lora_adapters_train_on_fsdp_ranks_as_in_one_process(two_ranks, tokenizer, batch):
    cfg = config(2, "fsdp", "model.lora_rank=4")
    initial = weights_of(initial_policy(cfg, tokenizer))
    assert_close_runs(train_local(cfg, tokenizer, batch), train_group(two_ranks, cfg, tokenizer, batch), initial)
    # The weight publisher's stream: rank 0 gathers and yields the adapters only, in order.
    trainable = [name for name, p in initial_policy(cfg, tokenizer).named_parameters() if p.requires_grad]
    assert two_ranks.with_weights(lambda stream: [name for name, _ in stream]) == trainable
    adapters = sum(initial[name].nbytes for name in trainable)
    assert all(rank["optimizer"] / (2 * adapters) == pytest.approx(0.5, abs=0.02) for rank in two_ranks.memory())


def rank_gradients(group) -> dict[str, torch.Tensor]:
    """The gradients the ranks' last pass stepped with (clipped as the step clipped them), whole:
    gathered from the shards under FSDP (every rank takes part in each gather), rank 0's under DDP."""
    def gradients(rank):
        grads = {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
                 for n, p in rank.model.named_parameters() if p.grad is not None}
        return grads if rank.rank == 0 else None

    return group.run(gradients)[0]


def assert_same_gradients(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Every element within 1e-5 of its gradient's scale (the tensor's largest element). What
    differs is the order of fp32 additions: measured at most 1.8e-7 of the scale on a first update,
    9.2e-7 on later ones (taken at weights that already differ by rounding), over top-entropy,
    adaptive entropy and distillation runs; a rank taking the top-entropy threshold over its own
    share gives 1.2 (the negative control below)."""
    assert got.keys() == want.keys() and want
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=0.0, atol=1e-5 * float(g.abs().max()) + 1e-12, msg=name)


def updates_side_by_side(group, cfg, tokenizer, batch, steps: int, teacher=None):
    """`steps` updates on the same batch by the local learner and by `group` (reset to the same
    first weights, and `teacher`), compared after each: metrics within METRIC_RTOL, gradients
    within 1e-5 of their scale; then the weights within WEIGHT_ATOL. Returns the local learner and
    the metrics (local, group) of each update."""
    local = LocalLearner(initial_policy(cfg, tokenizer), tokenizer, cfg)
    group.reset(initial_policy(cfg, tokenizer), cfg, teacher=teacher)
    records = []
    for _ in range(steps):
        want, got = comparable(local.update(*batch)), comparable(group.update(*batch))
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=METRIC_RTOL, abs=1e-9), key
        assert_same_gradients(rank_gradients(group), {n: p.grad for n, p in local.policy.named_parameters() if p.grad is not None})
        records.append((want, got))
    with group.evaluation_policy() as policy:
        assert max_difference(weights_of(policy), weights_of(local.policy)) <= WEIGHT_ATOL
    return local, records


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_top_entropy_tokens_are_the_whole_batch_s_on_two_ranks(two_ranks, tokenizer, batch, strategy):
    """algo.top_entropy_quantile on two ranks trains the tokens one process trains: every rank
    takes the threshold over both ranks' in-loss entropies (Share.gather), so the threshold, the
    share of tokens kept, the gradients and the weights are the local learner's. Five
    micro-batches of 3 (one row left out): under FSDP rank 1 also runs a zero-weight forward in
    the no-grad entropy pass, as in the training pass, or the ranks would wait on each other."""
    cfg = config(2, strategy, "algo.top_entropy_quantile=0.3")
    include_B = torch.ones(16, dtype=torch.bool)
    include_B[5] = False
    local, records = updates_side_by_side(two_ranks, cfg, tokenizer, (*batch, include_B), STEPS)
    for want, got in records:
        assert want["loss/forwards"] == 5
        assert got["loss/top_entropy_kept_frac"] == want["loss/top_entropy_kept_frac"]  # counts of tokens: exactly
        assert 0.2 < want["loss/top_entropy_kept_frac"] < 0.4
    # The negative control: each rank taking the threshold over its own share (what a Share without
    # `gather` does) trains other tokens, and the gradient comparison above sees it.
    learner = LocalLearner(initial_policy(cfg, tokenizer), tokenizer, cfg)
    collect, settings = torch.optim.SGD(learner.policy.parameters(), lr=0.0), dataclasses.replace(learner.settings, max_grad_norm=0.0)
    plan = plan_micro_batches(*batch, include_B, settings)

    def gradients(shares):
        grads = {}
        for parts in shares:
            run_update(learner.policy, collect, torch.optim.lr_scheduler.LambdaLR(collect, lambda s: 1.0), *batch, settings, plan,
                       Share(parts, len(parts)), reference=learner.reference)
            for n, p in learner.policy.named_parameters():
                grads[n] = grads.get(n, 0) + p.grad
        return grads

    whole, per_rank = gradients([plan.parts]), gradients([plan.parts[0::2], plan.parts[1::2]])
    with pytest.raises(AssertionError):
        assert_same_gradients(per_rank, whole)


@pytest.mark.parametrize("strategy, target", [("ddp", 0.5), ("fsdp", 100.0)])
def test_adaptive_entropy_control_on_two_ranks_follows_the_local_learner_and_resumes(two_ranks, tokenizer, batch, tmp_path,
                                                                                     strategy, target):
    """algo.entropy_adaptive on two ranks: the group holds the coefficient, sends the ranks the one
    it applies, plans with it and steps it from the merged loss/entropy, so the trajectory is the
    local learner's. Target 0.5 nats (below the tiny model's entropy): the bonus acts on the first
    update only, after which the plan skips the zero-advantage rows (beta = 0), as the local plan
    does; target 100: it acts throughout, its coefficient rising. A resume from a checkpoint taken
    between two updates redoes the next one exactly, coefficient included."""
    cfg = config(2, strategy, "algo.beta=0", "algo.entropy_adaptive=true", "algo.entropy_coef=0.01", f"algo.entropy_target={target}",
                 "algo.entropy_coef_delta=0.004")
    local, records = updates_side_by_side(two_ranks, cfg, tokenizer, (*batch, None), 3)
    applied = [want["loss/entropy_coef"] for want, _ in records]
    assert [got["loss/entropy_coef"] for _, got in records] == applied
    assert applied == ([0.01, 0.0, 0.0] if target < 1 else pytest.approx([0.01, 0.014, 0.018]))
    assert [want["loss/active_frac"] for want, _ in records] == ([1.0, 0.75, 0.75] if target < 1 else [1.0] * 3)
    assert two_ranks.entropy_control.coef == pytest.approx(local.entropy_control.coef, abs=1e-12)
    assert two_ranks.entropy_control.last == pytest.approx(local.entropy_control.last, rel=METRIC_RTOL)
    # Checkpoint, one more update, then back to the checkpoint in a fresh learner: the same update again.
    two_ranks.save_policy(tmp_path)
    state = two_ranks.trainer_state()
    assert state["entropy_control"] == two_ranks.entropy_control.state()
    after = comparable(two_ranks.update(*batch, None))
    two_ranks.reset(initial_policy(cfg, tokenizer), cfg)
    assert two_ranks.entropy_control.state() == {"coef": 0.01, "last": None}
    two_ranks.load_policy(tmp_path)
    two_ranks.load_trainer_state(state)
    assert comparable(two_ranks.update(*batch, None)) == after


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_on_policy_distillation_on_two_ranks_trains_what_the_local_learner_does(two_ranks, tokenizer, batch, tmp_path, strategy):
    """distill.on_policy_coef on two ranks: the driver loads the teacher as LocalLearner does, puts it
    in the object store (teacher_weights_of), and every rank builds it frozen beside the reference (sharded under FSDP,
    where rank 1's zero-weight forward must go through the teacher too). A teacher unlike the
    student (another seed): the per-token term moves the loss, and the ranks' metrics (teacher_kl
    among them), gradients and weights are the local learner's; ranks that ignored the teacher
    would lack loss/teacher_kl and differ in the loss."""
    from rlvr.distributed.learner_group import teacher_weights_of
    from rlvr.models import save_pretrained

    cfg = config(2, strategy)
    teacher = build_tiny_model(tokenizer, cfg.model.tiny, seed=7)
    with torch.no_grad():
        teacher.model.norm.weight.mul_(8.0)  # sharper than the near-uniform student: a per-token term far from 0
    save_pretrained(teacher, tokenizer, tmp_path / "teacher")
    cfg = config(2, strategy, "distill.on_policy_coef=0.5", f'distill.teacher="{tmp_path / "teacher"}"')
    include_B = torch.ones(16, dtype=torch.bool)
    include_B[5] = False
    teacher = teacher_weights_of(cfg, tokenizer, initial_policy(cfg, tokenizer))  # what RayLearner hands its LearnerGroup
    _, records = updates_side_by_side(two_ranks, cfg, tokenizer, (*batch, include_B), STEPS, teacher=teacher)
    assert records[0][0]["loss/forwards"] == 5 and records[0][0]["loss/teacher_kl"] > 0.5
    assert all(rank["teacher"] > 0 for rank in two_ranks.memory())
    with pytest.raises(ValueError, match="a teacher goes with distill.on_policy_coef > 0"):
        two_ranks.reset(initial_policy(cfg, tokenizer), cfg)


@pytest.mark.parametrize("size", ["tiny", "lab x2", "llama 16k vocab"])
def test_the_plan_matches_each_fsdp_rank_s_measured_peak(two_ranks, tokenizer, size):
    """The plan's bytes per rank against each of two FSDP2 ranks' peak over a real update (two
    micro-batches each, 48 new tokens), at three sizes. Measured here, plan / peak of ranks 0, 1:
    the tiny model 1.09-1.13, lab x2 1.03, 1.03, the Llama with a 16k vocabulary 1.07, 1.10."""
    import ray as ray_

    from rlvr.distributed.plan import ModelShape, Setup, plan
    from rlvr.rollout import Rollouts
    from test_plan import build

    dims = {"lab x2": ["model.tiny.hidden_size=256", "model.tiny.num_layers=3", "model.tiny.intermediate_size=768"]}.get(size, [])
    cfg = config(2, "fsdp", "train.micro_batch_size=4", "rollout.max_new_tokens=48", "train.bucket_overhead_tokens=0", "algo.beta=0", *dims)
    model = build("llama", 256, 2, 688, 4, 2, 16384) if size == "llama 16k vocab" else initial_policy(cfg, tokenizer)
    def rank_peak(rank, batch) -> tuple[int, int]:
        """On a rank: (bytes of its parameter shards and optimizer state, their sum with the peak of
        everything allocated over one update), from the profiler's allocation events, as
        tests/test_plan.py measures the learner in one process. Defined here: Ray sends it by value."""
        from torch.profiler import ProfilerActivity, profile

        local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # noqa: E731
        state = [s[k] for s in rank.optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]  # (and a 4-byte step per tensor)
        static = sum({local(t).untyped_storage().data_ptr(): local(t).untyped_storage().nbytes() for t in [*rank.model.parameters(), *state]}.values())
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            rank.update(batch)
        running = peak = 0
        for e in sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()):
            running += e.nbytes()
            peak = max(peak, running)
        return static, static + peak

    two_ranks.reset(model, cfg)
    B, P, T = 16, 16, 48
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (B, P + T), generator=g)
    rollouts = Rollouts(ids[:, :P], torch.ones(B, P, dtype=torch.long), ids[:, P:], torch.ones(B, T, dtype=torch.long),
                        torch.zeros(B, dtype=torch.bool), 0.0)
    advantages = torch.randn(B, generator=g)
    batch = ray_.put((rollouts, advantages, plan_micro_batches(rollouts, advantages, None, two_ranks.settings)))
    planned = plan(ModelShape.from_hf(model.config), Setup.from_config(cfg, P))
    for static, peak in two_ranks.run(rank_peak, batch):
        assert static == planned.device["weights"] + planned.device["optimizer state"]
        assert planned.device_total == pytest.approx(peak, rel=0.2), {k: v / 2**20 for k, v in planned.device.items()} | {"measured": peak / 2**20}


def test_more_learner_ranks_than_the_cluster_can_place_fail_at_once(learner_cluster, tokenizer):
    policy = build_tiny_model(tokenizer, config(1, "fsdp").model.tiny, seed=0)
    start = time.perf_counter()
    with pytest.raises(DistributedError, match=r"learner_workers = 4 needs 4 x \{CPU: 1\} \(CPU: needs 4, has 3\)"):
        LearnerGroup(copy.deepcopy(policy), config(4, "fsdp"))
    with pytest.raises(DistributedError, match=r"GPU: needs 2, has 0"):
        LearnerGroup(copy.deepcopy(policy), config(2, "fsdp", "distributed.gpus_per_learner=1"))
    assert time.perf_counter() - start < 5  # no waiting for a timeout


def test_a_bundle_must_fit_on_one_node():
    nodes = [{"CPU": 3.0, "GPU": 2.0}, {"CPU": 3.0, "GPU": 1.0}]
    assert placement_shortfall(3, {"CPU": 1.0, "GPU": 1.0}, nodes) is None
    assert placement_shortfall(2, {"CPU": 2.0}, nodes) is None
    assert "the nodes hold 2" in placement_shortfall(3, {"CPU": 2.0}, nodes)  # 6 CPUs in all, but 2 + 2 + 2 needs three nodes
    assert "GPU: needs 4, has 3" in placement_shortfall(4, {"CPU": 1.0, "GPU": 1.0}, nodes)


def test_a_strategy_this_torch_cannot_run_is_a_config_error(monkeypatch, tokenizer):
    import torch.distributed

    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="learner_strategy = 'fsdp': this torch is built without torch.distributed"):
        LearnerGroup(build_tiny_model(tokenizer, config(1, "fsdp").model.tiny, seed=0), config(2, "fsdp"))


def test_sharded_checkpoint_resumes_the_next_update_exactly(two_ranks, tokenizer, batch, tmp_path):
    """save_policy + trainer_state after one update; after another update, load_policy +
    load_trainer_state put the ranks back: the second update is redone to the last bit."""
    cfg = config(2, "fsdp")
    two_ranks.reset(initial_policy(cfg, tokenizer), cfg)
    two_ranks.update(*batch, None)
    two_ranks.save_policy(tmp_path)
    state = two_ranks.trainer_state()
    first = comparable(two_ranks.update(*batch, None))
    with two_ranks.evaluation_policy() as policy:
        first_weights = weights_of(policy)
    two_ranks.load_policy(tmp_path)
    two_ranks.load_trainer_state(state)
    assert comparable(two_ranks.update(*batch, None)) == first
    with two_ranks.evaluation_policy() as policy:
        assert all(torch.equal(p, first_weights[name]) for name, p in weights_of(policy).items())


def test_a_rank_that_dies_after_another_rank_s_error_is_reported_as_lost(two_ranks):
    """A collective broken by a dead rank fails at once on the survivors (gloo), so a survivor's
    error can reach the driver before Ray reports the death: the group must still say the rank was
    lost (the run re-forms it), not that a rank failed (the run would stop). Here rank 0 raises at
    once and rank 1 dies a second later; the group is then formed again for the other tests."""
    from rlvr.errors import LearnerLost

    def fail_or_die(rank):
        if rank.rank == 0:
            raise RuntimeError("Connection closed by peer")  # what gloo says when a peer is gone
        import os
        import time

        time.sleep(1.0)
        os._exit(1)

    try:
        with pytest.raises(LearnerLost, match="a learner rank died"):
            two_ranks.run(fail_or_die)
        assert two_ranks.ranks == [] and two_ranks.placement is None  # stopped at once, the reservation freed
    finally:
        two_ranks.reform()
    assert two_ranks.restarts == 1 and len(two_ranks.ranks) == 2
