"""infra/models.py — loading a model and its tokenizer: the built-in tiny models, a local directory or a hub
id; precision (--dtype) and autocast; sharding under torchrun. Nothing here is from the paper."""
import functools
import os
import types

import torch
from transformers.utils import logging as hf_logging

from infra.distributed import is_main, shard, under_torchrun

# transformers' own bars ("Loading weights", "Writing model shards") at every stage's load and save say nothing a
# run's own bars and lines do not: off
hf_logging.disable_progress_bar()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_DIR = os.path.join(REPO, "world", "tiny_model")   # (the built-in world's models live with it)
MODEL_DIRS = {"tiny": TINY_DIR, "tiny_think": TINY_DIR + "_think"}   # the built-in models' directories
BUILT_IN_MODELS = ("tiny", "tiny_think")


# --dtype: (weight dtype, compute dtype). "bf16" keeps fp32 master weights and computes in bf16 (the
# release: fp32 actor and teacher, bf16 compute), as bf16 autocast in one process or FSDP2's mixed
# precision under torchrun. "bf16-weights" stores the weights themselves in bf16: half the memory, but
# AdamW at lr 1e-6 … 1e-5 then loses most of each update to rounding (docs/GPU.md) — only on purpose.
DTYPES = {"fp32": (torch.float32, torch.float32), "bf16": (torch.float32, torch.bfloat16),
          "bf16-weights": (torch.bfloat16, torch.bfloat16)}


def resolve_dtype(name, device):
    """--dtype -> (weight dtype, compute dtype): 'auto' = fp32 on CPU, bf16 compute on CUDA."""
    if name in (None, "auto"):
        name = "bf16" if torch.device(device).type == "cuda" else "fp32"
    return DTYPES[name]


def with_autocast(model, device_type, dtype):
    """Run the model's forward under autocast: matrix products in `dtype`, the weights stay as they are.

    The wrapper is bound to the model as a method (types.MethodType), never a closure over the model's
    own bound `forward`: `copy.deepcopy` rebinds a method to the copy, so a clone (SDPO's teacher, GRPO's
    reference) computes with *its own* weights. (A closure would keep calling the original: a teacher
    whose weights change nothing.) functools.wraps keeps forward's signature: `generate` reads it."""
    plain_forward = type(model).forward

    @functools.wraps(plain_forward)
    def forward_autocast(self, *args, **kwargs):
        with torch.autocast(device_type, dtype=dtype):
            return plain_forward(self, *args, **kwargs)
    model.forward = types.MethodType(forward_autocast, model)
    return model


def load_model(name="tiny", device="cpu", dtype=None, grad_checkpointing=False, distributed=None, enable_thinking=None):
    """Load a causal LM and its tokenizer: 'tiny' (the committed built-in model), 'tiny_think' (its
    thinking variant), a local HF directory, or a hub id (downloaded to the HF cache; offline it is
    read from the cache). The model's own chat template is used as it is.

    dtype: a --dtype name (see DTYPES; default fp32 on CPU, bf16 compute on CUDA). With bf16 compute over
    fp32 weights, one process wraps the forward in bf16 autocast; under torchrun (`distributed`, default:
    when launched by it) infra.shard's mixed-precision policy does it instead (`model.compute_dtype`).
    grad_checkpointing: recompute activations in the backward (less memory, ~30% slower).
    enable_thinking: --enable-thinking / --disable-thinking, kept on the tokenizer for encode_chat (None:
    the chat template's own default)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    path = MODEL_DIRS.get(name, name)   # (the thinking variant: tools/tiny.py)
    device = torch.device(device)
    weights, compute = resolve_dtype(dtype, device)
    tok = AutoTokenizer.from_pretrained(path)
    if distributed is None:
        distributed = under_torchrun()
    config = AutoConfig.from_pretrained(path)
    if distributed and not is_main():
        # torchrun: only rank 0 reads the weights; the others build the model empty (meta device), and
        # infra.shard gives each rank its own shard from rank 0's copy (host memory: 1 model, not N)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=weights, **attention_of(config))
        if os.path.isfile(os.path.join(path, "generation_config.json")) or not os.path.isdir(path):
            model.generation_config = GenerationConfig.from_pretrained(path)   # (else from_config's stands)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=weights, **attention_of(config))
    model._weights_on_rank0 = distributed   # read by infra.shard
    if not distributed:        # (torchrun: it stays in host memory until infra.shard moves each rank's shard)
        model = model.to(device)
    model.compute_dtype = compute
    if compute != weights and not distributed:
        with_autocast(model, device.type, compute)
    if grad_checkpointing:   # (transformers 5 renames it; both exist for now)
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    if tok.pad_token_id is None:  # some chat models ship without a pad token; the mask never uses ids
        tok.pad_token = tok.eos_token
    model.generation_config.pad_token_id = tok.pad_token_id
    tok.enable_thinking = enable_thinking
    return model, tok


def load_policy(name="tiny", device="cpu", dtype=None, grad_checkpointing=False, enable_thinking=None):
    """The model to train: load_model, then under torchrun FSDP2 over the processes (infra.shard: each
    keeps 1/N of the weights); in one process, the model as it is."""
    model, tok = load_model(name, device, dtype, grad_checkpointing, enable_thinking=enable_thinking)
    return shard(model, device), tok


def attention_of(config):
    """Character-sized models (hidden size ≤ 256: the built-in tiny models and every checkpoint trained from
    them) use plain ("eager") attention, the faster one there (docs/HISTORY.md, "What a step costs"); real
    models keep transformers' default. Decided from the config, not the name, so that a reloaded stage
    checkpoint computes exactly as the model that was saved."""
    return {"attn_implementation": "eager"} if getattr(config, "hidden_size", 1 << 30) <= 256 else {}
