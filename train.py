"""train.py — the training loop, in one place: sample → grade → the method's loss → backward → clip → step →
teacher → log.

grpo.py and sdpo.py hold the equations. Each is handed to this loop as it is, a module with the same four
functions, and its *frozen* model (GRPO's reference, G4, or SDPO's teacher, S2: no gradient reaches it):

    method.prepare_batch(model, frozen, batch, args, tok, step) -> plan   what the batch gives the loss:
                     GRPO's advantages and π_old (G1, G2); SDPO's teacher prompts and token masks (S1, S7, S8);
                     and the batch's optimizer steps, each a list of micro-batches
    method.micro_batch_loss(model, frozen, batch, plan, part, idx, args, tok) -> (loss, stats)
                     the loss of one micro-batch: GRPO (G2–G5) or SDPO (S2–S5), every equation called there
    method.step_stats(plan, results) -> dict                               what the step logs
    method.after_step(frozen, model, step, args) -> bool                   SDPO's teacher schedule (T1 EMA,
                     T2 refresh: True at a refresh point); GRPO has none

`run_steps` is the loop and `update` one batch's optimizer steps: read them top to bottom. `train_one_task`
is what `python grpo.py` and `python sdpo.py` run: evaluate, train one task, evaluate, save.
continual.py calls `run_steps` once per stage (C1).
"""
import json
import os
import random
import sys
import time

import torch
from tqdm import tqdm

import evaluate
from infra import stats
from infra import plots, safety
from world import tasks
from infra.flags import check_code_jail, check_dir_flag, per_seed
from infra.stops import Interrupted, StepBoundarySigint
from infra.distributed import NonFiniteError, check_weights, checked_total, clip_gradients, first_global_index, gathered, global_sum, init_distributed, is_main, my_sample_blocks, clone_model, process_count, update_size, weights_snapshot
from infra.checkpoints import append_jsonl, save_checkpoint
from infra.models import load_policy
from rollout import acc_at_k, collect, drop_long_prompts


def train_records(task, n=4000, seed=0):
    """The training prompts of a task: a built-in domain's train split, a JSON(-lines) file, or hf:NAME."""
    if task in tasks.GENERATORS:
        return tasks.builtin_split(task, "train", n, seed, allow_fewer=True)
    return tasks.task_records(task)


def prompt_order(n_records, args):
    """Indices of the prompts of every step, in a fixed order from `args.seed` (an epoch-wise shuffle):
    two methods run with the same seed see the same prompts in the same order."""
    order_rng = random.Random(args.seed)
    order, per_epoch = [], list(range(n_records))
    while len(order) < args.steps * args.prompts_per_step:
        order_rng.shuffle(per_epoch)
        order += per_epoch
    return order


def sample_seed(seed, step, block):
    """The sampling seed of one block of one step: every step reproducible on its own (so a run resumes
    exactly), and each block of prompts its own stream (block 0's is the one-process seed)."""
    return seed * 100_003 + step + 1_000_003 * block


def update_seed(seed, step):
    """The update's own seed (SDPO's token masks, S7), the same in every process."""
    return seed * 100_003 + step + 7


def sample_and_grade(model, tok, chosen, args, step):
    """G responses for each of this process's share of the step's prompts, graded (rollout.collect).

    The step's prompts are cut into `--sample-blocks` blocks of whole prompts (default: one per process
    under torchrun, infra.my_sample_blocks), each sampled under its own seed, so a step's samples do not
    depend on how many processes share it (a group never straddles two). One process: one block.
    """
    blocks, mine = my_sample_blocks(args.sample_blocks)
    per = len(chosen) // blocks
    parts = []
    for b in mine:
        torch.manual_seed(sample_seed(args.seed, step, b))
        try:
            parts.append(collect(model, tok, chosen[b * per:(b + 1) * per], args.group_size, args.max_new_tokens,
                                 args.temperature, args.top_p, sample_batch=args.sample_batch))
        except RuntimeError as e:   # torch's "probability tensor contains either inf, nan or element < 0"
            if "inf" not in str(e) and "nan" not in str(e):
                raise
            raise NonFiniteError(f"the policy's probabilities are not finite at step {step + 1} "
                                 f"(is --lr too large?)") from None
    batch = {k: [x for p in parts for x in p[k]] for k in ("records", "prompt_ids", "response_ids", "texts", "feedback")}
    batch["rewards"] = torch.cat([p["rewards"] for p in parts])    # [N*G] (this process's prompts)
    batch["group_size"] = args.group_size
    batch["blocks"] = max(1, len(mine))   # sample blocks in it: the batch's order is made block by block
    batch["first_index"] = first_global_index(len(batch["response_ids"]))   # its first response in the whole batch
    return batch


