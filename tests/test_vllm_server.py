"""rollout.engine = "vllm_server": a run samples from a vLLM server that `rlvr serve` started.

Run by `make test-vllm` in .venv-vllm (vLLM's CPU build); where vLLM cannot be imported every test
here skips with the reason. One server for the module (`rlvr serve` on the tiny model, in a child
process, on a free port). What users depend on: the server's log-probs of its own samples are the
learner's; after every weight push the server samples from the pushed weights, never older ones;
a server that dies stops the run at once with a message that says where and what to do, and the
run resumes from its checkpoint on a restarted server; a server that is not there is a config
error before any model loads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.rollout.vllm_sampler import vllm_unavailable

_WHY = vllm_unavailable()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(_WHY is not None, reason=f"vLLM unavailable: {_WHY}")]

PROMPTS = ["3+4*2=", "12-5=", "7*7-1=", "9+9="]
# The lab's tiny model at a small shape: the served model and the training run's (same shape, same tokenizer).
# Heads of 32: vLLM's CPU attention has no kernel for a head_dim of 16.
SHAPE = ["model.tiny.hidden_size=64", "model.tiny.num_layers=2", "model.tiny.intermediate_size=128", "model.tiny.num_heads=2",
         "model.tiny.num_kv_heads=1"]
START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`rlvr serve MODEL --port P` in a child process: its URL, and the pid of vLLM's server it printed."""

    def __init__(self, model_dir: Path | str, logs: Path) -> None:
        self.model_dir, self.logs, self.port = model_dir, logs, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.vllm_pid, self.starts, self.start_s = 0, 0, 0.0

    def start(self) -> None:
        self.starts += 1
        log = self.logs / f"serve-{self.starts}.log"
        t0 = time.perf_counter()
        with open(log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", str(self.model_dir), "--port", str(self.port),
                                          "--kv-cache-gib", "0.25"], stdout=out, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < START_TIMEOUT_S:
            found = re.search(r"serving .* at (\S+) \(vLLM pid (\d+)", log.read_text(errors="replace"))
            if found:
                assert found.group(1) == self.url
                self.vllm_pid, self.start_s = int(found.group(2)), time.perf_counter() - t0
                return
            assert self.proc.poll() is None, f"rlvr serve exited with {self.proc.returncode}:\n{log.read_text()[-3000:]}"
            time.sleep(0.25)
        raise AssertionError(f"rlvr serve did not print its URL within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")

    def kill_vllm(self) -> None:
        """SIGKILL vLLM's server process, as a crash or an OOM kill would end it."""
        os.kill(self.vllm_pid, signal.SIGKILL)
        self.proc.wait(60)  # `rlvr serve` sees its server gone, cleans up and exits

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from rlvr.config import load_config
    from rlvr.models import save_pretrained
    from rlvr.runtime import tiny_lab_model

    root = tmp_path_factory.mktemp("served")
    save_pretrained(*tiny_lab_model(load_config(overrides=[*SHAPE, "run.seed=0"])), root / "tiny")
    served = Served(root / "tiny", root)
    served.start()
    print(f"\nrlvr serve: up in {served.start_s:.1f} s")
    yield served
    served.stop()
    assert served.proc.returncode is not None


def tiny(seed: int):
    from rlvr.config import load_config
    from rlvr.runtime import tiny_lab_model

    return tiny_lab_model(load_config(overrides=[*SHAPE, f"run.seed={seed}"]))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_servers_log_probs_of_its_samples_are_the_learners(server, temperature):
    from rlvr.logprobs import completion_logprobs
    from rlvr.rollout.vllm_server import ServerSampler
    from rlvr.sampling import Sampling

    model, tokenizer = tiny(seed=3)  # not the served weights: the sampler pushes its own
    sampler = ServerSampler(model, tokenizer, Sampling(max_new_tokens=20, temperature=temperature), server.url, 60)
    r = sampler.sample(PROMPTS, 4, torch.Generator().manual_seed(0)).rollouts
    mask = r.completion_mask_BT.bool()
    assert int(mask.sum()) > 40 and r.sample_logp_BT.shape == r.completion_ids_BT.shape
    with torch.no_grad():
        learner = completion_logprobs(model, r.prompt_ids_BP, r.prompt_mask_BP, r.completion_ids_BT, r.completion_mask_BT,
                                      temperature=temperature)
    assert float((learner - r.sample_logp_BT)[mask].abs().max()) < 1e-4  # fp32 on both sides; measured ~1e-6
    assert float(r.sample_logp_BT[~mask].abs().sum()) == 0.0
    assert r.entropy_sum == pytest.approx(float(-r.sample_logp_BT.sum()), rel=1e-6)


