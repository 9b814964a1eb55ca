"""Sequence-classification reward models as reward terms: ``reward.functions = ["reward_model:<where>"]``.

``<where>`` names an ``AutoModelForSequenceClassification`` with one label (a Bradley-Terry reward
model, as TRL's ``reward_funcs`` takes one), found the way every rlvr command finds a model
(the rules of :func:`rlvr.sources.resolve_model`): a model directory, a hub id (through the hub client and
its cache), or a run directory holding one (``runs/rm``: its final ``model/``; ``runs/rm@start``: the model
it started from). A run's step or SFT checkpoint holds a causal LM policy, never a reward model, and is
refused. This module sits with the verifiers, below the config and the model loaders (tests/
test_architecture.py), so it reads a run's config.toml and loads with transformers itself.

The term is TRL-batched: one call per batch. Each row's text is what TRL gives a reward model:
for chat prompts the prompt messages and the completion through the reward model's own chat
template (message contents joined by newlines when it has none), for text prompts the prompt text
followed by the completion text; tokenized without added special tokens (the template or the
prompt carries them), as TRL does. A text longer than the model's limit (``reward.model_max_length``,
else the smaller of its position limit and its tokenizer's) keeps its *end*: the completion is what
is judged, and a sequence classifier reads its verdict from the last token.

The score of a row is ``logits[:, 0]`` as a float. Rows go through the model in micro-batches of
``reward.model_batch_size``, longest first, right-padded: a causal model's last real token never
sees the padding after it, and the model pools at the last non-pad token, so a row scores the same
alone or beside longer rows (tested, to float tolerance). The model loads on the first call, once
per process (training, evaluation, the audit's and Ray's workers each load their own), in eval mode,
on ``reward.model_device``, and scores under ``torch.inference_mode`` with autocast off.

A module literally named ``reward_model`` cannot be named as ``reward_model:function``: the prefix
is read first. Name such a function through its package (``mypkg.reward_model:fn``).
"""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any, Sequence

from rlvr.errors import UsageError

PREFIX = "reward_model:"
NAME = "reward_model"  # the term's metric name (reward/reward_model; reward_model_<i> for a second one)

_LOADED: dict[tuple[str, bool, str, str], tuple[Any, Any]] = {}  # (source, trust_remote_code, device, dtype) -> (model, tokenizer)
_LOCK = threading.Lock()


def is_reward_model(spec: str) -> bool:
    """Whether a reward.functions entry names a reward model (checked before any ``module:function`` parse).

    >>> is_reward_model("reward_model:runs/rm"), is_reward_model("mypkg.reward_model:fn")
    (True, False)
    """
    return spec.strip().startswith(PREFIX)


def location(spec: str) -> str:
    return spec.strip()[len(PREFIX):].strip()


class RewardModel:
    """A sequence-classification reward model as a TRL-batched reward function.

    `source` is the model directory or hub id the spec resolved to. Picklable and light: the model
    itself lives in a per-process cache, loaded on the first call (or by `warm_up`)."""

    learned = True  # a learned reward: the hack monitor compares it with the verifier (hack/<term>/wrong_over_right)

    def __init__(self, source: str, *, trust_remote_code: bool = False, batch_size: int = 16, max_length: int = 0,
                 device: str = "auto", dtype: str = "float32") -> None:
        self.source, self.trust_remote_code = source, trust_remote_code
        self.batch_size, self.max_length, self.device, self.dtype = batch_size, max_length, device, dtype

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        model, tokenizer = self.loaded()
        texts = [input_text(tokenizer, p, c) for p, c in zip(prompts, completions)]
        return score_texts(model, tokenizer, texts, self.batch_size, self.max_length)

    def preflight(self) -> None:
        """Before any model loads: the config says one-label sequence classifier (a hub id: fetched, or read from the cache)."""
        problem = classifier_problem(self.source, self.trust_remote_code)
        if problem:
            raise ValueError(problem)

    def warm_up(self) -> None:
        """Load the model (a pool's workers do this before they take items, so no item pays for it)."""
        self.loaded()

    def loaded(self) -> tuple[Any, Any]:
        """(model, tokenizer) of this process, loaded once."""
        device = self.device if self.device != "auto" else ("cuda" if _cuda() else "cpu")
        key = (self.source, self.trust_remote_code, device, self.dtype)
        with _LOCK:
            if key not in _LOADED:
                _LOADED[key] = load_reward_model(self.source, device, self.dtype, self.trust_remote_code)
            return _LOADED[key]


