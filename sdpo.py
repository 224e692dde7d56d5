"""sdpo.py — Self-Distillation Policy Optimization, SPEC (S1)–(S8), with the paper's teacher schedules (T1)–(T3).

    python continual.py --method sdpo --stages math --alpha 0.05         # EMA teacher, the paper's SDPO_5%
    python continual.py --method sdpo --stages math --alpha 0            # frozen teacher, SDPO_0
    python continual.py --method sdpo --stages math --refresh-every 20   # StableSDPO: refresh-and-freeze

One step: sample G responses per prompt and grade them (rollout.collect, as GRPO). For response i
the *teacher* is the same network (a separate copy of its weights, θ_T) shown the prompt plus the
first successful sibling answer (S1). The teacher scores the student's own sampled tokens (S2); the
student minimises the generalised Jensen–Shannon divergence to the teacher's next-token
distribution at every response token (S3–S5). After each optimizer step the teacher follows the
student by EMA (T1) or by periodic refresh (T2); in continual training it restarts from each
stage's starting student, or carries the previous stage's teacher (T3, continual.py). Options the
release has: token masking (S7, --mask-ratio) and environment feedback (S8, --feedback). One
optimizer step per batch, as in the release; the loss is the mean over all responses of each
response's token-mean (docs/PROTOCOL.md).

Simplifications, on purpose:
* The SDPO loss *replaces* the policy-gradient loss (as SPEC S5 says); no reference KL, no ratio.
* Only responses with a teacher signal (m_i = 1) are run through the student and the teacher:
  the others contribute nothing to the loss, so their forward passes would be wasted.
* Student entropy is logged over the distilled responses (the ones that were run).
"""
import dataclasses
import sys
from typing import Literal

import torch

from infra.knobs import knob, must
from world import graders
from infra.distributed import check_weights, clone_model
from rollout import (batch_positions, chat_messages, encode_chat, fill_reprompt, logsumexp_fp32, micro_batches,
                     response_logits, strip_think, token_entropy)

# SDPO's knobs, one field each (infra/knobs.py): the flag (--refresh-every for refresh_every), its default and the
# --help text; the values allowed are checked in __post_init__. The paper's first (--help), then the release's rules
# the paper leaves implicit (rule=True, --help-all). The method is handed one instance, `cfg`
# (experiment/configurations.config_of), and reads its knobs there. SETTINGS name a configuration (run_name).
@dataclasses.dataclass(frozen=True)
class SDPOConfig:
    """SDPO's knobs: the paper's (--help), then the release's rules (--help-all)."""
    alpha: float = knob(0.05, "teacher EMA rate α (T1); 0 = frozen teacher (continual.py: a comma list sweeps)",
                        sweep=True)
    beta: float = knob(0.5, "GJSD mix β (S3): 0 forward KL, 0.5 JS, 1 reverse KL")
    refresh_every: int = knob(0, "StableSDPO: refresh the teacher every K steps (T2); 0 = off")
    gamma: float = knob(1.0, "refresh rate γ (T2); 1 = hard restart")
    topk: int | None = knob(None, "the student's top-k ids + a tail (S4); 0 = all; default 100 (tiny: all)", rule=True)
    cot: bool = knob(False, "SDPO-CoT: keep <think> spans in the demonstration (S6)", rule=True)
    mask_ratio: float = knob(0.0, "token masking (S7): drop each distilled token with this chance; 0 = off", rule=True)
    feedback: Literal["release", "on", "off"] = knob("release", "environment feedback (S8); release = per domain, as "
                                                     "the release", rule=True)
    teacher_init: Literal["restart", "carry"] = knob("restart", "SDPO's teacher at a stage start (T3): the student's "
                                                                "copy, or carried", rule=True)
    teacher_mix: float = knob(1.0, "a of (T3) θ_T ← a·θ_ckpt + (1−a)·θ_student, with --teacher-init carry", rule=True)

    def __post_init__(self):   # the values allowed, checked before any work (infra/knobs.must: one error line)
        must(0 <= self.alpha <= 1, "--alpha must be in [0, 1]")
        must(0 <= self.beta <= 1, "--beta must be in [0, 1]")
        must(self.refresh_every >= 0, "--refresh-every must be >= 0")
        must(0 < self.gamma <= 1, "--gamma must be in (0, 1]")
        must(self.topk is None or self.topk >= 0, "--topk must be int >= 0")
        must(0 <= self.mask_ratio < 1, "--mask-ratio must be in [0, 1)")
        must(0 <= self.teacher_mix <= 1, "--teacher-mix must be in [0, 1]")


