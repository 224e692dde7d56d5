"""drift.py — why a method forgets, measured: parameter drift (A4–A6), response drift (A7),
the sequence KL to the base (the quantity of the forgetting law, B4), and collapse (A8).

continual.py calls `stage_drift` after every stage (against the base θ_0 and the previous stage) and
puts the numbers in results.json; `python tools/drift.py RUN_DIR` recomputes them for a finished run, and
`python tools/report.py RUN_DIR` tabulates them. The paper's §5 reading: SDPO drifts more than GRPO
in parameter space (larger spectral shift and subspace rotation, lower principal-mask overlap) and
in response space (lower base-vs-trained similarity, heavier lower tail).

Parameter drift compares every 2-D weight matrix W (base) with W' (trained):
    (A4) NSS = ‖σ(W') − σ(W)‖₂ / ‖σ(W)‖₂                         how much the spectrum moved
    (A5) largest principal angle between top-r singular subspaces    how much the directions rotated
    (A6) principal-mask overlap (IoU) and the share of ‖W' − W‖² inside W's principal mask
with r = ceil(rank_frac · min(m, n)) (default 10%) and the mask = the top q (default 10%) entries of
|U_r Σ_r V_rᵀ|. Summaries are per layer type (q_proj, mlp.up_proj, embed_tokens, ...): mean and max.
"""
import dataclasses
import math
import re
import sys
import time

import torch

import evaluate
from evaluate import collapse
from infra.flags import MASK_Q, RANK_FRAC
from infra.distributed import full_state_dict, gathered, is_main
from infra.checkpoints import load_responses, save_responses
from infra.models import load_model
from infra.speedups import SAMPLE_BATCH
from rollout import chat_messages, encode_chat, prompt_room, response_logits, sample, sampled_logprobs


# ----------------------------------------------------------------------------------------------
# Parameter drift (A4–A6), one matrix at a time
# ----------------------------------------------------------------------------------------------
def svd64(W):
    """The thin SVD in float64: (U [m, k], S [k] descending, Vh [k, n]), k = min(m, n)."""
    return torch.linalg.svd(W.double(), full_matrices=False)


def normalized_spectral_shift(S, S2):
    """(A4) NSS = ‖σ(W') − σ(W)‖₂ / ‖σ(W)‖₂, from the two spectra S = σ(W), S2 = σ(W') (descending)."""
    # (A4) ‖σ(W') − σ(W)‖₂ / ‖σ(W)‖₂
    return (torch.linalg.vector_norm(S2 - S) / torch.linalg.vector_norm(S)).item()


def principal_angles(B, B2):
    """(A5) Principal angles (degrees, ascending) between the subspaces spanned by the orthonormal
    columns of B and B2 [m, r]: the top-r left (U_r) or right (V_r) singular vectors of W and W'.

    cos θ_k = singular values of B_rᵀ B'_r. The largest angle (the last) is the one reported.
    """
    # (A5) cos θ_k = σ_k(U_rᵀ U'_r), clipped into [0, 1] against round-off
    cos = torch.linalg.svdvals(B.T @ B2).clamp(0.0, 1.0)                              # [r], descending
    return torch.rad2deg(torch.arccos(cos))                                           # ascending angles


def _top_mask(recon, q):
    """The top-q fraction (by count, at least one) of the entries of |recon|, as a bool mask."""
    k = max(1, math.ceil(q * recon.numel()))
    mask = torch.zeros(recon.numel(), dtype=torch.bool, device=recon.device)
    mask[recon.abs().flatten().topk(k).indices] = True
    return mask.view_as(recon)


def principal_mask(U, S, Vh, r, q):
    """(A6) Top-q fraction of the entries of |U_r Σ_r V_rᵀ|, as a bool mask [m, n] (U, S, Vh: svd64(W))."""
    # (A6) the rank-r reconstruction U_r Σ_r V_rᵀ
    return _top_mask((U[:, :r] * S[:r]) @ Vh[:r], q)                                   # [m, n]


