"""Every forward whose size grows with the number of sequences is chunked by one knob (--sample-batch,
docs/GPU.md): on a model with a real-sized vocabulary (128k ids, tiny layers) the peak memory of drift's
KL and embeddings grows with the chunk, not with the number of sequences; the embeddings build no
logits at all. Measured as the process's resident high-water mark (VmHWM) in a fresh interpreter,
steps in increasing order, glibc returning freed blocks (MALLOC_MMAP_THRESHOLD_)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from infra import memory  # noqa: E402

SCRIPT = r'''
import json, torch
from transformers import LlamaConfig, LlamaForCausalLM
import drift, rollout
from infra import models
torch.manual_seed(0)
torch.set_num_threads(1)
_, tok = models.load_model("tiny")
V, T = 128_000, 32
cfg = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
model, base = LlamaForCausalLM(cfg).eval(), LlamaForCausalLM(cfg).eval()
def hwm():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
recs = lambda n: [{"prompt": f"What is {i}+1?"} for i in range(n)]
out = {"start": hwm(), "logits_per_seq": T * V * 4}
drift.kl_to_base(model, base, tok, recs(2), samples=2, max_new_tokens=T, batch_size=2)
out["kl_4_by_2"] = hwm()
drift.kl_to_base(model, base, tok, recs(12), samples=2, max_new_tokens=T, batch_size=2)
out["kl_24_by_2"] = hwm()
texts = ["x" * 200] * 24
e = drift.embed_texts(model, tok, texts, batch_size=24)
out["embed_24"] = hwm()
drift.kl_to_base(model, base, tok, recs(12), samples=2, max_new_tokens=T, batch_size=24)
out["kl_24_by_24"] = hwm()
out["embed_shape"] = list(e.shape)
print(json.dumps(out))
'''


def test_peak_memory_grows_with_the_chunk_not_the_number_of_sequences():
    env = dict(os.environ, PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="131072")
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout.strip().splitlines()[-1])
    per_seq = r["logits_per_seq"]                                  # 16 MB: one sequence's fp32 logits
    # 6x the sequences at the same chunk: the peak moves by well under one extra sequence's logits ...
    assert r["kl_24_by_2"] - r["kl_4_by_2"] < 1.0 * per_seq, r
    # ... while one chunk of all 24 raises it by many sequences' worth (the check can fail)
    assert r["kl_24_by_24"] - r["embed_24"] > 8 * per_seq, r
    # embeddings of 24 texts of ~200 tokens: logits would be 24 × 200 × 128k × 4 B = 2.5 GB; none are built
    assert r["embed_24"] - r["kl_24_by_2"] < 2 * per_seq, r
    assert r["embed_shape"] == [24, 16]


def test_the_formulas_logit_bytes_are_what_an_update_measures():
    """memory.LOGIT_BYTES (the update's bytes per token × vocabulary id in memory_per_rank and docs/GPU.md)
    against a fresh measurement of SDPO's update at the release's top-k 100 with bf16 compute: within 25%."""
    code = ("from tools import bench; from infra import speedups; import torch; torch.set_num_threads(1); speedups.ROWS_PER_CHUNK = 64; "
            "print(bench.logit_memory_slope('sdpo top-100'))")
    env = dict(os.environ, PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="131072")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    measured = float(res.stdout.strip().splitlines()[-1])
    assert abs(measured / memory.LOGIT_BYTES["sdpo top-100"] - 1) < 0.25, measured
    assert measured < memory.LOGIT_BYTES["sdpo full"] / 3     # top-k keeps no full fp32 log-softmax