SETTINGS = ("alpha", "refresh_every", "gamma", "cot", "mask_ratio", "feedback")


def feedback_on(mode, record):
    """Is (S8) on for a response to this record? mode: "release" (the release's rule for the record's data kind, a
    field of the world's training records: world/tasks.with_release_rules), "on", "off", or a bool."""
    if mode == "release":
        return record.get("release_feedback", True)
    return mode is True or mode == "on"


def build_teacher_prompts(records, texts, rewards, group_size, cot=False, feedback=False, position=None, notes=None):
    """(S1) The teacher's user turn for every response, and the signal mask m; (S8) with feedback.

    records, texts: [N*G] (grouped contiguously); rewards: [N*G] (1.0 = success).
    position: each response's place in the batch's order (rollout.batch_order; the release's is
    length-balanced); default: sampling order.
    For response i: j* = the first j ≠ i in i's group with r_j = 1, first in that order. If there is none, m_i = 0 and the
    teacher text is None. The demonstration is y_{j*} with <think> spans stripped unless `cot` (S6).
    feedback (S8, the release's environment feedback, only where no sibling succeeded; a bool or a mode of
    `feedback_on`): a response without j* whose grader has something to say about it gets a teacher
    prompt with that feedback instead of a demonstration, and m_i = 1.
    notes: what the grader said about each response [N*G] ("" = nothing), as rollout.collect records it;
    None: asked of the grader here (graders.feedback).
    Returns (teacher user texts [N*G], m [N*G] float tensor, j* per response or None; a j* of None with
    m_i = 1 is a response distilled by feedback).

    Example, G = 3, rewards [0, 1, 1]: response 0 -> j*=1; response 1 -> j*=2 (itself excluded);
    response 2 -> j*=1. Rewards [1, 0, 0]: response 0 has no other success -> m_0 = 0.
    """
    position = list(range(len(records))) if position is None else position
    user_texts, mask, demo_of = [], [], []
    for i, rec in enumerate(records):
        g0 = (i // group_size) * group_size
        # (S1) the first successful *other* response of the same group, in the batch's order
        successes = [j for j in range(g0, g0 + group_size) if j != i and float(rewards[j]) == 1.0]
        j_star = min(successes, key=lambda j: position[j]) if successes else None
        demo_of.append(j_star)
        if j_star is not None:
            demo = texts[j_star] if cot else strip_think(texts[j_star])  # (S6)
            user_texts.append(fill_reprompt(rec["prompt"], demo))
            mask.append(1.0)
            continue
        # (S8) no successful sibling: the grader's feedback on this response's own failed attempt
        note = None
        if feedback_on(feedback, rec) and float(rewards[i]) != 1.0:
            note = graders.feedback(rec, texts[i]) if notes is None else (notes[i] or None)
        user_texts.append(None if note is None else fill_reprompt(rec["prompt"], feedback=note))
        mask.append(0.0 if note is None else 1.0)  # (S1) nothing to show -> no distillation signal
    return user_texts, torch.tensor(mask), demo_of


@torch.no_grad()
def teacher_logits(teacher, teacher_prompt_ids, response_ids, pad_id, as_float=True):
    """(S2) log-odds of the teacher θ_T at every response position [b, T, V], under no-grad: the teacher reads
    its own prompt followed by the student's *sampled token ids* (never re-tokenised text). rollout.pack
    left-pads prompts and puts every response at the same columns, so teacher and student positions line up
    on the last |y| tokens by construction. as_float False: in the compute dtype (bf16 on GPUs: top-k, S4)."""
    # (S2) the teacher's prompt + the student's own response ids, one forward
    return response_logits(teacher, teacher_prompt_ids, response_ids, pad_id, as_float=as_float)[0]


def kl_from_logp(p_logp, q_logp):
    """(A1) KL(P‖Q) = Σ_v P(v) (log P(v) − log Q(v)) over the last dimension. [..., V] -> [...]."""
    # (A1) Σ_v P (log P − log Q)
    return (p_logp.exp() * (p_logp - q_logp)).sum(-1)


def log_mixture(student_logp, teacher_logp, beta):
    """log M for M = β T + (1−β) S, in a form that is exact when T == S (then log M == log S bit for bit).

    With d = log T − log S:  log M = log S + log1p(β·expm1(d))          where d ≤ 0,
                             log M = log T + log1p((1−β)·expm1(−d))     where d > 0  (no overflow).
    """
    d = teacher_logp - student_logp
    from_s = student_logp + torch.log1p(beta * torch.expm1(d.clamp(max=0)))
    from_t = teacher_logp + torch.log1p((1 - beta) * torch.expm1((-d).clamp(max=0)))
    return torch.where(d <= 0, from_s, from_t)


def generalized_jsd(student_logp, teacher_logp, beta=0.5):
    """(S3) GJSD_β(S, T) = β KL(T‖M) + (1−β) KL(S‖M),  M = β T + (1−β) S, per position.

    student_logp, teacher_logp: [..., V] log-probabilities (computed in float32). Returns [...].
    Endpoints special-cased: β = 0 -> KL(T‖S) (forward), β = 1 -> KL(S‖T) (reverse).
    β = 0.5 is the symmetric Jensen–Shannon divergence. ≥ 0, and 0 exactly when S == T.
    """
    S, T = student_logp.float(), teacher_logp.float()
    if beta == 0:
        # (S3) β = 0: forward KL(T‖S)
        return kl_from_logp(T, S)
    if beta == 1:
        # (S3) β = 1: reverse KL(S‖T)
        return kl_from_logp(S, T)
    # (S3) log M, M = β T + (1−β) S
    log_m = log_mixture(S, T, beta)                                  # [..., V]
    # (S3) GJSD_β = β KL(T‖M) + (1−β) KL(S‖M)
    return beta * kl_from_logp(T, log_m) + (1 - beta) * kl_from_logp(S, log_m)


def log1m_exp(log_p):
    """log(1 − p) from log p ≤ 0, floored at log(1e-30) so an (almost) empty tail stays finite."""
    return torch.log(torch.clamp(-torch.expm1(log_p), min=1e-30))


def topk_logprobs(student_logits, teacher_logits, k):
    """(S4) Keep the student's top-k ids, take both distributions' log-probabilities there, and add one
    tail bucket log(1 − Σ_k p): [..., V] -> [..., k+1], both still distributions (with k = V the tail is
    empty and GJSD is unchanged). From raw logits, without a full-vocabulary fp32 log-softmax on either side.

    log p(v) = x_v − logsumexp(x): only the k gathered values and one fp32 logsumexp per position are
    made (rollout.logsumexp_fp32: chunk by chunk with the speed-ups), so at 8k tokens × 152k ids the student keeps its
    logits (bf16 on GPUs) and nothing else of size V. The same numbers as
    a brute-force top-k of log_softmax(S), log_softmax(T) up to float rounding (tests/equations/test_sdpo.py).
    student_logits, teacher_logits: [..., V]. Returns ([..., k+1], [..., k+1]).
    """
    ids = student_logits.topk(k, dim=-1).indices                            # [..., k] the student's top-k
    # (S4) log p = x − logsumexp(x), on the student's top-k ids only
    s_k = student_logits.gather(-1, ids).float() - logsumexp_fp32(student_logits).unsqueeze(-1)   # [..., k]
    with torch.no_grad():
        t_k = teacher_logits.gather(-1, ids).float() - logsumexp_fp32(teacher_logits).unsqueeze(-1)
    # (S4) tail bucket log(1 − Σ_k p)
    s_tail = log1m_exp(torch.logsumexp(s_k, -1, keepdim=True))              # [..., 1]
    t_tail = log1m_exp(torch.logsumexp(t_k, -1, keepdim=True))              # [..., 1]
    return torch.cat([s_k, s_tail], -1), torch.cat([t_k, t_tail], -1)


def sdpo_loss(per_token, token_mask, num_tokens=None, mode="token-mean", num_seqs=None):
    """(S5) The SDPO loss: the per-token GJSD [b, T] (S3) reduced over the distilled tokens (token_mask
    [b, T] = m_i × kept × is-a-response-token):

    token-mean:          L = Σ_{i,t} mask · GJSD_β(S_{i,t}, sg[T_{i,t}]) / Σ_{i,t} mask          (SPEC S5)
    seq-mean-token-mean: L = (1/B) Σ_i (Σ_t mask · GJSD / Σ_t mask)   over *all* B responses, a response
                         without signal counting 0: what the release computes (docs/PROTOCOL.md)
    num_tokens / num_seqs: the whole batch's counts (distilled tokens / all responses) when this is one
    micro-batch of it. Example (seq-mean-token-mean): 4 responses, one with signal and mean GJSD 0.2 ->
    L = 0.2 / 4 = 0.05.
    """
    mask = token_mask.float()                                        # [b, T]
    if mode == "seq-mean-token-mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)   # [b] each response's token-mean
        # (S5, release) mean over all responses of each response's token-mean
        return per_seq.sum() / (per_seq.shape[0] if num_seqs is None else num_seqs)
    if mode != "token-mean":
        raise ValueError(f"unknown aggregation '{mode}' (token-mean, seq-mean-token-mean)")
    denom = mask.sum().clamp(min=1) if num_tokens is None else num_tokens
    # (S5) token-mean over distilled tokens
    return (per_token * mask).sum() / denom


def mask_seed(step_draw, index):
    """The seed of response `index`'s token mask (S7): the step's draw and the response's place in the batch."""
    return step_draw * 1_000_003 + index


def token_keep_masks(lengths, mask_ratio, offset=0):
    """(S7) Token masking: each distilled token is kept with probability 1 − r (the release's `mask_ratio`).

    lengths: |y_i| of this process's responses; offset: the whole-batch index of its first. Returns one
    bool tensor [|y_i|] per response. Response j's draw has its own generator, seeded from the step's
    RNG (train.run_steps seeds it per step, the same in every process) and j, so the masks are
    reproducible and do not depend on the micro-batch split or on how many processes share the batch.
    mask_ratio = 0 keeps every token.
    """
    if mask_ratio <= 0:
        return [torch.ones(n, dtype=torch.bool) for n in lengths]
    base = int(torch.randint(0, 2**31 - 1, ()))
    gens = [torch.Generator().manual_seed(mask_seed(base, offset + i)) for i in range(len(lengths))]
    # (S7) keep_{i,t} = [u_{i,t} ≥ r],  u ~ U(0, 1)
    return [torch.rand(n, generator=g) >= mask_ratio for n, g in zip(lengths, gens)]


# ----------------------------------------------------------------------------------------------
# Teacher schedules
# ----------------------------------------------------------------------------------------------
def init_teacher(student):
    """A separate, frozen-for-autograd copy of the student's weights."""
    return clone_model(student).eval().requires_grad_(False)   # (sharded the same way under torchrun)


@torch.no_grad()
def stage_teacher(student, ckpt_teacher=None, mix=1.0):
    """(T3) The teacher at the start of a stage: θ_T ← a·θ_ckpt + (1−a)·θ_student (the release's
    `teacher_init_alpha` = a = mix, `teacher_path` = θ_ckpt).

    ckpt_teacher None: θ_ckpt = the stage's starting student, so the teacher restarts from it (whatever a).
    ckpt_teacher = the previous stage's final teacher: a = 1 carries it over, 0 < a < 1 mixes the two.
    """
    teacher = init_teacher(student)
    if ckpt_teacher is None or mix == 0:
        return teacher
    for p_t, p_c in zip(teacher.parameters(), ckpt_teacher.parameters()):
        # (T3) θ_T ← a·θ_ckpt + (1−a)·θ_student   (p_t holds θ_student here)
        p_t.mul_(1 - mix).add_(p_c.to(p_t.dtype), alpha=mix)
    return teacher


@torch.no_grad()
def move_teacher(teacher, student, rate):
    """θ_T ← (1−rate) θ_T + rate·θ, parameter by parameter: rate 0 leaves the teacher bit-identical,
    rate 1 copies the student exactly. T1 (rate α, every step) and T2 (rate γ, every K steps) both use it."""
    if rate == 0:
        return teacher
    check_weights(student)   # a non-finite student: NonFiniteError, and the teacher is left as it was
    # (torchrun: teacher and student are cut the same way, so each process moves its own part of θ_T
    # toward its own part of θ — no communication)
    for p_t, p_s in zip(teacher.parameters(), student.parameters()):
        if rate == 1:
            p_t.copy_(p_s)  # a hard restart, exact
        else:
            p_t.mul_(1 - rate).add_(p_s.detach().to(p_t.dtype), alpha=rate)
    return teacher


def ema_update(teacher, student, alpha):
    """(T1) The EMA teacher after every optimizer step. α = 0: frozen (SDPO_0); α = 1: a copy."""
    # (T1) θ_T ← (1−α) θ_T + α θ
    return move_teacher(teacher, student, alpha)


def teacher_after_step(teacher, student, step, alpha, refresh_every=0, gamma=1.0):
    """The teacher schedule after optimizer step `step` (1-based).

    refresh_every = 0: (T1) EMA with rate α after every step.
    refresh_every = K: (T2) refresh-and-freeze: frozen, except every K steps θ_T ← (1−γ) θ_T + γ θ.
    Returns True at a refresh point (the log marks it, and curves.png draws it), else False.
    """
    if refresh_every > 0:
        if step % refresh_every == 0:
            # (T2) refresh point: θ_T ← (1−γ) θ_T + γ θ
            move_teacher(teacher, student, gamma)
            return True
        return False
    ema_update(teacher, student, alpha)   # (T1)
    return False


# ----------------------------------------------------------------------------------------------
# The SDPO update on one graded batch
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SDPOPlan:
    """What prepare_batch gives the loss for one batch (train.update reads `steps`, infra/distributed.whole_batch
    sums each step's counts and `counts` over the processes)."""
    steps: list        # the one optimizer step: {"micro_batches": [index lists, distilled ones], "n_tok", "n_seq"}
    counts: dict       # what the logged shares are computed from (signal_counts)
    user_texts: list   # (S1, S8) the teacher's user turn of each response; None where it has nothing to show
    token_keep: list   # (S7) the tokens distilled, [|y_i|] bools per response


def prepare_batch(model, teacher, batch, cfg, args, tok, step):
    """Teacher prompts (S1, S8) and token masking (S7) for one batch, and its one optimizer step: the
    micro-batches of the responses with a teacher signal, whose loss micro_batch_loss computes (S2–S5).
    cfg: SDPO's knobs (SDPOConfig); args: the run's (the batch order, the micro-batch size).

    A step in which no response has a signal still steps AdamW, with zero gradients, as the release does:
    the weights keep moving on momentum (docs/PROTOCOL.md, rule 2b).
    """
    B = len(batch["response_ids"])
    # the batch's order (the release's length-balanced one by default): it decides which success is "first"
    position = batch_positions(batch, batch.get("blocks", 1), args.mini_batch_order)
    # (S1, S8) the teacher's user turn for each response; has_demo[i] = m_i = 1 where it has something to show
    user_texts, has_demo, demo_of = build_teacher_prompts(batch["records"], batch["texts"], batch["rewards"],
                                                          batch["group_size"], cfg.cot, cfg.feedback, position,
                                                          batch.get("feedback"))
    lengths = [len(r) for r in batch["response_ids"]]
    # (S7) the tokens distilled this step (every token unless --mask-ratio); response i's draw is seeded
    # by its index in the whole batch, so the masks do not depend on how it is split
    token_keep = token_keep_masks(lengths, cfg.mask_ratio, batch.get("first_index", 0))  # [|y_i|] bools, per response
    n_kept = [int(k.sum()) for k in token_keep]                                     # tokens kept, per response
    distilled = [i for i in range(B) if has_demo[i] > 0 and n_kept[i] > 0]          # the responses in the loss
    n_distilled = sum(n_kept[i] for i in distilled)
    # only the distilled responses are run (none without a signal: zero gradient from them)
    micro = [[distilled[j] for j in idx] for idx in micro_batches([lengths[i] for i in distilled], args.micro_batch)]
    # (S5) the counts the loss divides by: distilled tokens (token-mean), responses (seq-mean); train.update
    # makes them the whole batch's when several processes share it
    return SDPOPlan([{"micro_batches": micro, "n_tok": n_distilled, "n_seq": B}],
                    signal_counts(has_demo, demo_of, n_distilled, lengths), user_texts, token_keep)


def signal_counts(has_demo, demo_of, n_distilled, lengths):
    """The counts behind the step's shares (logs; train.update sums them over the processes): the responses, those
    with a teacher prompt, by a sibling's demonstration (S1) or by feedback (S8), their tokens and the distilled ones."""
    by_demo = [j is not None for j in demo_of]
    return {"responses": len(lengths), "reprompted": int((has_demo > 0).sum()), "by_demo": sum(by_demo),
            "by_feedback": sum(float(m) > 0 and not d for m, d in zip(has_demo, by_demo)),
            "response_tokens": sum(lengths), "distilled_tokens": n_distilled}


def step_stats(plan, results):
    """The step's statistics over the whole batch: the shares of responses with a teacher prompt (by what) and of
    tokens distilled, loss, ‖∇‖, and per distilled token the GJSD, the student's and the teacher's entropies."""
    (loss, parts, grad_norm), c = results[0], plan.counts
    tokens, responses = max(1, plan.steps[0]["n_tok"]), max(1, c["responses"])   # (n_tok: the whole batch's)
    return {"reprompt_frac": c["reprompted"] / responses, "demo_frac": c["by_demo"] / responses,
            "feedback_frac": c["by_feedback"] / responses,
            "distilled_token_frac": c["distilled_tokens"] / max(1, c["response_tokens"]),
            "loss": loss, "grad_norm": grad_norm, "js": sum(p["js_sum"] for p in parts) / tokens,
            "entropy": sum(p["entropy_sum"] for p in parts) / tokens,
            "teacher_entropy": sum(p["teacher_entropy_sum"] for p in parts) / tokens,
            "skipped": int(plan.steps[0]["n_tok"] == 0)}


def micro_batch_loss(model, teacher, batch, plan, part, idx, cfg, args, tok):
    """The SDPO loss of the responses `idx` (one micro-batch, all with a teacher signal): (S2)–(S5), each
    equation called here; cfg: SDPO's knobs, args: the run's (the aggregation). Returns (loss, stats). To change
    SDPO's loss, change this function."""
    # (S2, S4, S7) the student's and the teacher's next-token distributions at every kept response token
    s_dist, t_dist, mask, entropies = distill_distributions(model, teacher, batch, plan, idx, cfg, tok)
    # (S3) GJSD_β(S, sg[T]) at every response token: no gradient ever reaches the teacher
    per_token = generalized_jsd(s_dist, t_dist.detach(), cfg.beta)                         # [b, T]
    # (S5) reduced over the whole batch's distilled tokens or responses
    loss = sdpo_loss(per_token, mask, num_tokens=part["n_tok"], mode=args.loss_agg, num_seqs=part["n_seq"])
    return loss, loss_stats(per_token, entropies, mask)


def distill_distributions(model, teacher, batch, plan, idx, cfg, tok, logits_of_teacher=None):
    """(S2) The teacher's and (S4) the student's distributions [b, T, V] (or [b, T, k+1] with --topk) at every
    response token of the responses `idx`, the response mask [b, T] with (S7)'s masked tokens out, and both
    entropies [b, T] (logs). logits_of_teacher(teacher, teacher_prompt_ids, response_ids, pad_id, as_float): the
    teacher's logits, its own weights' (S2) unless another kind of teacher is given (beyond/variants.py)."""
    logits_of_teacher = logits_of_teacher or teacher_logits
    prompts, responses = [batch["prompt_ids"][i] for i in idx], [batch["response_ids"][i] for i in idx]
    t_prompts = [encode_chat(tok, chat_messages(batch["records"][i], plan.user_texts[i])) for i in idx]   # (S1)
    if cfg.topk:    # (S4) real models: k+1 values per position, never a full fp32 log-softmax
        t_logits = logits_of_teacher(teacher, t_prompts, responses, tok.pad_token_id, as_float=False)   # [b, T, V]
        logits, mask, _ = response_logits(model, prompts, responses, tok.pad_token_id, as_float=False)  # [b, T, V]
        s_dist, t_dist = topk_logprobs(logits, t_logits, cfg.topk)                        # [b, T, k+1] (S4)
        entropies = token_entropy(logits), token_entropy(t_logits)                         # [b, T] each (logs)
    else:           # the full vocabulary (the built-in model)
        t_dist = torch.log_softmax(logits_of_teacher(teacher, t_prompts, responses, tok.pad_token_id), dim=-1)
        logits, mask, _ = response_logits(model, prompts, responses, tok.pad_token_id)     # [b, T, V]
        s_dist = torch.log_softmax(logits, dim=-1)                                         # [b, T, V]
        entropies = entropy_of(s_dist), entropy_of(t_dist)                                 # [b, T] each (logs)
    for j, i in enumerate(idx):   # (S7) masked tokens leave the loss
        keep = plan.token_keep[i]                                                          # [|y_i|] bools
        mask[j, :len(keep)] *= keep.to(mask.device, mask.dtype)
    return s_dist, t_dist, mask, entropies


@torch.no_grad()
def entropy_of(logp):
    """−Σ_v p log p from log-probabilities [..., V] -> [...] (the logs)."""
    return -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def loss_stats(per_token, entropies, mask):
    """Sums over the micro-batch's distilled tokens of the GJSD and of the student's and teacher's entropies."""
    fm = mask.float()                                                                      # [b, T]
    return {"js_sum": (per_token * fm).sum().item(), "entropy_sum": (entropies[0] * fm).sum().item(),
            "teacher_entropy_sum": (entropies[1] * fm).sum().item()}


def frozen_model(model, cfg, carried=None):
    """(T3) The teacher at the start of a task or stage: a copy of the student (the release restarts it from each
    stage's starting student), or, with --teacher-init carry, `carried` (the previous stage's final teacher, which
    the run keeps: experiment/rundir.py) mixed in with --teacher-mix."""
    return stage_teacher(model, carried, cfg.teacher_mix)


def frozen_state(frozen):
    """The frozen model a stop saves beside the student (experiment/rundir.py): SDPO's teacher, as it was."""
    return frozen


def after_step(teacher, model, step, cfg):
    """(T1) the EMA or (T2) the refresh of the teacher after the optimizer step; True at a refresh point."""
    return teacher_after_step(teacher, model, step, cfg.alpha, cfg.refresh_every, cfg.gamma)


def run_name(s):
    """The run's name from its SDPO settings: sdpo_a0.05, sdpo_a0_cot, sdpo_r10_g1 (refresh-and-freeze),
    sdpo_a0.05_mask0.3_fb_carry (--teacher-init carry, T3). s: a dict (or namespace)."""
    s = s if isinstance(s, dict) else vars(s)
    name = "sdpo" + (f"_r{s['refresh_every']}_g{s['gamma']:g}" if s["refresh_every"] else f"_a{s['alpha']:g}")
    name += "_cot" if s["cot"] else ""
    name += f"_mask{s['mask_ratio']:g}" if s["mask_ratio"] else ""
    name += {"on": "_fb", True: "_fb", "off": "_nofb"}.get(s["feedback"], "")   # "release" (the default): none
    if s.get("teacher_init") == "carry":
        name += "_carry" + ("" if s["teacher_mix"] == 1 else f"{s['teacher_mix']:g}")
    return name


if __name__ == "__main__":   # (this file is SDPO's equations; continual.py runs it through train.run_steps)
    print("error: a one-domain SDPO run is a one-stage continual run: python continual.py --method sdpo --stages "
          "TASK (--task X is --stages X, --out runs/NAME is --name NAME)", file=sys.stderr)
    sys.exit(2)