def principal_mask_overlap(M, M2, update):
    """(A6) {'iou': |M ∩ M'| / |M ∪ M'|, 'update_in_mask': ‖(W' − W)·M‖² / ‖W' − W‖²} (None if W' = W).

    M, M2: the principal masks of W and W' [m, n]; update: W' − W [m, n].
    """
    # (A6) overlap of the two principal masks, intersection over union
    iou = ((M & M2).sum() / (M | M2).sum()).item()
    energy = update.pow(2).sum().item()
    # (A6) share of the update's energy inside the base model's principal mask
    inside = update.pow(2)[M].sum().item() / energy if energy > 0 else None
    return {"iou": iou, "update_in_mask": inside}


def matrix_drift(W, W2, r, q):
    """(A4–A6) for one matrix: {'nss', 'angle' (the largest principal angle of the left and right top-r
    subspaces, degrees), 'iou', 'in_mask'}. One SVD of each matrix feeds all three."""
    (U, S, Vh), (U2, S2, Vh2) = svd64(W), svd64(W2)
    left = principal_angles(U[:, :r], U2[:, :r])
    right = principal_angles(Vh[:r].T, Vh2[:r].T)
    overlap = principal_mask_overlap(principal_mask(U, S, Vh, r, q), principal_mask(U2, S2, Vh2, r, q),
                                     W2.double() - W.double())
    return {"nss": normalized_spectral_shift(S, S2), "angle": max(left[-1], right[-1]).item(),
            "iou": overlap["iou"], "in_mask": overlap["update_in_mask"]}


def layer_type(name):
    """'model.layers.2.self_attn.q_proj.weight' -> 'self_attn.q_proj'; 'model.embed_tokens.weight' -> 'embed_tokens'."""
    name = re.sub(r"\.weight$", "", name)
    name = re.sub(r"^(model\.)?(layers|h|blocks)\.\d+\.", "", re.sub(r"^model\.", "", name))
    return name


def matrices(model_or_state):
    """The 2-D weight matrices of a model or state dict, by name (a CPU fp32 copy, detached)."""
    sd = model_or_state.state_dict() if hasattr(model_or_state, "state_dict") else model_or_state
    out, seen = {}, set()
    for k, v in sd.items():
        if v.dim() == 2 and v.data_ptr() not in seen:   # tied embeddings: the one matrix, once
            seen.add(v.data_ptr())
            out[k] = v.detach().float().cpu().clone()
    return out


def parameter_drift(before, after, rank_frac=RANK_FRAC, q=MASK_Q, device="cpu"):
    """(A4–A6) for every 2-D weight matrix; summary per layer type and over all matrices.

    before, after: models or state dicts with the same names. Returns
      {'by_type': {type: {nss_mean, nss_max, angle_mean, angle_max, iou_mean, iou_min, in_mask_mean}},
       'all': the same over every matrix}
    angle: the largest principal angle of the left and right subspaces, in degrees. One SVD per
    matrix (float64, on `device`; use a GPU for billion-parameter models).
    """
    a, b = matrices(before), matrices(after)
    per = {}
    for name, W in a.items():
        if name not in b:
            continue
        W, W2 = W.to(device, torch.float64), b[name].to(device, torch.float64)
        r = max(1, math.ceil(rank_frac * min(W.shape)))
        per[name] = matrix_drift(W, W2, r, q)

    def summary(rows):
        def agg(key, f):
            vals = [r[key] for r in rows if r[key] is not None]
            return f(vals) if vals else None
        return {"nss_mean": agg("nss", lambda v: sum(v) / len(v)), "nss_max": agg("nss", max),
                "angle_mean": agg("angle", lambda v: sum(v) / len(v)), "angle_max": agg("angle", max),
                "iou_mean": agg("iou", lambda v: sum(v) / len(v)), "iou_min": agg("iou", min),
                "in_mask_mean": agg("in_mask", lambda v: sum(v) / len(v)), "matrices": len(rows)}

    types = {}
    for name, row in per.items():
        types.setdefault(layer_type(name), []).append(row)
    return {"by_type": {t: summary(rows) for t, rows in types.items()}, "all": summary(list(per.values()))}


