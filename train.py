"""train.py — the training loop, in one place: sample → grade → the method's loss → backward → clip → step →
teacher → log.

grpo.py and sdpo.py hold the equations. Each is handed to this loop as it is, a module with the same functions,
with its own knobs, `cfg` (grpo.GRPOConfig, sdpo.SDPOConfig), and its *frozen* model (GRPO's reference, G4, or SDPO's
teacher, S2: no gradient reaches it); `args` are the run's settings (steps, rates, sampling, the batch's order):

    method.frozen_model(model, cfg) -> frozen                              the reference (G4) or the teacher (T3)
    method.prepare_batch(model, frozen, batch, cfg, args, tok, step) -> plan   what the batch gives the loss, a
                     dataclass (grpo.GRPOPlan, sdpo.SDPOPlan): GRPO's advantages and π_old (G1, G2); SDPO's teacher
                     prompts and token masks (S1, S7, S8); and the batch's optimizer steps, `plan.steps`, each a list
                     of micro-batches with the counts its loss divides by
    method.micro_batch_loss(model, frozen, batch, plan, part, idx, cfg, args, tok) -> (loss, stats)
                     the loss of one micro-batch: GRPO (G2–G5) or SDPO (S2–S5), every equation called there
    method.step_stats(plan, results) -> dict                               what the step logs, over the whole
                     batch: each step's counts and `plan.counts` summed over the processes, each result's
                     micro-batch stats from every process
    method.after_step(frozen, model, step, cfg) -> bool                    SDPO's teacher schedule (T1 EMA,
                     T2 refresh: True at a refresh point); GRPO, with no teacher, has no after_step
    method.frozen_state(frozen) -> model or None                           the frozen model a stop saves beside the
                     student (SDPO's teacher, GRPO's G4 reference, θ_{k−1}), so a resumed stage keeps it

`run_steps` is the loop and `update` one batch's optimizer steps: read them top to bottom. continual.py calls
`run_steps` once per stage (C1), with the method named in experiment/configurations.METHODS. The loop's bookkeeping
(the progress bar, the log, clean stops) is infra/steps.py's; several processes enter through three calls,
`whole_batch`, `clip_and_step` and `gather_lists`.
"""
import random

import torch

from infra.distributed import clip_and_step, gather_lists, whole_batch
from infra.steps import StepLog
from rollout import sample_and_grade

def prompt_order(n_records, args):
    """Indices of the prompts of every step, in a fixed order from `args.seed` (an epoch-wise shuffle):
    two methods run with the same seed see the same prompts in the same order."""
    order_rng = random.Random(args.seed)
    order, per_epoch = [], list(range(n_records))
    while len(order) < args.steps * args.prompts_per_step:
        order_rng.shuffle(per_epoch)
        order += per_epoch
    return order


def update_seed(seed, step):
    """The update's own seed (SDPO's token masks, S7), the same in every process."""
    return seed * 100_003 + step + 7


def stage_warmup(warmup_steps, records):
    """The warmup of a task or stage: --warmup-steps when given, else the release's for its data kind (a field of
    the world's training records: world/tasks.with_release_rules)."""
    if warmup_steps is not None:
        return warmup_steps
    return records[0].get("release_warmup", 0) if records else 0


def warmup_lr(lr, step, warmup_steps):
    """The learning rate of batch `step` (0-based): the release's constant schedule with a linear warmup
    from 0 (verl `get_constant_schedule_with_warmup`, stepped once per batch), lr · min(1, step / W). So
    with W = 10 the first batch's steps have rate 0 and batch 10 on the full rate; W = 0: always lr."""
    return lr if warmup_steps <= 0 else lr * min(1.0, step / warmup_steps)


def run_steps(model, tok, records, args, method, cfg, frozen, opt, desc="train", start_step=0, on_step=None):
    """Steps `start_step+1 .. args.steps` of one task. Any step can be resumed: it has its own seed.

    method: the grpo or sdpo module; cfg: its knobs; frozen: its frozen model (GRPO's reference or None, SDPO's
    teacher); args: the run's settings.
    on_step(step, row) runs after each step with its line (continual.py: log.jsonl, the in-stage curve).
    """
    order, warmup = prompt_order(len(records), args), stage_warmup(args.warmup_steps, records)
    with StepLog(model, args.steps, start_step, desc, on_step) as log:   # bar, log, Ctrl-C (infra/steps.py)
        for step in log.steps():
            n = args.prompts_per_step
            chosen = [records[i] for i in order[step * n:(step + 1) * n]]
            # ---- 1. sample a group of G responses per prompt and grade them (rollout.py, world/graders.py) ----
            batch = sample_and_grade(model, tok, chosen, args, step)
            log.sampled()
            # ---- 2. the method's update: its loss on every micro-batch, backward, clip, step (update) ----
            torch.manual_seed(update_seed(args.seed, step))
            lr = warmup_lr(args.lr, step, warmup)   # this batch's rate (the release's warmup)
            stats = update(model, opt, method, cfg, frozen, batch, args, tok, step + 1, lr)
            model.zero_grad(set_to_none=True)   # the gradients' memory is free for the next rollout
            # ---- 3. the teacher schedule: SDPO's EMA (T1) or refresh (T2); GRPO has none (no after_step) ----
            if hasattr(method, "after_step") and method.after_step(frozen, model, step + 1, cfg):
                stats["teacher_refresh"] = True   # a T2 refresh point, marked on curves.png
            # ---- 4. log the step; a Ctrl-C stops here, after a whole step ----
            log.step(batch, stats)
    return model


def update(model, opt, method, cfg, frozen, batch, args, tok, step, lr=None):
    """One batch's update: what the method needs from the batch (method.prepare_batch), then its optimizer
    steps (GRPO: mini-batches × epochs; SDPO: one), each: zero the gradient, the method's loss and its
    backward on every micro-batch, clip, step. Returns the step's statistics (method.step_stats, the rate).
    lr: this batch's rate (None: the optimizer's own).

    Each micro-batch's loss is already divided by the *whole* batch's count (every process), so the
    gradients summed over micro-batches (and processes) are the whole batch's gradient however it is split.
    NonFiniteError before the step on a non-finite loss or gradient (the weights stay as they were), and
    after it when the step made a weight non-finite.
    """
    if lr is not None:                 # this batch's rate (the release's warmup)
        for group in opt.param_groups:
            group["lr"] = lr
    plan = method.prepare_batch(model, frozen, batch, cfg, args, tok, step)
    results = []                       # (loss, [stats per micro-batch], ‖∇‖) per optimizer step
    with whole_batch(plan, frozen, step):   # (G5, S5) each step's counts over the whole batch (torchrun: every process)
        for part in plan.steps:
            opt.zero_grad(set_to_none=True)
            total, parts = torch.zeros(()), []
            for idx in part["micro_batches"]:
                # the method's loss on these responses: GRPO (G2–G5) or SDPO (S2–S5)
                loss, stats = method.micro_batch_loss(model, frozen, batch, plan, part, idx, cfg, args, tok)
                loss.backward()        # the gradient accumulates in p.grad, micro-batch by micro-batch
                total, parts = total + loss.detach().cpu(), parts + [stats]
            # the loss checked (a non-finite one stops before the step), the gradient clipped, AdamW's step
            total, grad_norm = clip_and_step(model, opt, total, len(part["micro_batches"]), args.max_grad_norm)
            results.append((total, gather_lists(parts), grad_norm))   # (the stats: every process's micro-batches)
    return {**method.step_stats(plan, results), "lr": opt.param_groups[0]["lr"]}
