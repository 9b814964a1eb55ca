"""One typed config tree: TOML load, dotted command-line overrides, validation.

Every knob of a run lives in exactly one dataclass field below, with its help text beside it.
The defaults are the built-in CPU lab; a user's TOML file overrides any subset, and the command
line overrides that (`algo.beta=0.04`). Unknown keys and values of the wrong type or range are
rejected at load time with the dotted name of the field, before anything expensive starts.

>>> cfg = load_config(overrides=["algo.beta=0.04", "rollout.group_size=4"])
>>> cfg.algo.beta, cfg.rollout.group_size
(0.04, 4)
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import os
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr.config_paths import resolve_input_paths
from rlvr.errors import UsageError
from rlvr.files import atomic_write_text
from rlvr.sampling import BudgetForcing, InvalidSampling, Sampling
from rlvr.stages.estimators import default_ks
from rlvr.trackers import missing_trackers

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(UsageError):
    """A config file, key or value is invalid; the message names the field."""


def knob(default: Any, help: str) -> Any:
    """A config field with its help text (reused by `rlvr config --help` and the docs)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def choice(registry: str, default: str, help: str) -> Any:
    """A string field whose allowed values are the names in a registry ("module:NAME", a registry on
    a floor below this one, imported when a value is first checked or listed, so that importing
    rlvr.config alone imports no torch): a registered function is selectable without touching this
    file, and `rlvr config` lists each with its docstring."""
    return field(default=default, metadata={"help": help, "choices": registry})