# ----------------------------------------------------------------------------------------------
# Response drift (A7)
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def embed_texts(model, tok, texts, batch_size=SAMPLE_BATCH):
    """Mean-pooled last hidden states of each text (BOS + its tokens, right-padded): [N, H], float32.

    `model` is any HF model: the base causal LM by default, or an encoder loaded with AutoModel
    (--embed-model). No logits are built (`hidden_states`): for a 150k-token vocabulary they would be most
    of the memory. batch_size texts at a time (--sample-batch).
    """
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        ids = [([tok.bos_token_id] if tok.bos_token_id is not None else []) +
               tok(t, add_special_tokens=False)["input_ids"] for t in chunk]
        ids = [s if s else [tok.pad_token_id] for s in ids]
        L = max(len(s) for s in ids)
        x = torch.full((len(ids), L), tok.pad_token_id, dtype=torch.long)
        m = torch.zeros((len(ids), L), dtype=torch.long)
        for i, s in enumerate(ids):
            x[i, :len(s)], m[i, :len(s)] = torch.tensor(s), 1
        x, m = x.to(device), m.to(device)
        h = hidden_states(model, x, m)                                                               # [b, L, H]
        w = m.unsqueeze(-1).float()
        out.append(((h * w).sum(1) / w.sum(1)).cpu())                                                # [b, H]
    return torch.cat(out)


def hidden_states(model, ids, mask):
    """The last hidden states: [b, L, H] float32. A causal LM runs whole (through its root, as a sharded
    model requires) with its LM head on one position only (`logits_to_keep=1`): its hidden_states[-1]
    (after the final norm) without the [b, L, V] logits. An encoder (--embed-model) gives them directly."""
    if model.get_output_embeddings() is None:
        return model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
    return model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                 logits_to_keep=1).hidden_states[-1].float()


def quantile(values, p):
    """The p-quantile (0..1) by linear interpolation between order statistics."""
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def embed_cached(embedder, tok, texts, cache, batch_size=SAMPLE_BATCH):
    """embed_texts, remembered per list of texts (the base samples are compared at every stage)."""
    if cache is None:
        return embed_texts(embedder, tok, texts, batch_size)
    key = tuple(texts)   # the texts themselves: an exact key
    if key not in cache:
        cache[key] = embed_texts(embedder, tok, texts, batch_size)
    return cache[key]


def response_drift(embedder, tok, texts_a, texts_b, cache=None, batch_size=SAMPLE_BATCH):
    """(A7) cos(e(y_a), e(y_b)) for responses to the same prompts (paired by index):
    {'mean', 'p5', 'p25', 'p50', 'n'}. cache: optional dict that keeps embeddings between calls."""
    if len(texts_a) != len(texts_b):
        raise ValueError(f"response drift needs paired responses, got {len(texts_a)} and {len(texts_b)}")
    if not texts_a:
        return {"mean": None, "p5": None, "p25": None, "p50": None, "n": 0}
    ea, eb = embed_cached(embedder, tok, texts_a, cache, batch_size), embed_cached(embedder, tok, texts_b, cache, batch_size)
    # (A7) cosine similarity of the embeddings, one per pair
    cos = torch.nn.functional.cosine_similarity(ea, eb, dim=-1).tolist()
    return {"mean": sum(cos) / len(cos), "p5": quantile(cos, 0.05), "p25": quantile(cos, 0.25),
            "p50": quantile(cos, 0.5), "n": len(cos)}


# ----------------------------------------------------------------------------------------------
# KL to the base (the quantity of the forgetting law, B4)
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def kl_to_base(model, base, tok, records, samples=2, max_new_tokens=64, seed=0, batch_size=SAMPLE_BATCH):
    """Monte-Carlo sequence KL(π_θ ‖ π_0) on the records' prompts:

        KL ≈ (1/N) Σ_i Σ_t [log π_θ(y_t | h_t) − log π_0(y_t | h_t)],   y_i ~ π_θ (temperature 1)

    Returns {'kl', 'stderr', 'n'} in nats per response (responses cut at max_new_tokens, so it is
    the KL of the length-limited policies). The sampling RNG is forked: training is not disturbed.
    batch_size (--sample-batch): sequences sampled and scored at once; each chunk's log-probs are taken
    from its own logits, so no [N, T, V] tensor of all the samples ever exists.
    """
    return kl_stats(kl_terms(model, base, tok, records, samples, max_new_tokens, seed, batch_size))


def kl_stats(terms):
    """{'kl', 'stderr', 'n'}: the mean of the per-sequence terms and its standard error."""
    n = len(terms)
    mean = sum(terms) / n
    var = sum((d - mean) ** 2 for d in terms) / max(1, n - 1)
    return {"kl": mean, "stderr": math.sqrt(var / n), "n": n}


