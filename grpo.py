"""grpo.py — Group Relative Policy Optimization, SPEC (G1)–(G5): the paper's sequence-level baseline.

    python continual.py --method grpo --stages coding                   # one domain, as the paper ran it
    python continual.py --method grpo --stages coding --mini-batches 1  # the on-policy variant

One step: take `--prompts-per-step` prompts, sample G responses each, grade them (binary reward),
turn rewards into group-relative advantages (G1), and minimise the clipped surrogate (G2, G3) —
optionally plus a k3 KL to the starting model (G4) — aggregated over tokens (G5). AdamW, gradient
clipping at 1.0. train.py runs the loop and takes the optimizer steps; this file holds the equations,
`prepare_batch` (G1, G2: which responses each optimizer step sees) and `micro_batch_loss` (G2–G5), the
loss train.update calls on every micro-batch.

Which GRPO the paper compared (the release's `baseline_grpo.yaml`, docs/PROTOCOL.md): **four optimizer
steps per rollout batch** (`--mini-batches 4`, the default here), each on a quarter of the batch in
the release's length-balanced order (a band of similar-length responses from many groups;
`--mini-batch-order contiguous`: a quarter of the groups). From the second step on π_old ≠ π_θ, so the ratio ρ and the clip (with the dual clip c = 3
for negative advantages) act. `--mini-batches 1` is the on-policy variant: π_old = sg[π_θ], every
ratio is 1, the clip never binds, and the gradient is exactly A_i ∇log π_θ (REINFORCE with a group
baseline). SDPO takes one step per batch in both the release and here.

Simplifications, on purpose (and what the release does instead):
* No critic, no value head, no reward model: rewards come from the graders in world/tasks.py.
* Log-probs are those of the untempered policy (the release divides logits by the rollout temperature;
  with the default rollout temperature 1 the two agree).
"""
import dataclasses
import math
import sys

import torch

from infra.knobs import knob, must
from infra.distributed import clone_model
from rollout import batch_order, micro_batches, response_logits, response_logprobs, token_entropy, token_logprobs

# GRPO's knobs, one field each (infra/knobs.py): the flag (--mini-batches for mini_batches), its default and the
# --help text; the values allowed are checked in __post_init__. The defaults are the release's
# (`baseline_grpo.yaml`, docs/PROTOCOL.md); the paper states none of them, so all are the protocol's (--help-all).
# The method is handed one instance, `cfg` (experiment/configurations.config_of), and reads its knobs there.
@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """GRPO's knobs, all the release's rules (--help-all)."""
    mini_batches: int = knob(4, "GRPO: optimizer steps per batch (the release: 4); 1 = on-policy (G2)", rule=True)
    epochs: int = knob(1, "GRPO: passes over each batch", rule=True)
    epsilon: float = knob(0.2, "GRPO: ε_low of the clip (G3)", rule=True)
    epsilon_high: float = knob(0.28, "GRPO: ε_high of the clip (G3)", rule=True)
    clip_ratio_c: float = knob(3.0, "GRPO: dual clip c for negative advantages (G3; release: 3); 0 = off", rule=True)
    kl_coef: float = knob(0.0, "GRPO: β_KL of the k3 KL to the start model (G4); 0 = off", rule=True)
    adv_std: bool = knob(False, "GRPO: divide advantages by the group std (G1)", rule=True)

    def __post_init__(self):   # the values allowed, checked before any work (infra/knobs.must: one error line)
        must(self.mini_batches >= 1, "--mini-batches must be >= 1")
        must(1 <= self.epochs <= 64, "--epochs must be in [1, 64] (each is a pass of optimizer steps over the batch)")
        must(0 <= self.epsilon < 1, "--epsilon must be in [0, 1)")
        must(0 <= self.epsilon_high < math.inf, "--epsilon-high must be >= 0")
        must(self.clip_ratio_c == 0 or 1 < self.clip_ratio_c < math.inf, "--clip-ratio-c must be 0 or > 1")
        must(0 <= self.kl_coef < math.inf, "--kl-coef must be >= 0")