def _registry_of(spec: str) -> Any:
    """The object a "module:NAME" spec names (a registry), importing the module."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def section(cls: type, help: str) -> Any:
    return field(default_factory=cls, metadata={"help": help})


@dataclass
class RunConfig:
    output_dir: str = knob("", "Directory for config.toml, metrics.jsonl, samples, plots and the model; empty = runs/<command>-<time>.")
    seed: int = knob(0, "Seed for data splits, model init, sampling and shuffling.")
    device: str = knob("auto", "'auto' (cuda if available, else cpu), 'cpu', 'cuda' or 'cuda:N'.")
    dtype: Literal["float32", "bfloat16", "float16"] = knob(
        "float32", "Parameter dtype of the policy. Training full weights needs float32 (AdamW updates below bf16's "
        "resolution vanish); bf16/fp16 weights are for LoRA (adapters stay fp32) or evaluation. For bf16 compute use run.autocast."
    )
    autocast: Literal["none", "bfloat16"] = knob(
        "none", "Run every forward pass (sampling, update, reference, SFT, eval) in this dtype under torch.autocast while "
        "weights and optimizer state stay in run.dtype: the usual mixed precision for GPUs. Backward runs outside it."
    )
    threads: int = knob(0, "torch CPU threads; 0 keeps torch's default.")
    trackers: list[str] = knob(
        [], "Trackers that mirror every metric, the config, held-out evaluations and sampled completions: any of "
        "'tensorboard', 'wandb', 'mlflow', 'trackio' (each an optional install: rlvr[tensorboard], ...). rlvr's own files are always written."
    )
    project: str = knob("rlvr", "The trackers' project (W&B, trackio) or experiment (MLflow); runs are named after run.output_dir.")
    logits_budget_mib: float = knob(
        256.0, "Memory for one chunk of output-layer work when scoring tokens (update, reference, SFT): positions go through "
        "the vocabulary-wide projection this many MiB at a time, so no (rows, positions, vocabulary) logits exist (Llama-family "
        "models with a plain Linear output layer; others are scored whole by their own forward)."
    )
    share_prompts: bool = knob(
        True, "Score the G completions of a prompt with the prompt computed once (its keys and values shared, gradients "
        "summed back): the same result up to float rounding, on far fewer positions when prompts are long (Llama-family "
        "models with a plain Linear output layer, without gradient checkpointing; others run one joint forward per row). "
        "With dropout on (model.lora_dropout > 0) the G rows share one dropout mask over the prompt."
    )
    retain_freed_memory: bool = knob(
        True, "On Linux with glibc, keep memory that tensors free for the next ones instead of returning it to the system "
        "(mallopt: blocks up to 32 MiB from the heap, no trimming). Each training step allocates gigabytes of activations and "
        "gradients afresh; handed back, every page faults in again next step: measured on SmolLM2-135M, 2 cores, 15-25 s of "
        "kernel time in a cold forward + backward; the peak grows (~1 GB there: freed blocks that fit no later request stay). "
        "Process-wide; off sets glibc's initial thresholds back (without its own adaptive threshold)."
    )
    report: bool = knob(True, "Write report.html (plots, evaluations, samples, the doctor's verdicts) at the end of every phase; `rlvr report` redraws it.")
    report_every: int = knob(100, "During RL, also redraw report.html every N steps (about a second each at the lab's size); 0 = at phase ends only.")

    def validate(self) -> None:
        _require(self.threads >= 0, "run.threads", "must be >= 0")
        _require(self.report_every >= 0, "run.report_every", "must be >= 0")
        _require(self.logits_budget_mib > 0, "run.logits_budget_mib", "must be > 0")
        unknown = [t for t in self.trackers if t not in ("tensorboard", "wandb", "mlflow", "trackio")]
        _require(not unknown, "run.trackers", f"{unknown} are not trackers rlvr knows (tensorboard, wandb, mlflow, trackio)")
        _require(len(set(self.trackers)) == len(self.trackers), "run.trackers", "names a tracker twice")


@dataclass
class TinyModelConfig:
    hidden_size: int = knob(192, "Width of the tiny Qwen3 model built for the lab.")
    num_layers: int = knob(2, "Transformer blocks of the tiny model (shallow on purpose: see docs/lab.md).")
    num_heads: int = knob(4, "Attention heads of the tiny model.")
    num_kv_heads: int = knob(2, "Key/value heads (grouped-query attention) of the tiny model.")
    intermediate_size: int = knob(512, "MLP width of the tiny model.")
    max_positions: int = knob(128, "Longest sequence (prompt + completion) the tiny model handles.")

    def validate(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "max_positions"):
            _require(getattr(self, name) > 0, f"model.tiny.{name}", "must be > 0")
        _require(self.hidden_size % self.num_heads == 0, "model.tiny.num_heads", "must divide hidden_size")
        _require(self.num_heads % self.num_kv_heads == 0, "model.tiny.num_kv_heads", "must divide num_heads")


@dataclass
class ModelConfig:
    path: str = knob("", "Hugging Face hub id or local directory of a causal LM; empty builds the tiny lab model.")
    tiny: TinyModelConfig = section(TinyModelConfig, "Shape of the tiny model built when `path` is empty.")
    trust_remote_code: bool = knob(False, "Passed to from_pretrained for models with custom code.")
    gradient_checkpointing: bool = knob(False, "Trade compute for memory in the update (costs 10-17% at lab size).")
    lora_rank: int = knob(
        0, "RL through LoRA adapters of this rank (peft) on the frozen model; the KL reference is the same model with the "
        "adapters switched off, so no second copy of the weights exists. 0 = full fine-tuning."
    )
    lora_alpha: float = knob(32.0, "LoRA scaling numerator (the update is scaled by lora_alpha / lora_rank).")
    lora_dropout: float = knob(0.0, "Dropout on the LoRA path (0 keeps the update deterministic).")
    lora_targets: list[str] = knob(["all-linear"], "Modules that get adapters: peft target_modules names, or 'all-linear'.")

    def validate(self) -> None:
        self.tiny.validate()
        _require(self.lora_rank >= 0, "model.lora_rank", "must be >= 0")
        _require(self.lora_alpha > 0, "model.lora_alpha", "must be > 0")
        _require(0.0 <= self.lora_dropout < 1.0, "model.lora_dropout", "must be in [0, 1)")
        _require(bool(self.lora_targets), "model.lora_targets", "needs at least one module name (or 'all-linear')")


@dataclass
class TaskConfig:
    min_ops: int = knob(2, "Fewest operators in a built-in arithmetic problem (the lowest difficulty level).")
    max_ops: int = knob(5, "Most operators in a built-in arithmetic problem.")
    max_operand: int = knob(9, "Operands are drawn from 0..max_operand.")
    operators: str = knob("+-*", "Operators to draw from (subset of '+-*').")
    max_value: int = knob(
        19, "Only problems whose worked solution writes numbers in 0..max_value (every intermediate result and the "
        "answer), so that every step is an operation the tiny model sees often (docs/lab.md); -1 = any integer."
    )
    num_train: int = knob(20000, "Training problems generated from the seed.")
    num_eval: int = knob(600, "Held-out problems, split evenly across difficulty levels, never in train.")
    prompt_template: str = knob("{expr}=", "How a problem is shown to the model; {expr} is the expression.")
    format: Literal["plain", "think", "fused"] = knob(
        "plain", "Completions: 'plain' (working, then the box); 'think' (the working inside <think>...</think>, a direct "
        "answer as an empty block <think></think>, then the box); 'fused' (as 'think', and each prompt ends in a mode "
        "flag, ' /think' or ' /no_think', that says which; held-out problems are evaluated in both modes)."
    )
    think_fraction: float = knob(0.5, "format = 'fused': share of training prompts flagged /think (the rest /no_think).")

    def validate(self) -> None:
        _require(1 <= self.min_ops <= self.max_ops, "task.min_ops", "must satisfy 1 <= min_ops <= max_ops")
        _require(self.max_operand >= 1, "task.max_operand", "must be >= 1")
        _require(self.max_value >= -1, "task.max_value", "must be >= 0, or -1 for any integer")
        _require(bool(self.operators) and set(self.operators) <= set("+-*"), "task.operators", "must be a non-empty subset of '+-*'")
        _require(self.num_train > 0, "task.num_train", "must be > 0")
        _require(self.num_eval > 0, "task.num_eval", "must be > 0")
        _require("{expr}" in self.prompt_template, "task.prompt_template", "must contain {expr}")
        _require(0.0 <= self.think_fraction <= 1.0, "task.think_fraction", "must be in [0, 1]")


@dataclass
class DataConfig:
    # Not a `choice`: the tasks sit above the config (they read it), so a task's name and its own rules are checked
    # by rlvr.tasks.task_for, which every command calls before any work (`rlvr config` lists the names).
    source: str = knob(
        "arithmetic", "The task the problems come from: a name registered in rlvr/tasks/ (data.mix, when set, "
        "mixes several, and this is the one its entries default to)."
    )
    gym_tasks: list[str] = knob([], "source = 'reasoning_gym': task names, e.g. [\"basic_arithmetic\", \"chain_sum\", \"spell_backward\"].")
    gym_size: int = knob(1000, "source = 'reasoning_gym': training problems per task.")
    gym_eval_size: int = knob(50, "source = 'reasoning_gym': held-out problems per task.")
    gym_prompt: str = knob("{question}\nGive the final answer in \\boxed{}.", "source = 'reasoning_gym': the prompt, {question} replaced.")
    train_path: str = knob("", "Training problems: a JSONL file (source = 'jsonl'), or a dataset (source = 'hf': hub id, file or directory).")
    eval_path: str = knob("", "Held-out problems, as train_path; empty: source = 'hf' uses eval_split if set, else eval_fraction of train is held out.")
    hf_config: str = knob("", "source = 'hf': the dataset's configuration name (e.g. 'main' for gsm8k), if it has several.")
    train_split: str = knob("train", "source = 'hf': the split to train on.")
    eval_split: str = knob("", "source = 'hf': a split of the same dataset to hold out (e.g. 'test'); empty: eval_path or eval_fraction.")
    answer_format: Literal["plain", "gsm8k", "boxed"] = knob(
        "plain", "How the gold answer is read from answer_field: 'plain' as written; 'gsm8k' the text after the last '####' "
        "(the rationale before it, calculator notes removed, ending in \\boxed{answer}, becomes the SFT solution); 'boxed' "
        "the last \\boxed{} of a worked solution (MATH; the solution is kept for SFT)."
    )
    max_rows: int = knob(0, "Read only the first N rows of the training data (0 = all).")
    skip_solved_rate: float = knob(
        0.0, "Curriculum (0 = off): a problem whose pass rate in the round it was last sampled (share of its G completions with "
        "full marks) is at least this is passed over from then on (e.g. 1.0: skip what every sample solved); logged as curriculum/*."
    )
    solved_keep_prob: float = knob(0.0, "Curriculum: the chance a passed-over problem is taken anyway (0 = never: sampled less, or not at all).")
    skip_never_solved: bool = knob(False, "Curriculum: also pass over problems whose last pass rate was 0.")
    mix: list[dict[str, Any]] = knob(
        [], "Several sources as one training set ([[data.mix]] tables): each a source's data.* settings (unset ones are this "
        "section's) with weight (default 1), name and verifier (the reward term for its rows); rows remember their source. "
        "Empty: this section is the one source."
    )
    eval_fraction: float = knob(0.05, "Share of train held out when eval_path is empty.")
    prompt_field: str = knob("prompt", "Field with the problem: a string, or a list of chat messages ({role, content}; system and few-shot turns kept).")
    answer_field: str = knob("answer", "JSONL field with the gold final answer.")
    solution_field: str = knob("solution", "JSONL field with a worked solution for SFT (optional unless sft.steps > 0).")
    level_field: str = knob("level", "Optional JSONL field with a difficulty level, reported per level in evaluation.")
    id_field: str = knob("id", "Optional JSONL field with a unique row id; a repeated id is a bad row.")
    skip_bad_rows: bool = knob(False, "Leave bad JSONL rows out (each reported and counted) instead of refusing the file.")
    system_prompt: str = knob("", "System message for chat-template models; empty sends none.")
    use_chat_template: bool = knob(
        False, "Also wrap plain string prompts in the chat template (the tokenizer's, or data.chat_template). As in TRL, "
        "chat-format prompts (lists of messages) always go through it and strings are used as written unless this is set, "
        "so data whose prompts are already formatted is never templated twice."
    )
    chat_template: str = knob("", "A Jinja chat template file used instead of the tokenizer's own (also for a tokenizer that has none).")
    chat_template_kwargs: dict[str, Any] = knob(
        {}, "Extra variables for the chat template, e.g. {enable_thinking = false} for Qwen3's thinking switch "
        "(passed to apply_chat_template)."
    )

    def validate(self) -> None:
        _require(self.max_rows >= 0, "data.max_rows", "must be >= 0")
        _require(0.0 <= self.skip_solved_rate <= 1.0, "data.skip_solved_rate", "must be in [0, 1] (0 = off)")
        _require(0.0 <= self.solved_keep_prob < 1.0, "data.solved_keep_prob", "must be in [0, 1)")
        _require(0.0 < self.eval_fraction < 1.0, "data.eval_fraction", "must be in (0, 1)")
        _require(not self.chat_template or Path(self.chat_template).is_file(), "data.chat_template", f"{self.chat_template} is not a file")
        reserved = {"messages", "tokenize", "add_generation_prompt", "chat_template", "conversation"} & set(self.chat_template_kwargs)
        _require(not reserved, "data.chat_template_kwargs", f"{sorted(reserved)} are set by rlvr itself, not by the template's variables")


@dataclass
class SFTConfig:
    steps: int = knob(1500, "Cold-start SFT optimizer steps; 0 skips SFT.")
    batch_size: int = knob(64, "Sequences per SFT step.")
    lr: float = knob(2e-3, "Peak SFT learning rate (AdamW, linear warmup then cosine decay).")
    warmup_steps: int = knob(50, "SFT warmup steps.")
    weight_decay: float = knob(0.0, "SFT AdamW weight decay.")
    worked_fraction: float = knob(
        0.4, "The lab's built-in tasks only: share of SFT targets that are worked solutions (arithmetic: the steps; word "
        "problems: the equations; code: "
        "the program with its differences in a comment), the rest bare answers (a user's data trains on its own solutions)."
    )
    micro_batch_size: int = knob(64, "Most rows per forward/backward; rows (prompt + target) are sorted by length to cut padding.")
    micro_batch_tokens: int = knob(
        384, "Most positions (rows x the longest row) per forward/backward, so short rows share one by the dozen and long ones "
        "are not padded together (the lab's fastest, measured: bench/sft_speed.py); raise it on a GPU. 0 = micro_batch_size rows each."
    )
    save_model: bool = knob(False, "Save the cold-started model under output_dir/sft (a starting point for `model.path`).")

    def validate(self) -> None:
        _require(self.steps >= 0, "sft.steps", "must be >= 0")
        _require(self.batch_size > 0, "sft.batch_size", "must be > 0")
        _require(self.micro_batch_size > 0, "sft.micro_batch_size", "must be > 0")
        _require(self.micro_batch_tokens >= 0, "sft.micro_batch_tokens", "must be >= 0")
        _require(self.lr > 0, "sft.lr", "must be > 0")
        _require(0.0 <= self.worked_fraction <= 1.0, "sft.worked_fraction", "must be in [0, 1]")


@dataclass
class RolloutConfig:
    group_size: int = knob(8, "G: completions sampled per prompt.")
    prompts_per_step: int = knob(16, "Prompts per RL step (batch = prompts_per_step * group_size).")
    temperature: float = knob(1.0, "Sampling temperature; the update scores tokens at the same temperature.")
    top_p: float = knob(1.0, "Nucleus sampling mass (1.0 = off).")
    max_new_tokens: int = knob(64, "Longest completion; longer ones are cut and usually score 0.")
    top_k: int = knob(0, "Sample among the k most likely tokens only (0 = off).")
    min_p: float = knob(0.0, "Drop tokens less likely than min_p times the most likely one (0 = off; Nguyen et al. 2024).")
    stop: list[str] = knob(
        [], "Stop strings: a completion ends when its tokens end with one (kept in it, like EOS); used in RL sampling, "
        "evaluation and rejection sampling alike."
    )
    seeding: Literal["auto", "stream", "group"] = knob(
        "auto", "'stream': one random stream for all of a step's samples; 'group': each prompt's G samples draw from "
        "their own stream, seeded from run.seed, the generation round and the prompt's place in it, so results do not "
        "depend on how a round is split across rollout workers; 'auto': stream on the local backend, group on Ray. So "
        "with 'auto' a local run and a 1-worker Ray run draw different samples; with 'group' on both they train alike "
        "(tests/test_distributed.py)."
    )
    engine: Literal["auto", "static", "transformers", "vllm", "vllm_server"] = knob(
        "auto",
        "What samples: rlvr's engine ('static' drives a Llama/Mistral/Qwen2/Qwen3 model's layers with a preallocated KV "
        "cache, faster; 'transformers' calls the model's own forward, any model; 'auto' = static where it applies), "
        "'vllm' (an in-process vLLM engine, sent the policy's weights after every update) or 'vllm_server' (a vLLM "
        "server started by `rlvr serve`, at rollout.server_url). Evaluation and rejection sampling use the same engine. "
        "docs/vllm.md.",
    )
    vllm_gpu_memory_utilization: float = knob(
        0.3, "rollout.engine = 'vllm' on GPU: the share of the GPU's memory vLLM takes for its weights and KV cache (the "
        "learner, in the same process, needs the rest)."
    )
    vllm_sleep: bool = knob(
        True, "rollout.engine = 'vllm' on GPU: the engine sleeps while the learner updates (vLLM's sleep mode, level 2: its "
        "weights and KV cache leave the GPU; the weights pushed after the update wake it)."
    )
    vllm_kv_cache_gib: float = knob(
        1.0, "rollout.engine = 'vllm' on CPU: the KV cache's size in GiB (vLLM's own default sizes it from the machine's "
        "memory). 1 GiB holds ~23,000 tokens of SmolLM2-135M; a step's rows that do not fit wait their turn."
    )
    vllm_args: dict[str, Any] = knob(
        {}, "rollout.engine = 'vllm': any other argument of vllm.LLM, as vLLM names it (tensor_parallel_size, "
        "enable_prefix_caching, max_num_seqs, ...); these win over rlvr's own choices."
    )
    vllm_lora: Literal["adapter", "merged"] = knob(
        "adapter", "rollout.engine = 'vllm' with a LoRA policy: 'adapter' sends the frozen base weights once and then only the "
        "adapters, as a vLLM LoRA adapter per update; 'merged' sends the whole model with the adapters merged in (for adapters "
        "vLLM's LoRA cannot apply: DoRA, modules_to_save)."
    )
    server_url: str = knob("", "rollout.engine = 'vllm_server': the server's address, as `rlvr serve` prints it (http://host:port).")
    server_timeout_s: float = knob(
        600.0, "rollout.engine = 'vllm_server': the longest wait for one sampling request or weight push; past it the run "
        "stops with a checkpoint (a dead server is reported at once)."
    )
    pack_weights: bool = knob(
        True, "On CPU in fp32, the static engine decodes with each projection's weights packed once per generate call "
        "for oneDNN's matmul instead of F.linear (MKL re-packs them on every call): 0.6-0.8x the step time at 135M "
        "parameters, logits equal to ~1e-6. Only for plain Linear layers (not LoRA-wrapped) of models at least 512 wide.",
    )
    tools: list[str] = knob(
        [], 'Tools the model may call, each "package.module:function" (TRL\'s `tools`): its name, type hints and Google-style '
        "docstring become the schema the chat template renders (tools=); calls are parsed in rollout.tool_format, run, and "
        "their results appended as tool messages (docs/tools.md). Built in: rlvr.rollout.toolbox:calculator, :python (sandboxed).",
    )
    environment: str = knob(
        "", 'An environment class or factory, "package.module:Factory" (TRL\'s `environment_factory`): a fresh instance per '
        "rollout; reset(**row) may return text appended to the last user message; its public methods are tools; "
        "get_reward(), when defined, is a reward term named after the class.",
    )
    environments: dict[str, str] = knob(
        {}, "Several environments by name -> \"package.module:Factory\" (TRL's dict of factories); each row picks one by its "
        "rollout.environment_field and sees only that environment's tools.",
    )
    environment_field: str = knob("environment", "The data field that names a row's environment when rollout.environments is set.")
    max_turns: int = knob(
        4, "Model turns per rollout when tools are set (TRL's max_tool_calling_iterations + 1): a call in the last turn goes "
        "unanswered and is counted (tools/turn_limit). rollout.max_new_tokens bounds the whole conversation after the prompt.",
    )
    tool_timeout_s: float = knob(10.0, "Longest a tool call may run; past it the model reads a timeout message (tools/timeout).")
    tool_max_chars: int = knob(2000, "Longest tool result the model reads, in characters; longer ones are cut (tools/truncated).")
    tool_format: Literal["hermes"] = knob("hermes", "How the model writes a tool call (hermes: Qwen's and Hermes' "
                                          "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>; rollout/tools.py TOOL_FORMATS).")

    @property
    def multi_turn(self) -> bool:
        """Whether rollouts are conversations with tools (rollout/multiturn.py)."""
        return bool(self.tools or self.environment or self.environments)

    def validate(self) -> None:
        _require(self.group_size >= 2, "rollout.group_size", "must be >= 2 (group-relative advantages need a group)")
        _require(self.max_turns >= 1, "rollout.max_turns", "must be >= 1")
        _require(self.tool_timeout_s > 0, "rollout.tool_timeout_s", "must be > 0")
        _require(self.tool_max_chars >= 16, "rollout.tool_max_chars", "must be >= 16")
        _require(not (self.environment and self.environments), "rollout.environments",
                 "set rollout.environment (one for every row) or rollout.environments (routed by a field), not both")
        for i, spec in enumerate(self.tools):
            _require(isinstance(spec, str) and ":" in spec, f"rollout.tools[{i}]", f'{spec!r} is not "package.module:function"')
        for name, spec in ([("", self.environment)] if self.environment else []) + list(self.environments.items()):
            where = f"rollout.environments.{name}" if name else "rollout.environment"
            _require(isinstance(spec, str) and ":" in spec, where, f'{spec!r} is not "package.module:Factory"')
        _require(0.0 < self.vllm_gpu_memory_utilization <= 1.0, "rollout.vllm_gpu_memory_utilization", "must be in (0, 1]")
        _require(self.vllm_kv_cache_gib > 0.0, "rollout.vllm_kv_cache_gib", "must be > 0")
        _require(self.server_timeout_s > 0, "rollout.server_timeout_s", "must be > 0")
        _require(not self.server_url or self.server_url.startswith(("http://", "https://")), "rollout.server_url",
                 f"{self.server_url!r} is not an http:// or https:// address")
        _require(self.prompts_per_step > 0, "rollout.prompts_per_step", "must be > 0")
        self.sampling()

    def sampling(self) -> Sampling:
        """How RL rollouts are drawn (built once per run; checked here, by field)."""
        return _sampling("rollout", {}, max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                         top_k=self.top_k, min_p=self.min_p, stop=self.stop)


@dataclass
class AlgoConfig:
    preset: str = knob(
        "",
        "Named algorithm preset (grpo, rloo, dr_grpo, dapo, gspo; files in rlvr/presets/) or a path to your own "
        "preset TOML. It is applied first; every other setting you give refines it.",
    )
    baseline: str = choice("rlvr.algorithms.advantage:BASELINES", "group_mean", "Advantage baseline subtracted from each reward.")
    std_scale: str = choice(
        "rlvr.algorithms.advantage:STD_SCALES", "group",
        "What the centred rewards are divided by.",
    )
    adv_eps: float = knob(1e-4, "eps in (r - mean) / (std + eps).")
    surrogate: str = choice(
        "rlvr.algorithms.surrogate:SURROGATES", "ppo_clip",
        "Per-token objective of the importance ratio and the advantage; clip_low / clip_high bound its ratio.",
    )
    ratio_level: str = choice("rlvr.algorithms.loss:RATIO_LEVELS", "token", "Importance ratio per token or per completion.")
    clip_low: float = knob(0.2, "Lower clip: ratio >= 1 - clip_low.")
    clip_high: float = knob(0.2, "Upper clip: ratio <= 1 + clip_high (DAPO clip-higher raises it).")
    dual_clip: float = knob(
        0.0, "Dual-clip bound c > 1: the loss of a negative-advantage token is capped at -c * A (0 = off; verl uses 3); "
        "for surrogates that support it (ppo_clip)."
    )
    aggregation: str = choice(
        "rlvr.algorithms.loss:AGGREGATIONS", "token_mean", "Loss aggregation: how per-token losses become one number."
    )
    beta: float = knob(0.0, "KL weight to the frozen reference model; 0 builds no reference model.")
    kl_estimator: str = choice(
        "rlvr.algorithms.loss:KL_ESTIMATORS", "k3", "Per-token KL estimator (Schulman, 2020), of x = log pi_ref - log pi."
    )
    kl_in: Literal["loss", "reward"] = knob(
        "loss", "Where the KL goes: a per-token term in the loss (GRPO), or beta * summed KL subtracted from each reward (RLOO, PPO-RLHF)."
    )
    entropy_coef: float = knob(0.0, "Entropy bonus: subtract entropy_coef * per-token policy entropy from the loss (0 = off).")
    entropy_adaptive: bool = knob(
        False, "Adaptive entropy control (Skywork-OR1; TRL's use_adaptive_entropy): algo.entropy_coef is the starting "
        "coefficient; after each update it rises by entropy_coef_delta when the policy's mean entropy over the tokens "
        "trained on was at or below entropy_target and falls by it otherwise (within [entropy_coef_min, entropy_coef_max]), "
        "and the bonus acts only while the last measured entropy is at or below the target.",
    )
    entropy_target: float = knob(0.2, "Adaptive entropy control: the mean token entropy (nats) below which the bonus acts.")
    entropy_coef_delta: float = knob(0.005, "Adaptive entropy control: the coefficient's step per update.")
    entropy_coef_min: float = knob(0.0, "Adaptive entropy control: the coefficient's lower bound.")
    entropy_coef_max: float = knob(1.0, "Adaptive entropy control: the coefficient's upper bound.")
    num_iterations: int = knob(1, "mu: optimisation passes over each rollout batch.")
    reuse_sampling_logp: bool = knob(
        False, "With num_iterations > 1, take the old policy's log-probs from sampling instead of a forward pass "
        "(same weights; they differ by KV-cache numerics only, logged as rollout/logp_mismatch_max)."
    )
    tis_cap: float = knob(
        0.0, "Truncated importance sampling (0 = off; else a cap C >= 1): each token's loss is weighted by "
        "min(pi_learner / pi_sampler, C), the learner's log-probs against the sampler's, correcting for samples drawn "
        "by older weights (asynchronous rollouts, distributed.max_staleness > 0) or another engine's numerics. The "
        "sampler's log-probs are those of its tempered distribution before top-k / top-p / min-p truncation."
    )
    tis_level: Literal["token", "sequence"] = knob(
        "token", "Truncated importance sampling per token, or one weight per completion (the product of its token ratios, capped)."
    )
    tis_mode: Literal["truncate", "mask"] = knob(
        "truncate", "With algo.tis_cap: 'truncate' clamps each weight into [tis_floor, tis_cap]; 'mask' zeroes a weight outside "
        "it, so the token (tis_level = token) or the whole completion (sequence) leaves the surrogate (TRL's token_mask / "
        "sequence_mask, verl's rollout rejection)."
    )
    tis_floor: float = knob(0.0, "With algo.tis_cap: the lower bound of the importance weights (0 = none; else in (0, 1)).")
    pass_at_k: int = knob(
        1, "PKPO (Walder & Karkhanis 2025): with k > 1 the advantages are each sample's contribution to the best of k "
        "(the k-1 baselined estimator, unbiased for the gradient of pass@k / max@k) instead of reward minus algo.baseline; "
        "algo.std_scale then scales them. 1 = ordinary (pass@1) advantages. At most rollout.group_size."
    )
    top_entropy_quantile: float = knob(
        1.0, "Train the surrogate only on the batch's most uncertain tokens (Wang et al. 2025, 'Beyond the 80/20 rule'; TRL's "
        "top_entropy_quantile; 0.2 recommended; 1.0 = every token): the tokens of the completions that carry gradient whose "
        "policy entropy is in this top share of the whole batch's, measured by one no-grad forward before the update (so "
        "the same tokens on every micro-batch split); the entropy bonus acts on the same tokens."
    )
    off_policy_mask: float = knob(
        0.0, "Off-policy sequence masking (DeepSeek-V3.2; TRL's off_policy_mask_threshold; 0 = off): a completion with a "
        "negative advantage whose tokens the current policy finds on average more than this many nats less likely than "
        "the sampler did (mean log pi_sampler - log pi) leaves the surrogate. Re-checked on every pass."
    )
    dynamic_sampling: bool = knob(
        False, "DAPO dynamic sampling: drop groups whose rewards are all equal (zero gradient) and sample more prompts to fill the batch."
    )
    max_sampling_rounds: int = knob(4, "Dynamic sampling: most generation rounds per step; a batch still short after them trains on what it has.")
    mask_truncated: bool = knob(False, "Leave completions cut at max_new_tokens out of the loss (DAPO's overlong filtering).")

    def validate(self) -> None:
        _require(self.adv_eps > 0, "algo.adv_eps", "must be > 0")
        _require(0.0 <= self.clip_low < 1.0, "algo.clip_low", "must be in [0, 1)")
        _require(self.clip_high >= 0.0, "algo.clip_high", "must be >= 0")
        _require(self.dual_clip == 0.0 or self.dual_clip > 1.0, "algo.dual_clip", "must be 0 (off) or > 1")
        _require(self.beta >= 0.0, "algo.beta", "must be >= 0")
        _require(self.num_iterations >= 1, "algo.num_iterations", "must be >= 1")
        _require(self.max_sampling_rounds >= 1, "algo.max_sampling_rounds", "must be >= 1")
        _require(self.tis_cap == 0.0 or self.tis_cap >= 1.0, "algo.tis_cap", "must be 0 (off) or >= 1 (a cap on pi_learner / pi_sampler)")
        _require(0.0 <= self.tis_floor < 1.0, "algo.tis_floor", "must be in [0, 1) (a lower bound on pi_learner / pi_sampler)")
        _require(self.tis_cap > 0 or (self.tis_mode == "truncate" and self.tis_floor == 0.0), "algo.tis_mode",
                 "algo.tis_mode and algo.tis_floor shape the importance weights of algo.tis_cap, which is 0 (off): set tis_cap")
        _require(self.off_policy_mask >= 0.0, "algo.off_policy_mask", "must be >= 0 (0 = off)")
        _require(0.0 < self.top_entropy_quantile <= 1.0, "algo.top_entropy_quantile", "must be in (0, 1] (1 = every token)")
        _require(self.pass_at_k >= 1, "algo.pass_at_k", "must be >= 1 (1 = ordinary advantages)")
        _require(self.entropy_coef_delta >= 0 and 0.0 <= self.entropy_coef_min <= self.entropy_coef_max, "algo.entropy_coef_min",
                 "adaptive entropy control needs 0 <= entropy_coef_min <= entropy_coef_max and entropy_coef_delta >= 0")
        _require(
            not (self.tis_cap and self.reuse_sampling_logp and self.num_iterations > 1), "algo.tis_cap",
            "has nothing to correct with algo.reuse_sampling_logp: the old log-probs would be the sampler's own; turn one off",
        )


@dataclass
class TrainConfig:
    steps: int = knob(150, "RL steps (each: rollout, verify, advantages, num_iterations updates).")
    lr: float = knob(2e-4, "RL peak learning rate (AdamW), after warmup; train.lr_schedule says what follows.")
    warmup_steps: int = knob(10, "RL learning-rate warmup steps (linear from lr / warmup_steps).")
    lr_schedule: Literal["constant", "linear", "cosine"] = knob(
        "constant", "After warmup: constant, or a linear or cosine decay to 0 at train.steps (transformers' lr_scheduler_type)."
    )
    weight_decay: float = knob(0.0, "RL AdamW weight decay; biases and normalisation weights (1-D parameters) never decay.")
    adam_beta1: float = knob(0.9, "AdamW beta1 (transformers' default 0.9).")
    adam_beta2: float = knob(
        0.99, "AdamW beta2. transformers defaults to 0.999; rlvr's RL uses 0.99, which forgets old gradient scales in ~100 "
        "steps instead of ~1000: RL's gradient statistics shift as the policy does (the lab's tuned value)."
    )
    adam_epsilon: float = knob(1e-8, "AdamW epsilon (transformers' default 1e-8).")
    max_grad_norm: float = knob(1.0, "Clip the global gradient norm (0 = off).")
    micro_batch_size: int = knob(64, "Sequences per forward/backward; gradients accumulate exactly to the full batch.")
    micro_batch_tokens: int = knob(
        0, "If > 0, a micro-batch holds as many length-sorted sequences as fit in this many padded tokens (at most "
        "micro_batch_size): many short ones together, long ones apart. Gradients are the same either way."
    )
    bucket_overhead_tokens: int = knob(
        128, "Length bucketing: a length-sorted micro-batch is split into separate forwards wherever that saves more "
        "padded positions than this many per extra forward (what one forward's fixed cost is worth in tokens: 64-256 all "
        "measured about equal on a 2-core CPU; a GPU's forward is worth more tokens, so likely a larger value, unmeasured); "
        "0 = off. Gradients are the same either way."
    )
    log_samples_every: int = knob(25, "Write sample completions with verdicts every N steps.")
    save_model: bool = knob(True, "Save the final policy (save_pretrained) under output_dir/model.")
    max_nonfinite_steps: int = knob(
        3, "A step whose loss or gradient is NaN/inf is skipped and counted; after this many in a row the run stops with a checkpoint."
    )

    def validate(self) -> None:
        _require(self.steps >= 0, "train.steps", "must be >= 0")
        _require(0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0, "train.adam_beta1", "AdamW betas must be in [0, 1)")
        _require(self.adam_epsilon > 0, "train.adam_epsilon", "must be > 0")
        _require(self.max_nonfinite_steps >= 1, "train.max_nonfinite_steps", "must be >= 1")
        _require(self.lr > 0, "train.lr", "must be > 0")
        _require(self.micro_batch_size > 0, "train.micro_batch_size", "must be > 0")
        _require(self.micro_batch_tokens >= 0, "train.micro_batch_tokens", "must be >= 0")
        _require(self.bucket_overhead_tokens >= 0, "train.bucket_overhead_tokens", "must be >= 0")
        _require(self.max_grad_norm >= 0, "train.max_grad_norm", "must be >= 0")
        _require(self.log_samples_every > 0, "train.log_samples_every", "must be > 0")


@dataclass
class CheckpointConfig:
    every: int = knob(50, "Write a checkpoint every N RL steps (0 = only at the end); one is always written at the end.")
    keep_last: int = knob(2, "Keep the newest N step checkpoints (0 = keep all).")
    sft_every: int = knob(
        500, "Write a checkpoint every N SFT steps (weights, optimizer, schedule), so a killed run resumes SFT at its last "
        "checkpoint; only the newest is kept, and it is removed when SFT finishes. 0 = none (a killed SFT starts over)."
    )
    auto_resume: bool = knob(
        False, "When run.output_dir already holds this run, continue it from its newest complete checkpoint instead of refusing."
    )

    def validate(self) -> None:
        _require(self.every >= 0, "checkpoint.every", "must be >= 0")
        _require(self.keep_last >= 0, "checkpoint.keep_last", "must be >= 0")
        _require(self.sft_every >= 0, "checkpoint.sft_every", "must be >= 0")


@dataclass
class RFTConfig:
    samples: int = knob(8, "k: completions sampled per training prompt by `rlvr rft` and `rlvr distill` (rejection sampling).")
    prompts: int = knob(0, "Distinct training prompts to sample from (a seeded choice); 0 = all of them (each distinct prompt once).")
    max_per_prompt: int = knob(4, "m: at most this many distinct verified completions kept per prompt (Yuan et al. 2023: distinct paths are what helps).")
    select: Literal["shortest", "random"] = knob(
        "shortest", "Which of a prompt's distinct verified completions are kept when there are more than m: the shortest "
        "(fewest tokens, then sampling order) or a seeded random choice."
    )
    temperature: float = knob(1.0, "Sampling temperature of the rejection-sampled completions.")
    top_p: float = knob(1.0, "Nucleus sampling mass of the rejection-sampled completions (1.0 = off).")
    top_k: int = knob(0, "Top-k truncation of the rejection-sampled completions (0 = off).")
    min_p: float = knob(0.0, "Min-p truncation of the rejection-sampled completions (0 = off).")
    batch_size: int = knob(512, "Completions decoded at once while sampling (prompts x rft.samples).")

    def validate(self) -> None:
        _require(self.samples >= 1, "rft.samples", "must be >= 1")
        _require(self.prompts >= 0, "rft.prompts", "must be >= 0")
        _require(self.max_per_prompt >= 1, "rft.max_per_prompt", "must be >= 1")
        _require(self.batch_size >= 1, "rft.batch_size", "must be >= 1")
        self.sampling(max_new_tokens=1, stop=())  # its own fields; rollout's are checked there

    def sampling(self, max_new_tokens: int, stop: list[str]) -> Sampling:
        """How rejection sampling draws, up to rollout.max_new_tokens and ending at rollout.stop as RL's rollouts do."""
        return _sampling("rft", {"max_new_tokens": "rollout", "stop": "rollout"}, max_new_tokens=max_new_tokens,
                         temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p, stop=stop)