@torch.no_grad()
def kl_terms(model, base, tok, records, samples, max_new_tokens, seed, batch_size):
    """Σ_t [log π_θ(y_t | h_t) − log π_0(y_t | h_t)] for each of `samples` responses y ~ π_θ per record
    (record by record): the terms whose mean is the sequence KL (kl_to_base). log π_θ is recorded as each
    token is drawn (rollout.sample's with_logprobs), log π_0 is one forward of the base."""
    prompts = [encode_chat(tok, chat_messages(r)) for r in records]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        responses, logp = sample(model, tok, prompts, samples, max_new_tokens, temperature=1.0, top_p=1.0,
                                 batch_size=batch_size, with_logprobs=True)
    expanded = [p for p in prompts for _ in range(samples)]
    terms = []
    for s in range(0, len(expanded), batch_size):
        p, r = expanded[s:s + batch_size], responses[s:s + batch_size]
        lg0, mask, targets = response_logits(base, p, r, tok.pad_token_id, as_float=False)   # [b, T, V]
        lp0 = sampled_logprobs(lg0, targets)                                                 # [b, T]
        del lg0
        lp = torch.zeros_like(lp0)                                                           # [b, T]
        for j, row in enumerate(logp[s:s + batch_size]):
            lp[j, :len(row)] = torch.tensor(row)
        # log π_θ(y) − log π_0(y), summed over the response tokens (EOS included)
        terms += ((lp - lp0) * mask).sum(-1).tolist()
    return terms


def kl_to_base_per_benchmark(model, base, tok, kl_records, samples, max_new_tokens, seed, batch_size):
    """kl_to_base of every benchmark ({name: records}), all sampled together in as few `generate` calls as
    batch_size allows: {name: {'kl', 'stderr', 'n'}}."""
    names = list(kl_records)
    terms = kl_terms(model, base, tok, [r for b in names for r in kl_records[b]], samples, max_new_tokens, seed,
                     batch_size)
    out, start = {}, 0
    for b in names:
        n = len(kl_records[b]) * samples
        out[b] = kl_stats(terms[start:start + n])
        start += n
    return out


# ----------------------------------------------------------------------------------------------
# The forward KL on the new task (RL's Razor's law: forgetting tracks E_{x~D_k}[KL(π_0 ‖ π_θ)])
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def forward_kl_terms(model, base, prompts, responses, pad_id, batch_size=SAMPLE_BATCH):
    """(RL's Razor's law, beside B4's reverse KL) For each response y ~ π_0 of its prompt: Σ_t KL(π_0(·|h_t) ‖ π_θ(·|h_t)) over its tokens
    (EOS included), h_t = prompt + y_<t. Its mean over y ~ π_0 is the sequence KL(π_0 ‖ π_θ) of the
    length-limited policies (the chain rule: each position's next token is drawn from π_0(·|h_t)), with less
    variance than Σ_t [log π_0(y_t) − log π_θ(y_t)], since each position's whole distribution is summed.
    One teacher-forced pass of each model per chunk of `batch_size` sequences."""
    terms = []
    for s in range(0, len(prompts), batch_size):
        p, r = prompts[s:s + batch_size], responses[s:s + batch_size]
        lg0, mask, _ = response_logits(base, p, r, pad_id)                  # [b, T, V], [b, T]
        lg, _, _ = response_logits(model, p, r, pad_id)                     # [b, T, V]
        logp0, logp = torch.log_softmax(lg0.float(), -1), torch.log_softmax(lg.float(), -1)   # [b, T, V]
        # KL(π_0 ‖ π_θ) at each position: Σ_v π_0(v|h_t) [log π_0(v|h_t) − log π_θ(v|h_t)]       [b, T]
        per_token = (logp0.exp() * (logp0 - logp)).sum(-1)
        terms += (per_token * mask).sum(-1).tolist()
    return terms


def base_samples(base, tok, records, samples, max_new_tokens, seed, batch_size, cache):
    """(prompts, y ~ π_0): `samples` responses of the base per record at temperature 1, drawn once (seeded, the
    training RNG untouched) and kept in `cache` for every later checkpoint scored on the same records."""
    key = (tuple(r["prompt"] for r in records), samples, max_new_tokens, seed)
    if key not in cache:
        prompts = [encode_chat(tok, chat_messages(r)) for r in records]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            responses = sample(base, tok, prompts, samples, max_new_tokens, temperature=1.0, top_p=1.0,
                               batch_size=batch_size)
        cache[key] = ([p for p in prompts for _ in range(samples)], responses)
    return cache[key]


