"""The user's JSONL files (data.source = "jsonl"): one problem a line, read and validated by
`rlvr.data.read_jsonl` (the row parsing every file source shares), every bad line reported at once."""

from __future__ import annotations

from rlvr.config import Config, DataConfig
from rlvr.data import Example, Problem, load_jsonl_splits
from rlvr.reward import answer_check
from rlvr.tasks.registry import Task, held_out_of, register_task, require


@register_task("jsonl")
class JsonlTask(Task):
    """Your files: data.train_path (and data.eval_path, else data.eval_fraction of train held out)."""

    def splits(self, cfg: Config, skipped: list[Problem] | None = None) -> tuple[list[Example], list[Example]]:
        # a gold answer the correctness verifier refuses (boxed_math: cannot match it to itself) can never be rewarded
        return load_jsonl_splits(cfg.data, cfg.run.seed, need_solution=cfg.sft.steps > 0, answer_ok=answer_check(cfg.reward),
                                 skipped=skipped)

    def check_data(self, data: DataConfig) -> None:
        require(bool(data.train_path), "data.train_path", "is required when data.source = 'jsonl'")

    def held_out_label(self, cfg: Config) -> str:
        return cfg.data.eval_path or held_out_of(cfg.data.train_path, cfg)
