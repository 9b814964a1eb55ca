"""`rlvr serve MODEL_OR_RUN`: a vLLM server that runs sample from (rollout.engine = "vllm_server").

Sampling on a server of its own lets the trainer keep its GPU for the update and the sampler keep
its KV cache between steps, on the same machine or another. The server is vLLM's own
OpenAI-compatible server, started as a child process and left as vLLM wrote it, with the
additions a run needs:
- VLLM_SERVER_DEV_MODE=1, which opens POST /collective_rpc (how the trainer reaches the workers)
  and POST /reset_prefix_cache (after every weight push);
- rlvr's weight receiver mixed into its workers (--worker-extension-cls,
  rollout/vllm_weights.py), through which the trainer broadcasts the policy's weights;
- VLLM_MAX_STOP_STRINGS=1024 (unless set): the server's default refuses a request with more than
  four stop strings, a limit rollout.stop does not have.
Sampling defaults match the in-process engine's: settings from the request alone, not the model's
generation config (--generation-config vllm); log-probs after temperature and truncation
(--logprobs-mode processed_logprobs); on a CPU fp32, eager, and a KV cache of --kv-cache-gib
(vLLM's CPU default sizes it from the machine's memory: tens of seconds of page faults).
Anything after `--` goes to vLLM as written, after these, so it can override them.

MODEL_OR_RUN is what `rlvr eval` takes (rlvr/sources.py): a model directory or hub id is served as
it is; a run's point (runs/a, runs/a@sft, runs/a@50) is written as a plain model directory first,
as `rlvr export` writes it, into a temporary directory removed when the server stops. Whatever is
served, the trainer replaces its weights with the policy's before sampling; what must match is
the architecture and shape, so `rlvr serve RUN_DIR@start` serves the model a run starts from.

The URL is printed once the server answers /health. Ctrl-C or SIGTERM stops it (vLLM's own
shutdown, then anything left of its process group), and so does this process's death (the child
is sent SIGTERM then: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

import torch

from rlvr.config import ConfigError
from rlvr.errors import RunStopped
from rlvr.models import save_pretrained
from rlvr.rollout.vllm_sampler import vllm_unavailable
from rlvr.sources import ModelSource, resolve_model

RECEIVER = "rlvr.rollout.vllm_weights.WeightReceiver"
STOP_GRACE_S = 20.0  # vLLM's own shutdown, before what is left of its process group is killed


class Stopped(Exception):
    """SIGTERM arrived (Ctrl-C arrives as KeyboardInterrupt)."""


def servable(source: ModelSource, directory: str) -> str:
    """A directory or hub id vLLM can load the source from: as given, or written out into `directory`."""
    if source.checkpoint is None:
        local = Path(source.skeleton).expanduser()
        config = local / "config.json"
        if not local.exists() or json.loads(config.read_text(encoding="utf-8")).get("architectures"):
            return str(local) if local.exists() else source.skeleton
    dtype = source.run_config.run.dtype if source.run_config is not None else "float32"
    model, tokenizer = source.load(dtype)  # a LoRA checkpoint comes merged
    return str(save_pretrained(model, tokenizer, Path(directory) / "model"))  # save_pretrained names the architecture vLLM picks by


def vllm_command(model: str, name: str, host: str, port: int, kv_cache_gib: float | None, extra: list[str], on_gpu: bool) -> list[str]:
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", name,
               "--host", host, "--port", str(port), "--worker-extension-cls", RECEIVER, "--generation-config", "vllm",
               "--logprobs-mode", "processed_logprobs", "--seed", "0"]
    if on_gpu:
        command += ["--dtype", "bfloat16" if torch.cuda.is_bf16_supported() else "float16"]  # a V100 or T4 has no bf16
        if kv_cache_gib is not None:
            command += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * 2**30))]
    else:
        command += ["--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(int((kv_cache_gib or 1.0) * 2**30)),
                    # whole prefills: vLLM 0.32's CPU build fails on a seeded request whose prefill is chunked (vllm_sampler.py)
                    "--no-enable-chunked-prefill"]
    return command + list(extra)


def _die_with_parent() -> None:
    """In the child, before vLLM starts: SIGTERM when `rlvr serve` dies, however it dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: Ctrl-C and SIGTERM still stop the server
        pass


def _healthy(url: str) -> bool:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + "/health", timeout=2.0) as reply:
            return reply.status == 200
    except OSError:
        return False


def _stop(child: subprocess.Popen) -> None:
    """vLLM's own shutdown (SIGTERM), then SIGKILL to whatever is left of its process group (its
    engine process outlives a server killed outright)."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def serve(spec: str, host: str = "127.0.0.1", port: int = 8000, kv_cache_gib: float | None = None, extra: list[str] | None = None,
          say: Callable[[str], None] = print) -> None:
    """Serve `spec` until Ctrl-C or SIGTERM; RunStopped if the server exits by itself."""
    why = vllm_unavailable()
    if why is not None:
        raise ConfigError(f"rlvr serve: {why}")
    if kv_cache_gib is not None and kv_cache_gib <= 0:
        raise ConfigError(f"--kv-cache-gib must be > 0, got {kv_cache_gib}")
    source = resolve_model(spec, "rlvr serve")
    _refuse_taken_port(host, port)
    everywhere = host in ("0.0.0.0", "::")
    url = f"http://{socket.getfqdn() if everywhere else host}:{port}"  # what a trainer, here or elsewhere, connects to
    local_url = f"http://127.0.0.1:{port}" if everywhere else url
    with tempfile.TemporaryDirectory(prefix="rlvr-serve-") as directory:
        command = vllm_command(servable(source, directory), spec, host, port, kv_cache_gib, extra or [], torch.cuda.is_available())
        package_root = str(Path(__file__).resolve().parents[2])  # the workers import rlvr's receiver, installed or not
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1",
               # vLLM's OpenAI server refuses a request with more than 4 stop strings (OpenAI's limit); rollout.stop has none
               "VLLM_MAX_STOP_STRINGS": os.environ.get("VLLM_MAX_STOP_STRINGS", "1024"),
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the engine in its own process, as a server runs it
        previous = signal.signal(signal.SIGTERM, _raise_stopped)
        child = None
        try:
            child = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_die_with_parent)
            t0 = time.perf_counter()
            while not _healthy(local_url):
                if child.poll() is not None:
                    raise RunStopped(f"the vLLM server for {spec} exited with status {child.returncode} before it answered "
                                     f"{local_url}/health (its log is above)")
                time.sleep(0.5)
            say(f"serving {spec} at {url} (vLLM pid {child.pid}, up in {time.perf_counter() - t0:.0f} s); train with "
                f"rollout.engine=vllm_server rollout.server_url={url}")
            code = child.wait()
            raise RunStopped(f"the vLLM server at {url} exited with status {code} (its log is above)")
        except (KeyboardInterrupt, Stopped):
            say(f"stopping the vLLM server at {url}")
        finally:
            if child is not None:
                _stop(child)
            signal.signal(signal.SIGTERM, previous)


def _refuse_taken_port(host: str, port: int) -> None:
    """A port another process listens on is refused before vLLM starts: that process's /health would
    otherwise answer for a server that failed to bind."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port left in TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as err:
            raise ConfigError(f"rlvr serve: cannot listen on {host}:{port} ({err.strerror}): is another server there? "
                              "Choose another --port") from None


def _raise_stopped(signum, frame) -> None:
    raise Stopped()