def forward_kl_new_task(model, base, tok, records, samples, max_new_tokens, seed, batch_size, cache):
    """E_{x~D_k}[KL(π_0 ‖ π_θ)] on the new task's (the stage's own domain's) test prompts: {'kl', 'stderr', 'n'},
    nats per response; the base's samples are drawn once and cached, each checkpoint scored by a forward pass."""
    prompts, responses = base_samples(base, tok, records, samples, max_new_tokens, seed, batch_size, cache)
    return kl_stats(forward_kl_terms(model, base, prompts, responses, tok.pad_token_id, batch_size))


# ----------------------------------------------------------------------------------------------
# One stage, as continual.py and the CLI use it
# ----------------------------------------------------------------------------------------------
def stage_drift(model, base, prev_state, responses, base_responses, prev_responses, embedder, embed_tok,
                tok, kl_records, args, embed_cache=None, weights=None, domain=None, base_cache=None):
    """Every drift figure of one trained model θ_k.

    base: θ_0 (a model); prev_state: θ_{k−1}'s 2-D matrices (None for k = 1: then "vs previous" = vs base).
    responses / base_responses / prev_responses: {benchmark: {'texts': [...], 'hit_limit': [...]}}, the
    evaluation samples of θ_k, θ_0, θ_{k−1} on the same prompts in the same order.
    kl_records: {benchmark: records} for kl_to_base.
    weights: optional (θ_k's matrices, θ_0's matrices), whole and fp32, for models whose own parameters
    are sharded (torchrun); by default they are read from `model` and `base`.
    domain: the stage's own domain; when it is one of kl_records' benchmarks, the forward KL on it is measured too
    (forward_kl_new_task; base_cache keeps the base's samples across stages).
    """
    device = next(model.parameters()).device
    now, zero = weights if weights is not None and weights[0] is not None else (model, base)
    out = {"params_vs_base": parameter_drift(zero, now, args.rank_frac, args.mask_q, device),
           "params_vs_prev": parameter_drift(prev_state if prev_state is not None else zero, now,
                                             args.rank_frac, args.mask_q, device)}
    names = list(responses)
    texts = [t for b in names for t in responses[b]["texts"]]
    cache = {} if embed_cache is None else embed_cache   # this stage's samples are embedded once, the base's once per run

    def embedded(resp):   # (A7) the first --embed-samples of each prompt's k responses, every benchmark
        return [t for b in names for t in first_samples(resp[b]["texts"], args.eval_k, args.embed_samples)]
    out["responses_vs_base"] = response_drift(embedder, embed_tok, embedded(base_responses), embedded(responses),
                                              cache, args.sample_batch)
    prev = prev_responses if prev_responses is not None else base_responses
    out["responses_vs_prev"] = response_drift(embedder, embed_tok, embedded(prev), embedded(responses), cache,
                                              args.sample_batch)
    out["kl_to_base"] = kl_to_base_per_benchmark(model, base, tok, kl_records, args.kl_samples, args.max_new_tokens,
                                                 args.eval_seed, args.sample_batch)
    out["kl_to_base_mean"] = sum(v["kl"] for v in out["kl_to_base"].values()) / max(1, len(out["kl_to_base"]))
    if domain in kl_records:
        out["forward_kl_new"] = forward_kl_new_task(model, base, tok, kl_records[domain], args.kl_samples,
                                                    args.max_new_tokens, args.eval_seed, args.sample_batch,
                                                    {} if base_cache is None else base_cache)
    out["collapse"] = collapse(texts, [h for b in names for h in responses[b]["hit_limit"]])
    return out


def first_samples(texts, k, m):
    """The first m of each prompt's k responses (texts [N·k], prompt by prompt); m = 0: all of them."""
    return [t for i, t in enumerate(texts) if m <= 0 or i % k < m]


