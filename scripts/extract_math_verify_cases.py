"""Regenerate tests/data/math_verify_cases.jsonl from Math-Verify's own regression tests.

Where the cases come from: huggingface/Math-Verify (https://github.com/huggingface/Math-Verify),
a peer verifier of math answers, licensed Apache-2.0 (its LICENCE file; the header of its
tests/test_all.py carries an MIT notice, "Copyright (c) 2024 The HuggingFace Team"). Its
tests/test_all.py, tests/test_numina_cases.py and tests/test_open_thoughts.py assert
``compare_strings(gold, pred, ...) == expected`` over (gold, prediction, expected) triples
written from real model outputs. The data file keeps that attribution in its first line.

The cases are read mechanically, never copied by hand: each file is parsed with ``ast``; every
``compare_strings(...) == expected`` comparison inside a ``test_*`` function yields one case per
``pytest.mark.parametrize`` row (or one case when the function is not parametrised), with the
call's keyword arguments (``match_types``, ``precision``, ``strict``,
``allow_set_relation_comp``) resolved against the row and against ``compare_strings``'s own
defaults. Only literals are evaluated (``ast.literal_eval``), plus f-strings whose only names
are ``math`` functions (one case formats ``math.sqrt(17)``). A non-raw string keeps what Python
makes of it (``"$\\text{13}$"`` written without ``r`` holds a TAB), as Math-Verify's test sees it.

How a case is given to rlvr's ``boxed_math(completion, gold)`` (its gold is a bare answer, its
completion is read only through its last box):

* gold: the content of its single box if it has exactly one box (Math-Verify's test extracts
  a boxed gold first); else the content of one math span (``$..$``, ``$$..$$``, ``\\(..\\)``,
  ``\\[..\\]``) that is the whole gold; else the gold itself when it is bare (no math delimiter
  and no prose). Any other gold (several boxes, prose) is not kept: it is not one answer.
* completion: the prediction as written when it contains a box command (``form = "boxed"``);
  ``\\boxed{content}`` when the whole prediction is one math span (``form = "span"``) or a bare
  answer (``form = "bare"``), which is what a model that boxed its answer would have written.
  A prediction whose answer has to be extracted from prose is not kept: boxed_math never reads
  an unboxed answer, by design.

Usage (the default commit is the one the checked-in data was made from):

    python scripts/extract_math_verify_cases.py --math-verify /path/to/Math-Verify[.git]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

# the boxes as boxed_math finds them (every box command, its optional and colour arguments)
from rlvr.verifiers.math.extract import _BOX_CMD, _boxes

COMMIT = "5d148cfaaf99214c2e4ffb4bc497ab042c592a7a"  # Math-Verify main, 2025-07-02
SOURCES = ("tests/test_all.py", "tests/test_numina_cases.py", "tests/test_open_thoughts.py")
HELPER = "compare_strings"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "math_verify_cases.jsonl"

_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_WORD = re.compile(r"(?<!\\)(?<![A-Za-z])[A-Za-z]{2,}")  # two letters not after a backslash: prose


# ---------------------------------------------------------------- reading the test files


def _read_source(repo: Path, commit: str, path: str) -> str:
    """A file of the Math-Verify repository at ``commit`` (a git dir or a checkout)."""
    git_dir = repo if (repo / "HEAD").exists() and not (repo / ".git").exists() else repo / ".git"
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        check=True, capture_output=True, text=True,
    ).stdout


def _evaluate(node: ast.expr) -> Any:
    """A literal's value; f-strings may only call ``math`` functions on literals."""
    if isinstance(node, ast.JoinedStr):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id != "math":
                raise ValueError(f"f-string uses the name {sub.id!r}, not a literal")
        code = compile(ast.Expression(node), "<case>", "eval")
        return eval(code, {"__builtins__": {}, "math": math})  # noqa: S307 -- checked above
    return ast.literal_eval(node)


def _helper_defaults(tree: ast.Module) -> dict[str, Any]:
    """compare_strings's keyword defaults, read from its definition (in test_all.py)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == HELPER:
            args = node.args.args
            defaults = node.args.defaults
            named = args[len(args) - len(defaults):]
            return {a.arg: _evaluate(d) for a, d in zip(named, defaults)}
    raise ValueError(f"no {HELPER} definition found")


def _parametrize_rows(func: ast.FunctionDef) -> list[tuple[int, dict[str, ast.expr]]]:
    """(line, {argname: node}) for each parametrize row; one empty row when not parametrised."""
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize":
            names = [n.strip() for n in _evaluate(deco.args[0]).split(",")]
            rows = []
            for row in deco.args[1].elts:  # type: ignore[attr-defined]
                if not isinstance(row, ast.Tuple) or len(row.elts) != len(names):
                    raise ValueError(f"{func.name}: row at line {row.lineno} is not a {len(names)}-tuple")
                rows.append((row.lineno, dict(zip(names, row.elts))))
            return rows
    return [(0, {})]


def _helper_checks(func: ast.FunctionDef) -> list[ast.Compare]:
    """Every ``compare_strings(...) == expected`` in the function's body."""
    found = []
    for node in ast.walk(func):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                and isinstance(node.left, ast.Call) and getattr(node.left.func, "id", "") == HELPER):
            found.append(node)
    return found


