"""The learner owns its weights: every backend implements the whole `Learner` protocol, and the
loop and the pipeline reach the policy only through its verbs (a learner whose weights live
elsewhere, sharded over processes, must be able to serve them)."""

import ast
import inspect
import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.learner import Learner, LocalLearner
from rlvr.loop import rl_train
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.reward import RewardTerm
from rlvr.tasks.arithmetic import make_splits

PACKAGE = Path(__file__).resolve().parent.parent / "rlvr"
# Where a learner's policy may be read: the learners themselves.
OWNERS = {PACKAGE / "learner.py", PACKAGE / "distributed"}


def protocol_verbs() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(Learner).items() if callable(fn) and not name.startswith("_")}


def protocol_attributes() -> set[str]:
    return set(Learner.__annotations__)


def attributes_set_in_init(cls: type) -> set[str]:
    """Names assigned as self.<name> in cls.__init__ (tuple assignments included)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"}


def learner_classes() -> list[type]:
    pytest.importorskip("ray")
    from rlvr.distributed.ray_learner import RayLearner

    return [LocalLearner, RayLearner]


def test_the_protocol_declares_the_verbs_the_loop_and_the_pipeline_call():
    assert {"generate", "reference_kl", "update", "save_policy", "load_policy", "trainer_state", "load_trainer_state",
            "evaluation_policy", "step_metrics", "close"} <= set(protocol_verbs())
    assert "policy" not in protocol_attributes()


@pytest.mark.parametrize("cls", learner_classes(), ids=lambda c: c.__name__)
def test_every_learner_implements_every_verb_of_the_protocol(cls):
    for name, wanted in protocol_verbs().items():
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks the verb {name}"
        assert list(inspect.signature(getattr(cls, name)).parameters) == list(wanted.parameters), f"{cls.__name__}.{name}'s parameters"
    assert protocol_attributes() <= attributes_set_in_init(cls)


def reads_of_a_learners_policy(source: str) -> list[str]:
    """`<something naming a learner>.policy` expressions in Python source."""
    return [ast.unparse(node) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "policy" and "learner" in ast.unparse(node.value).lower()]


def test_nothing_outside_the_learners_reads_a_learners_policy():
    assert reads_of_a_learners_policy("f(learner.policy)\nctx.learner.policy.train()") == ["learner.policy", "ctx.learner.policy"]  # it can fail
    found = {str(path.relative_to(PACKAGE)): reads
             for path in PACKAGE.rglob("*.py") if not any(path == o or o in path.parents for o in OWNERS)
             for reads in [reads_of_a_learners_policy(path.read_text())] if reads}
    assert found == {}


class ProtocolOnly:
    """A learner that answers the protocol's names and nothing else: the loop reaching past them fails."""

    def __init__(self, inner: LocalLearner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name not in set(protocol_verbs()) | protocol_attributes():
            raise AttributeError(f"the loop reached past the Learner protocol: .{name}")
        return getattr(self._inner, name)


class Bar:
    def advance(self, info=""):
        pass


@pytest.mark.integration  # trains two tiny steps, twice
def test_the_loop_saves_resumes_and_evaluates_through_the_protocol_alone(tmp_path):
    cfg = load_config(overrides=[
        "model.tiny.hidden_size=16", "model.tiny.num_layers=1", "model.tiny.intermediate_size=32", "task.num_train=20",
        "task.num_eval=4", "rollout.max_new_tokens=6", "rollout.group_size=2", "rollout.prompts_per_step=2", "run.threads=1",
        "train.steps=2", "checkpoint.every=1", "eval.every=1",
    ])
    tok = build_char_tokenizer()
    train, _ = make_splits(cfg.task, 0)
    terms = [RewardTerm("parity", 1.0, lambda completion, answer: float(len(completion) % 2 == 0), batched=False)]
    evaluated = []

    def evaluate_policy(policy: torch.nn.Module) -> dict:
        evaluated.append(policy)
        return {"eval/params": sum(p.numel() for p in policy.parameters())}

    first_model = build_tiny_model(tok, cfg.model.tiny, seed=0)
    whole = rl_train(ProtocolOnly(LocalLearner(first_model, tok, cfg)), train, cfg, terms, tmp_path / "whole", Bar(),
                     evaluate_policy=evaluate_policy)
    assert evaluated == [first_model, first_model]  # the learner lent its own policy, once per eval.every step

    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    checkpoints = tmp_path / "resumed" / "checkpoints"
    resumed = rl_train(ProtocolOnly(LocalLearner(build_tiny_model(tok, cfg.model.tiny, seed=1), tok, cfg)), train, cfg, terms,
                       tmp_path / "resumed", Bar(), resume_from=checkpoints / "step-000001", evaluate_policy=evaluate_policy)

    def untimed(records):
        return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"} for r in records]

    assert untimed(resumed) == untimed(whole)
    for name in ("model.safetensors", "trainer.pt"):  # what a learner writes is what it read back and trained on
        assert (checkpoints / "step-000002" / name).read_bytes() == (tmp_path / "whole" / "checkpoints" / "step-000002" / name).read_bytes()
