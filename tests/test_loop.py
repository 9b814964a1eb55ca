"""The loop's filters and reward handling on a real tiny model: dynamic sampling, missing rewards,
KL in the reward, truncated completions left out."""

import copy

import pytest
import torch

import rlvr.learner as learner_module
import rlvr.loop as loop
from rlvr.config import AlgoConfig, load_config
from rlvr.learner import LocalLearner
from rlvr.metrics import read_jsonl_records
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.reward import RewardError, RewardTerm
from rlvr.rollout import encode_prompts, generate
from rlvr.sampling import Sampling
from rlvr.tasks.arithmetic import make_splits
from rlvr.update import UpdateSettings, rl_update

TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.intermediate_size=64",
    "task.num_train=200", "task.num_eval=30", "rollout.max_new_tokens=10",
    "rollout.group_size=4", "rollout.prompts_per_step=4", "train.micro_batch_size=8", "run.threads=1",
    "train.lr=1e-3", "train.warmup_steps=1",
]


class Bar:
    def advance(self, info=""):
        pass


def setup(overrides):
    cfg = load_config(overrides=TINY + overrides)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
    train, _ = make_splits(cfg.task, 0)
    return cfg, tokenizer, model, train


def term(fn, name="r"):
    return [RewardTerm(name, 1.0, fn, batched=False)]


def parity(completion, answer):
    return float(len(completion) % 2 == 0)


def flat_for_even_answers(completion, answer):
    """Groups of even-answer problems all score 1 (no signal); the others score by parity."""
    return 1.0 if int(answer) % 2 == 0 else parity(completion, answer)


@pytest.fixture
def updates(monkeypatch):
    """Record what the loop hands to the update."""
    seen = []

    def spy(policy, optimizer, scheduler, rollouts, advantages_B, settings, **kw):
        seen.append({"rows": rollouts.completion_ids_BT.shape[0], "adv": advantages_B.clone(), "include": kw["include_B"].clone()})
        return rl_update(policy, optimizer, scheduler, rollouts, advantages_B, settings, **kw)

    monkeypatch.setattr(learner_module, "rl_update", spy)
    return seen


def test_dynamic_sampling_fills_the_batch_with_informative_groups(tmp_path, updates):
    cfg, tok, model, train = setup(["algo.dynamic_sampling=true", "algo.max_sampling_rounds=10", "train.steps=3"])
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(flat_for_even_answers), tmp_path, Bar())
    G, P = 4, 4
    for rec, upd in zip(records, updates):
        assert upd["rows"] == P * G  # exactly a full batch, surplus groups trimmed
        assert (upd["adv"].view(P, G) != 0).any(dim=1).all()  # every kept group has signal
        assert rec["sampling/batch_fill"] == 1.0
        assert rec["sampling/groups_dropped"] >= 0 and 1 <= rec["sampling/rounds"] <= 10
    assert sum(r["sampling/groups_dropped"] for r in records) > 0  # even answers were dropped
    assert read_jsonl_records(tmp_path / "metrics.jsonl")[0]["sampling/rounds"] == records[0]["sampling/rounds"]


def test_dynamic_sampling_stops_after_max_rounds_and_skips_an_empty_batch(tmp_path, updates):
    cfg, tok, model, train = setup(["algo.dynamic_sampling=true", "algo.max_sampling_rounds=3", "train.steps=2"])
    before = copy.deepcopy(model.state_dict())
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(lambda c, a: 1.0), tmp_path, Bar())
    assert not updates  # nothing informative: no update, weights untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    for rec in records:
        assert rec["sampling/rounds"] == 3 and rec["sampling/groups_dropped"] == 12 and rec["sampling/batch_fill"] == 0.0