def _resolve(node: ast.expr, row: dict[str, ast.expr]) -> Any:
    if isinstance(node, ast.Name) and node.id in row:
        return _evaluate(row[node.id])
    return _evaluate(node)


def cases_of(path: str, source: str, defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """Every case of one test file, in source order."""
    tree = ast.parse(source)
    cases = []
    for func in tree.body:
        if not (isinstance(func, ast.FunctionDef) and func.name.startswith("test_")):
            continue
        for check in _helper_checks(func):
            call: ast.Call = check.left  # type: ignore[assignment]
            for line, row in _parametrize_rows(func):
                gold, pred = (_resolve(a, row) for a in call.args[:2])
                config = dict(defaults)
                config.update({k.arg: _resolve(k.value, row) for k in call.keywords})
                expected = _resolve(check.comparators[0], row)
                cases.append({
                    "id": f"{Path(path).name}:{line or call.lineno}",
                    "source": path, "line": line or call.lineno, "test": func.name,
                    "gold": gold, "prediction": pred, "expected": int(expected), "config": config,
                })
    return cases


# ---------------------------------------------------------------- feeding a case to rlvr


def _whole_span(text: str) -> str | None:
    """The content of a math span that is the whole text, else None."""
    text = text.strip()
    for opening, closing in _SPANS:
        if len(text) > len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            inner = text[len(opening):-len(closing)]
            if "$" not in inner and "\\(" not in inner and "\\[" not in inner:
                return inner.strip()
    return None


def _is_bare(text: str) -> bool:
    """No math delimiter and no prose: an answer as a model would put it in a box."""
    stripped = text.strip()
    return bool(stripped) and not any(d in stripped for d in ("$", "\\(", "\\[")) and (
        not _WORD.search(stripped) and stripped.isascii()
    )


def rlvr_gold(gold: str) -> tuple[str | None, str]:
    """(bare gold, how it was obtained) or (None, why the gold is not one answer)."""
    boxes = _boxes(gold)
    if len(boxes) == 1 and boxes[0] is not None:
        return boxes[0].strip(), "box"
    if boxes:
        return None, "gold has several boxes (not one answer)"
    inner = _whole_span(gold)
    if inner is not None:
        return inner, "span"
    if _is_bare(gold):
        return gold.strip(), "bare"
    return None, "gold is prose (Math-Verify extracts it; not one answer)"


def rlvr_completion(pred: str) -> tuple[str | None, str]:
    """(completion for boxed_math, form) or (None, why the prediction is not kept)."""
    if _BOX_CMD.search(pred):
        return pred, "boxed"
    inner = _whole_span(pred)
    if inner is not None:
        return "\\boxed{" + inner + "}", "span"
    if _is_bare(pred):
        return "\\boxed{" + pred.strip() + "}", "bare"
    return None, "unboxed answer in prose (boxed_math reads only a box)"


def build(repo: Path, commit: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sources = {path: _read_source(repo, commit, path) for path in SOURCES}
    defaults = _helper_defaults(ast.parse(sources["tests/test_all.py"]))
    cases = [case for path, text in sources.items() for case in cases_of(path, text, defaults)]
    ids = [c["id"] for c in cases]
    if len(ids) != len(set(ids)):
        raise ValueError("two cases share an id (file:line)")
    for case in cases:
        gold, gold_how = rlvr_gold(case["gold"])
        completion, form = rlvr_completion(case["prediction"])
        kept = gold is not None and completion is not None
        case["rlvr"] = {
            "kept": kept,
            "gold": gold, "gold_from": gold_how if gold is not None else None,
            "completion": completion, "form": form if completion is not None else None,
            "dropped_because": None if kept else (gold_how if gold is None else form),
        }
    header = {
        "_header": "Math-Verify regression cases for rlvr's boxed_math (tests/test_math_verify_suite.py)",
        "source": "https://github.com/huggingface/Math-Verify", "commit": commit, "files": list(SOURCES),
        "license": "Apache-2.0 (Math-Verify's LICENCE); tests/test_all.py's header: MIT, "
                   "Copyright (c) 2024 The HuggingFace Team",
        "regenerate": "python scripts/extract_math_verify_cases.py --math-verify PATH",
        "cases": len(cases), "kept": sum(c["rlvr"]["kept"] for c in cases),
    }
    return header, cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--math-verify", type=Path, required=True, help="Math-Verify git dir or checkout")
    parser.add_argument("--commit", default=COMMIT, help="Math-Verify commit to read (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    header, cases = build(args.math_verify, args.commit)
    with args.out.open("w", encoding="utf-8") as out:
        for record in (header, *cases):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{header['cases']} cases, {header['kept']} kept -> {args.out}")


if __name__ == "__main__":
    main()