@dataclass
class ThinkingConfig:
    open: str = knob("<think>", "The tag that opens a completion's thinking block.")
    close: str = knob("</think>", "The tag that closes it.")
    budget: int = knob(
        -1, "Evaluation only: thinking tokens a completion may write inside its block; then `forced` is written and the "
        "model answers from there (budget forcing). -1 = no budget; 0 = answer at once."
    )
    forced: str = knob(
        "</think>", "What is written when the budget is spent: the closing tag, and optionally a cue before or after it "
        "(Qwen3: 'Considering the limited time by the user, I have to give the solution based on the thinking directly now.\n</think>.\n\n')."
    )

    def validate(self) -> None:
        _require(bool(self.open) and bool(self.close), "thinking.open", "and thinking.close must not be empty")
        _require(self.budget >= -1, "thinking.budget", "must be -1 (none) or >= 0")
        _require(self.close in self.forced, "thinking.forced", f"must contain the closing tag {self.close!r}, or the block never closes")

    def budget_forcing(self) -> BudgetForcing | None:
        """The thinking budget evaluation decodes under, or None (thinking.budget = -1)."""
        return BudgetForcing(self.open, self.close, self.forced, self.budget) if self.budget >= 0 else None


@dataclass
class DistillConfig:
    teacher: str = knob(
        "", "Teacher for the token-level term of SFT: a model directory, hub id or run (as `rlvr eval` takes one); `rlvr distill` sets it."
    )
    kl_coef: float = knob(
        0.0, "Weight of KL(teacher || student) over the vocabulary at each trace token, added to SFT's NLL (needs teacher "
        "and student to share a tokenizer); 0 = SFT on the verified traces only."
    )
    on_policy_coef: float = knob(
        0.0, "On-policy distillation (`rlvr distill --on-policy`): in RL, each sampled token's advantage gains coef x (log "
        "pi_teacher - log pi_student) of that token, the negative of its sampled reverse KL to distill.teacher (prime-rl's opd, "
        "Thinking Machines' on-policy distillation); the student learns where its own samples go wrong. Needs a shared "
        "tokenizer; 0 = off."
    )
    verifier_advantage: float = knob(
        1.0, "With distill.on_policy_coef > 0: the weight of the verifier's group advantage beside the teacher's per-token "
        "term; 0 = pure distillation (rewards are still computed and logged, and a completion with a missing reward still trains)."
    )

    def validate(self) -> None:
        _require(self.kl_coef >= 0.0, "distill.kl_coef", "must be >= 0")
        _require(self.kl_coef == 0.0 or bool(self.teacher), "distill.kl_coef", "is > 0 but distill.teacher names no teacher model")
        _require(self.on_policy_coef >= 0.0, "distill.on_policy_coef", "must be >= 0")
        _require(self.on_policy_coef == 0.0 or bool(self.teacher), "distill.on_policy_coef",
                 "is > 0 but distill.teacher names no teacher model")
        _require(self.verifier_advantage >= 0.0, "distill.verifier_advantage", "must be >= 0")