def test_missing_rewards_are_excluded_from_the_loss_and_counted(tmp_path, updates):
    cfg, tok, model, train = setup(["train.steps=2"])

    def half_missing(completion, answer):
        return None if len(completion) % 3 == 0 else parity(completion, answer)

    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(half_missing, "half"), tmp_path, Bar())
    for rec, upd in zip(records, updates):
        missing = rec["reward/missing"]
        assert missing == rec["reward/half/missing"] == int((~upd["include"]).sum()) == rec["loss/excluded"]
        assert (upd["adv"][~upd["include"]] == 0).all()
        assert all(v is None or v == v for v in rec.values() if isinstance(v, float))  # no NaN anywhere
    assert sum(r["reward/missing"] for r in records) > 0


def test_too_many_missing_rewards_stop_the_run_with_the_cause(tmp_path):
    cfg, tok, model, train = setup(["train.steps=2", "reward.max_missing_frac=0.5"])

    def broken(completion, answer):
        raise ConnectionError("judge unreachable")

    with pytest.raises(RewardError, match=r"step 1: 100% of rewards are missing.*judge unreachable"):
        loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(broken, "judge"), tmp_path, Bar())


def test_kl_in_reward_subtracts_beta_times_the_sequence_kl(tmp_path, monkeypatch):
    cfg, tok, model, train = setup(["train.steps=2", "algo.beta=0.5", "algo.kl_in=reward", "algo.kl_estimator=k1"])
    raw, kls, seen = [], [], []

    def recording_parity(completion, answer):
        raw.append(parity(completion, answer))
        return raw[-1]

    real_kl, real_adv = learner_module.sequence_kl_to_reference, loop.compute_advantages
    monkeypatch.setattr(learner_module, "sequence_kl_to_reference", lambda *a, **k: kls.append(real_kl(*a, **k)) or kls[-1])
    monkeypatch.setattr(loop, "compute_advantages", lambda r, *a, **k: seen.append(r.clone()) or real_adv(r, *a, **k))
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(recording_parity), tmp_path, Bar())
    B = 16
    for step in range(2):
        expected = torch.tensor(raw[step * B : (step + 1) * B]) - 0.5 * kls[step]
        torch.testing.assert_close(seen[step], expected)
    assert (kls[0] == 0).all()  # the policy starts as the reference
    assert kls[1].abs().sum() > 0  # one update later it has moved
    assert records[1]["reward/kl_sequence"] == pytest.approx(float(kls[1].mean()))
    assert all(r["loss/kl"] is None for r in records)  # no KL term in the loss


def test_mask_truncated_leaves_cut_completions_out(tmp_path, updates):
    cfg, tok, model, train = setup(["train.steps=1", "algo.mask_truncated=true", "rollout.max_new_tokens=6"])
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(parity), tmp_path, Bar())
    truncated = records[0]["rollout/truncated_frac"] * 16
    assert truncated > 0 and records[0]["loss/excluded"] == round(truncated)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "constant"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_excluded_rows_give_the_gradient_of_the_batch_without_them(aggregation, beta):
    tokenizer = build_char_tokenizer()
    cfg = load_config(overrides=TINY)
    model = build_tiny_model(tokenizer, cfg.model.tiny, seed=0)
    prompts = [p for p in ["1+2=", "3*4-5=", "9-8+7*6="] for _ in range(4)]
    ids, mask = encode_prompts(tokenizer, prompts, torch.device("cpu"))
    rollouts = generate(model, ids, mask, Sampling(max_new_tokens=8), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                        generator=torch.Generator().manual_seed(3))
    adv = torch.linspace(-1.0, 1.0, 12)
    include = torch.tensor([True, False, True, True, False, True, True, True, True, False, True, True])

    def grad(rollouts, adv, include):
        policy = copy.deepcopy(model).train()
        reference = copy.deepcopy(model).eval() if beta else None
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        algo = AlgoConfig(aggregation=aggregation, beta=beta)
        settings = UpdateSettings.from_algo(algo, temperature=1.0, max_new_tokens=8, micro_batch_size=5, max_grad_norm=0.0)
        rl_update(policy, opt, sched, rollouts, adv, settings, reference=reference, include_B=include)
        return torch.cat([p.grad.flatten() for p in policy.parameters()])

    keep = torch.nonzero(include).squeeze(1)
    with_exclusion = grad(rollouts, adv, include)
    subset = grad(rollouts.select(keep), adv[keep], None)
    assert with_exclusion.abs().sum() > 0
    torch.testing.assert_close(with_exclusion, subset, atol=1e-6, rtol=1e-4)


