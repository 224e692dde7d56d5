"""grpo.py — Group Relative Policy Optimization, SPEC (G1)–(G5): the paper's sequence-level baseline.

    python grpo.py --task coding --steps 100 --seed 0

One step: take `--prompts-per-step` prompts, sample G responses each (rollout.collect), grade them
(binary reward), turn rewards into group-relative advantages (G1), and minimise the clipped
surrogate (G2, G3) — optionally plus a k3 KL to the starting model (G4) — aggregated over tokens
(G5). AdamW, gradient clipping at 1.0.

Simplifications, on purpose (and what the release does instead):
* By default one optimizer step per batch (on-policy). Then π_old = sg[π_θ], every ratio ρ is 1,
  the clip never binds, and the gradient is exactly A_i ∇log π_θ (REINFORCE with a group baseline).
  `--epochs`/`--mini-batches` > 1 make the ratio and clip matter; π_old is then the policy that
  sampled the batch, scored once under no-grad before the first update.
* No critic, no value head, no reward model: rewards come from the graders in tasks.py.
* Log-probs are those of the untempered policy (the release divides logits by the rollout temperature).
"""
import argparse
import copy
import json
import os
import random
import sys
import time

import torch

import tasks
from rollout import (Interrupted, NonFiniteError, StepBoundarySigint, add_common_args, append_jsonl, drop_long_prompts,
                     gather_lists, global_sum, init_distributed, is_main, my_share, rank_and_world, sum_gradients,
                     weights_digest,
                     check_finite, collect, load_model, micro_batches, response_logits, save_checkpoint,
                     token_entropy, token_logprobs, validate_common_args)


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


def clipped_surrogate(logp, old_logp, advantages, eps_low=0.2, eps_high=0.28):
    """(G2) ρ = π_θ/π_old = exp(logp − old_logp);  (G3) ℓ = −min(ρ A, clip(ρ, 1−ε_low, 1+ε_high) A).

    logp, old_logp: [B, T] log-probs of the sampled tokens; advantages: [B] (one per sequence).
    Returns (per-token loss [B, T], clipped [B, T] bool: where the clipped term is the active one).
    With one update per batch old_logp = logp.detach(): ρ = 1, ℓ = −A, and ∇ℓ = −A ∇log π_θ.
    """
    A = advantages.unsqueeze(-1)                           # [B, 1]
    # (G2) ρ_{i,t} = π_θ(y_t|h_t) / π_old(y_t|h_t)
    ratio = torch.exp(logp - old_logp)                     # [B, T]
    unclipped = ratio * A                                  # [B, T]
    # (G3) clip(ρ, 1 − ε_low, 1 + ε_high) · A
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * A  # [B, T]
    # (G3) ℓ_{i,t} = −min(ρ A, clip(ρ) A)
    loss = -torch.minimum(unclipped, clipped)              # [B, T]
    return loss, clipped < unclipped


def k3_kl(logp, ref_logp):
    """(G4) k3 = π_ref/π_θ − log(π_ref/π_θ) − 1  (≥ 0, = 0 where the policies agree), per token [B, T]."""
    log_ratio = ref_logp - logp                            # [B, T] log(π_ref/π_θ)
    # (G4) k3 = e^{log r} − log r − 1
    return torch.exp(log_ratio) - log_ratio - 1.0


