"""`rlvr import-gguf`: a GGUF file the test writes itself (with the gguf package, as llama.cpp
lays one out) from a tiny Llama model and a byte-level BPE tokenizer becomes a model directory
whose logits, tokens and chat template are the source model's."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from rlvr.commands.import_gguf import GGUFError, import_gguf  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}" \
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
TEXT = ["What is 12 + 30? The answer is 42.", "Tom has 3 apples and buys 4 more: 3 + 4 = 7.", "Put the final answer in \\boxed{}."] * 20


def source_model():
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<|im_end|>")
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(vocab_size=backend.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                         rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer


def _llama_cpp_order(weight: torch.Tensor, heads: int) -> np.ndarray:
    """q/k rows as llama.cpp stores them: each head's two rotary halves interleaved (transformers undoes it when reading)."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols).numpy()


def write_gguf(model, tokenizer, path) -> None:
    c = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-test-llama")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(c.rope_theta if hasattr(c, "rope_theta") else c.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_vocab_size(c.vocab_size)
    vocab = tokenizer.backend_tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_chat_template(TEMPLATE)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"].numpy())
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"].numpy())
        writer.add_tensor(f"blk.{i}.attn_q.weight", _llama_cpp_order(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads))
        writer.add_tensor(f"blk.{i}.attn_k.weight", _llama_cpp_order(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads))
        writer.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"].numpy())
        writer.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"].numpy())
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"].numpy())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"].numpy())
        writer.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"].numpy())
        writer.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"].numpy())
    writer.add_tensor("output_norm.weight", sd["model.norm.weight"].numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    model, tokenizer = source_model()
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(model, tokenizer, path)
    return path, model, tokenizer


def test_a_gguf_model_imports_with_its_logits_tokens_and_chat_template(gguf_file, tmp_path):
    path, source, source_tokenizer = gguf_file
    out = import_gguf(path, tmp_path / "model")
    assert (out / "config.json").is_file() and not (tmp_path / "model.importing").exists()
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    text = "Tom has 12 apples: 12 + 30 = 42."
    assert tokenizer.encode(text, add_special_tokens=False) == source_tokenizer.encode(text, add_special_tokens=False)
    ids = torch.tensor([source_tokenizer.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, source(ids).logits, rtol=1e-5, atol=1e-5)
    assert tokenizer.eos_token == "<|im_end|>"
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        source_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def test_bad_inputs_are_refused_by_name(gguf_file, tmp_path):
    path, _, _ = gguf_file
    with pytest.raises(GGUFError, match="no such file"):
        import_gguf(tmp_path / "missing.gguf", tmp_path / "a")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(GGUFError, match="not a .gguf file"):
        import_gguf(tmp_path / "weights.bin", tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(GGUFError, match="already exists and is not empty"):
        import_gguf(path, tmp_path / "full")
    (tmp_path / "broken.gguf").write_bytes(b"GGUF not really")
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "import-gguf", str(tmp_path / "broken.gguf"), str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "broken.gguf" in done.stderr + done.stdout
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
