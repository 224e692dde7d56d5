"""infra/memory.py — the memory a training step needs per GPU under FSDP2 (infra/distributed.py's sharding), by
phase and by stage: the formula docs/GPU.md's tables come from, which tools/bench.py and tools/gpu_check.py
compare with what a run measures."""
from infra.speedups import ROWS_PER_CHUNK

# ----------------------------------------------------------------------------------------------
# Memory per GPU under FSDP2 (infra.shard): the formula, and the table for the paper's models
# ----------------------------------------------------------------------------------------------
# From each model's config.json (hidden size d, MLP width ff, heads, KV heads, head dim, vocabulary).
MODEL_SHAPES = {
    "Qwen3-4B": dict(layers=36, d=2560, ff=9728, heads=32, kv_heads=8, head_dim=128, vocab=151936, tied=True),
    "Olmo-3-7B": dict(layers=32, d=4096, ff=11008, heads=32, kv_heads=32, head_dim=128, vocab=100278, tied=False),
}
GB = 1e9


def shape_of_config(cfg):
    """MODEL_SHAPES-style numbers from a transformers config."""
    return dict(layers=cfg.num_hidden_layers, d=cfg.hidden_size, ff=cfg.intermediate_size, heads=cfg.num_attention_heads,
                kv_heads=cfg.num_key_value_heads, head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
                vocab=cfg.vocab_size, tied=bool(cfg.tie_word_embeddings))


def parameter_counts(s):
    """(parameters of one decoder layer, of the root — embeddings, LM head, final norm —, in all)."""
    q, kv = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    layer = s["d"] * q + 2 * s["d"] * kv + q * s["d"] + 3 * s["d"] * s["ff"] + 2 * s["d"]   # attention, MLP, 2 norms
    root = s["vocab"] * s["d"] * (1 if s["tied"] else 2) + s["d"]
    return layer, root, s["layers"] * layer + root


def memory_per_rank(s, ranks, method="sdpo", tokens=10240, rollout_seqs=32, compute_bytes=2, topk=100):
    """Peak bytes per rank of one training step, by phase, for FSDP2 over `ranks` (bf16 compute over fp32
    master weights: compute_bytes 2; fp32 compute: 4). With P parameters, P_l per layer, P_r in the root,
    T tokens in an update micro-batch (one response, as the release), V the vocabulary:

      sharded, always     P·(4 weights + 8 AdamW)/N  [+ P·4/N the teacher, SDPO]
      update (the peak)   + P·4/N                the gradients (freed after each update: train.run_steps)
                          + P·c                  the teacher gathered for its forwards (SDPO; infra.gathered)
                          + (2·P_l + P_r)·c      the student's layer being computed, the next one, the root
                          + 2·P_l·4              a layer's unsharded fp32 gradient before its reduce-scatter
                          + L·T·d·c              layer inputs kept by activation checkpointing
                          + T·(4d + 3ff)·c·2     one layer's activations, recomputed, and their gradients
                          + T·V·b                the logits and everything made from them, forward and
                                                 backward: b measured (LOGIT_BYTES, `--logit-memory`)
                          + min(T, R)·V·k        one chunk of R = speedups.ROWS_PER_CHUNK positions' fp32
                                                 temporaries: k = 8 (an fp32 copy and one temporary) with
                                                 bf16 logits, 4 with fp32 ones (no copy is made)
      rollout             + (P + P_r)·c          the student gathered for sampling; the largest module (the
                                                 root) twice while it is gathered: FSDP2 all-gathers into a
                                                 buffer, then copies out
                          + 2·L·kv·hd·(T·S)·c    the KV cache of S sequences sampled at once
    topk: SDPO's --topk (None: the full vocabulary)."""
    layer, root, P = parameter_counts(s)
    N, c, T, L = ranks, compute_bytes, tokens, s["layers"]
    sdpo = method == "sdpo"
    sharded = P * 12 / N + (P * 4 / N if sdpo else 0)
    per_logit = LOGIT_BYTES[logit_case(method, topk, "bf16" if c == 2 else "fp32")]
    update = {"sharded states": sharded + P * 4 / N,
              "teacher gathered": P * c if sdpo else 0.0,
              "layer buffers": (2 * layer + root) * c + 2 * layer * 4,
              "activations": L * T * s["d"] * c + T * (4 * s["d"] + 3 * s["ff"]) * c * 2,
              "logits": T * s["vocab"] * per_logit + min(T, ROWS_PER_CHUNK) * s["vocab"] * chunk_bytes(c)}
    rollout = {"sharded states": sharded, "student gathered": (P + root) * c,
               "kv cache": kv_cache_bytes(s, T, rollout_seqs, c)}
    return {"update": update, "rollout": rollout, "update_total": sum(update.values()),
            "rollout_total": sum(rollout.values()), "parameters": P}