def aggregate(per_token_loss, mask, mode="token-mean", num_tokens=None, num_seqs=None):
    """(G5) Reduce a [B, T] per-token loss over the response tokens (mask [B, T]) to a scalar.

    token-mean:          Σ_{i,t} m ℓ / Σ_{i,t} m            (release default; every token weighs the same)
    seq-mean-token-mean: (1/B) Σ_i (Σ_t m ℓ / Σ_t m)        (original GRPO; short answers weigh more per token)
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


def grpo_loss(logp, old_logp, advantages, mask, ref_logp=None, kl_coef=0.0, eps_low=0.2, eps_high=0.28,
              mode="token-mean", num_tokens=None, num_seqs=None):
    """(G3)+(G4)+(G5): aggregate(ℓ_clip + β_KL · k3). Returns (loss, stats of this micro-batch)."""
    per_token, clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)  # [B, T]
    stats = {"clip_frac": (clipped.float() * mask).sum().item() / max(1.0, mask.sum().item())}
    if kl_coef > 0 and ref_logp is not None:
        kl = k3_kl(logp, ref_logp)                         # [B, T]
        # (G4) ℓ + β_KL · k3
        per_token = per_token + kl_coef * kl
        stats["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1)).item()
    return aggregate(per_token, mask, mode, num_tokens, num_seqs), stats


# ----------------------------------------------------------------------------------------------
# One training step on a collected batch
# ----------------------------------------------------------------------------------------------
def grpo_update(model, opt, batch, args, ref_model=None, pad_id=0):
    """Advantages, then `epochs × mini_batches` optimizer steps of the GRPO loss; returns stats.

    Gradient accumulation over micro-batches uses the mini-batch's global token / sequence counts,
    so the update does not depend on --micro-batch. Raises NonFiniteError before a bad step.
    """
    adv = group_advantages(batch["rewards"], batch["group_size"], args.adv_std)  # [N*G]
    B = adv.shape[0]
    lengths = [len(r) for r in batch["response_ids"]]
    multi = args.epochs > 1 or args.mini_batches > 1
    old = None
    if multi:  # π_old: the sampling policy, scored once before any update
        with torch.no_grad():
            old = [None] * B
            for idx in micro_batches(lengths, args.micro_batch):
                logits, mask, tgt = response_logits(model, [batch["prompt_ids"][i] for i in idx],
                                                    [batch["response_ids"][i] for i in idx], pad_id)
                lp = token_logprobs(logits, tgt)
                for j, i in enumerate(idx):
                    old[i] = lp[j, :lengths[i]]
    stats = {"loss": 0.0, "clip_frac": 0.0, "entropy": 0.0, "kl": 0.0}
    n_updates = 0
    for _ in range(args.epochs):
        # mini-batches shuffled by torch's RNG, which run_steps seeds per step (reproducible, resumable)
        order = torch.randperm(B).tolist() if args.mini_batches > 1 else list(range(B))
        for mb in range(args.mini_batches):
            mini = order[mb * B // args.mini_batches:(mb + 1) * B // args.mini_batches]
            n_tok = global_sum(sum(lengths[i] for i in mini))   # global counts: Σ over ranks = full batch
            n_seq = global_sum(len(mini))
            local_tok = max(1, sum(lengths[i] for i in mini))
            opt.zero_grad(set_to_none=True)
            total = torch.zeros(())
            ent_sum, clip_sum = 0.0, 0.0
            for idx in micro_batches([lengths[i] for i in mini], args.micro_batch):
                idx = [mini[j] for j in idx]
                logits, mask, tgt = response_logits(model, [batch["prompt_ids"][i] for i in idx],
                                                    [batch["response_ids"][i] for i in idx], pad_id)  # [b,T,V]
                logp = token_logprobs(logits, tgt)                       # [b, T]
                if old is None:
                    old_logp = logp.detach()  # (G2) one update per batch: π_old = sg[π_θ], ρ = 1
                else:
                    old_logp = torch.zeros_like(logp)
                    for j, i in enumerate(idx):
                        old_logp[j, :lengths[i]] = old[i]
                ref_logp = None
                if ref_model is not None:
                    with torch.no_grad():
                        ref_logits, _, _ = response_logits(ref_model, [batch["prompt_ids"][i] for i in idx],
                                                           [batch["response_ids"][i] for i in idx], pad_id)
                        ref_logp = token_logprobs(ref_logits, tgt)
                loss, st = grpo_loss(logp, old_logp, adv[idx].to(logp.device), mask, ref_logp, args.kl_coef,
                                     args.epsilon, args.epsilon_high, args.loss_agg, num_tokens=n_tok,
                                     num_seqs=n_seq)
                loss.backward()
                total = total + loss.detach().cpu()
                with torch.no_grad():
                    ent_sum += (token_entropy(logits.detach()) * mask).sum().item()
                clip_sum += st["clip_frac"] * mask.sum().item()
                stats["kl"] += st.get("kl", 0.0) * mask.sum().item() / local_tok
            sum_gradients(model)                          # data parallel: Σ_ranks ∇ = the full-batch gradient
            total = torch.tensor(global_sum(total.item()))
            check_finite(total, model)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            opt.step()
            n_updates += 1
            stats["loss"] += total.item()
            stats["entropy"] += ent_sum / local_tok       # (entropy, clip fraction: this rank's tokens)
            stats["clip_frac"] += clip_sum / local_tok
    for key in stats:
        stats[key] /= max(1, n_updates)
    groups = adv.view(-1, batch["group_size"])
    stats["groups_with_signal"] = (groups.abs().sum(1) > 0).float().mean().item()
    return stats


def add_grpo_args(ap):
    g = ap.add_argument_group("GRPO (G1–G5)")
    g.add_argument("--epsilon", type=float, default=0.2, help="ε_low of the clip (G3)")
    g.add_argument("--epsilon-high", type=float, default=0.28, help="ε_high of the clip (G3)")
    g.add_argument("--kl-coef", type=float, default=0.0, help="β_KL of the k3 KL to the start model (G4); 0 = off")
    g.add_argument("--loss-agg", default="token-mean", choices=["token-mean", "seq-mean-token-mean"], help="(G5)")
    g.add_argument("--adv-std", action="store_true", help="divide advantages by the group std (G1)")
    g.add_argument("--epochs", type=int, default=1, help="passes over each batch (1 = on-policy)")
    g.add_argument("--mini-batches", type=int, default=1, help="optimizer steps per pass")
    return ap


def validate_grpo_args(ap, args):
    for flag, ok, allowed in [("--epsilon", 0 <= args.epsilon < 1, "in [0, 1)"),
                              ("--epsilon-high", args.epsilon_high >= 0, ">= 0"),
                              ("--kl-coef", args.kl_coef >= 0, ">= 0"), ("--epochs", args.epochs >= 1, ">= 1"),
                              ("--mini-batches", args.mini_batches >= 1, ">= 1")]:
        if not ok:
            ap.error(f"{flag} must be {allowed}")


# ----------------------------------------------------------------------------------------------
# The loop shared by grpo.py and sdpo.py (one domain)
# ----------------------------------------------------------------------------------------------
def train_records(task, n=4000, seed=0):
    """The training prompts of a task: a built-in domain's train split, a JSON(-lines) file, or hf:NAME."""
    if task in tasks.GENERATORS:
        return tasks.builtin_split(task, "train", n, seed, allow_fewer=True)
    return tasks.task_records(task)


