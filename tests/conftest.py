import pytest
import torch

# As the pipeline does (see rlvr.pipeline.configure_cpu_math): denormal floats make CPU training
# math up to ~100x slower and change nothing that matters.
torch.set_flush_denormal(True)


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