@dataclass
class EvalConfig:
    batch_size: int = knob(200, "Completions decoded at once: greedy prompts, or sampled prompts x eval.samples.")
    max_new_tokens: int = knob(64, "Longest held-out completion.")
    max_problems: int = knob(0, "Evaluate at most this many held-out problems (0 = all).")
    before_sft: bool = knob(
        False, "With a cold start (sft.steps > 0), also evaluate the starting model before it (eval_before_sft): what the "
        "cold start itself adds."
    )
    before_rl: bool = knob(True, "Evaluate the held-out problems before RL (after SFT when there is one): RL's gain is measured from it.")
    after_rl: bool = knob(True, "Evaluate the held-out problems after RL.")
    samples: int = knob(
        0, "N: completions sampled per held-out problem for pass@k, maj@k and mean@N (besides the greedy one); 0 = greedy "
        "accuracy only."
    )
    temperature: float = knob(1.0, "Sampling temperature of the eval.samples completions.")
    top_p: float = knob(1.0, "Nucleus sampling mass of the eval.samples completions (1.0 = off).")
    top_k: int = knob(0, "Top-k truncation of the eval.samples completions (0 = off).")
    min_p: float = knob(0.0, "Min-p truncation of the eval.samples completions (0 = off).")
    k: list[int] = knob([], "The k of pass@k and maj@k, each at most eval.samples; empty = powers of two up to eval.samples, and eval.samples.")
    bootstrap_rounds: int = knob(1000, "Bootstrap resamples of the problems for the 95% intervals.")
    tool_control: bool = knob(
        True, "Runs with tools (rollout.tools, rollout.environment): each evaluation also decodes the problems greedily with "
        "no tool offered (single-turn, the prompt without tools=), the control that says what the tools add (without_tools).",
    )
    every: int = knob(
        0, "During RL, evaluate the held-out split every N steps (greedy, and sampled when eval.samples > 0), logged as "
        "eval/* in metrics.jsonl and drawn with the reward curve; 0 = before and after RL only."
    )

    def validate(self) -> None:
        _require(self.batch_size > 0, "eval.batch_size", "must be > 0")
        _require(self.max_new_tokens > 0, "eval.max_new_tokens", "must be > 0")
        _require(self.max_problems >= 0, "eval.max_problems", "must be >= 0")
        _require(self.samples >= 0, "eval.samples", "must be >= 0")
        _require(self.bootstrap_rounds >= 1, "eval.bootstrap_rounds", "must be >= 1")
        self.sampling(stop=(), thinking=None)  # its own fields; rollout.stop and thinking.* are checked there
        _require(self.every >= 0, "eval.every", "must be >= 0")
        for i, k in enumerate(self.k):
            _require(k >= 1, f"eval.k[{i}]", f"must be >= 1, got {k}")
            _require(
                k <= self.samples, f"eval.k[{i}]",
                f"= {k} but eval.samples = {self.samples}: pass@k and maj@k need at least k samples per problem (raise eval.samples or drop k)",
            )

    def sampling(self, stop: list[str], thinking: ThinkingConfig | None) -> Sampling:
        """How the eval.samples completions are drawn (the greedy one: `.as_greedy()`), ending at rollout.stop
        as RL's rollouts do, under thinking.budget when one is set."""
        return _sampling("eval", {"stop": "rollout"}, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                         top_p=self.top_p, top_k=self.top_k, min_p=self.min_p, stop=stop,
                         budget=thinking.budget_forcing() if thinking is not None else None)

    def ks(self) -> list[int]:
        """The k values reported: eval.k, or powers of two up to eval.samples and eval.samples itself."""
        if self.k:
            return sorted(set(self.k))
        return default_ks(self.samples) if self.samples else []