def resolve_reward_model(spec: str, where: str, config: Any = None) -> RewardModel:
    """The RewardModel a ``reward_model:<where>`` entry names, its settings from `config` (the reward section,
    reward.model_*; the defaults when None). A local model is checked now (UsageError prefixed with `where`; the
    contract raises it as a ConfigError); a hub id by the term's preflight, the first time the hub or its cache is read."""
    place = location(spec)
    if not place:
        raise UsageError(f"{where}: {spec!r} names no model: reward_model:<model directory, hub id or run directory>")
    # A hub id is `name` or `org/name`: a path of more segments that is not here is a missing directory.
    if "@" not in place and place.count("/") >= 2 and not Path(place).expanduser().exists():
        raise UsageError(f"{where}: {spec!r}: {place} does not exist (a hub id is org/name)")
    source, trust = model_of(place, f"{where}: {spec!r}")
    if Path(source).expanduser().is_dir():
        problem = classifier_problem(source, trust)
        if problem:
            raise UsageError(f"{where}: {spec!r}: {problem}")
    settings = {"batch_size": getattr(config, "model_batch_size", 16), "max_length": getattr(config, "model_max_length", 0),
                "device": getattr(config, "model_device", "auto"), "dtype": getattr(config, "model_dtype", "float32")}
    return RewardModel(source, trust_remote_code=trust, **settings)


def model_of(place: str, what: str) -> tuple[str, bool]:
    """(model directory or hub id, trust_remote_code) of a location: a run directory (a config.toml) names its final
    model/ or, with @start, the model it started from, as rlvr.sources reads them; anything else is itself."""
    whole = Path(place).expanduser()
    path_part, at, point = place.rpartition("@") if "@" in place and not whole.exists() else (place, "", "")
    run = Path(path_part).expanduser()
    if not (run / "config.toml").is_file():
        if at:
            raise UsageError(f"{what}: '@{point}' picks a point of a run, but {path_part} is not a run directory (no config.toml)")
        return place, False
    try:
        model = tomllib.loads((run / "config.toml").read_text(encoding="utf-8")).get("model", {})
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"{what}: cannot read {run / 'config.toml'}: {err}") from None
    trust = bool(model.get("trust_remote_code", False))
    if point in ("", "final"):
        final = run / "model"
        if not (final / "config.json").is_file():
            raise UsageError(f"{what}: {run} holds no final model/ (a run's checkpoints hold its causal LM policy, not a "
                             "sequence-classification reward model)")
        return str(final), trust
    if point == "start":
        return str(model.get("path") or run / "init"), trust
    raise UsageError(f"{what}: @{point} is one of {run}'s checkpoints, and a run's checkpoints hold its causal LM policy, not a "
                     "sequence-classification reward model: name the run (its model/) or @start")