def test_nonfinite_updates_are_skipped_counted_and_stop_the_run_with_a_checkpoint(tmp_path, monkeypatch):
    import rlvr.update as update_module
    from rlvr.checkpoint import load_weights

    cfg, tok, model, train = setup(["train.steps=6", "train.max_nonfinite_steps=2", "checkpoint.every=0"])
    real = update_module.completion_logprobs
    monkeypatch.setattr(update_module, "completion_logprobs", lambda *a, **k: real(*a, **k) * float("nan"))
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(loop.TrainingError, match=r"step 2: 2 steps in a row had a NaN/inf loss or gradient.*step-000002"):
        loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, term(parity), tmp_path, Bar())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no NaN reached a weight
    lines = read_jsonl_records(tmp_path / "metrics.jsonl")
    assert [r["loss/skipped_nonfinite"] for r in lines] == [1, 1]
    saved = build_tiny_model(tok, cfg.model.tiny, seed=1)
    load_weights(tmp_path / "checkpoints" / "step-000002", saved)
    assert all(torch.equal(before[k], v) for k, v in saved.state_dict().items())


def test_dynamic_sampling_filters_on_correctness_not_on_shaping(tmp_path, updates):
    """DAPO keeps a group when 0 < #correct < G; a length term must not rescue an all-correct group."""
    cfg, tok, model, train = setup(["algo.dynamic_sampling=true", "algo.max_sampling_rounds=2", "train.steps=1"])
    terms = [RewardTerm("always_right", 1.0, lambda c, a: 1.0, batched=False),
             RewardTerm("length", 0.01, lambda c, a: float(len(c)), batched=False)]
    records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, terms, tmp_path, Bar())
    assert not updates and records[0]["sampling/groups_dropped"] == 8 and records[0]["reward/std"] > 0


def test_learning_rate_schedules_and_weight_decay_groups():
    import math

    import torch

    from rlvr.learner import adamw, lr_factor

    constant, linear, cosine = (lr_factor(kind, 2, 10) for kind in ("constant", "linear", "cosine"))
    assert [constant(s) for s in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]  # warmup, then flat
    assert [linear(s) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]  # to 0 at train.steps
    assert cosine(6) == pytest.approx(0.5) and cosine(2) == 1.0 and cosine(10) == pytest.approx(0.0, abs=1e-12)
    assert cosine(4) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    opt = adamw(model, 1e-3, (0.9, 0.95), 1e-6, 0.1)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert decayed == {id(model[0].weight)}  # biases and the norm's weight never decay
    assert opt.param_groups[0]["betas"] == (0.9, 0.95) and opt.param_groups[0]["eps"] == 1e-6
    assert len(adamw(model, 1e-3, (0.9, 0.99), 1e-8, 0.0).param_groups) == 1


def take_steps(steps: int, *pairs) -> None:
    """`steps` optimizer steps of each (network, optimizer) pair on the same input and loss."""
    x = torch.randn(16, 5)
    for _ in range(steps):
        for net, opt in pairs:
            opt.zero_grad(set_to_none=True)
            net(x).pow(2).sum().backward()
            opt.step()