def test_greedy_completions_follow_every_weight_push(server):
    """After each of three changes of the weights the server samples what rlvr's engine samples from
    them, and says it holds that version; they do change, so a server left on older weights fails."""
    from rlvr.rollout import Sampler
    from rlvr.rollout.vllm_server import ServerSampler
    from rlvr.sampling import Sampling

    model, tokenizer = tiny(seed=5)
    greedy = Sampling(max_new_tokens=16, greedy=True)
    remote, local = ServerSampler(model, tokenizer, greedy, server.url, 60), Sampler(model, tokenizer, greedy)
    noise = torch.Generator().manual_seed(0)
    seen, pushes = [], remote.link.pushes
    for version in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=noise) * 0.3)
        remote.weights_changed()
        got, want = remote.sample(PROMPTS), local.sample(PROMPTS)
        assert got.completion_ids() == want.completion_ids(), f"version {version}"
        assert remote.server_versions() == [remote.link.version]
        seen.append(tuple(got.texts))
        assert remote.sample(PROMPTS[:1]).texts == got.texts[:1]  # unchanged weights: sampled again without a push
    assert remote.link.pushes == pushes + 3
    assert len(set(seen)) == 3, "the changes did not change the greedy completions: the test proves nothing"


def test_both_vllm_engines_give_the_same_rows(server):
    """The server and an in-process engine (rollout.engine = vllm) on the same weights and seeds give
    the same rows, masks and log-probs, bit for bit, under either seeding: the two modes share
    the request, the parameters and the rows, and differ only in where the engine runs."""
    from rlvr.learner import group_generators
    from rlvr.rollout.vllm_sampler import VLLMSampler, VLLMSettings
    from rlvr.rollout.vllm_server import ServerSampler
    from rlvr.sampling import Sampling

    model, tokenizer = tiny(seed=7)
    sampling = Sampling(max_new_tokens=16, temperature=0.9, top_k=20)
    local = VLLMSampler(model, tokenizer, sampling, VLLMSettings(kv_cache_gib=0.25))
    remote = ServerSampler(model, tokenizer, sampling, server.url, 60)
    cpu = torch.device("cpu")
    for seeds in (lambda: {"generator": torch.Generator().manual_seed(3)}, lambda: {"generators": group_generators(7, 2, len(PROMPTS), cpu)}):
        a, b = local.sample(PROMPTS, 4, **seeds()), remote.sample(PROMPTS, 4, **seeds())
        assert a.completion_ids() == b.completion_ids() and a.texts == b.texts and len(set(a.texts)) > 8
        for name in ("prompt_ids_BP", "prompt_mask_BP", "completion_mask_BT", "sample_logp_BT", "truncated_B"):
            assert torch.equal(getattr(a.rollouts, name), getattr(b.rollouts, name)), name


def test_a_policy_of_another_shape_is_refused_and_the_server_serves_on(server):
    """A policy whose weights cannot fit the served model is a ConfigError naming rollout.server_url
    and the difference, on every side at once; the server stays up for a policy that fits."""
    from rlvr.config import ConfigError, load_config
    from rlvr.rollout.vllm_server import ServerSampler
    from rlvr.runtime import tiny_lab_model
    from rlvr.sampling import Sampling

    other, tokenizer = tiny_lab_model(load_config(overrides=[*SHAPE, "model.tiny.num_layers=1"]))
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=re.escape(f"rollout.server_url = '{server.url}'")) as err:
        ServerSampler(other, tokenizer, Sampling(max_new_tokens=4), server.url, 60)
    assert "num_hidden_layers: 2 served, 1 in the policy" in str(err.value) and time.perf_counter() - t0 < 10
    model, tokenizer = tiny(seed=4)
    assert len(ServerSampler(model, tokenizer, Sampling(max_new_tokens=4), server.url, 60).sample(PROMPTS).texts) == 4


def test_a_missing_server_or_vllm_is_a_config_error(monkeypatch):
    """check_engine (train, --dry-run, every run's start) names rollout.server_url when nothing
    answers there; `rlvr serve` without vLLM says what vllm_unavailable says (exit status 2)."""
    import importlib.util

    from typer.testing import CliRunner

    from rlvr.cli import app
    from rlvr.config import ConfigError, load_config
    from rlvr.rollout import vllm_sampler
    from rlvr.runtime import check_engine

    url = f"http://127.0.0.1:{free_port()}"
    cfg = load_config(overrides=["rollout.engine=vllm_server", f"rollout.server_url={url}"])
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=re.escape(f"rollout.server_url = '{url}'")) as err:
        check_engine(cfg)
    assert "nothing listens there" in str(err.value) and "rlvr serve" in str(err.value) and time.perf_counter() - t0 < 5

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "vllm" else real(name, *a, **k))
    why = vllm_sampler.vllm_unavailable()
    assert why is not None and why.startswith("vllm is not installed")
    done = CliRunner().invoke(app, ["serve", "some/model"])
    assert done.exit_code == 2 and why in " ".join(done.output.split()), done.output


