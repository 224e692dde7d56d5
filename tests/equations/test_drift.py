"""drift.py (A4–A8) against brute-force numpy computations and their defining properties."""
import copy
import math

import numpy as np
import pytest
import torch

import drift
import evaluate


def rand(m, n, seed):
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def random_orthogonal(n, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return torch.tensor(q)


def nss(W, W2):
    return drift.normalized_spectral_shift(drift.svd64(W)[1], drift.svd64(W2)[1])


def angles(W, W2, r, side="left"):
    (U, _, Vh), (U2, _, Vh2) = drift.svd64(W), drift.svd64(W2)
    return drift.principal_angles(U[:, :r], U2[:, :r]) if side == "left" else drift.principal_angles(Vh[:r].T, Vh2[:r].T)


def overlap(W, W2, r, q):
    return drift.principal_mask_overlap(drift.principal_mask(*drift.svd64(W), r, q),
                                        drift.principal_mask(*drift.svd64(W2), r, q), W2 - W)


# ---------------------------------------------------------------- (A4)
@pytest.mark.parametrize("shape", [(5, 7), (8, 3), (6, 6)])
def test_spectral_shift_matches_numpy(shape):
    W, W2 = rand(*shape, 0), rand(*shape, 1)
    s = np.linalg.svd(W.numpy(), compute_uv=False)
    s2 = np.linalg.svd(W2.numpy(), compute_uv=False)
    want = math.sqrt(sum((a - b) ** 2 for a, b in zip(s2, s))) / math.sqrt(sum(a * a for a in s))
    assert nss(W, W2) == pytest.approx(want, rel=1e-12)


def test_spectral_shift_zero_for_identical_and_rotations():
    W = rand(6, 9, 2)
    assert nss(W, W.clone()) == 0.0
    # W' = Q1 W Q2 keeps the singular values: the spectrum did not move
    W2 = random_orthogonal(6, 3) @ W @ random_orthogonal(9, 4)
    assert nss(W, W2) < 1e-12
    # ...but scaling does move it, by exactly the scale
    assert nss(W, 1.5 * W) == pytest.approx(0.5, rel=1e-12)


# ---------------------------------------------------------------- (A5)
def test_principal_angles_zero_for_same_subspace_and_90_for_orthogonal():
    W = rand(8, 6, 5)
    assert angles(W, W.clone(), 3).max().item() < 1e-4
    assert angles(W, W.clone(), 3, "right").max().item() < 1e-4
    # W: top-2 left subspace = span(e1, e2); W2: top-2 left subspace = span(e3, e4)
    W = torch.diag(torch.tensor([5.0, 4.0, 1.0, 0.5], dtype=torch.float64))
    W2 = torch.diag(torch.tensor([1.0, 0.5, 5.0, 4.0], dtype=torch.float64))
    assert angles(W, W2, 2).tolist() == pytest.approx([90.0, 90.0], abs=1e-9)
    # a rotation by 30° inside the plane (e1, e3) tilts the top-1 subspace by exactly 30°
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    R = torch.eye(4, dtype=torch.float64)
    R[0, 0], R[0, 2], R[2, 0], R[2, 2] = c, -s, s, c
    assert angles(W, R @ W, 1)[-1].item() == pytest.approx(30.0, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_largest_principal_angle_matches_projection_formula(seed):
    """Brute force: sin θ_max = ‖(I − U'U'ᵀ) U‖₂ (spectral norm), an independent formula."""
    W, W2 = rand(9, 7, seed), rand(9, 7, seed + 10)
    r = 3
    U = np.linalg.svd(W.numpy())[0][:, :r]
    U2 = np.linalg.svd(W2.numpy())[0][:, :r]
    sin_max = np.linalg.norm((np.eye(9) - U2 @ U2.T) @ U, 2)
    want = math.degrees(math.asin(min(1.0, sin_max)))
    assert angles(W, W2, r)[-1].item() == pytest.approx(want, abs=1e-6)


# ---------------------------------------------------------------- (A6)
def brute_mask(W, r, q):
    U, S, Vt = np.linalg.svd(W, full_matrices=False)
    R = np.zeros_like(W)
    for i in range(W.shape[0]):
        for j in range(W.shape[1]):
            R[i, j] = sum(U[i, k] * S[k] * Vt[k, j] for k in range(r))
    k = max(1, math.ceil(q * W.size))
    order = sorted(((abs(R[i, j]), i, j) for i in range(W.shape[0]) for j in range(W.shape[1])), reverse=True)
    return {(i, j) for _, i, j in order[:k]}


@pytest.mark.parametrize("seed", [0, 1])
def test_mask_overlap_matches_brute_force(seed):
    W, W2 = rand(6, 8, seed), rand(6, 8, seed) + 0.3 * rand(6, 8, seed + 50)
    r, q = 2, 0.25
    M, M2 = brute_mask(W.numpy(), r, q), brute_mask(W2.numpy(), r, q)
    got = overlap(W, W2, r, q)
    assert got["iou"] == pytest.approx(len(M & M2) / len(M | M2), abs=1e-7)   # (a float32 ratio of counts)
    upd = (W2 - W).numpy()
    inside = sum(upd[i, j] ** 2 for i, j in M)
    assert got["update_in_mask"] == pytest.approx(inside / (upd ** 2).sum(), rel=1e-10)


def test_mask_overlap_identical_is_full_and_update_share_undefined():
    W = rand(7, 5, 3)
    got = overlap(W, W.clone(), 2, 0.1)
    assert got == {"iou": 1.0, "update_in_mask": None}


# ---------------------------------------------------------------- per-model summary
def test_parameter_drift_of_a_model(tiny):
    model, _ = tiny
    same = drift.parameter_drift(model, model)
    assert same["all"]["nss_max"] == 0.0 and same["all"]["iou_min"] == 1.0 and same["all"]["in_mask_mean"] is None
    assert same["all"]["angle_max"] < 1e-3
    types = set(same["by_type"])
    assert {"embed_tokens", "self_attn.q_proj", "mlp.down_proj"} <= types
    assert same["by_type"]["self_attn.q_proj"]["matrices"] == model.config.num_hidden_layers
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.model.layers[0].mlp.up_proj.weight.mul_(1.1)
    d = drift.parameter_drift(model, moved)
    assert d["by_type"]["mlp.up_proj"]["nss_max"] == pytest.approx(0.1, rel=1e-5)
    assert d["by_type"]["self_attn.q_proj"]["nss_max"] == 0.0


def test_layer_type_names():
    assert drift.layer_type("model.layers.12.self_attn.q_proj.weight") == "self_attn.q_proj"
    assert drift.layer_type("model.embed_tokens.weight") == "embed_tokens"
    assert drift.layer_type("lm_head.weight") == "lm_head"


# ---------------------------------------------------------------- (A7)
def test_quantile_matches_numpy():
    v = list(np.random.default_rng(0).standard_normal(37))
    for p in (0.05, 0.25, 0.5, 0.9):
        assert drift.quantile(v, p) == pytest.approx(float(np.quantile(v, p)), rel=1e-12)


def test_response_drift_identical_texts_is_one(tiny):
    model, tok = tiny
    texts = ["\\boxed{12}", "<answer>B</answer>", "Action: add\nAction Input: {\"a\": 1}", ""]
    same = drift.response_drift(model, tok, texts, list(texts))
    assert same["n"] == 4 and same["mean"] == pytest.approx(1.0, abs=1e-6) and same["p5"] == pytest.approx(1.0, abs=1e-6)
    other = drift.response_drift(model, tok, texts, texts[::-1])
    assert other["mean"] < 0.999
    with pytest.raises(ValueError, match="paired"):
        drift.response_drift(model, tok, texts, texts[:2])


def test_embedding_is_independent_of_batch_padding(tiny):
    model, tok = tiny
    texts = ["a", "\\boxed{123456}", "<answer>C</answer>"]
    together = drift.embed_texts(model, tok, texts)
    alone = torch.cat([drift.embed_texts(model, tok, [t]) for t in texts])
    assert torch.allclose(together, alone, atol=1e-5)


# ---------------------------------------------------------------- KL to the base
def test_kl_to_base_zero_for_same_model_and_positive_after_a_change(tiny):
    model, tok = tiny
    recs = evaluate.benchmark_records("math", 6, 0)
    torch.manual_seed(123)
    want_next = torch.rand(3)
    torch.manual_seed(123)
    same = drift.kl_to_base(model, model, tok, recs, samples=2, max_new_tokens=24)
    assert torch.equal(torch.rand(3), want_next)       # the caller's RNG is untouched
    # log π_θ is recorded while sampling and log π_0 comes from a forward: equal up to float summation order
    assert abs(same["kl"]) < 1e-4 and same["n"] == 12
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.lm_head.weight.add_(0.05 * torch.randn_like(moved.lm_head.weight))
    d = drift.kl_to_base(moved, model, tok, recs, samples=4, max_new_tokens=24)
    assert d["kl"] > 2 * d["stderr"] > 0


# ---------------------------------------------------------------- (A8)
def test_repeated_pattern_and_collapse():
    assert evaluate.repeated_pattern("x = 3 \\boxed\\boxed\\boxed\\boxed") == "\\boxed"
    assert evaluate.repeated_pattern("aaaa") == "a"
    assert evaluate.repeated_pattern("\\boxed{12}") is None
    assert evaluate.repeated_pattern("abab") is None             # only 2 repeats of 'ab'
    texts = ["\\boxed\\boxed\\boxed\\boxed", "####", "\\boxed{3}", "####"]
    hit = [True, True, True, False]                          # the last one ended with an EOS
    c = evaluate.collapse(texts, hit)
    assert c["share"] == pytest.approx(0.5)
    assert c["patterns"] == {"\\boxed": 1, "#": 1}
    assert evaluate.collapse([], []) == {"share": 0.0, "patterns": {}}


@pytest.mark.parametrize("seed", [0, 1])
def test_parameter_drift_agrees_with_the_one_matrix_functions(seed):
    """parameter_drift runs matrix_drift, which calls the four functions tested above."""
    W = rand(12, 9, seed).float().double()          # fp32 values, as matrices() stores them
    W2 = (W + 0.2 * rand(12, 9, seed + 7)).float().double()
    r = 2                                             # ceil(0.2 · 9)
    got = drift.parameter_drift({"w": W}, {"w": W2}, rank_frac=0.2, q=0.1)["all"]
    assert got["nss_max"] == pytest.approx(nss(W, W2), rel=1e-10)
    angle = max(angles(W, W2, r, "left")[-1].item(), angles(W, W2, r, "right")[-1].item())
    assert got["angle_max"] == pytest.approx(angle, abs=1e-6)
    ov = overlap(W, W2, r, 0.1)
    assert got["iou_min"] == pytest.approx(ov["iou"]) and got["in_mask_mean"] == pytest.approx(ov["update_in_mask"])


def test_matrices_are_a_copy_not_a_view(tiny):
    model, _ = tiny
    m = copy.deepcopy(model)
    snap = drift.matrices(m)
    with torch.no_grad():
        m.model.embed_tokens.weight.add_(1.0)
    assert not torch.equal(snap["model.embed_tokens.weight"], m.model.embed_tokens.weight)
    assert "lm_head.weight" not in snap        # tied to the embeddings: counted once


def test_response_drift_cache_gives_the_same_numbers(tiny):
    model, tok = tiny
    a, b = ["\\boxed{1}", "<answer>A</answer>"], ["\\boxed{2}", "Action: add"]
    cache = {}
    first = drift.response_drift(model, tok, a, b, cache)
    assert len(cache) == 2
    assert drift.response_drift(model, tok, a, b, cache) == first == drift.response_drift(model, tok, a, b)


# ---- the forward KL on the new task (RL's Razor's law) against exact enumeration --------------------------
def small_lm(seed, vocab=5):
    """A random 1-layer Llama over 5 tokens (4 = EOS): small enough to list every response of up to 3 tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                      eos_token_id=vocab - 1, pad_token_id=vocab - 1)
    return LlamaForCausalLM(cfg).eval()


def every_response(vocab, eos, length):
    """Every response a length-limited sampler can produce: it stops at EOS or after `length` tokens."""
    out, frontier = [], [[]]
    for _ in range(length):
        grown = []
        for y in frontier:
            for v in range(vocab):
                (out if v == eos else grown).append(y + [v])
        frontier = grown
    return out + frontier


def sequence_logprob(model, prompt, y):
    """log π(y | prompt) by one forward of the unpadded sequence (no packing, no masks)."""
    logp = torch.log_softmax(model(torch.tensor([prompt + y])).logits[0].double(), -1)   # [P+T, V]
    return sum(float(logp[len(prompt) - 1 + t, v]) for t, v in enumerate(y))


def test_forward_kl_terms_average_to_the_exact_sequence_kl_by_enumeration():
    """Σ_y π_0(y|x) · term(y) over every response y equals KL(π_0 ‖ π_θ) = Σ_y π_0(y) log π_0(y)/π_θ(y), exactly:
    the per-position KL summed along y ~ π_0 is the sequence KL (chain rule), for each prompt."""
    base, moved = small_lm(0), small_lm(1)
    with torch.no_grad():
        for prompt in ([1, 2], [3, 0, 1]):
            ys = every_response(5, 4, 3)                      # 4 + 4·… : 84 responses of 1–3 tokens
            lp0 = [sequence_logprob(base, prompt, y) for y in ys]
            lp = [sequence_logprob(moved, prompt, y) for y in ys]
            assert sum(math.exp(a) for a in lp0) == pytest.approx(1.0, abs=1e-6)   # the list is complete
            exact = sum(math.exp(a) * (a - b) for a, b in zip(lp0, lp))
            terms = drift.forward_kl_terms(moved, base, [prompt] * len(ys), ys, pad_id=4, batch_size=16)
            estimate = sum(math.exp(a) * t for a, t in zip(lp0, terms))
            assert exact > 0.01 and estimate == pytest.approx(exact, rel=1e-4)
            # the same model: every term is 0
            assert max(abs(t) for t in drift.forward_kl_terms(base, base, [prompt] * 8, ys[:8], 4)) < 1e-6


def test_forward_kl_new_task_samples_the_base_once(tiny):
    model, tok = tiny
    recs = evaluate.benchmark_records("math", 3, 0)
    cache = {}
    same = drift.forward_kl_new_task(model, model, tok, recs, 2, 16, 0, 8, cache)
    assert same["n"] == 6 and abs(same["kl"]) < 1e-6 and len(cache) == 1
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.02 * torch.randn_like(p))
    first = cache[next(iter(cache))]
    d = drift.forward_kl_new_task(moved, model, tok, recs, 2, 16, 0, 8, cache)
    assert d["kl"] > 0 and cache[next(iter(cache))] is first and len(cache) == 1   # the base was not resampled