@pytest.mark.parametrize("weight_decay,amsgrad", [(0.0, False), (0.1, False), (0.1, True)])
def test_adam_state_allocated_up_front_steps_exactly_as_the_lazy_one(weight_decay, amsgrad):
    """rlvr's AdamW holds its moments before the first step (so they sit below the activations in
    memory); the steps it takes are bit for bit torch's lazily initialised ones."""

    from rlvr.allocator import allocate_adam_state
    from rlvr.learner import adamw

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    twin = copy.deepcopy(model)
    eager = adamw(model, 1e-2, (0.9, 0.99), 1e-8, weight_decay)
    if amsgrad:
        for group in eager.param_groups:
            group["amsgrad"] = True
        eager.defaults["amsgrad"] = True
        eager.state.clear()
        allocate_adam_state(eager)
    assert all(set(eager.state[p]) >= {"step", "exp_avg", "exp_avg_sq"} for p in model.parameters())
    assert all(float(eager.state[p]["step"]) == 0.0 and not eager.state[p]["exp_avg"].any() for p in model.parameters())
    groups = [{"params": [q for q, p in zip(twin.parameters(), model.parameters()) if id(p) in {id(x) for x in g["params"]}],
               "weight_decay": g["weight_decay"]} for g in eager.param_groups]
    lazy = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, amsgrad=amsgrad, fused=eager.defaults["fused"])
    take_steps(3, (model, eager), (twin, lazy))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
    restored = adamw(copy.deepcopy(twin), 1e-2, (0.9, 0.99), 1e-8, weight_decay)
    restored.load_state_dict(lazy.state_dict())  # a checkpoint's state replaces the zeros
    assert all(float(s["step"]) == 3.0 for s in restored.state.values())