@dataclass
class JudgeConfig:
    """[reward.judge]: the LLM judge that the reward.functions entry "judge" names (rlvr/verifiers/judge.py)."""

    url: str = knob(
        "", "OpenAI-compatible base URL of the judge's server, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama.cpp, a hosted API): "
        "each distinct row is one POST to <url>/chat/completions. Needed when reward.functions has 'judge'."
    )
    model: str = knob("", "The model the judge's server is asked for (the request's `model` field). Needed when reward.functions has 'judge'.")
    rubric: str = knob(
        "", "The judge's prompt, sent as one user message: a template whose placeholders {prompt}, {completion}, {answer} and "
        "{<any data field>} are filled per row ({{ and }} write literal braces; it must show {completion}), or the path of a file "
        "holding one (a value with no '{' and no line break is a path, read next to the config file when it is there). Needed when "
        "reward.functions has 'judge'."
    )
    parser: str = knob(
        "number", "How a reply becomes a score: 'number' (the last number in it; '7/10' and '7 out of 10' read 7), 'yes_no' "
        "(1 or 0: a reply that starts with yes or no, else its last yes or no), 'score_tag' (the last <score>x</score>), or "
        "'module:function' (reply text -> float | None). A reply it cannot read is a missing reward, never 0 "
        "(reward/judge/malformed)."
    )
    scale: list[float] = knob(
        [], "[low, high]: the range of the parser's number (the rubric's scale, e.g. [0, 10]), mapped linearly onto [0, 1]; a number "
        "outside it is a malformed reply. Empty: the number as read."
    )
    max_tokens: int = knob(512, "Most tokens the judge may write per reply (the request's max_tokens): room for its reasoning and the verdict.")
    temperature: float = knob(0.0, "The judge's sampling temperature (0: greedy, so a cached reply is the reply).")
    cache: str = knob(
        "", "A JSONL file of the judge's replies, keyed by a hash of the model, the rendered messages and the sampling settings: "
        "read at start and appended to (one line per reply, a torn last line skipped), so a resumed or repeated run asks "
        "nothing twice. Relative: from the working directory. Empty: no cache."
    )
    concurrency: int = knob(8, "Requests in flight at once (threads); a batch's identical rows are asked once.")
    timeout_s: float = knob(
        60.0, "Seconds a request may wait for the server (connecting, or between bytes of the reply); a row whose every try ran out "
        "is a missing reward counted in reward/judge/timeouts."
    )
    retries: int = knob(
        3, "Tries after the first, with exponential backoff (0.5 s, 1 s, 2 s, ...; a 429's Retry-After), on connection failures, "
        "timeouts, HTTP 5xx and 429; never on another 4xx. Counted in reward/judge/retries."
    )
    api_key_env: str = knob(
        "", "The name of an environment variable holding the API key, sent as 'Authorization: Bearer <key>' (the key itself never "
        "enters the config). Empty: no key."
    )

    def validate(self) -> None:
        from rlvr.verifiers.judge import PARSERS  # start-up time: it imports urllib and http.client, which only a judge needs

        _require(self.parser in PARSERS or (self.parser.count(":") == 1 and all(p.strip() for p in self.parser.split(":"))),
                 "reward.judge.parser", f"{self.parser!r} is neither a built-in parser {sorted(PARSERS)} nor 'module:function'")
        _require(not self.scale or (len(self.scale) == 2 and self.scale[0] < self.scale[1]), "reward.judge.scale",
                 f"{self.scale}: give [low, high] with low < high, or nothing")
        _require(self.max_tokens >= 1, "reward.judge.max_tokens", "must be >= 1")
        _require(self.temperature >= 0.0, "reward.judge.temperature", "must be >= 0")
        _require(self.concurrency >= 1, "reward.judge.concurrency", "must be >= 1")
        _require(self.timeout_s > 0, "reward.judge.timeout_s", "must be > 0")
        _require(self.retries >= 0, "reward.judge.retries", "must be >= 0")
        _require(not self.api_key_env or self.api_key_env.replace("_", "a").isalnum(), "reward.judge.api_key_env",
                 f"{self.api_key_env!r} is not an environment variable's name (the key itself does not belong in a config)")


