"""Tiny random models and tokenizers built inside the tests (no network, no files)."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM


def tiny_model(
    *,
    vocab_size: int = 64,
    seed: int = 0,
    family: str = "llama",
    hidden_size: int = 32,
    num_layers: int = 2,
    max_positions: int = 256,
    init_std: float = 0.3,
    dtype: torch.dtype = torch.float32,
):
    """A 2-layer causal LM with fixed random weights; large init_std gives decisive argmaxes."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=init_std,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(family)
    return model.to(dtype).eval()


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: ids 0..255 are bytes, 256 is <eos>. len() == 257."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_to_unicode = sorted(alphabet, key=lambda ch: _unicode_to_byte()[ch])
    vocab = {ch: i for i, ch in enumerate(byte_to_unicode)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    return fast


def _unicode_to_byte() -> dict[str, int]:
    # the GPT-2 byte ↔ unicode table used by ByteLevel
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