def run_steps(model, tok, records, args, update_fn, log_path=None, desc="train", start_step=0, on_step=None):
    """Steps `start_step+1 .. args.steps`: pick prompts, collect a group per prompt, update, log.

    Prompts are drawn in a fixed order from `args.seed` (an epoch-wise shuffle), so two methods run
    with the same seed see the same prompts in the same order. `update_fn(batch) -> stats` does the
    method's optimizer step; `on_step(step, row)` runs after each logged step (evaluation, saving).
    """
    from tqdm import tqdm
    order_rng = random.Random(args.seed)
    order = []
    per_epoch = list(range(len(records)))
    need = args.steps * args.prompts_per_step
    while len(order) < need:
        order_rng.shuffle(per_epoch)
        order += per_epoch
    bar = tqdm(range(start_step, args.steps), desc=desc, dynamic_ncols=True, leave=False, disable=not is_main())
    with StepBoundarySigint() as sigint:
        for step in bar:
            run_one_step(model, tok, records, args, update_fn, order, step, log_path, bar, on_step)
            if sigint.requested:
                raise Interrupted(step + 1)
    return model


def step_batch(model, tok, chosen, args, step):
    """Sample and grade this rank's share of a step's prompts.

    The step's prompts are cut into `--sample-blocks` blocks of whole prompts (default: one per rank),
    each sampled under its own seed, so a step's samples do not depend on how many ranks share it
    (a group never straddles two ranks). Block 0's seed is the single-process seed of earlier runs.
    """
    rank, world = rank_and_world()
    blocks = args.sample_blocks or world
    per = len(chosen) // blocks
    parts = []
    for b in my_share(blocks, rank, world):
        torch.manual_seed(args.seed * 100_003 + step + 1_000_003 * b)  # reproducible per step and block
        parts.append(collect(model, tok, chosen[b * per:(b + 1) * per], args.group_size, args.max_new_tokens,
                             args.temperature, args.top_p))
    batch = {k: [x for p in parts for x in p[k]] for k in ("records", "prompt_ids", "response_ids", "texts")}
    batch["rewards"] = torch.cat([p["rewards"] for p in parts])
    batch["group_size"] = args.group_size
    return batch


def run_one_step(model, tok, records, args, update_fn, order, step, log_path, bar, on_step):
    """Step `step` (0-based) of run_steps: its own seed, its own prompts, so any step can be resumed."""
    chosen = [records[i] for i in order[step * args.prompts_per_step:(step + 1) * args.prompts_per_step]]
    t0 = time.time()
    batch = step_batch(model, tok, chosen, args, step)
    t1 = time.time()
    torch.manual_seed(args.seed * 100_003 + step + 7)  # the update's own RNG (mini-batch shuffles), same on every rank
    stats = update_fn(batch)
    n = global_sum(len(batch["response_ids"]))
    row = {"step": step + 1, "reward": global_sum(batch["rewards"].sum().item()) / n,
           "response_len": global_sum(sum(len(r) for r in batch["response_ids"])) / n,
           **stats, "rollout_s": round(t1 - t0, 3), "update_s": round(time.time() - t1, 3)}
    if log_path and is_main():
        append_jsonl(log_path, row)
    bar.set_postfix(reward=f"{row['reward']:.2f}", loss=f"{row['loss']:.3f}")
    if on_step:
        on_step(step + 1, row)


