"""The tiny lab model and its character tokenizer, through the standard save/Auto* load path."""

from __future__ import annotations

import string

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast

from rlvr.config import TinyModelConfig
from rlvr.models import build_char_tokenizer, build_tiny_model, count_parameters, load_model, load_tokenizer, save_pretrained

# What arithmetic and math prompts, solutions and chat text need; written out here rather than
# taken from rlvr.models so that a character dropped from the vocabulary fails the tests.
ALPHABET = string.digits + string.ascii_letters + " \n+-*/^=()[]{}.,:;?!'\"<>_%$\\|&#@~"
PIECES = list(ALPHABET) + ["\\boxed{", "\\frac{", "  ", "\n\n"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)

SAMPLES = [
    "7+3*2=",
    "7+6=13\n\\boxed{13}",
    "  leading and trailing spaces  ",
    "a , b . c ? d ! e 's",  # spaces before punctuation must survive decode
    "line one\n\nline three\n",
    "\\frac{1}{2} + \\boxed{-4}",
    "",
]

TINY = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=48, max_positions=64)


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok):
    model = build_tiny_model(tok, TINY, seed=0).eval()
    directory = save_pretrained(model, tok, tmp_path_factory.mktemp("tiny"))
    return model, directory


@pytest.fixture(scope="module")
def reloaded_tok(saved):
    return load_tokenizer(str(saved[1]))


# ----------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("text", SAMPLES)
def test_char_tokenizer_round_trip(tok, text):
    ids = encode(tok, text)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(text=TEXT)
def test_char_tokenizer_round_trips_any_text_over_its_alphabet(tok, text):
    ids = encode(tok, text)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_char_tokenizer_special_tokens_and_word_pieces(tok):
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    assert len({tok.pad_token_id, tok.eos_token_id, tok.unk_token_id}) == 3
    # \boxed{ is one token, so a boxed two-digit answer costs 4 tokens
    ids = encode(tok, "\\boxed{42}")
    assert len(ids) == 4
    assert tok.decode(ids[:1]) == "\\boxed{"
    # an unknown character becomes <unk> instead of being dropped silently
    assert tok.unk_token_id in encode(tok, "é")
    # no special tokens are added by default when encoding a prompt
    assert tok("12")["input_ids"] == encode(tok, "12")


def test_char_tokenizer_batches_with_padding(tok):
    batch = tok(["1+1=", "12*3-4="], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 7)
    assert batch["attention_mask"].sum(dim=1).tolist() == [4, 7]
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tok.pad_token_id).all()


# ----------------------------------------------------------------------------- save and reload


@pytest.mark.parametrize("text", SAMPLES)
def test_reloaded_tokenizer_encodes_and_decodes_identically(tok, reloaded_tok, text):
    assert encode(reloaded_tok, text) == encode(tok, text)
    assert reloaded_tok.decode(encode(reloaded_tok, text)) == text


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_reloaded_tokenizer_round_trips_any_text(tok, reloaded_tok, text):
    ids = encode(reloaded_tok, text)
    assert ids == encode(tok, text)
    assert reloaded_tok.decode(ids) == text


def test_reloaded_tokenizer_keeps_vocabulary_and_special_tokens(tok, reloaded_tok):
    assert len(reloaded_tok) == len(tok)
    assert reloaded_tok.get_vocab() == tok.get_vocab()
    assert (reloaded_tok.pad_token, reloaded_tok.eos_token, reloaded_tok.unk_token) == (tok.pad_token, tok.eos_token, tok.unk_token)
    assert (reloaded_tok.pad_token_id, reloaded_tok.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)