def load_embedder(name, base, tok, device):
    """(model, tokenizer) that embeds responses: the base model itself, or an HF encoder by name."""
    if not name:
        return base, tok
    from transformers import AutoModel, AutoTokenizer
    etok = AutoTokenizer.from_pretrained(name)
    if etok.pad_token_id is None:
        etok.pad_token = etok.eos_token
    return AutoModel.from_pretrained(name).to(device).eval(), etok


# ----------------------------------------------------------------------------------------------
# Drift across the stages of a continual run (continual.py calls these once per stage)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class DriftMeter:
    """What the drift measurements (A4–A8) keep across a run's stages. want: drift is measured (not --no-drift);
    measure: this process measures it (rank 0); the rest only where measure is set."""
    want: bool
    measure: bool
    base_state: dict = None       # θ_0's weight matrices, whole, fp32 (A4–A6)
    embedder: object = None       # the response embedder and its tokenizer (A7)
    embed_tok: object = None
    kl_records: dict = None       # each benchmark's test prompts for the KL to the base (B4)
    base_resp: dict = None        # θ_0's evaluation responses
    cache: dict = dataclasses.field(default_factory=dict)          # response embeddings (the base's reused each stage)
    base_samples: dict = dataclasses.field(default_factory=dict)   # θ_0's samples on each stage's domain (forward KL)


def drift_meter(args, base_model, tok, benchmarks, run_dir, device):
    """The run's DriftMeter: the base's weights and responses, the response embedder, the KL prompts. Measured by
    rank 0 alone, from the whole fp32 weights (gathered by every rank) and, under torchrun, with every rank's
    models gathered so that rank 0's forwards need no collective."""
    meter = DriftMeter(want=not args.no_drift, measure=not args.no_drift and is_main())
    meter.base_state = matrices(full_state_dict(base_model)) if meter.want else None
    if meter.measure:
        meter.embedder, meter.embed_tok = load_embedder(args.embed_model, base_model, tok, device)
        room = prompt_room(base_model, args.max_new_tokens)
        meter.kl_records = {b: evaluate.benchmark_records(b, args.eval_n, args.eval_seed, tok, args.max_prompt_len,
                                                          room=room) for b in benchmarks}
        meter.base_resp = load_responses(run_dir, "base")
    return meter


def weights_before_stage(meter, model, done, args, resume):
    """θ_{k−1}'s matrices, for "drift vs the previous stage" (from disk when resuming mid-stage)."""
    if not meter.want or resume:
        return None if not meter.measure else matrices(
            load_model(done[-1]["checkpoint"] if done else args.model, "cpu", "fp32")[0])
    return matrices(full_state_dict(model))


def measure_drift(meter, model, base_model, prev_state, resp, run_dir, run_name, k, tok, args, domain=None):
    """Save stage k's evaluation responses, then (A4–A8) its drift vs θ_0 and vs θ_{k−1}, and the forward KL on
    the stage's own domain (None with --no-drift)."""
    if is_main():
        save_responses(run_dir, f"{run_name}-stage{k + 1}", resp)
    measured = None
    weights = matrices(full_state_dict(model)) if meter.want else None   # θ_k, whole, fp32
    with gathered(model, base_model):
        if meter.measure:
            t1 = time.time()
            prev_resp = load_responses(run_dir, f"{run_name}-stage{k}") if k > 0 else None
            measured = stage_drift(model, base_model, prev_state, resp, meter.base_resp, prev_resp,
                                   meter.embedder, meter.embed_tok, tok, meter.kl_records, args,
                                   meter.cache, weights=(weights, meter.base_state), domain=domain,
                                   base_cache=meter.base_samples)
            forward = measured.get("forward_kl_new")
            print(f"{run_name} stage {k + 1} drift: NSS vs base "
                  f"{measured['params_vs_base']['all']['nss_mean']:.4f}, response cos vs base "
                  f"{measured['responses_vs_base']['mean']:.3f}, KL to base "
                  f"{measured['kl_to_base_mean']:.2f} nats" + ("" if forward is None else
                  f", forward KL on {domain} {forward['kl']:.3f}") + f" ({time.time() - t1:.0f}s)")
    return measured


if __name__ == "__main__":   # (this file is the drift measures; continual.py calls them, tools/drift.py reruns them)
    print("error: a finished run's drift is recomputed by python tools/drift.py RUN_DIR", file=sys.stderr)
    sys.exit(2)
