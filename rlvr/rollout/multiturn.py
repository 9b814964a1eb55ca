"""Multi-turn rollouts: the model calls tools, reads their results, and goes on until it answers.

With `rollout.tools` or `rollout.environment(s)` set (TRL's `tools` and `environment_factory`),
every sampler is wrapped in a `ToolSampler`. Per rollout it:

1. makes a fresh environment instance (isolation: no state written by one rollout is ever seen by
   another), calls `reset(**row)` and appends any text it returns to the last user message;
2. renders the prompt through the chat template with `tools=` (the standalone tools plus the
   environment's public methods: their schemas from type hints and docstrings);
3. samples a turn on the inner sampler (rlvr's engine or vLLM: `sample_ids`, one path), parses
   its tool calls (rollout.tool_format), runs them (rollout/tools.py: timeouts, output caps, every
   failure a message to the model and a counted outcome), renders their results as `tool`
   messages and appends those tokens;
4. samples the next turn from exactly the tokens it holds (never re-tokenized text), until a turn
   makes no call, rollout.max_turns turns were taken, or rollout.max_new_tokens (the budget of the
   whole conversation after the prompt) runs out.

The result is one `Rollouts` row per conversation: the prompt, then every turn's sampled tokens
and the tool results between them. `completion_mask_BT` marks the sampled tokens only (the loss,
the KL and every per-token metric see those), `context_mask_BT` every real token (the model
attends to the tool results), and `sample_logp_BT` holds each sampled token's log-prob. `texts`
are the model's own words (tool results are never judged as the model's); the whole conversation
travels beside them (`ToolTrace`) for reward functions that read messages, for the report, and
for the tools/* metrics.

Seeding: turn 1 draws from the group's generator as a single-turn rollout does; each later turn
(and a first turn whose prompts differ within a group) draws each row from a child generator seeded
from its own group's stream, so a conversation depends on its own group's seed alone, never on
which other rows share the batch (Ray's slices) or how long their budgets are.
"""

from __future__ import annotations

import copy
import importlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.config import ConfigError, DataConfig
from rlvr.data import Example, chat_template_text, prompt_messages
from rlvr.rollout.generate import Rollouts
from rlvr.rollout.sampler import Completions
from rlvr.rollout.tools import OUTCOMES, TOOL_FORMATS, TOOL_WRITERS, Tool, ToolResult, environment_tools, load_tools, run_call
from rlvr.verifiers.contract import example_fields

STOPS = ("answer", "turn_limit", "budget")  # why a conversation ended: no call; a call in the last allowed turn; out of tokens


@dataclass(frozen=True)
class ToolSettings:
    """What a multi-turn rollout may do (the rollout.tools* / environment* fields)."""

    tools: tuple[str, ...] = ()
    environment: str = ""
    environments: tuple[tuple[str, str], ...] = ()  # (name, factory spec), routed by environment_field
    environment_field: str = "environment"
    max_turns: int = 4
    timeout_s: float = 10.0
    max_chars: int = 2000
    format: str = "hermes"

    @classmethod
    def from_config(cls, rollout: Any) -> ToolSettings | None:
        """None when the run has no tools (single-turn rollouts)."""
        if not rollout.multi_turn:
            return None
        return cls(tuple(rollout.tools), rollout.environment, tuple(sorted(rollout.environments.items())), rollout.environment_field,
                   rollout.max_turns, rollout.tool_timeout_s, rollout.tool_max_chars, rollout.tool_format)