def test_reloaded_model_gives_the_same_logits(tok, saved):
    model, directory = saved
    reloaded = load_model(str(directory)).eval()
    assert type(reloaded) is type(model)
    batch = tok(["7+3*2=", "\\boxed{13}", "1 2 3\n4"], padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model(**batch).logits
        got = reloaded(**batch).logits
    assert got.shape == (3, batch["input_ids"].shape[1], len(tok))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_load_model_in_bfloat16(saved):
    reloaded = load_model(str(saved[1]), dtype="bfloat16")
    assert {p.dtype for p in reloaded.parameters()} == {torch.bfloat16}
    assert next(reloaded.parameters()).device.type == "cpu"


# ----------------------------------------------------------------------------- tiny model


def test_tiny_model_respects_config_sizes(tok):
    model = build_tiny_model(tok, TINY, seed=0)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (32, 2, 4, 2)
    assert (c.intermediate_size, c.max_position_embeddings, c.vocab_size) == (48, 64, len(tok))
    assert len(model.model.layers) == 2
    assert model.get_input_embeddings().weight.shape == (len(tok), 32)
    assert model.model.layers[0].mlp.up_proj.weight.shape == (48, 32)
    assert model.model.layers[0].self_attn.k_proj.weight.shape == (2 * 32 // 4, 32)  # 2 kv heads of dim 8
    assert (c.pad_token_id, c.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    # tied embeddings: output layer shares the input embedding
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    bigger = build_tiny_model(tok, TinyModelConfig(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=48, max_positions=64), seed=0)
    assert count_parameters(bigger) > count_parameters(model)


def test_tiny_model_init_is_seeded(tok):
    a = build_tiny_model(tok, TINY, seed=1).state_dict()
    b = build_tiny_model(tok, TINY, seed=1).state_dict()
    c = build_tiny_model(tok, TINY, seed=2).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


# ----------------------------------------------------------------------------- pad fallback


def word_tokenizer(**special) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "</s>": 1, "hello": 2, "world": 3}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", **special)


def test_load_tokenizer_falls_back_from_pad_to_eos(tmp_path):
    word_tokenizer(eos_token="</s>").save_pretrained(tmp_path)
    tok = load_tokenizer(str(tmp_path))
    assert tok.pad_token == "</s>"
    assert tok.pad_token_id == tok.eos_token_id == 1
    batch = tok(["hello", "hello world"], padding=True)
    assert batch["input_ids"][0] == [2, 1]


def test_load_tokenizer_keeps_an_existing_pad_token(saved):
    tok = load_tokenizer(str(saved[1]))
    assert tok.pad_token == "<pad>" and tok.pad_token_id != tok.eos_token_id


def test_load_tokenizer_without_pad_or_eos_is_an_error(tmp_path):
    word_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(ValueError) as err:
        load_tokenizer(str(tmp_path))
    assert str(tmp_path) in str(err.value)


# ----------------------------------------------------------------------------- model.path errors


def test_model_path_problems_are_one_clear_line(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from rlvr.models import ModelError, check_model_path, load_model

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # fail fast: no network retries

    with pytest.raises(ModelError, match=r"model.path: .*nope does not exist"):
        check_model_path(str(tmp_path / "nope"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ModelError, match="is a file, not a model directory"):
        check_model_path(str(tmp_path / "file.txt"))
    with pytest.raises(ModelError, match="has no config.json"):
        check_model_path(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="has no tokenizer files"):
        check_model_path(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelError, match=r"has no weights \(\*.safetensors or \*.bin\)"):
        check_model_path(str(tmp_path))
    check_model_path("Qwen/Qwen2.5-0.5B")  # a hub id is left to the hub client
    with pytest.raises(ModelError, match=r"^model.path: cannot load a causal LM from 'no-such-org-rlvr/no-such-model'"):
        load_model("no-such-org-rlvr/no-such-model")


def test_a_bad_model_path_stops_before_the_run_directory_is_written(tmp_path):
    from rlvr.config import load_config
    from rlvr.metrics import Reporter
    from rlvr.models import ModelError
    from rlvr.pipeline import run

    out = tmp_path / "run"
    cfg = load_config(overrides=[f"model.path={tmp_path / 'missing'}", f"run.output_dir={out}", "task.num_train=50", "task.num_eval=10"])
    with pytest.raises(ModelError):
        run(cfg, Reporter(enabled=False), "lab")
    assert not out.exists()


def test_autocast_runs_forwards_in_bf16_and_keeps_fp32_weights_and_gradients(saved):
    """run.autocast=bfloat16: the update's forward computes in bf16, the backward lands fp32
    gradients on fp32 weights, and the step moves them."""
    import copy

    from rlvr.config import AlgoConfig
    from rlvr.rollout import encode_prompts, generate
    from rlvr.sampling import Sampling
    from rlvr.update import UpdateSettings, rl_update

    model, tokenizer = load_model(str(saved[1])), load_tokenizer(str(saved[1]))
    seen, head_outputs = [], []
    model.model.layers[0].mlp.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    model.lm_head.register_forward_hook(lambda m, a, out: head_outputs.append(out.dtype))
    ids, mask = encode_prompts(tokenizer, ["1+2=", "3*4="], torch.device("cpu"))
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rollouts = generate(model, ids, mask, Sampling(max_new_tokens=6), eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                            group_size=4, generator=torch.Generator().manual_seed(0))
        settings = UpdateSettings.from_algo(AlgoConfig(), temperature=1.0, max_new_tokens=6, micro_batch_size=8, max_grad_norm=1.0)
        metrics = rl_update(model, optimizer, scheduler, rollouts, torch.linspace(-1, 1, 8), settings)
    assert set(seen) == {torch.bfloat16}  # sampling and the update's forward both ran in bf16
    assert head_outputs == []  # ... but not the output projection: logits come from an fp32 head (fp32_output_head)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
    assert metrics["loss/skipped_nonfinite"] == 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert metrics["rollout/logp_mismatch_max"] < 0.5
