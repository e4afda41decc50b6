"""A tiny random Qwen2 model written as a float32 GGUF file, for the llama.cpp runtime's tests.

The same weights as :func:`tiny_models.tiny_model` (``family="qwen2"``), so llama.cpp's logits
can be checked against the transformers model's own uncached forward pass: two independent
implementations of one function. Qwen2 is used because llama.cpp runs its rotary embedding in
the NEOX layout, the layout of the Hugging Face weights, so no Q/K permutation is needed (a
``llama`` GGUF would need convert_hf_to_gguf.py's permutation).

The vocabulary is V single characters of GPT-2's byte-level alphabet with no merges; the tests
feed token ids and never tokenize text through llama.cpp.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import pre_tokenizers

TENSOR_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_gguf(model, path: Path, *, eos_token_id: int | None = None) -> Path:
    """Write a transformers ``Qwen2ForCausalLM`` (float32, untied) to ``path`` as an F32 GGUF."""
    import gguf

    config = model.config
    assert config.model_type == "qwen2" and not config.tie_word_embeddings
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(alphabet[: config.vocab_size])
    writer.add_token_types([gguf.TokenType.NORMAL] * config.vocab_size)
    writer.add_token_merges([f"{alphabet[0]} {alphabet[1]}"])  # llama.cpp needs at least one merge
    if eos_token_id is not None:
        writer.add_eos_token_id(eos_token_id)
    for key, tensor in model.state_dict().items():
        array = tensor.detach().float().numpy().astype(np.float32)
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        elif key == "lm_head.weight":
            name = "output.weight"
        else:
            _, _, layer, rest = key.split(".", 3)  # model.layers.<i>.<module>.<weight|bias>
            module, kind = rest.rsplit(".", 1)
            name = f"blk.{layer}.{TENSOR_NAMES[module]}.{kind}"
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