@dataclass
class RewardConfig:
    functions: list[str] = knob(
        ["boxed_math"],
        "Reward terms: registered verifier names (rlvr.verifiers.registry.VERIFIERS, e.g. boxed_math; or one a module in reward.imports "
        "registers) or 'module:function' import paths. Per item f(completion, answer, **fields) -> float | None, or TRL-batched "
        "f(prompts, completions, **columns) -> list[float | None]: told apart by the parameter names (docs/verifiers.md). "
        "'reward_model:<where>': a sequence-classification reward model (one label) in a directory, a hub id or a run directory, "
        "scored in batches (reward.model_*; its metric name is reward_model; a module named reward_model is shadowed). "
        "'judge': an LLM judge over an OpenAI-compatible endpoint, set in [reward.judge] (its metric name is judge).",
    )
    weights: list[float] = knob([], "One weight per reward function (empty = all 1.0); the reward is the weighted sum.")
    route_field: str = knob(
        "verifier", "A row field naming the one reward term that judges the row (its name in reward.functions): on data that mixes "
        "kinds of problem (math, code, reasoning-gym tasks) a row is scored only by its own term, and the others do not "
        "count as missing. Rows without the field are scored by every term."
    )
    correctness: str = knob(
        "", "The term that judges correctness (held-out accuracy, dynamic sampling): an entry of reward.functions or its "
        "metric name; empty = the first."
    )
    imports: list[str] = knob(
        [], "Modules imported before reward.functions are resolved (in every worker too), so verifiers they register with "
        "@rlvr.verifiers.registry.register can be named, e.g. [\"mypkg.rewards\"]."
    )
    overlong_buffer_frac: float = knob(
        0.0, "DAPO soft overlong punishment over the last frac * max_new_tokens tokens (L_cache / L_max), as its own reward term; 0 = off."
    )
    overlong_penalty: float = knob(1.0, "Penalty at max_new_tokens for the overlong term (DAPO: 1.0).")
    aggregation: Literal["sum", "normalize_then_sum"] = knob(
        "sum", "How the terms make the reward RL trains on: their weighted sum; or, GDPO (TRL's multi_objective_aggregation = "
        "'normalize_then_sum'), each term normalised within its group first ((r - mean) / (std + 1e-4)), so a term with a "
        "small spread is not drowned by one with a large one (set algo.std_scale = 'batch' for TRL's batch scaling after)."
    )
    workers: int = knob(
        0, "Score registered verifiers in this many worker processes, each item under a hard timeout (a hung verifier is killed, "
        "its sample counted missing; their timing is logged as time/verify/<term>/*); 0 scores in the training process (fine for the "
        "bounded built-in math verifier)."
    )
    timeout_s: float = knob(
        10.0, "Per-item verification timeout in seconds when reward.workers > 0. A verifier with its own limit waits at least "
        "that long (python_code: 1.25 x its sandbox's 20 s + 1 s), and for python_code a timeout scores 0, not missing."
    )
    max_missing_frac: float = knob(
        0.5, "Stop the run when more than this share of a step's rewards are missing (no term scored the completion, or a term "
        "failed on it: error, timeout): a broken reward, not noise."
    )
    model_batch_size: int = knob(16, "Rows per forward pass of a reward_model:<where> term (micro-batches of each step's completions).")
    model_max_length: int = knob(
        0, "Tokens a reward_model:<where> term reads per row; a longer row keeps its last tokens (the completion). 0 = the model's "
        "own limit (the smaller of its position limit and its tokenizer's)."
    )
    model_device: str = knob(
        "auto", "Device of reward_model:<where> terms: 'auto' (cuda when the process sees a GPU, as the learner's; else cpu), "
        "'cpu', 'cuda' or 'cuda:N'."
    )
    model_dtype: Literal["float32", "bfloat16", "float16"] = knob("float32", "Parameter dtype of reward_model:<where> terms.")
    judge: JudgeConfig = section(JudgeConfig, "The LLM judge that the reward.functions entry 'judge' names (docs/verifiers.md).")

    def validate(self) -> None:
        from rlvr.verifiers.registry import VERIFIERS  # start-up time: the registry imports every built-in verifier
        from rlvr.verifiers.judge import is_judge  # start-up time, as PARSERS in JudgeConfig.validate
        from rlvr.verifiers.reward_model import NAME as REWARD_MODEL_NAME, is_reward_model, location

        _require(bool(self.functions), "reward.functions", "needs at least one reward function")
        for i, module in enumerate(self.imports):
            _require(all(part.isidentifier() for part in module.split(".")), f"reward.imports[{i}]", f"{module!r} is not a module name")
        for i, name in enumerate(self.functions):
            if is_reward_model(name):  # read before the module:function form (the contract reads it first too)
                _require(bool(location(name)), f"reward.functions[{i}]", f"{name!r} names no model: reward_model:<directory, hub id or run>")
                continue
            if is_judge(name):  # its settings are the [reward.judge] table: the ones it cannot do without must be there
                for key, what in (("url", "the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"),
                                  ("model", "the model the server is asked for"), ("rubric", "the judge's prompt template, or a file")):
                    _require(bool(getattr(self.judge, key).strip()), f"reward.judge.{key}",
                             f"is needed by reward.functions[{i}] = 'judge': {what}")
                continue
            is_path = name.count(":") == 1 and all(part.strip() for part in name.split(":"))
            # a name a module in reward.imports registers is known only once it is imported (rlvr.reward does that)
            ok = is_path or name in VERIFIERS or (bool(self.imports) and ":" not in name and bool(name.strip()))
            _require(ok, f"reward.functions[{i}]", f"{name!r} is neither a registered verifier {sorted(VERIFIERS)}, 'module:function', "
                     "'reward_model:<where>' nor 'judge'")
        self.judge.validate()
        _require(
            not self.weights or len(self.weights) == len(self.functions),
            "reward.weights",
            f"has {len(self.weights)} entries for {len(self.functions)} reward functions (give one per function, or none)",
        )
        names = {n for spec in self.functions
                 for n in (spec, REWARD_MODEL_NAME if is_reward_model(spec) else spec.rpartition(":")[2].rpartition(".")[2].strip())}
        _require(not self.correctness or self.correctness in names, "reward.correctness", f"{self.correctness!r} is none of reward.functions {self.functions}")
        _require(0.0 <= self.overlong_buffer_frac <= 1.0, "reward.overlong_buffer_frac", "must be in [0, 1]")
        _require(self.overlong_penalty >= 0.0, "reward.overlong_penalty", "must be >= 0")
        _require(0.0 <= self.max_missing_frac <= 1.0, "reward.max_missing_frac", "must be in [0, 1]")
        _require(self.workers >= 0, "reward.workers", "must be >= 0")
        _require(self.timeout_s > 0, "reward.timeout_s", "must be > 0")
        _require(self.model_batch_size >= 1, "reward.model_batch_size", "must be >= 1")
        _require(self.model_max_length >= 0, "reward.model_max_length", "must be >= 0 (0: the model's own limit)")
        _require(self.model_device == "auto" or self.model_device.split(":")[0] in ("cpu", "cuda", "mps", "xpu"), "reward.model_device",
                 f"{self.model_device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")


@dataclass
class MonitorConfig:
    enabled: bool = knob(True, "Log hack/* each step: detectors of known reward hacks on the completions trained on (rlvr/monitor.py).")
    compare_strict: bool = knob(
        True, "When the trained correctness term is not boxed_math, re-score math rows with it and log hack/proxy_minus_strict."
    )
    stop_on_hack: bool = knob(
        False, "Stop the run (after a checkpoint) when hack/proxy_minus_strict has grown: its moving average over monitor.window steps "
        "more than monitor.min_gap above the run's first window for monitor.patience steps in a row."
    )
    window: int = knob(10, "Steps in the moving average of hack/proxy_minus_strict that monitor.stop_on_hack compares with the run's first window.")
    patience: int = knob(5, "Steps in a row the averaged gap must stand above the start (by monitor.min_gap) before monitor.stop_on_hack stops the run.")
    min_gap: float = knob(0.1, "How far the averaged proxy-minus-strict gap must rise above the run's first window to count as grown.")

    def validate(self) -> None:
        _require(self.patience >= 1, "monitor.patience", "must be >= 1")
        _require(self.window >= 1, "monitor.window", "must be >= 1")


@dataclass
class DistributedConfig:
    backend: Literal["local", "ray"] = knob(
        "local", "'local': one process; 'ray': rollout workers and reward workers as Ray actors, the learner in this "
        "process (docs/distributed.md). Nothing of Ray is imported on the local backend."
    )
    address: str = knob("", "Ray cluster to join: empty starts a Ray instance on this machine; 'auto' or 'host:port' joins one.")
    rollout_workers: int = knob(2, "Rollout workers (Ray actors), each holding a copy of the policy and sampling a slice of every round.")
    rollout_engine: Literal["", "auto", "static", "transformers", "vllm", "vllm_server"] = knob(
        "", "What each rollout worker samples with (empty: rollout.engine): 'vllm' gives every worker an in-process vLLM "
        "engine of its own, sent each weight version the worker receives."
    )
    reward_workers: int = knob(1, "Reward workers (Ray actors) that verify completions as each rollout worker's slice arrives.")
    cpus_per_worker: float = knob(1.0, "CPUs Ray reserves for each rollout worker; its torch threads are this, rounded, at least 1.")
    gpus_per_worker: float = knob(0.0, "GPUs Ray reserves for each rollout worker (> 0: the worker samples on cuda).")
    cpus_per_reward_worker: float = knob(
        0.0, "CPUs Ray reserves for each reward worker (0: math verification is light; give sandboxed code verification CPUs)."
    )
    resources: dict[str, Any] = knob({}, "Custom Ray resources each rollout worker needs, e.g. {rollout = 1} to place them on nodes that advertise it.")
    mode: Literal["sync", "async"] = knob(
        "sync", "'sync': every round is sampled by the latest weights; 'async': the next rounds are sampled while the "
        "learner updates, by weights at most distributed.max_staleness updates old (correct with algo.tis_cap)."
    )
    max_staleness: int = knob(1, "Async mode: how many updates old the weights that sampled a batch may be (0 = the synchronous loop).")
    startup_timeout_s: float = knob(120.0, "Seconds to wait for the workers to come up before stopping with what the cluster lacks.")
    max_restarts: int = knob(
        3, "Times Ray restarts each worker that dies (its process killed, its node lost), redoing its unfinished calls, and "
        "times a run re-forms its learner ranks after one died (training on from the last checkpoint); -1 = always (a "
        "worker that crashes the same way every time then retries forever)."
    )
    learner_workers: int = knob(
        0, "Learner ranks (Ray actors forming one torch.distributed group) that hold and train the policy; 0: the learner "
        "stays in the driver process, as on the local backend (docs/distributed.md, 'The sharded learner')."
    )
    learner_strategy: Literal["fsdp", "ddp"] = knob(
        "fsdp", "How learner ranks split the model: 'fsdp' shards parameters, gradients and optimizer state per transformer "
        "block (torch FSDP2, fully_shard); 'ddp' keeps a whole copy on each rank and sums gradients in rank order."
    )
    cpus_per_learner: float = knob(1.0, "CPUs Ray reserves for each learner rank; its torch threads are this, rounded, at least 1.")
    gpus_per_learner: float = knob(0.0, "GPUs Ray reserves for each learner rank (> 0: the rank trains on cuda, its group uses NCCL).")
    learner_resources: dict[str, Any] = knob(
        {}, "Custom Ray resources each learner rank needs, e.g. {learner = 1} to place the ranks on nodes that advertise it."
    )
    learner_offload: bool = knob(
        False, "FSDP only: keep the ranks' parameter shards, gradients and optimizer state in host memory (FSDP2's "
        "CPUOffloadPolicy; the optimizer steps on the CPU), trading step time for device memory."
    )
    weight_sync: Literal["auto", "collective", "object_store"] = knob(
        "auto", "How updated weights reach the rollout workers: 'collective' broadcasts them parameter by parameter through a "
        "process group of the learner (the driver's, or learner rank 0, which gathers each sharded parameter as it sends "
        "it) and every rollout worker; 'object_store' puts them into Ray's object store once; 'auto': collective for "
        "synchronous rollout workers on GPUs fed by a learner on GPUs (NCCL), else the object store (faster on CPU, "
        "where gloo goes over TCP; docs/distributed.md). Collective cannot serve async rounds in flight (max_staleness > 0)."
    )
    device_memory_gb: float = knob(
        0.0, "Memory of one learner device in GiB, for the plan's check (rlvr train --dry-run): 0 takes the device's own "
        "(a GPU's total memory) and checks nothing on CPU."
    )
    sync_bandwidth_gbs: float = knob(
        10.0, "GB/s the plan assumes for the weight broadcast to rollout workers (its estimated sync time; measured figures "
        "in docs/distributed.md)."
    )

    def validate(self) -> None:
        _require(self.rollout_workers >= 1, "distributed.rollout_workers", "must be >= 1")
        _require(self.reward_workers >= 1, "distributed.reward_workers", "must be >= 1")
        _require(self.cpus_per_worker >= 0 and self.gpus_per_worker >= 0 and self.cpus_per_reward_worker >= 0,
                 "distributed.cpus_per_worker", "CPUs and GPUs per worker must be >= 0")
        _require(self.max_staleness >= 0, "distributed.max_staleness", "must be >= 0")
        _require(self.startup_timeout_s > 0, "distributed.startup_timeout_s", "must be > 0")
        _require(self.max_restarts >= -1, "distributed.max_restarts", "must be >= 0, or -1 (always)")
        bad = {k: v for k, v in self.resources.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0}
        _require(not bad, "distributed.resources", f"amounts must be numbers >= 0, got {bad}")
        bad = {k: v for k, v in self.learner_resources.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0}
        _require(not bad, "distributed.learner_resources", f"amounts must be numbers >= 0, got {bad}")
        reserved = sorted(k for k in self.learner_resources if k in ("CPU", "GPU", "memory", "object_store_memory"))
        _require(not reserved, "distributed.learner_resources", f"{reserved} are set by cpus_per_learner and gpus_per_learner (or by "
                 "Ray itself); name only custom resources here")
        _require(self.learner_workers >= 0, "distributed.learner_workers", "must be >= 0 (0: the learner stays in the driver)")
        _require(self.cpus_per_learner >= 0 and self.gpus_per_learner >= 0, "distributed.cpus_per_learner",
                 "CPUs and GPUs per learner rank must be >= 0")
        _require(not (self.learner_offload and self.learner_strategy != "fsdp"), "distributed.learner_offload",
                 "offloads FSDP's shards; it needs distributed.learner_strategy = 'fsdp'")
        _require(self.device_memory_gb >= 0, "distributed.device_memory_gb", "must be >= 0 (0: the device's own)")
        _require(self.sync_bandwidth_gbs > 0, "distributed.sync_bandwidth_gbs", "must be > 0")
        _require(not (self.weight_sync == "collective" and self.mode == "async" and self.max_staleness > 0), "distributed.weight_sync",
                 "= 'collective' cannot serve async mode with max_staleness > 0: a broadcast needs every rollout worker at once, so "
                 "the learner would wait for the rounds in flight, the overlap async mode exists for; use 'object_store' or 'auto'")