LENGTH_REWARD = '''
def length(completion, answer, **fields):
    """A reward every completion earns differently, so every step updates the policy."""
    return len(completion) / 12.0
'''


def _lab(args: list[str], reward_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(reward_dir), os.environ.get("PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "rlvr.cli", "lab", "--quiet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def _steps(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_a_run_stopped_by_a_dead_server_resumes_on_a_restarted_one(server, tmp_path):
    """A server killed mid-run stops the run at once (not after rollout.server_timeout_s) saying
    where and how to go on; resumed from its checkpoint on a restarted server (serving the run's
    own checkpoint, written out as a model), the run ends its steps, and every step's samples
    were scored by the learner as the server sampled them (a server left on older weights than
    the learner's would not be)."""
    (tmp_path / "served_reward.py").write_text(LENGTH_REWARD)
    run_dir = tmp_path / "run"
    overrides = [*SHAPE, "sft.steps=0", "eval.before_rl=false", "eval.after_rl=false", "train.steps=8", "checkpoint.every=1",
                 "rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=12", "train.lr=1e-2",
                 "train.warmup_steps=0", 'reward.functions=["served_reward:length"]', "run.report=false", "run.threads=1",
                 "rollout.engine=vllm_server", f"rollout.server_url={server.url}", "rollout.server_timeout_s=300",
                 f"run.output_dir={run_dir}"]
    run = _lab(overrides, tmp_path)
    second = run_dir / "checkpoints" / "step-000002" / "COMPLETE"
    t0 = time.perf_counter()
    while not second.exists():
        assert run.poll() is None, run.stdout.read()[-3000:]
        assert time.perf_counter() - t0 < 300, "no step-2 checkpoint in 300 s"
        time.sleep(0.05)
    server.kill_vllm()
    killed = time.perf_counter()
    out = run.communicate(timeout=300)[0]
    stopped_after = time.perf_counter() - killed
    assert run.returncode == 1, out[-3000:]
    message = " ".join(out.split())
    assert server.url in message and "rlvr serve" in message and "--resume RUN_DIR" in message, out[-3000:]
    assert stopped_after < 60, f"stopped {stopped_after:.0f} s after the kill"  # the timeout was 300 s
    done_before = len(_steps(run_dir))
    assert 2 <= done_before < 8, f"{done_before} steps ran before the kill stopped the run"

    server.model_dir = f"{run_dir}@2"  # restarted on the run's step-2 checkpoint: `rlvr serve` takes a run as `rlvr eval` does
    server.start()
    resumed = _lab(["--resume", str(run_dir)], tmp_path)
    out = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, out[-3000:]
    steps = [s for s in _steps(run_dir) if "reward/mean" in s]
    assert [s["step"] for s in steps] == list(range(1, 9))
    scored = [s for s in steps if s["loss/active_frac"] > 0]
    assert len(scored) >= 6 and max(s["rollout/logp_mismatch_max"] for s in scored) < 1e-3
    print(f"\nthe run stopped {stopped_after:.1f} s after its server was killed; restarted in {server.start_s:.1f} s")


def test_a_killed_server_is_a_server_error_naming_it_at_once(server):
    """The last test: it leaves the module's server dead. A sampler whose server was SIGKILLed
    fails on its next call with ServerError (a RunStopped) naming the URL, what happened and what
    to do, in about a second, not after its timeout."""
    from rlvr.errors import RunStopped
    from rlvr.rollout.vllm_server import ServerError, ServerSampler
    from rlvr.sampling import Sampling

    model, tokenizer = tiny(seed=8)
    sampler = ServerSampler(model, tokenizer, Sampling(max_new_tokens=8), server.url, 120)
    sampler.sample(PROMPTS, 2, torch.Generator().manual_seed(0))
    server.kill_vllm()
    t0 = time.perf_counter()
    with pytest.raises(ServerError) as err:
        sampler.sample(PROMPTS, 2, torch.Generator().manual_seed(1))
    assert time.perf_counter() - t0 < 10
    message = str(err.value)
    assert isinstance(err.value, RunStopped) and server.url in message
    assert "refused the connection" in message and "rlvr serve" in message and "--resume RUN_DIR" in message