def import_factory(spec: str, where: str) -> Callable[[], Any]:
    """An environment class or factory named "package.module:Name"."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's to fix
        raise ConfigError(f"{where}: cannot import {module_name!r} ({spec!r}): {type(err).__name__}: {err}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"{where}: {spec!r} names no class or function in {module_name!r}")
    return factory


def _probe(factory: Callable[[], Any], name: str) -> Any:
    try:
        return factory()
    except Exception as err:  # noqa: BLE001 - a user's factory may fail in any way
        where = f"rollout.environments.{name}" if name else "rollout.environment"
        raise ConfigError(f"{where}: building an environment failed: {type(err).__name__}: {err}") from None


# ---------------------------------------------------------------------------------------------
# One conversation


@dataclass
class Conversation:
    """One rollout's state: what it started from and everything after its prompt."""

    prompt_messages: list[dict[str, Any]]
    prompt_text: str
    prompt_ids: list[int]
    tools: dict[str, Tool]
    environment: Any = None
    environment_name: str | None = None
    ids: list[int] = field(default_factory=list)  # every token after the prompt
    sampled: list[int] = field(default_factory=list)  # 1 where the policy sampled the token
    logp: list[float] = field(default_factory=list)  # the sampling log-prob (0 on tokens it did not sample)
    messages: list[dict[str, Any]] = field(default_factory=list)  # the completion as chat messages
    texts: list[str] = field(default_factory=list)  # each turn's sampled text
    results: list[ToolResult] = field(default_factory=list)
    turns: int = 0
    truncated: bool = False
    stop: str = ""

    def add_turn(self, ids: list[int], logp: list[float]) -> None:
        self.ids += ids
        self.sampled += [1] * len(ids)
        self.logp += logp
        self.turns += 1

    def add_context(self, ids: list[int]) -> None:
        self.ids += ids
        self.sampled += [0] * len(ids)
        self.logp += [0.0] * len(ids)


@dataclass
class ToolTrace:
    """What the conversations of a batch did, row for row (beside their Rollouts and texts)."""

    conversations: list[list[dict[str, Any]]]  # each row's completion as messages: assistant (tool_calls), tool, ...
    prompt_messages: list[list[dict[str, Any]]]  # each row's prompt messages, an environment's reset text included
    results: list[list[ToolResult]]  # each row's tool calls, in order
    turns: list[int]
    stops: list[str]  # STOPS
    prompts: list[str]  # each row's prompt text, rendered with its tools
    environments: list[Any] | None = None  # each row's environment instance (None: the run has none)
    environment_names: list[str | None] | None = None
    # Not per row: the run's environment classes that define get_reward (each a reward term in every step, whichever
    # environments a step's rows happen to use).
    reward_kinds: tuple[str, ...] = ()

    def select(self, rows: list[int]) -> ToolTrace:
        def pick(items):
            return [items[i] for i in rows] if isinstance(items, list) else items
        return ToolTrace(*(pick(getattr(self, f.name)) for f in fields(self)))

    @staticmethod
    def concat(parts: list[ToolTrace]) -> ToolTrace:
        def join(name):
            values = [getattr(p, name) for p in parts]
            if name == "reward_kinds":
                return tuple(dict.fromkeys(k for v in values for k in v))
            return None if any(x is None for x in values) else [v for x in values for v in x]
        return ToolTrace(*(join(f.name) for f in fields(ToolTrace)))

    def call_records(self) -> list[list[dict[str, Any]]]:
        """Each row's calls as plain data (the `tool_calls` column reward functions may read)."""
        return [[{"name": r.name, "arguments": r.arguments, "outcome": r.outcome} for r in row] for row in self.results]

    def metrics(self) -> dict[str, float]:
        """tools/*: calls per rollout, the share of rollouts that called at all, each outcome's count, model turns per
        rollout, conversations ended by the turn limit or the budget; and time/tools, the seconds spent in tools (a
        clock, not a count: it differs run to run)."""
        n = max(len(self.results), 1)
        calls = [len(r) for r in self.results]
        out = {"tools/calls": sum(calls) / n, "tools/call_rate": sum(c > 0 for c in calls) / n,
               "tools/turns": sum(self.turns) / n}
        for outcome in OUTCOMES:
            out[f"tools/{outcome}"] = sum(r.outcome == outcome for row in self.results for r in row)
        out["tools/failed_frac"] = (sum(r.outcome not in ("ok", "truncated") for row in self.results for r in row)
                                    / max(sum(calls), 1))
        for stop in ("turn_limit", "budget"):
            out[f"tools/{stop}"] = sum(s == stop for s in self.stops)
        out["time/tools"] = sum(r.seconds for row in self.results for r in row)
        return out