# The release's learning-rate warmup, per data kind (docs/PROTOCOL.md): 10 batches for SciKnowEval and
# ToolAlpaca (experiments/generalization/run_sdpo_all.sh:126 and run_baseline_grpo_all.sh:112,
# lr_warmup_steps=10); none for CODING (experiments/rich_feedback/run_sdpo.sh:123 and run_baseline_grpo.sh:107,
# lr_warmup_steps=0) nor for MATH, which has no script (optim/fsdp.yaml:15,24: lr_warmup_steps -1 falls
# back to lr_warmup_steps_ratio 0.0, fsdp_workers.py:574–580).
RELEASE_WARMUP = {"mcq": 10, "tooluse": 10}


def stage_warmup(warmup_steps, records):
    """The warmup of a task or stage: --warmup-steps when given, else the release's for its data kind."""
    if warmup_steps is not None:
        return warmup_steps
    return RELEASE_WARMUP.get(records[0].get("kind"), 0) if records else 0


def warmup_lr(lr, step, warmup_steps):
    """The learning rate of batch `step` (0-based): the release's constant schedule with a linear warmup
    from 0 (verl `get_constant_schedule_with_warmup`, stepped once per batch), lr · min(1, step / W). So
    with W = 10 the first batch's steps have rate 0 and batch 10 on the full rate; W = 0: always lr."""
    return lr if warmup_steps <= 0 else lr * min(1.0, step / warmup_steps)


def run_steps(model, tok, records, args, method, frozen, opt, log_path=None, desc="train", start_step=0,
              on_step=None, base=None):
    """Steps `start_step+1 .. args.steps` of one task. Any step can be resumed: it has its own seed.

    method: the grpo or sdpo module; frozen: its frozen model (GRPO's reference or None, SDPO's teacher).
    on_step(step, row) runs after each logged step (continual.py: in-stage curve, its own log).
    base: θ_0 of the whole sequence, for the forgetting defences (--anchor R2, --base-kl R3); None without them.
    """
    order, warmup = prompt_order(len(records), args), stage_warmup(args.warmup_steps, records)
    bar = tqdm(range(start_step, args.steps), desc=desc, dynamic_ncols=True, leave=False, disable=not is_main())
    with StepBoundarySigint() as sigint:          # Ctrl-C stops at the end of a step (infra/distributed.py)
        for step in bar:
            n = args.prompts_per_step
            chosen = [records[i] for i in order[step * n:(step + 1) * n]]
            t0 = time.time()
            # ---- 1. sample a group of G responses per prompt and grade them (rollout.py, world/tasks.py) ----
            batch = sample_and_grade(model, tok, chosen, args, step)
            t1 = time.time()
            # ---- 2. the method's update: its loss on every micro-batch, backward, clip, step (update) ----
            torch.manual_seed(update_seed(args.seed, step))
            lr = warmup_lr(args.lr, step, warmup)   # this batch's rate (the release's warmup)
            stats = update(model, opt, method, frozen, batch, args, tok, step + 1, lr, base)
            model.zero_grad(set_to_none=True)   # the gradients' memory is free for the next rollout
            # ---- 3. the teacher schedule: SDPO's EMA (T1) or refresh (T2); GRPO has none ----
            refreshed = method.after_step(frozen, model, step + 1, args)
            # ---- 4. log ----
            row = step_row(model, batch, stats, step, t0, t1)
            if refreshed:                      # a T2 refresh point, marked on curves.png
                row["teacher_refresh"] = True
            if log_path and is_main():
                append_jsonl(log_path, row)
            # GRPO's loss is ≈ 0 by construction (advantages sum to 0 in a group, ρ ≈ 1): show its clip
            # fraction; SDPO's per-token JS is its signal
            signal = {"js": f"{row['js']:.3f}"} if "js" in row else {"clip": f"{row.get('clip_frac', 0):.3f}"}
            bar.set_postfix(reward=f"{row['reward']:.2f}", **signal)
            if on_step:
                on_step(step + 1, row)
            if sigint.requested:
                raise Interrupted(step + 1)
    return model