def classifier_problem(source: str, trust_remote_code: bool = False) -> str | None:
    """Why `source` is not a one-label sequence classifier, from its config alone (None: it is one)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        return f"cannot load a model config from {source}: {(str(err).strip().splitlines() or [type(err).__name__])[0]}"
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        return (f"{source} is a {', '.join(architectures)}, not a sequence-classification reward model "
                "(AutoModelForSequenceClassification with one label)")
    if config.num_labels != 1:
        return f"{source} has num_labels = {config.num_labels}; a reward model scores with one label (logits[:, 0])"
    return None


def load_reward_model(source: str, device: str, dtype: str, trust_remote_code: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer): eval mode, no gradients, on `device`; a pad token set on both (batches need one).
    Refuses weights without the classification head (transformers would start it at random)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise UsageError(f"reward model {source}: cannot load its tokenizer: {(str(err).strip().splitlines() or [type(err).__name__])[0]}") from None
    if tokenizer.pad_token_id is None:  # batches need one; EOS as rlvr.models.load_tokenizer falls back
        if tokenizer.eos_token_id is None:
            raise UsageError(f"reward model {source}: its tokenizer has neither a pad nor an EOS token; cannot batch")
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            source, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code, output_loading_info=True)
    except (OSError, ValueError) as err:
        raise UsageError(f"reward model {source}: cannot load: {(str(err).strip().splitlines() or [type(err).__name__])[0]}") from None
    if info.get("missing_keys"):
        raise UsageError(f"reward model {source}: its weights lack {sorted(info['missing_keys'])}: the classification head was "
                          "never trained (a causal LM's weights?)")
    if model.config.num_labels != 1:
        raise UsageError(f"reward model {source}: num_labels = {model.config.num_labels}, not 1")
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval().requires_grad_(False).to(device), tokenizer


def input_text(tokenizer: Any, prompt: Any, completion: Any) -> str:
    """What the reward model reads of one row, as TRL builds it: chat messages (a prompt's or a tool
    rollout's) through the reward model's chat template, text as prompt + completion.

    >>> input_text(None, "2+2=", " 4")
    '2+2= 4'
    """
    if not isinstance(prompt, list) and not isinstance(completion, list):
        return str(prompt) + str(completion)
    messages = (prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]) + \
        (completion if isinstance(completion, list) else [{"role": "assistant", "content": str(completion)}])
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return "\n".join(str(m.get("content") or "") for m in messages)


def max_length_of(model: Any, tokenizer: Any, max_length: int = 0) -> int | None:
    """The smaller of the model's position limit and its tokenizer's (None: neither has one), and of `max_length`
    when > 0 (a setting above what the model can read would index past its positions)."""
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    limits = [int(x) for x in limits if isinstance(x, int) and 0 < x < 10**7]  # tokenizers without a limit say ~1e30
    if max_length > 0:
        limits.append(max_length)
    return min(limits) if limits else None


def score_texts(model: Any, tokenizer: Any, texts: Sequence[str], batch_size: int = 16, max_length: int = 0) -> list[float | None]:
    """logits[:, 0] of each text, in micro-batches of `batch_size` rows (longest first, right-padded).
    A text over the limit (`max_length_of`) keeps its last tokens; one of no tokens is None (not scored)."""
    import torch

    if not texts:
        return []
    limit = max_length_of(model, tokenizer, max_length)
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    ids = [row[-limit:] if limit is not None and len(row) > limit else row for row in ids]
    pad_id = model.config.pad_token_id
    device = next(model.parameters()).device
    # similar lengths share a micro-batch: little padding; a row of no tokens has nothing to judge and is not scored
    order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: -len(ids[i]))
    scores: list[float | None] = [None] * len(ids)
    with torch.inference_mode(), torch.autocast(device.type, enabled=False):
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            T = max(1, max(len(ids[i]) for i in rows))
            input_ids_BT = torch.full((len(rows), T), pad_id, dtype=torch.long)
            mask_BT = torch.zeros((len(rows), T), dtype=torch.long)
            for b, i in enumerate(rows):
                input_ids_BT[b, :len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                mask_BT[b, :len(ids[i])] = 1
            logits_BL = model(input_ids=input_ids_BT.to(device), attention_mask=mask_BT.to(device)).logits
            for i, value in zip(rows, logits_BL[:, 0].float().tolist()):
                scores[i] = value
    return scores


def _cuda() -> bool:
    import torch  # start-up time: resolving a spec never needs torch

    return torch.cuda.is_available()