def test_adamw_is_fused_where_torch_can_and_steps_as_the_unfused_one():
    """rlvr's AdamW runs torch's fused kernel on CPU (one pass per parameter instead of ~10): the
    same update as the unfused loop up to float rounding, and the two load each other's state."""
    from rlvr.learner import adamw
    from rlvr.optim import new_adamw

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    twin, before = copy.deepcopy(model), copy.deepcopy(model)
    fused = adamw(model, 1e-2, (0.9, 0.99), 1e-8, 0.1)
    assert fused.defaults["fused"] is True
    plain = torch.optim.AdamW([{"params": [q for q in twin.parameters() if q.ndim >= 2], "weight_decay": 0.1},
                               {"params": [q for q in twin.parameters() if q.ndim < 2], "weight_decay": 0.0}],
                              lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    take_steps(5, (model, fused), (twin, plain))
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(model[0].weight, before[0].weight, atol=1e-3)  # five steps of lr 1e-2 did move them
    # A checkpoint of either kind loads into the other and keeps the loading optimizer's kernel
    # (torch's load_state_dict alone would take the saved flag).
    resumed = adamw(copy.deepcopy(twin), 1e-2, (0.9, 0.99), 1e-8, 0.1)
    resumed.load_state_dict(plain.state_dict())
    assert all(g["fused"] is True for g in resumed.param_groups)
    assert all(float(s["step"]) == 5.0 and s["step"].dtype == torch.float32 for s in resumed.state.values())
    plain.load_state_dict(fused.state_dict())
    assert all(g["fused"] for g in plain.param_groups)  # torch's own optimizer takes the saved flag: what the hook undoes
    assert new_adamw([torch.nn.Parameter(torch.zeros(3, dtype=torch.complex64))], lr=1.0).defaults["fused"] is None
    generator = (q for q in torch.nn.Linear(2, 2).parameters())  # a generator is read once, not twice
    assert len(new_adamw(generator, lr=1.0).param_groups[0]["params"]) == 2


def test_the_curriculum_passes_over_solved_problems_and_resumes_where_it_was():
    from rlvr.data import Example
    from rlvr.loop import PromptStream, group_pass_rates

    examples = [Example(f"q{i}", str(i)) for i in range(10)]
    plain = PromptStream(examples, seed=3)
    off = PromptStream(examples, seed=3, skip_rate=0.0)
    assert [plain.take(4) for _ in range(5)] == [off.take(4) for _ in range(5)]  # off: the order it always was

    stream = PromptStream(examples, seed=3, skip_rate=1.0)
    first = stream.take(5)
    stream.record(first, [1.0, 1.0, 0.5, 0.0, 1.0])  # the 1st, 2nd and 5th solved by every sample
    solved = {first[i].prompt for i in (0, 1, 4)}
    taken = [e.prompt for _ in range(6) for e in stream.take(5)]
    assert not solved & set(taken) and len(taken) == 30
    metrics = stream.curriculum_metrics()
    assert metrics["curriculum/skipped"] > 0 and metrics["curriculum/rate_1"] == pytest.approx(3 / 5)
    assert metrics["curriculum/rate_0"] == pytest.approx(1 / 5) and metrics["curriculum/seen"] == 5

    resumed = PromptStream(examples, seed=3, skip_rate=1.0)
    resumed.set_state(stream.state())
    assert [e.prompt for e in resumed.take(7)] == [e.prompt for e in stream.take(7)]

    everything = PromptStream(examples, seed=0, skip_rate=0.5)
    everything.record(everything.take(10), [1.0] * 10)
    assert len(everything.take(3)) == 3  # all solved: after a whole epoch passed over, it takes what comes
    assert group_pass_rates(torch.tensor([1.0, 0.0, float("nan"), 1.0, 1.0, 1.0]), 3) == pytest.approx([1 / 3, 1.0])


def test_a_curriculum_run_logs_its_histogram(tiny_grpo):
    cfg = load_config(overrides=["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "task.num_train=12", "task.num_eval=4",
                                 "rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=6", "train.steps=6",
                                 "run.threads=1", "data.skip_solved_rate=1.0", "data.skip_never_solved=true"])
    records, _, _ = tiny_grpo(cfg, "starts_with_1", lambda completion, answer: float(completion.startswith("1")))
    assert all("curriculum/rate_1" in r for r in records)
    assert records[-1]["curriculum/seen"] == 12 and sum(r["curriculum/skipped"] for r in records) > 0


def test_a_decaying_schedule_spans_every_optimizer_step_of_the_run():
    cfg = load_config(overrides=["train.steps=10", "algo.num_iterations=2", "train.lr_schedule=linear", "train.warmup_steps=0",
                                 "model.tiny.hidden_size=16", "model.tiny.intermediate_size=32"])
    tok = build_char_tokenizer()
    learner = LocalLearner(build_tiny_model(tok, cfg.model.tiny, 0), tok, cfg)
    factor = learner.scheduler.lr_lambdas[0]
    assert factor(10) == pytest.approx(0.5) and factor(20) == 0.0  # 10 RL steps x 2 passes: halfway at optimizer step 10


def test_a_term_scored_in_worker_processes_logs_verify_timing_on_the_metrics_line(tmp_path):
    """reward.workers > 0: time/verify/<term>/* on every step's line, the rounds of dynamic sampling added
    up (the untrained model boxes nothing, so every group is all wrong and each step samples its 2
    rounds of 16 completions: 32 items); a term scored in this process adds no time/verify/ key."""
    from rlvr.verifiers.pool import VerifierPool

    cfg, tok, model, train = setup(["algo.dynamic_sampling=true", "algo.max_sampling_rounds=2", "train.steps=2"])
    with VerifierPool("boxed_math", workers=1, timeout_s=30.0) as pool:
        terms = [RewardTerm("pooled", 1.0, None, batched=False, pool=pool, correctness=True), *term(parity, "local")]
        records = loop.rl_train(LocalLearner(model, tok, cfg), train, cfg, terms, tmp_path, Bar())
    for rec in records:
        assert rec["sampling/rounds"] == 2
        assert rec["time/verify/pooled/items_per_s"] * rec["time/verify/pooled/seconds"] == pytest.approx(32)
        assert 0 < rec["time/verify/pooled/slowest_item_s"] <= rec["time/verify/pooled/seconds"]
        assert not any(k.startswith("time/verify/local") for k in rec)