@dataclass
class Config:
    run: RunConfig = section(RunConfig, "Where and how the run executes.")
    model: ModelConfig = section(ModelConfig, "The policy model.")
    data: DataConfig = section(DataConfig, "Where problems come from.")
    task: TaskConfig = section(TaskConfig, "The built-in arithmetic task.")
    sft: SFTConfig = section(SFTConfig, "Cold-start supervised fine-tuning.")
    rollout: RolloutConfig = section(RolloutConfig, "Sampling completions from the policy.")
    reward: RewardConfig = section(RewardConfig, "Scoring completions.")
    algo: AlgoConfig = section(AlgoConfig, "Advantages and the policy loss.")
    train: TrainConfig = section(TrainConfig, "The RL optimiser and loop.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "Checkpoints and resuming.")
    eval: EvalConfig = section(EvalConfig, "Held-out evaluation.")
    rft: RFTConfig = section(RFTConfig, "Rejection sampling: verified completions of a model as SFT data (`rlvr rft`, `rlvr distill`).")
    distill: DistillConfig = section(DistillConfig, "Distillation: the teacher's token-level term in SFT, and on-policy distillation in RL.")
    thinking: ThinkingConfig = section(ThinkingConfig, "Thinking blocks: their tags, and a thinking budget at evaluation.")
    distributed: DistributedConfig = section(DistributedConfig, "Scale-out: where rollouts and verification run (local, or Ray workers).")
    monitor: MonitorConfig = section(MonitorConfig, "The live reward-hacking monitor: hack/* metrics, and stopping on a hack.")

    def validate(self, for_training: bool = True) -> "Config":
        """Check every field and the settings that contradict each other. `for_training=False`
        (reading a finished run's config, e.g. to export it) skips the checks that only guard a
        run about to train."""
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate()
        _check_choices(self)
        surrogates = _registry_of("rlvr.algorithms.surrogate:SURROGATES")
        _require(
            self.algo.dual_clip == 0.0 or surrogates.trait(self.algo.surrogate, "dual_clip", False),
            "algo.dual_clip",
            f"caps the clipped-ratio loss; algo.surrogate = {self.algo.surrogate!r} does not support it (those that do: "
            f"{[name for name in surrogates if surrogates.trait(name, 'dual_clip', False)]}); set it to 0",
        )
        _require(
            not (self.rollout.multi_turn and self.thinking.budget >= 0), "thinking.budget",
            "cannot be combined with tools (rollout.tools / rollout.environment): a budget counts one turn's thinking tokens, a "
            "conversation has several turns; evaluate tool runs without a budget",
        )
        _require(self.algo.pass_at_k <= self.rollout.group_size, "algo.pass_at_k",
                 f"= {self.algo.pass_at_k} needs at least that many samples per prompt (rollout.group_size = {self.rollout.group_size})")
        if self.distill.on_policy_coef > 0:  # the teacher's term is per token: settings that cannot carry it are refused
            _require(self.algo.ratio_level == "token", "algo.ratio_level",
                     "= 'sequence' (GSPO) gives every token of a completion one ratio, so the teacher's per-token advantages "
                     "would push every token alike: use algo.ratio_level = 'token' with distill.on_policy_coef > 0")
            pure = self.distill.verifier_advantage == 0
            _require(not (pure and self.algo.dynamic_sampling), "algo.dynamic_sampling",
                     "drops groups whose verifier scores are all equal, but with distill.verifier_advantage = 0 the teacher teaches "
                     "every completion: set algo.dynamic_sampling = false")
            _require(not (pure and self.algo.beta > 0 and self.algo.kl_in == "reward"), "algo.kl_in",
                     "= 'reward' subtracts the KL from the rewards, which distill.verifier_advantage = 0 leaves out of the "
                     "advantages: use algo.kl_in = 'loss'")
        _require(
            not (self.rollout.multi_turn and self.distributed.backend == "ray" and self.distributed.mode == "async"
                 and self.distributed.max_staleness > 0), "distributed.mode",
            "= 'async' cannot start tool rounds ahead yet: rounds in flight are saved in checkpoints as tensors, and a "
            "conversation's environments are Python objects; use distributed.mode = 'sync' with rollout.tools",
        )
        # Settings that are valid alone but contradict each other: say which and why.
        _require(
            not (self.data.skip_solved_rate > 0 and self.distributed.mode == "async" and self.distributed.max_staleness > 0),
            "data.skip_solved_rate", "cannot be used with asynchronous rollouts (distributed.mode = 'async', max_staleness > 0): the "
            "rounds started ahead would be chosen before the pass rates that decide them are known",
        )
        _require(
            not (self.distributed.backend == "ray" and self.rollout.seeding == "stream"), "rollout.seeding",
            "= 'stream' cannot be split across Ray rollout workers (one stream would depend on the split); use 'group' or 'auto'",
        )
        if for_training and self.distributed.backend == "local":
            _check_ray_only_settings(self.distributed)
        worker_engine = (self.distributed.rollout_engine or self.rollout.engine) if self.distributed.backend == "ray" else ""
        _require(
            worker_engine != "vllm_server" or self.distributed.rollout_workers == 1, "distributed.rollout_workers",
            f"= {self.distributed.rollout_workers} rollout workers cannot share one vLLM server (rollout.server_url): each would "
            "push its weights to it and take the weight group from the others; use 1 worker, or distributed.rollout_engine = 'vllm' "
            "(an engine in each worker)",
        )
        _require(
            not (worker_engine == "vllm_server" and self.rollout.engine == "vllm_server"), "rollout.engine",
            "= 'vllm_server' with Ray rollout workers on the same server: the driver's evaluation and the worker would both push "
            "weights to it; set distributed.rollout_engine = 'vllm_server' and rollout.engine = 'auto' (the driver evaluates on "
            "rlvr's engine) or 'vllm'",
        )
        _require(
            not {self.rollout.engine, worker_engine} & {"vllm_server"} or bool(self.rollout.server_url), "rollout.server_url",
            "is empty: the 'vllm_server' engine samples through a server started by `rlvr serve` (docs/vllm.md)",
        )
        engines = {self.rollout.engine, self.distributed.rollout_engine if self.distributed.backend == "ray" else ""}
        _require(
            self.thinking.budget < 0 or not engines & {"vllm", "vllm_server"}, "thinking.budget",
            f"= {self.thinking.budget} cannot be enforced by a vLLM engine (rollout.engine = {self.rollout.engine!r}): vLLM's "
            "thinking_token_budget needs a reasoning parser and does not write thinking.forced; evaluate with rollout.engine = 'auto'",
        )
        _require(
            not (self.sft.save_model and self.sft.steps == 0), "sft.save_model", "is true but sft.steps = 0: there is no SFT model to save"
        )
        _require(
            not (self.checkpoint.auto_resume and not self.run.output_dir),
            "checkpoint.auto_resume",
            "needs a fixed run.output_dir: without one every run gets a new timestamped directory and has nothing to resume",
        )
        if not self.model.path:  # the tiny lab model has a fixed context: prompt + completion must fit
            longest_prompt = len(self.task.prompt_template.replace("{expr}", "")) + 2 * self.task.max_ops + 1 + (
                (self.task.max_ops + 1) * (len(str(self.task.max_operand)) - 1)
            ) + (len(" /no_think") if self.task.format == "fused" else 0)
            longest = longest_prompt + max(self.rollout.max_new_tokens, self.eval.max_new_tokens)
            _require(
                longest <= self.model.tiny.max_positions,
                "model.tiny.max_positions",
                f"= {self.model.tiny.max_positions} but a prompt of up to {longest_prompt} tokens plus "
                f"{max(self.rollout.max_new_tokens, self.eval.max_new_tokens)} new tokens needs {longest}; "
                "raise it or lower rollout/eval max_new_tokens",
            )
        if for_training and self.run.trackers:
            missing = missing_trackers(self.run.trackers)
            _require(not missing, "run.trackers", f"names trackers that are not installed: {'; '.join(missing)}")
        trains_full_weights = for_training and (self.sft.steps > 0 or (self.train.steps > 0 and self.model.lora_rank == 0))
        _require(
            self.run.dtype == "float32" or not trains_full_weights,
            "run.dtype",
            f"= {self.run.dtype} would train full {self.run.dtype} weights, and AdamW updates smaller than the weights' "
            "resolution (1/256 of a weight in bf16: a 1e-6 learning rate does nothing) are rounded away; use "
            "run.dtype=float32 with run.autocast=bfloat16 (bf16 compute, fp32 weights), or train LoRA adapters (model.lora_rank > 0)"
            + (" and sft.steps=0 (SFT trains full weights)" if self.sft.steps > 0 and self.model.lora_rank > 0 else ""),
        )
        if self.reward.overlong_buffer_frac > 0:
            _require(
                round(self.reward.overlong_buffer_frac * self.rollout.max_new_tokens) >= 1,
                "reward.overlong_buffer_frac",
                f"covers no token of rollout.max_new_tokens = {self.rollout.max_new_tokens}",
            )
        return self


# ----------------------------------------------------------------------------- loading


def _sampling(section: str, borrowed: dict[str, str], **settings: Any) -> Sampling:
    """A section's Sampling; a value out of range is a ConfigError naming the key the user wrote
    (`borrowed`: the fields this section takes from another, e.g. eval's stop strings are rollout.stop)."""
    try:
        return Sampling(**settings)
    except InvalidSampling as err:
        field = err.field.split("[")[0]
        raise ConfigError(f"{borrowed.get(field, section)}.{err.field}: {err.why}") from None


def _require(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {why}")


def _check_ray_only_settings(dist: DistributedConfig) -> None:
    """On the local backend one process samples and learns in turn, so the settings that change
    how or by whom a round is sampled would be ignored; a user who set them expects them to act.
    Refused when set away from their defaults (the resource settings stay harmless)."""
    default = DistributedConfig()
    for name, effect in (("mode", "sampling ahead of the learner"), ("max_staleness", "how stale async samples may be"),
                         ("rollout_workers", "how many workers sample"), ("learner_workers", "learner ranks on Ray actors"),
                         ("weight_sync", "how weights reach Ray's rollout workers")):
        value = getattr(dist, name)
        _require(
            value == getattr(default, name), f"distributed.{name}",
            f"= {value!r} sets {effect}, which only Ray's rollout workers do; the local backend (distributed.backend = 'local') "
            "would ignore it: set distributed.backend = 'ray', or leave it out",
        )


def _check_choices(obj: Any, prefix: str = "") -> None:
    """Every registry-backed field holds a registered name (also when set from Python, not a file)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            _check_choices(value, f"{prefix}{f.name}.")
        else:
            _check_choice(f, value, f"{prefix}{f.name}")


def _coerce(value: Any, annotation: Any, name: str) -> Any:
    """Check one TOML value against a field's annotation; ints widen to floats, nothing else."""
    origin = typing.get_origin(annotation)
    if origin is dict:  # a table of template variables: string keys, scalar (or list-of-scalar) values
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a table such as {{key = value}}, got {value!r}")
        for key, item in value.items():
            scalars = (str, int, float, bool)
            if not (isinstance(item, scalars) or (isinstance(item, list) and all(isinstance(v, scalars) for v in item))):
                raise ConfigError(f"{name}.{key}: expected a string, number, boolean or a list of them, got {item!r}")
        return dict(value)
    if origin is list:
        if isinstance(value, str) and typing.get_args(annotation) == (str,):
            value = [value]  # `reward.functions=boxed_math` on the command line means a list of one
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        (item,) = typing.get_args(annotation)
        return [_coerce(v, item, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {list(choices)}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{name}: unsupported field type {annotation!r}")  # pragma: no cover


def _apply(obj: Any, table: dict[str, Any], prefix: str) -> None:
    """Write a (nested) TOML table onto a dataclass instance, rejecting unknown keys and values a
    registry does not know."""
    hints = typing.get_type_hints(type(obj))
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(f"{name}: unknown key{_suggest(key, set(fields), prefix)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: expected a table of settings, got {value!r}")
            _apply(current, value, f"{name}.")
        else:
            value = _coerce(value, hints[key], name)
            _check_choice(fields[key], value, name)
            setattr(obj, key, value)


def _check_choice(f: dataclasses.Field, value: Any, name: str) -> None:
    if "choices" in f.metadata:
        names = list(_registry_of(f.metadata["choices"]))
        if value not in names:
            raise ConfigError(f"{name}: {value!r} is not one of {names}")


RENAMED = {"reward.verifier": "reward.functions (a list: [\"boxed_math\"])"}


def _suggest(key: str, names: set[str], prefix: str) -> str:
    """' (did you mean X?)' for a typo, the new name for a renamed key, else the known keys."""
    if f"{prefix}{key}" in RENAMED:
        return f"; it is now {RENAMED[prefix + key]}"
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {prefix}{close[0]}?)"
    return f" (known: {', '.join(sorted(names))})"


def _parse_override(text: str) -> tuple[list[str], Any]:
    """`algo.beta=0.04` -> (['algo', 'beta'], 0.04). Values are TOML; bare words are strings."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: bad key {key!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word such as `algo.baseline=leave_one_out`
    return key.split("."), value


def _annotation_at(cfg: Config, keys: list[str]) -> Any:
    """The declared type of a dotted field, or None when the path does not name a leaf."""
    obj: Any = cfg
    for key in keys[:-1]:
        obj = getattr(obj, key, None)
        if not dataclasses.is_dataclass(obj):
            return None
    if not dataclasses.is_dataclass(obj):
        return None
    return typing.get_type_hints(type(obj)).get(keys[-1])


PRESET_DIR = Path(__file__).parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def read_toml(path: str | os.PathLike, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML: {err}") from None


def _preset_table(preset: str) -> dict[str, Any]:
    """The settings of a named preset (rlvr/presets/NAME.toml) or of a preset file given by path."""
    path = PRESET_DIR / f"{preset}.toml"
    if not path.exists():
        if not preset.endswith(".toml"):
            raise ConfigError(f"algo.preset: unknown preset {preset!r} (named presets: {', '.join(preset_names())}; or a path to a .toml file)")
        path = Path(preset)
    table = read_toml(path, "preset file")
    if "preset" in table.get("algo", {}):
        raise ConfigError(f"{path}: a preset cannot name another preset (algo.preset)")
    return table


def load_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    for_training: bool = True,
    tables: list[tuple[str, dict[str, Any]]] | None = None,
) -> Config:
    """Defaults <- preset <- TOML file <- `tables` <- dotted overrides, then validate (`Config.validate`).

    `tables` are more layers of nested settings, each with where it came from for error messages
    (a recipe's defaults and a stage's settings, their paths already resolved: `resolve_input_paths`).
    A preset (`algo.preset`, in any layer; the last one given wins) is applied under everything
    else, so any setting, before or after it, refines it. Raises ConfigError naming the field.
    """
    layers: list[tuple[str, dict[str, Any]]] = []  # (where it came from, nested table)
    if path is not None:  # its relative input paths mean paths next to it (rlvr.config_paths); the overrides' do not
        layers.append((f"{path}: ", resolve_input_paths(read_toml(path, "config file"), Path(path).parent)))
    layers.extend(tables or [])
    probe = Config()
    for text in overrides or []:
        keys, value = _parse_override(text)
        if _annotation_at(probe, keys) is str and not isinstance(value, str):
            value = text.split("=", 1)[1].strip()  # `run.output_dir=2024-01-01` is a path, not a date
        nested: dict[str, Any] = {keys[-1]: value}
        for part in reversed(keys[:-1]):
            nested = {part: nested}
        layers.append(("", resolve_input_paths(nested, Path.cwd())))  # a shell user's path means one from here: made absolute

    cfg = Config()
    presets = [t["algo"]["preset"] for _, t in layers if isinstance(t.get("algo"), dict) and "preset" in t["algo"]]
    if presets and isinstance(presets[-1], str) and presets[-1]:
        table = _preset_table(presets[-1])
        try:
            _apply(cfg, table, "")
        except ConfigError as err:
            raise ConfigError(f"preset {presets[-1]!r}: {err}") from None
    for where, table in layers:
        try:
            _apply(cfg, table, "")
        except ConfigError as err:
            raise ConfigError(f"{where}{err}") from None
    return cfg.validate(for_training)


def with_overrides(cfg: Config, overrides: list[str], for_training: bool = True) -> Config:
    """A copy of `cfg` with dotted overrides applied (as on the command line), validated."""
    import copy

    out = copy.deepcopy(cfg)
    for text in overrides:
        keys, value = _parse_override(text)
        if _annotation_at(out, keys) is str and not isinstance(value, str):
            value = text.split("=", 1)[1].strip()
        nested: dict[str, Any] = {keys[-1]: value}
        for part in reversed(keys[:-1]):
            nested = {part: nested}
        _apply(out, nested, "")
    return out.validate(for_training)


# ----------------------------------------------------------------------------- saving


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):  # an inline table; keys quoted (a JSON string is a TOML basic string)
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    # A JSON string is a valid TOML basic string, provided non-ASCII characters are written as
    # themselves: json's \ud83d\ude00 surrogate escapes are not valid TOML.
    # DEL (U+007F) is the one control character json leaves raw and TOML forbids.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def to_toml(obj: Any, prefix: str = "") -> str:
    """Serialise a config tree; scalars first, then sub-tables (TOML requires that order).

    Written by hand because the tree holds only scalars and tables: a TOML-writer dependency
    would buy nothing here. The round trip is tested (load(save(cfg)) == cfg).
    """
    lines, tables = [], []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            tables.append((f.name, value))
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for name, value in tables:
        out += f"\n[{prefix}{name}]\n" + to_toml(value, f"{prefix}{name}.")
    return out


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    atomic_write_text(Path(path), to_toml(cfg).lstrip("\n"))


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted name: value} for every leaf field of a config tree."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(flatten(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def field_help(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted name, default, help) for every leaf field: the CLI's `rlvr config` listing."""
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows += field_help(type(default), f"{prefix}{f.name}.")
        else:
            help_text = f.metadata.get("help", "")
            if "choices" in f.metadata:
                help_text += " One of: " + _registry_of(f.metadata["choices"]).describe() + "."
            rows.append((f"{prefix}{f.name}", _toml_value(default), help_text))
    return rows