SETTINGS = ("mini_batches", "epochs", "clip_ratio_c")   # the knobs that name a GRPO configuration (run_name)


# ----------------------------------------------------------------------------------------------
# The equations
# ----------------------------------------------------------------------------------------------
def group_advantages(rewards, group_size, scale_std=False):
    """(G1) A_i = r_i - mean_j r_j  [optionally / (std_j r_j + 1e-4)].

    rewards: [N * G], grouped contiguously (prompt 0's G responses first). Returns [N * G].
    A group whose rewards are all equal gets exactly 0 (it carries no signal), never NaN.
    Example: rewards [1, 0, 0, 1 | 1, 1, 1, 1], G=4 -> [0.5, -0.5, -0.5, 0.5 | 0, 0, 0, 0].
    """
    r = rewards.view(-1, group_size).float()              # [N, G]
    # (G1) A_i = r_i − mean_j r_j
    adv = r - r.mean(dim=1, keepdim=True)                  # [N, G]
    if scale_std:
        # (G1, --adv-std) A_i / (std_j r_j + 1e-4); an all-equal group has A = 0 and std = 0 -> 0 / 1e-4 = 0
        adv = adv / (r.std(dim=1, keepdim=True, unbiased=True) + 1e-4)
    return adv.view(-1)                                    # [N * G]


def clipped_surrogate(logp, old_logp, advantages, eps_low=0.2, eps_high=0.28, clip_c=0.0):
    """(G2) ρ = π_θ/π_old = exp(logp − old_logp);  (G3) ℓ = −min(ρ A, clip(ρ, 1−ε_low, 1+ε_high) A).

    Dual clip (the release, c = 3; clip_c = 0 turns it off): where A < 0, ℓ ← min(ℓ, −c·A), so a token
    whose ratio has run far above 1 on a bad response cannot push the loss past c·|A|.
    logp, old_logp: [B, T] log-probs of the sampled tokens; advantages: [B] (one per sequence).
    Returns (per-token loss [B, T], clipped [B, T] bool: where a clip, either one, is the active term).
    With one update per batch old_logp = logp.detach(): ρ = 1, ℓ = −A, and ∇ℓ = −A ∇log π_θ.
    Example: A = −1, ρ = 5, ε = 0.2/0.28, c = 3: −min(−5, −1.28) = 5, then min(5, 3) = 3.
    """
    A = advantages.unsqueeze(-1)                           # [B, 1]
    # (G2) ρ_{i,t} = π_θ(y_t|h_t) / π_old(y_t|h_t)
    ratio = torch.exp(logp - old_logp)                     # [B, T]
    unclipped = ratio * A                                  # [B, T]
    # (G3) clip(ρ, 1 − ε_low, 1 + ε_high) · A
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * A  # [B, T]
    # (G3) ℓ_{i,t} = −min(ρ A, clip(ρ) A)
    loss = -torch.minimum(unclipped, clipped)              # [B, T]
    was_clipped = clipped < unclipped                      # [B, T]
    if clip_c > 0:
        # (G3, dual clip) for A < 0: ℓ ← min(ℓ, −c·A)
        capped = torch.minimum(loss, -clip_c * A)          # [B, T]
        was_clipped = was_clipped | ((A < 0) & (capped < loss))
        loss = torch.where(A < 0, capped, loss)
    return loss, was_clipped


def k3_kl(logp, ref_logp):
    """(G4) k3 = π_ref/π_θ − log(π_ref/π_θ) − 1  (≥ 0, = 0 where the policies agree), per token [B, T]."""
    log_ratio = ref_logp - logp                            # [B, T] log(π_ref/π_θ)
    # (G4) k3 = e^{log r} − log r − 1
    return torch.exp(log_ratio) - log_ratio - 1.0