def update(model, opt, method, frozen, batch, args, tok, step, lr=None, base=None):
    """One batch's update: what the method needs from the batch (method.prepare_batch), then its optimizer
    steps (GRPO: mini-batches × epochs; SDPO: one), each: zero the gradient, the method's loss and its
    backward on every micro-batch, clip, step. Returns the step's statistics (method.step_stats, the rate,
    the update's size). lr: this batch's rate (None: the optimizer's own).

    Each micro-batch's loss is already divided by the *whole* batch's count (every process), so the
    gradients summed over micro-batches (and processes) are the whole batch's gradient however it is split.
    NonFiniteError before the step on a non-finite loss or gradient (the weights stay as they were), and
    after it when the step made a weight non-finite.
    """
    if lr is not None:                 # this batch's rate (the release's warmup)
        for group in opt.param_groups:
            group["lr"] = lr
    plan = method.prepare_batch(model, frozen, batch, args, tok, step)
    plan["base"] = base                # θ_0, for a defence that reads it (sdpo: --base-kl, R3)
    for part in plan["steps"]:         # (G5, S5) each step's token and response counts over the whole batch
        part["n_tok"], part["n_seq"] = global_sum(part["n_tok"]), global_sum(part["n_seq"])
    empty = all(part["n_tok"] == 0 for part in plan["steps"])   # SDPO: no response had a teacher signal
    if empty and is_main():
        print(f"warning: step {step}: no token in the loss (SDPO: no response had a successful sibling or feedback); "
              f"zero gradient (AdamW still takes its step, as the release does, unless --skip-empty-steps)",
              file=sys.stderr)
    before = weights_snapshot(model)   # θ before the batch's steps, for the update's size (logged)
    results = []                       # (loss, [stats per micro-batch], ‖∇‖) per optimizer step
    skip = empty and getattr(args, "skip_empty_steps", False)   # no signal: no step, no momentum move
    with gathered(frozen):             # (torchrun: the frozen model's forwards need no collective)
        for part in plan["steps"]:
            if skip:
                results.append((0.0, [], 0.0))
                continue
            opt.zero_grad(set_to_none=True)
            total, parts = torch.zeros(()), []
            for idx in part["micro_batches"]:
                # the method's loss on these responses: GRPO (G2–G5) or SDPO (S2–S5)
                loss, stats = method.micro_batch_loss(model, frozen, batch, plan, part, idx, args, tok)
                loss.backward()        # the gradient accumulates in p.grad, micro-batch by micro-batch
                total, parts = total + loss.detach().cpu(), parts + [stats]
            if getattr(args, "anchor", 0):   # (R2) a forgetting defence: + (λ/2)‖θ − θ_0‖², once per step
                penalty = l2_anchor(model, base, args.anchor)
                penalty.backward()
                total = total + penalty.detach().cpu()
            total = checked_total(model, total, len(part["micro_batches"]))   # Σ over processes; stops if non-finite
            grad_norm = clip_gradients(model, args.max_grad_norm)   # ‖∇‖ before clipping, then clipped
            opt.step()
            check_weights(model)
            results.append((total, parts, grad_norm))
    return {**method.step_stats(plan, results), "lr": opt.param_groups[0]["lr"], **update_size(model, before)}


def start_copy_if_defended(model, args):
    """θ_0 for the forgetting defences that read it (--anchor R2, --base-kl R3): a frozen copy; else None."""
    if getattr(args, "anchor", 0) or getattr(args, "base_kl", 0):
        return clone_model(model).eval().requires_grad_(False)
    return None


