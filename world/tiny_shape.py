"""world/tiny_shape.py — the built-in tiny model's shape: a fresh, untrained Llama of it (tools/tiny.py pretrains it
on the world; tools/bench.py times one). A run never builds one: it loads the committed weights (infra/models.py)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build_tiny_llama(tok, seed=0):
    """A fresh, untrained small Llama (RoPE, RMSNorm, SwiGLU) for `tok`: 3 layers, width 192, tied embeddings: the
    built-in tiny model's shape (tools/tiny.py pretrains it on the world)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model