def merged_tool_metrics(traces: list[ToolTrace | None]) -> dict[str, float]:
    present = [t for t in traces if t is not None]
    return ToolTrace.concat(present).metrics() if present else {}


# ---------------------------------------------------------------------------------------------
# The chat template's pieces


def _strip_calls(text: str, calls: list) -> str:
    """A turn's text without the blocks of its parsed calls (TRL's content beside tool_calls): a call that did not
    parse stays in the text, so the conversation shows what the model wrote."""
    for call in calls:
        if call.error is None and call.text:
            text = text.replace(call.text, "", 1)
    return text.strip()


class ToolRenderer:
    """A run's tools and environments, and how its chat template writes a conversation in tokens: what
    sampling (`ToolSampler`) and SFT on tool traces (`sft_pair`) share, so both lay a conversation
    out token for token the same."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, settings: ToolSettings, data_cfg: DataConfig) -> None:
        self.tokenizer, self.settings, self.data_cfg = tokenizer, settings, data_cfg
        self.tools = load_tools(list(settings.tools))
        factories = [("", settings.environment)] if settings.environment else list(settings.environments)
        self.factories = {name: import_factory(spec, f"rollout.environments.{name}" if name else "rollout.environment")
                          for name, spec in factories}
        # One instance of each, as TRL probes them at start: a factory that cannot build one fails now, not mid-run,
        # and the classes whose get_reward is a reward term are known before any row uses them.
        kinds = {name: type(_probe(factory, name)) for name, factory in self.factories.items()}
        self.reward_kinds = tuple(dict.fromkeys(k.__name__ for k in kinds.values() if callable(getattr(k, "get_reward", None))))
        self.parse, self.write = TOOL_FORMATS[settings.format], TOOL_WRITERS.get(settings.format)
        self.template = chat_template_text(data_cfg)
        if not (self.template or getattr(tokenizer, "chat_template", None)):
            raise ConfigError("rollout.tools: tool calls need a chat template (tools=, tool messages); this tokenizer has none: set "
                              "data.chat_template to a template file that renders tools")
        self._suffixes: dict[str, list[int]] = {}

    def _render(self, messages: list[dict[str, Any]], tools: list[Tool], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=[t.schema for t in tools] or None, tokenize=False,
                                                  add_generation_prompt=generation_prompt, chat_template=self.template,
                                                  **self.data_cfg.chat_template_kwargs)

    def tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        """The tokens of `tool_messages` and the next assistant turn's header, as the template writes them after an
        assistant turn that ended on EOS: the difference between a dummy conversation rendered with and without them
        (TRL's method), cut after the dummy's last EOS, which the model sampled itself."""
        key = repr(tool_messages)
        if key not in self._suffixes:
            calls = [{"type": "function", "function": {"name": tool_messages[0].get("name") or "tool", "arguments": {}}}]
            dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
            before = self._render(dummy, [], generation_prompt=False)
            after = self._render(dummy + tool_messages, [], generation_prompt=True)
            eos = self.tokenizer.eos_token or ""
            cut = before.rfind(eos) + len(eos) if eos and eos in before else len(before)
            if not after.startswith(before[:cut]):
                raise ConfigError("the chat template does not render a conversation's start the same once tool messages follow: "
                                  "multi-turn rollouts need a prefix-preserving template (data.chat_template)")
            self._suffixes[key] = self.tokenizer.encode(after[cut:], add_special_tokens=False)
            if len(self._suffixes) > 4096:  # tool results rarely repeat; keep the memory bounded
                self._suffixes.clear()
                return self.tool_suffix_ids(tool_messages)
        return self._suffixes[key]

    def start(self, example: Example) -> Conversation:
        """A rollout's fresh environment, reset with its row, and its prompt rendered with its tools."""
        messages = [dict(m) for m in prompt_messages(example, self.data_cfg)]
        env, env_name = None, None
        if self.factories:
            env_name = "" if "" in self.factories else example.info.get(self.settings.environment_field)
            if env_name not in self.factories:
                raise ConfigError(f"a row names environment {env_name!r} in field {self.settings.environment_field!r}; "
                                  f"rollout.environments has {sorted(self.factories)}")
            env = self.factories[env_name]()
            row = {"prompt": copy.deepcopy(messages), "answer": example.answer, **example_fields(example)}  # its own: rlvr edits `messages`
            if env_name:
                row.pop(self.settings.environment_field, None)
            observation = env.reset(**row)
            if isinstance(observation, str) and observation:
                messages[-1] = {**messages[-1], "content": messages[-1]["content"] + observation}
        tools = list(self.tools) + (environment_tools(env) if env is not None else [])
        text = self._render(messages, tools, generation_prompt=True)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Conversation(messages, text, ids, {t.name: t for t in tools}, env, env_name or None)

    def sft_pair(self, example: Example, completion: list[dict[str, Any]]) -> tuple[list[int], list[int], list[bool]]:
        """A tool trace as SFT data laid out as sampling lays it out: (prompt ids, target ids, which target ids are
        trained). `completion` is the conversation after the prompt: assistant messages, each trained and followed by
        EOS, whose text is their `content` with their `tool_calls` written in rollout.tool_format when the content
        does not hold them already (as the conversations rlvr logs and `rlvr rft` keeps store them); tool messages,
        rendered as the template writes results, read but not trained."""
        row = self.start(example)
        ids: list[int] = []
        trained: list[bool] = []
        pending: list[dict[str, Any]] = []
        for message in completion:
            if message["role"] == "tool":
                pending.append(message)
                continue
            if message["role"] != "assistant":
                raise ValueError(f"a tool trace holds assistant and tool messages after its prompt, not {message['role']!r}")
            if pending:
                suffix = self.tool_suffix_ids(pending)
                ids, trained, pending = ids + suffix, trained + [False] * len(suffix), []
            text = message.get("content") or ""
            if message.get("tool_calls") and not self.parse(text):
                if self.write is None:
                    raise ValueError(f"a tool trace's turn holds its calls in tool_calls only, and rollout.tool_format = "
                                     f"{self.settings.format!r} has no writer (rollout/tools.py TOOL_WRITERS) to write them")
                text += self.write(message["tool_calls"])
            turn = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            ids, trained = ids + turn, trained + [True] * len(turn)
        if pending:
            raise ValueError("a tool trace ends on tool results: its last message must be the model's answer")
        return row.prompt_ids, ids, trained


class ToolSampler:
    """Multi-turn sampling with tools on any inner sampler (`Sampler`, `VLLMSampler`, `ServerSampler`):
    `sample` takes the examples themselves, whose rows reset the environments."""

    def __init__(self, inner: Any, tokenizer: PreTrainedTokenizerBase, settings: ToolSettings, data_cfg: DataConfig) -> None:
        self.inner, self.tokenizer, self.settings = inner, tokenizer, settings
        self.renderer = ToolRenderer(tokenizer, settings, data_cfg)
        self.sampling = inner.sampling
        self.parse = self.renderer.parse

    def weights_changed(self) -> None:
        self.inner.weights_changed()

    def rest(self) -> None:
        self.inner.rest()

    def sample(self, prompts: list[str], group_size: int = 1, generator: torch.Generator | None = None,
               generators: list[torch.Generator] | None = None, examples: list[Example] | None = None) -> Completions:
        """`group_size` conversations per example (rows g*G .. g*G+G-1 answer examples[g]). `prompts` (the caller's
        single-turn rendering) are not used: a conversation's prompt carries its tools and its environment's text."""
        if examples is None:
            raise ValueError("a multi-turn sampler needs the examples (their rows reset the environments), not only prompts")
        G, budget = group_size, self.sampling.max_new_tokens
        rows = [self.renderer.start(e) for e in examples for _ in range(G)]
        children = _Children(generators, G)
        parts = self._first_turn(rows, G, generator, generators, children)
        device, entropy = parts[0][1].completion_ids_BT.device, 0.0
        while True:
            turn_rows: list[int] = []
            calls_of: dict[int, list] = {}
            for part_rows, out in parts:
                entropy += out.entropy_sum
                ids_BT, mask_BT, logp_BT = out.completion_ids_BT.tolist(), out.completion_mask_BT.tolist(), out.sample_logp_BT.tolist()
                for j, b in enumerate(part_rows):
                    n = sum(mask_BT[j])
                    rows[b].add_turn(ids_BT[j][:n], logp_BT[j][:n])
                    rows[b].truncated = bool(out.truncated_B[j])
                    calls_of[b] = self._read_turn(rows[b], ids_BT[j][:n])
                turn_rows += part_rows
            for b in turn_rows:
                row = rows[b]
                if row.truncated:
                    row.stop = "budget"
                elif not calls_of[b]:
                    row.stop = "answer"
                elif row.turns >= self.settings.max_turns:
                    row.stop = "turn_limit"  # asked for a tool with no turn left to read it
            waiting = [b for b in turn_rows if not rows[b].stop]
            before = {b: (len(rows[b].messages), len(rows[b].results)) for b in waiting}
            self._run_calls([(rows[b], calls_of[b]) for b in waiting])
            next_rows = []
            for b in waiting:
                row = rows[b]
                suffix = self.renderer.tool_suffix_ids(row.messages[before[b][0]:])
                if len(row.ids) + len(suffix) >= budget:  # no room for the results and a token of answer
                    # As TRL: the results the model will never read leave the conversation (and the tool figures);
                    # what the calls did to the environment stays, as it does in TRL.
                    del row.messages[before[b][0]:], row.results[before[b][1]:]
                    row.stop, row.truncated = "budget", True
                    continue
                row.add_context(suffix)
                next_rows.append(b)
            if not next_rows:
                break
            parts = [(next_rows, self.inner.sample_ids([rows[b].prompt_ids + rows[b].ids for b in next_rows], 1, generator,
                                                       children.of(next_rows), [budget - len(rows[b].ids) for b in next_rows]))]
        rollouts = _rollouts(rows, self.tokenizer.pad_token_id, entropy, device)
        trace = ToolTrace([r.messages for r in rows], [r.prompt_messages for r in rows], [r.results for r in rows],
                          [r.turns for r in rows], [r.stop for r in rows], [r.prompt_text for r in rows],
                          [r.environment for r in rows] if self.renderer.factories else None,
                          [r.environment_name for r in rows] if self.renderer.factories else None, self.renderer.reward_kinds)
        return Completions([r.prompt_text for r in rows], rollouts, ["\n".join(t for t in r.texts if t) for r in rows], trace)

    def _first_turn(self, rows: list[Conversation], G: int, generator: torch.Generator | None, generators: list[torch.Generator] | None,
                    children: _Children) -> list[tuple[list[int], Rollouts]]:
        """Turn 1, as (rows, their Rollouts) parts. A group whose G prompts are one text (no environment, or one whose
        reset text is the same for every instance) is prefilled once and drawn from its own generator, as a single-turn
        group is; a group whose prompts differ samples each row from a child of its generator. Decided group by
        group, so a group's conversations never depend on which other groups share its batch."""
        starts = range(0, len(rows), G)
        shared = [g for g in starts if all(rows[g + i].prompt_ids == rows[g].prompt_ids for i in range(G))]
        own = [b for g in starts if g not in set(shared) for b in range(g, g + G)]
        parts = []
        if shared:
            gens = [generators[g // G] for g in shared] if generators is not None else None
            out = self.inner.sample_ids([rows[g].prompt_ids for g in shared], G, generator, gens)
            parts.append(([b for g in shared for b in range(g, g + G)], out))
        if own:
            parts.append((own, self.inner.sample_ids([rows[b].prompt_ids for b in own], 1, generator, children.of(own))))
        return parts

    def _read_turn(self, row: Conversation, ids: list[int]) -> list:
        """Record a turn as an assistant message; its tool calls (none when it answered)."""
        eos = self.tokenizer.eos_token_id
        kept = [t for t in ids if t != eos]
        raw = self.tokenizer.decode(kept, skip_special_tokens=False)
        row.texts.append(self.tokenizer.decode(kept, skip_special_tokens=True))
        calls = self.parse(raw)
        message: dict[str, Any] = {"role": "assistant", "content": _strip_calls(raw, calls) if calls else row.texts[-1]}
        parsed = [c for c in calls if c.error is None]
        if parsed:
            message["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in parsed]
        row.messages.append(message)
        return calls

    def _run_calls(self, work: list[tuple[Conversation, list]]) -> None:
        """Every waiting row's calls: rows side by side (each has its own environment), a row's calls in order."""
        def run(item: tuple[Conversation, list]) -> None:
            row, calls = item
            for call in calls:
                result = run_call(call, row.tools, timeout_s=self.settings.timeout_s, max_chars=self.settings.max_chars)
                row.results.append(result)
                row.messages.append({"role": "tool", "name": result.name or "invalid", "content": result.content})

        if len(work) <= 1:
            for item in work:
                run(item)
            return
        with ThreadPoolExecutor(max_workers=min(16, len(work)), thread_name_prefix="rlvr-tools") as pool:
            list(pool.map(run, work))


class _Children:
    """Per-row generators for a conversation's later turns, each seeded from its own group's stream."""

    def __init__(self, generators: list[torch.Generator] | None, group_size: int) -> None:
        self.generators, self.G = generators, group_size

    def of(self, rows: list[int]) -> list[torch.Generator] | None:
        if self.generators is None:
            return None  # one stream for the whole batch (rollout.seeding = "stream"): the caller's generator
        out = []
        for b in rows:  # in row order: a group's draws depend on its own rows alone
            parent = self.generators[b // self.G]
            seed = int(torch.randint(0, 2**62, (1,), generator=parent, device=parent.device))
            out.append(torch.Generator(device=parent.device).manual_seed(seed))
        return out


def _rollouts(rows: list[Conversation], pad_id: int, entropy: float, device: torch.device) -> Rollouts:
    """The conversations as one Rollouts: prompts left-padded, everything after them right-padded."""
    B = len(rows)
    P = max(len(r.prompt_ids) for r in rows)
    T = max(1, max(len(r.ids) for r in rows))
    prompt_ids = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    sampled = torch.zeros((B, T), dtype=torch.long)
    context = torch.zeros((B, T), dtype=torch.long)
    logp = torch.zeros((B, T))
    for b, r in enumerate(rows):
        prompt_ids[b, P - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
        prompt_mask[b, P - len(r.prompt_ids):] = 1
        n = len(r.ids)
        if n:
            ids[b, :n] = torch.tensor(r.ids)
            sampled[b, :n] = torch.tensor(r.sampled)
            context[b, :n] = 1
            logp[b, :n] = torch.tensor(r.logp)
    truncated = torch.tensor([r.truncated for r in rows], dtype=torch.bool)
    return Rollouts(prompt_ids.to(device), prompt_mask.to(device), ids.to(device), sampled.to(device), truncated.to(device), entropy,
                    logp.to(device), None, context.to(device))