def aggregate(per_token_loss, mask, mode="token-mean", num_tokens=None, num_seqs=None):
    """(G5) Reduce a [B, T] per-token loss over the response tokens (mask [B, T]) to a scalar.

    token-mean:          Σ_{i,t} m ℓ / Σ_{i,t} m            (SPEC G5; every token weighs the same)
    seq-mean-token-mean: (1/B) Σ_i (Σ_t m ℓ / Σ_t m)        (what the release computes, the default here; short
                                                        answers weigh more per token)
    num_tokens / num_seqs: the *whole batch's* counts, when this call sees one micro-batch of it,
    so that summing micro-batch losses gives exactly the full-batch loss (and gradient).
    """
    mask = mask.to(per_token_loss.dtype)
    if mode == "token-mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        # (G5) token-mean
        return (per_token_loss * mask).sum() / denom
    if mode == "seq-mean-token-mean":
        per_seq = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
        # (G5) seq-mean-token-mean
        return per_seq.sum() / (per_seq.shape[0] if num_seqs is None else num_seqs)
    raise ValueError(f"unknown aggregation '{mode}' (token-mean, seq-mean-token-mean)")


# ----------------------------------------------------------------------------------------------
# The GRPO update on one graded batch
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class GRPOPlan:
    """What prepare_batch gives the loss for one batch (train.update reads `steps`, infra/distributed.whole_batch
    sums each step's counts and `counts` over the processes)."""
    steps: list                 # the optimizer steps: each {"micro_batches": [index lists], "n_tok", "n_seq"} (G5)
    counts: dict                # what the logged shares are computed from (groups, groups with a learning signal)
    advantages: torch.Tensor    # [N*G] one advantage per response (G1)
    old: list | None            # (G2) log π_old of each response, [|y_i|] each; None on-policy (π_old = sg[π_θ])