def chunk_bytes(c):
    """Bytes per (position × id) of one chunk's fp32 temporaries at the peak: a copy of bf16 logits (none of
    fp32 ones: .float() returns them as they are) and one temporary of the chunk's size."""
    return 8 if c == 2 else 4


def kv_cache_bytes(s, tokens, seqs, c=2):
    """The KV cache of `seqs` sequences of `tokens` tokens: 2 (keys, values) · L · kv heads · head dim · c."""
    return 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * tokens * seqs * c


def memory_per_stage(s, ranks, method="sdpo", tokens=8192, sample_batch=8, c=2, topk=100):
    """Peak bytes per rank in each stage of a continual run (bf16 compute, FSDP2 over `ranks`), each with
    the base model θ_0's shard (4P/N, kept for drift) besides memory_per_rank's states:
      evaluation  sharded states + the student gathered + the KV cache of S = --sample-batch sequences
      rollout     the same with the step's sampling (memory_per_rank)
      update      memory_per_rank's update peak (the largest response: T tokens)
      drift       rank 0: sharded states + the student and the base gathered (2·P·c) + the KV cache of S
                  samples (KL) or their scoring, S sequences at once: logits S·T·V·c + a chunk (no fp32
                  copy: log-probs by chunked logsumexp), whichever is larger; the embeddings build no
                  logits."""
    m = memory_per_rank(s, ranks, method, tokens, sample_batch, c, topk)
    P = m["parameters"]
    base = P * 4 / ranks                                          # θ_0's fp32 shard
    states, gathered = m["rollout"]["sharded states"] + base, m["rollout"]["student gathered"]
    kv = kv_cache_bytes(s, tokens, sample_batch, c)
    rows = sample_batch * tokens
    scoring = rows * s["vocab"] * c + min(rows, ROWS_PER_CHUNK) * s["vocab"] * chunk_bytes(c)
    return {"evaluation": states + gathered + kv, "rollout": m["rollout_total"] + base,
            "update": m["update_total"] + base, "drift": states + 2 * P * c + max(gathered - P * c + kv, scoring),
            "parameters": P}


# ---- the logits' share, measured: bytes per (response token × vocabulary id) of one update micro-batch ----
LOGIT_CASES = {   # name: (method, --topk, compute dtype)
    "grpo": ("grpo", None, "bf16"), "sdpo full": ("sdpo", None, "bf16"), "sdpo top-100": ("sdpo", 100, "bf16"),
    "grpo fp32": ("grpo", None, "fp32"), "sdpo full fp32": ("sdpo", None, "fp32"),
    "sdpo top-100 fp32": ("sdpo", 100, "fp32")}
# Measured by `python tools/bench.py --logit-memory` (AMD EPYC, 2 cores, torch 2.13; V = 128,000, 1 tiny layer,
# one response of 128 then 640 tokens, chunks of 64 positions: the slope of the process's peak resident
# memory). The update's logits term of memory_per_rank is T·V times these. The old formula's 14 (GRPO) and
# 26 (SDPO) bytes assumed; full-vocabulary SDPO measures 57.
LOGIT_BYTES = {"grpo": 11.7, "sdpo full": 57.2, "sdpo top-100": 10.2,
               "grpo fp32": 11.6, "sdpo full fp32": 57.1, "sdpo top-100 fp32": 11.6}


def logit_case(method, topk, dtype):
    """The LOGIT_BYTES key of a method's update: GRPO, SDPO over the full vocabulary, or SDPO at top-k."""
    name = method if method == "grpo" else ("sdpo full" if not topk else "sdpo top-100")
    return name + ("" if dtype == "bf16" else " fp32")