def main(argv=None):
    ap = argparse.ArgumentParser(description="GRPO on one task (SPEC G1–G5).")
    ap.add_argument("--task", default="math", help=f"built-in domain ({', '.join(tasks.GENERATORS)}) or a JSON(-lines) file")
    ap.add_argument("--out", default=None, help="output directory (default runs/grpo-<task>-s<seed>)")
    add_common_args(ap)
    add_grpo_args(ap)
    args = ap.parse_args(argv)
    validate_common_args(ap, args)
    validate_grpo_args(ap, args)
    return train_one_task(ap, args, "grpo")


def train_one_task(ap, args, method):
    """grpo.py / sdpo.py's main: evaluate, train one task, evaluate, save a HF checkpoint and a log."""
    import evaluate
    try:
        tasks.check_task(args.task)
        records = train_records(args.task, seed=args.seed)
        test = evaluate.benchmark_records(args.task, args.eval_n, args.seed) if args.task in tasks.GENERATORS \
            else records[:args.eval_n]
    except Exception as e:  # a bad file names file:line; a hub task that cannot be fetched says why
        ap.error(f"--task: {tasks.one_line(e)}")
    out = args.out or os.path.join("runs", f"{method}-{os.path.basename(args.task)}-s{args.seed}")
    device = init_distributed(args.device)   # torchrun: data parallel over the ranks (rollout.py)
    log_path = os.path.join(out, "log.jsonl")
    if is_main():
        os.makedirs(out, exist_ok=True)
        if os.path.exists(log_path):
            os.remove(log_path)
    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, device, args.dtype, args.grad_checkpointing)
    try:
        records = drop_long_prompts(tok, records, args.max_prompt_len, "training prompts")
        test = drop_long_prompts(tok, test, args.max_prompt_len, "test prompts")
    except ValueError as e:
        ap.error(str(e))

    def acc():
        torch.manual_seed(args.seed)
        return evaluate.acc_at_k(model, tok, test, args.eval_k, args.max_new_tokens)[0]

    before = acc()
    print(f"{method} on {args.task}: Acc@{args.eval_k} before = {100 * before:.1f}% ({len(test)} test prompts)")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    update_fn = make_update_fn(method, model, tok, opt, args)
    t0 = time.time()
    try:
        run_steps(model, tok, records, args, update_fn, log_path, desc=f"{method}:{args.task}")
    except NonFiniteError as e:
        print(f"error: stopped at a non-finite step ({e}); nothing saved from this run", file=sys.stderr)
        sys.exit(1)
    train_s = time.time() - t0
    after = acc()
    # data parallel: every rank applied the same summed gradient, so the weights must be bit-identical
    rank, world = rank_and_world()
    identical = len(set(gather_lists([weights_digest(model)]))) == 1
    if not is_main():
        return before, after
    rows = [json.loads(line) for line in open(log_path)]
    print(f"{method} on {args.task}: Acc@{args.eval_k} {100 * before:.1f}% -> {100 * after:.1f}% "
          f"in {args.steps} steps ({train_s:.0f}s training); mean reward first/last 10 steps "
          f"{sum(r['reward'] for r in rows[:10]) / len(rows[:10]):.2f} / {sum(r['reward'] for r in rows[-10:]) / len(rows[-10:]):.2f}")
    if world > 1:
        print(f"{world} ranks; weights bit-identical across ranks: {identical}")
    save_checkpoint(model, tok, os.path.join(out, "model"))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"method": method, "task": args.task, "acc_before": before, "acc_after": after,
                   "train_seconds": train_s, "world_size": world, "weights_identical_across_ranks": identical,
                   "args": vars(args)}, f, indent=1)
    print(f"saved {out}/model, {out}/log.jsonl, {out}/summary.json")
    return before, after


def make_update_fn(method, model, tok, opt, args, teacher=None):
    """The method's update as a function of a collected batch (used by grpo.py, sdpo.py, continual.py)."""
    if method == "grpo":
        ref = None
        if args.kl_coef > 0:  # (G4) reference = the starting model, loaded only when it is used
            ref = copy.deepcopy(model).eval().requires_grad_(False)
        return lambda batch: grpo_update(model, opt, batch, args, ref, tok.pad_token_id)
    import sdpo
    return sdpo.make_sdpo_update(model, tok, opt, args, teacher)


if __name__ == "__main__":
    main()