def frozen_model(model, cfg, carried=None):
    """(G4)'s reference: a frozen copy of the starting model when --kl-coef > 0, else None. (carried: what SDPO
    carries between stages; GRPO carries nothing.)"""
    return clone_model(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None


def frozen_state(ref_model):
    """What a stop saves beside the student (experiment/rundir.py): (G4)'s frozen reference, θ_{k−1}, so that a
    resumed stage compares with the stage's start and not with the stopped weights; None without --kl-coef."""
    return ref_model


def prepare_batch(model, ref_model, batch, cfg, args, tok, step):
    """(G1) advantages and (G2) π_old for one batch, and its `epochs × mini_batches` optimizer steps: for
    each, its micro-batches and the mini-batch's token and sequence counts. train.update takes the steps.

    batch: from train.sample_and_grade (prompt_ids, response_ids [N*G], rewards [N*G], group_size).
    cfg: GRPO's knobs (GRPOConfig); args: the run's (the batch order, the micro-batch size).
    """
    # (G1) one advantage per response
    adv = group_advantages(batch["rewards"], batch["group_size"], cfg.adv_std)           # [N*G]
    # (G2) π_old: needed only when one batch feeds several optimizer steps; on-policy it is sg[π_θ]
    old = old_policy_logprobs(model, batch, args.micro_batch, tok.pad_token_id) if several_steps(cfg) else None
    lengths = [len(r) for r in batch["response_ids"]]
    seq_lengths = [len(p) + len(r) for p, r in zip(batch["prompt_ids"], batch["response_ids"])]
    steps = []
    for mini in mini_batch_split(len(adv), batch["group_size"], cfg.mini_batches, cfg.epochs, args.mini_batch_order,
                                 seq_lengths, batch.get("blocks", 1)):
        # (G5) the mini-batch's token and sequence counts: every micro-batch divides by them, so summing
        # micro-batch gradients gives the mini-batch gradient (train.update makes them the whole batch's)
        steps.append({"micro_batches": micro_batches_of(mini, lengths, args.micro_batch),
                      "n_tok": sum(lengths[i] for i in mini), "n_seq": len(mini)})
    groups = adv.view(-1, batch["group_size"])                                          # [N, G]
    # the counts behind the share of groups with a learning signal (logs; train.update sums them over the processes)
    counts = {"groups": groups.shape[0], "groups_with_signal": int((groups.abs().sum(1) > 0).sum())}
    return GRPOPlan(steps, counts, adv, old)


def micro_batch_loss(model, ref_model, batch, plan, part, idx, cfg, args, tok):
    """The GRPO loss of the responses `idx` (one micro-batch of the optimizer step `part`): (G2)–(G5), each
    equation called here; cfg: GRPO's knobs, args: the run's (the aggregation). Returns (loss, stats)."""
    prompts = [batch["prompt_ids"][i] for i in idx]
    responses = [batch["response_ids"][i] for i in idx]
    logits, mask, targets = response_logits(model, prompts, responses, tok.pad_token_id)   # [b, T, V], [b, T], [b, T]
    logp = token_logprobs(logits, targets)                                         # [b, T] log π_θ(y_t|h_t)
    # (G2) on-policy: π_old = sg[π_θ], so ρ = 1 and the gradient is A ∇log π_θ; else the sampler's log-probs
    old_logp = logp.detach() if plan.old is None else rows_of(plan.old, idx, logp)
    ref_logp = None
    if ref_model is not None:   # (G4) the frozen reference, only when --kl-coef > 0
        with torch.no_grad():
            ref_logits, _, _ = response_logits(ref_model, prompts, responses, tok.pad_token_id)   # [b, T, V]
            ref_logp = token_logprobs(ref_logits, targets)                                     # [b, T]
    # (G3) the clipped surrogate per token, and where the clip bound
    adv = plan.advantages[idx].to(logp.device)                                               # [b]
    per_token, clipped = clipped_surrogate(logp, old_logp, adv, cfg.epsilon, cfg.epsilon_high,
                                           cfg.clip_ratio_c)                                  # [b, T] each
    stats = {"clip_frac": (clipped.float() * mask).sum().item() / max(1.0, mask.sum().item())}
    if cfg.kl_coef > 0 and ref_logp is not None:
        kl = k3_kl(logp, ref_logp)                                                      # [b, T]
        # (G4) ℓ + β_KL · k3
        per_token = per_token + cfg.kl_coef * kl
        stats["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1)).item()
    # (G5) token-mean or seq-mean-token-mean, over the whole mini-batch's counts
    loss = aggregate(per_token, mask, args.loss_agg, part["n_tok"], part["n_seq"])
    with torch.no_grad():
        stats["entropy_sum"] = (token_entropy(logits.detach()) * mask).sum().item()
    stats["tokens"] = mask.sum().item()
    return loss, stats


def step_stats(plan, results):
    """The step's statistics over the whole batch, averaged over its optimizer steps: loss, clip fraction, entropy,
    k3 KL, ‖∇‖, and the share of groups with a learning signal (not all rewards equal)."""
    totals = {"loss": 0.0, "clip_frac": 0.0, "entropy": 0.0, "kl": 0.0, "grad_norm": 0.0}
    clip_by_step = []   # each optimizer step's own clip fraction: on-policy, the first never clips (ρ = 1)
    for step, (loss, parts, grad_norm) in zip(plan.steps, results):
        tokens = max(1, step["n_tok"])   # the mini-batch's tokens over every process (train.update)
        totals["loss"] += loss
        totals["grad_norm"] += grad_norm
        totals["entropy"] += sum(p["entropy_sum"] for p in parts) / tokens
        clip_by_step.append(sum(p["clip_frac"] * p["tokens"] for p in parts) / tokens)
        totals["clip_frac"] += clip_by_step[-1]
        for p in parts:
            totals["kl"] += p.get("kl", 0.0) * p["tokens"] / tokens
    stats = {key: v / max(1, len(results)) for key, v in totals.items()}
    stats["groups_with_signal"] = plan.counts["groups_with_signal"] / max(1, plan.counts["groups"])
    stats["clip_frac_by_step"] = clip_by_step
    return stats


# ----------------------------------------------------------------------------------------------
# Several optimizer steps per batch (--mini-batches, --epochs): the helpers the update calls
# ----------------------------------------------------------------------------------------------
def several_steps(cfg):
    return cfg.epochs > 1 or cfg.mini_batches > 1


def mini_batch_split(n, group_size, mini_batches, epochs=1, order="balanced", seq_lengths=None, blocks=1):
    """Index lists of the optimizer steps on one batch: `epochs` passes of `mini_batches` parts each.

    As the release does: the batch put in its order, then cut into contiguous mini-batches (verl's
    `data.split(ppo_mini_batch_size)`, no shuffle).
    order "balanced" (--mini-batch-order, default, the release's `_balance_batch`): the order is
      rollout.balanced_order of the prompt + response lengths (`seq_lengths`), so each mini-batch is a
      band of similar lengths drawn from many groups. Example, 64 responses, 4 mini-batches: the
      shortest band of the even-ranked, the longer even-ranked, the longest odd-ranked, the shorter ones.
    order "contiguous": sampling order, so whole groups: 8 prompts × G = 8, 4 mini-batches ->
      responses 0–15, 16–31, 32–47, 48–63, each two whole groups.
    With several sample blocks in the batch (`blocks`, `--sample-blocks`), each block is ordered and split
    the same way, so one process with N blocks takes the same steps as N processes.
    """
    per_block = n // blocks                                                    # responses per block
    if order == "balanced":
        in_order = batch_order(seq_lengths, blocks, "balanced")               # [blocks][per_block]
        cut = [mb * per_block // mini_batches for mb in range(mini_batches + 1)]
        for _ in range(epochs):
            for mb in range(mini_batches):
                yield [i for block in in_order for i in block[cut[mb]:cut[mb + 1]]]
        return
    groups = per_block // group_size                                           # groups per block
    for _ in range(epochs):
        for mb in range(mini_batches):
            lo, hi = mb * groups // mini_batches, (mb + 1) * groups // mini_batches
            yield [b * per_block + i for b in range(blocks) for i in range(lo * group_size, hi * group_size)]


def micro_batches_of(mini, lengths, size):
    """The micro-batches (index lists into the batch) of one mini-batch, length-aware (rollout.micro_batches)."""
    return [[mini[j] for j in idx] for idx in micro_batches([lengths[i] for i in mini], size)]


def old_policy_logprobs(model, batch, micro_batch, pad_id):
    """(G2) log π_old(y_t|h_t) of every response under the sampling policy, before any update: a list of [|y_i|]."""
    return response_logprobs(model, batch["prompt_ids"], batch["response_ids"], pad_id, micro_batch)


def rows_of(old, idx, like):
    """π_old's log-probs of the responses idx, right-padded to the shape of `like` [b, T]."""
    out = torch.zeros_like(like)
    for j, i in enumerate(idx):
        out[j, :old[i].shape[0]] = old[i]
    return out


def run_name(s):
    """The run's name from every GRPO setting that differs from its default: grpo, grpo_mb1, grpo_mb2_ep2_c0.
    s: a dict (or namespace) with mini_batches, epochs, clip_ratio_c."""
    s = s if isinstance(s, dict) else vars(s)
    parts = [f"_{tag}{s[k]:g}" for k, tag in (("mini_batches", "mb"), ("epochs", "ep"), ("clip_ratio_c", "c"))
             if s[k] != getattr(GRPOConfig, k)]
    return "grpo" + "".join(parts)


if __name__ == "__main__":   # (this file is GRPO's equations; continual.py runs it through train.run_steps)
    print("error: a one-domain GRPO run is a one-stage continual run: python continual.py --method grpo --stages "
          "TASK (--task X is --stages X, --out runs/NAME is --name NAME)", file=sys.stderr)
    sys.exit(2)