def l2_anchor(model, base, lam):
    """(R2) L2 anchoring to θ_0: (λ/2) Σ_p ‖θ_p − θ_0,p‖², whose gradient is λ(θ − θ_0) (the forgetting
    defence of a nanochat fork's --preserve-knowledge). base: θ_0, never moved."""
    # (R2) (λ/2) ‖θ − θ_0‖²
    return 0.5 * lam * sum(((p - p0.detach()) ** 2).sum() for p, p0 in zip(model.parameters(), base.parameters()))


def step_row(model, batch, stats, step, t0, t1):
    """The step's log line: mean reward and response length over every process's responses, the method's
    statistics, the rollout and update seconds (and this process's peak GPU memory on CUDA)."""
    total = global_sum(len(batch["response_ids"]))
    row = {"step": step + 1, "reward": global_sum(batch["rewards"].sum().item()) / total,
           "response_len": global_sum(sum(len(r) for r in batch["response_ids"])) / total,
           **stats, "rollout_s": round(t1 - t0, 3), "update_s": round(time.time() - t1, 3)}
    if torch.cuda.is_available() and next(model.parameters()).is_cuda:   # this process's peak this step
        row["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        torch.cuda.reset_peak_memory_stats()
    return row


def task_and_test_records(ap, args):
    """(training records, test records) of --task, or one error line: a built-in task is scored on its
    test split (or --eval-split valid), a file or hub task on its first --eval-n records."""
    try:
        tasks.check_task(args.task)
        records = train_records(args.task, seed=args.seed)
        test = evaluate.benchmark_records(args.task, args.eval_n, args.eval_seed, split=args.eval_split) \
            if args.task in tasks.GENERATORS \
            else records[:args.eval_n]
    except Exception as e:  # a bad file names file:line; a hub task that cannot be fetched says why
        ap.error(f"--task / --eval-n: {tasks.one_line(e)}")
    check_code_jail(ap, args, [args.task])
    return records, test


RUN_FILES = {"log.jsonl", "model", "teacher", "summary.json", "curves.png", "model.tmp", "model.old", "teacher.tmp",
             "teacher.old"}


def own_run_dir(out, method_name):
    """May this command replace `out`? Yes for its own earlier run (summary.json names the same method and
    settings), or an unfinished one (only the files a run writes, no summary yet)."""
    summary = os.path.join(out, "summary.json")
    if os.path.isfile(summary):
        try:
            return json.load(open(summary)).get("method") == method_name
        except (OSError, ValueError, AttributeError):
            return False
    return set(os.listdir(out)) <= RUN_FILES


def claim_out_dir(ap, args, method_name):
    """The run's directory (--out, else runs/<method_name>-<task>-s<seed>), or one error line: never under the
    committed folders without --overwrite-committed, never over what is not a run of this command."""
    if args.out is not None:   # (an empty --out is an error, not the default)
        check_dir_flag(ap, "--out", args.out)
    out = args.out or os.path.join("runs", f"{method_name}-{os.path.basename(args.task)}-s{args.seed}")
    safety.refuse_committed(ap.error, "--out", out, args.overwrite_committed)
    if is_main() and os.path.isdir(out) and os.listdir(out) and not own_run_dir(out, method_name):
        ap.error(f"--out {out} exists and is not a run of this command ({method_name}); nothing was changed. "
                 f"Give another --out")
    return out


def train_one_task(ap, args, method_name, method):
    """What `python grpo.py` / `python sdpo.py` run: evaluate, train one task, evaluate, save a HF
    checkpoint, log.jsonl and summary.json in runs/<method_name>-<task>-s<seed>/ (the name carries every
    method setting that differs from its default, e.g. sdpo_a0_cot). method: the grpo or sdpo module."""
    records, test = task_and_test_records(ap, args)
    out = claim_out_dir(ap, args, method_name)
    device = init_distributed(args.device, args.threads)   # torchrun: one process per GPU (infra/distributed.py)
    log_path = os.path.join(out, "log.jsonl")
    if is_main():
        os.makedirs(out, exist_ok=True)
        if os.path.exists(log_path):
            os.remove(log_path)
    torch.manual_seed(args.seed)
    model, tok = load_policy(args.model, device, args.dtype, args.grad_checkpointing, args.enable_thinking)
    try:
        records = drop_long_prompts(tok, records, args.max_prompt_len, "training prompts")
        test = drop_long_prompts(tok, test, args.max_prompt_len, "test prompts")
    except ValueError as e:
        ap.error(str(e))

    def acc():   # the evaluation's own seed: the same test prompts and sampling whatever the training seed
        torch.manual_seed(args.eval_seed)
        return acc_at_k(model, tok, test, args.eval_k, args.max_new_tokens, batch_size=args.sample_batch)[0]

    before = acc()
    print(f"{method_name} on {args.task}: Acc@{args.eval_k} before = {100 * before:.1f}% ({len(test)} test prompts)")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    frozen = method.frozen_model(model, args)   # GRPO's reference (G4, only with --kl-coef) or SDPO's teacher
    t0, base = time.time(), start_copy_if_defended(model, args)   # θ_0 for the defences R2, R3 (or None)
    try:
        run_steps(model, tok, records, args, method, frozen, opt, log_path, desc=f"{method_name}:{args.task}", base=base)
    except NonFiniteError as e:
        print(f"error: stopped at a non-finite step ({e}); nothing saved from this run", file=sys.stderr)
        sys.exit(1)
    train_s = time.time() - t0
    after = acc()
    processes = process_count()
    save_checkpoint(model, tok, os.path.join(out, "model"))   # (torchrun: gathered, every process takes part)
    teacher = frozen if method.FROZEN == "teacher" else None
    if teacher is not None:                                    # SDPO: the teacher as it ended
        save_checkpoint(teacher, tok, os.path.join(out, "teacher"))
    if not is_main():
        return before, after
    rows = [json.loads(line) for line in open(log_path)]
    first, last = rows[:10], rows[-10:]
    print(f"{method_name} on {args.task}: Acc@{args.eval_k} {100 * before:.1f}% -> {100 * after:.1f}% "
          f"in {args.steps} steps ({train_s:.0f}s training); mean reward first/last 10 steps "
          f"{sum(r['reward'] for r in first) / len(first):.2f} / {sum(r['reward'] for r in last) / len(last):.2f}")
    if processes > 1:
        print(f"{processes} processes, FSDP2: each held 1/{processes} of the weights, gradients and AdamW states")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"method": method_name, "task": args.task, "acc_before": before, "acc_after": after,
                   "train_seconds": train_s, "world_size": processes, "args": vars(args)}, f, indent=1)
    curves = plots.plot_curves(rows, os.path.join(out, "curves.png"))
    saved = [f"{out}/model"] + ([f"{out}/teacher"] if teacher is not None else []) + \
        [f"{out}/log.jsonl", f"{out}/summary.json"] + ([curves] if curves else [])
    print("saved " + ", ".join(saved))
    return before, after


def train_seeds(ap, args, method_name, method):
    """`--seed 0,1,2`: train_one_task once per seed, each in its own directory (…-s<seed>), all scored on
    the same test prompts (--eval-seed); then the change in accuracy, mean over seeds with its 95%
    interval (stats.mean_interval). Returns [(before, after)] per seed."""
    runs = []
    for one in per_seed(args):
        if args.out and len(args.seed) > 1:
            one.out = f"{args.out}-s{one.seed}"
        runs.append(train_one_task(ap, one, method_name, method))
    if len(runs) > 1 and is_main():
        mean, lo, hi = stats.mean_interval([after - before for before, after in runs])
        print(f"\n{method_name} on {args.task} over seeds {','.join(map(str, args.seed))}: Acc@{args.eval_k} change "
              f"{100 * mean:+.1f} points, 95% interval [{100 * lo:+.1f}, {100 * hi:+.1f}] "
              f"(t-interval over {len(runs)} seeds; " + ", ".join(f"s{s}: {100 * (a - b):+.1f}" for s, (b, a) in
                                                                  zip(args.seed, runs)) + ")")
    return runs
