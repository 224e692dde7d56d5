"""infra/one_task.py — the directory of a one-task run (`python grpo.py`, `python sdpo.py`, beyond/variants.py),
kept out of train.train_one_task: runs/<name>-<task>-s<seed>/ claimed (never over what is not such a run, never
under the committed folders without --overwrite-committed), θ_0 loaded, and at the end the trained model's
checkpoint (and the teacher's), summary.json and curves.png; then, over several seeds, the change in accuracy with
its interval. Nothing here is in the paper.
"""
import contextlib
import json
import os
import sys

import torch

from infra import plots, safety, trackers
from infra.checkpoints import read_jsonl, save_checkpoint
from infra.distributed import NonFiniteError, init_distributed, is_main, process_count
from infra.flags import check_code_jail, check_dir_flag, per_seed
from infra.models import load_policy
from infra.stats import mean_interval
from infra.stops import Interrupted, sigterm_as_ctrl_c
from world import tasks

RUN_FILES = {"log.jsonl", "model", "teacher", "summary.json", "curves.png", "model.tmp", "model.old", "teacher.tmp",
             "teacher.old"}


def own_run_dir(out, method_name, args):
    """May this command replace `out`? Yes for its own earlier run (summary.json names the same method, task and
    seed), or an unfinished one (only the files a run writes, no summary yet). Another task's or seed's finished
    run is never replaced."""
    summary = os.path.join(out, "summary.json")
    if os.path.isfile(summary):
        try:
            saved = json.load(open(summary))
            return (saved.get("method"), saved.get("task"), saved.get("seed", args.seed)) == \
                (method_name, args.task, args.seed)
        except (OSError, ValueError, AttributeError):
            return False
    return set(os.listdir(out)) <= RUN_FILES


LOCKS = []   # the run directory this process writes, locked until it exits (safety.RunLock)


def claim_out_dir(ap, args, method_name):
    """The run's directory (--out, else runs/<method_name>-<task>-s<seed>), or one error line: never under the
    committed folders without --overwrite-committed, never over what is not a run of this command."""
    if args.out is not None:   # (an empty --out is an error, not the default)
        check_dir_flag(ap, "--out", args.out)
    out = args.out or os.path.join("runs", f"{method_name}-{os.path.basename(args.task)}-s{args.seed}")
    safety.refuse_committed(ap.error, "--out", out, args.overwrite_committed)
    if is_main() and os.path.isdir(out) and os.listdir(out) and not own_run_dir(out, method_name, args):
        ap.error(f"--out {out} exists and is not a run of this command ({method_name} on {args.task}, seed "
                 f"{args.seed}); nothing was changed. Give another --out")
    return out


def lock_out_dir(ap, out):
    """One writer at a time (rank 0, once the ranks are known): a second run with the same --out stops here."""
    if is_main():
        lock = safety.RunLock(out)
        if not lock.acquire():
            ap.error(f"--out {out} is being written by another process (pid {lock.held_by()}); wait for it, or "
                     f"give another --out")
        LOCKS.append(lock)


class OneTaskRun:
    """One seed's one-task run: --task's training and test records (self.records, self.test; a built-in task is
    scored on its test split, or --eval-split valid, a file or hub task on its first --eval-n records), its
    directory claimed, θ_0 loaded (self.model, self.tok), log.jsonl begun afresh (self.log_path); save(...) writes
    the rest when the training is done. Bad input is one error line before anything is written."""

    def __init__(self, ap, args, method_name):
        try:
            tasks.check_task(args.task)   # a name that is no task: --task alone is to blame
        except ValueError as e:
            ap.error(f"--task: {e}")
        try:
            self.records, self.test = tasks.train_and_test(args.task, args.seed, args.eval_n, args.eval_seed,
                                                           args.eval_split)
        except Exception as e:  # a bad file names file:line; a hub task that cannot be fetched says why
            ap.error(f"--task / --eval-n: {tasks.one_line(e)}")
        check_code_jail(ap, args, [args.task])
        self.args, self.method_name = args, method_name
        self.out = claim_out_dir(ap, args, method_name)
        device = init_distributed(args.device, args.threads)   # torchrun: one process per GPU (infra/distributed.py)
        lock_out_dir(ap, self.out)
        self.log_path = os.path.join(self.out, "log.jsonl")
        if is_main():
            os.makedirs(self.out, exist_ok=True)
            if os.path.exists(self.log_path):
                os.remove(self.log_path)
        torch.manual_seed(args.seed)
        self.model, self.tok = load_policy(args.model, device, args.dtype, args.grad_checkpointing, args.enable_thinking)
        self.tracker = trackers.open_tracker(args.report_to, self.out, os.path.basename(os.path.abspath(self.out)),
                                             {**vars(args), "method": method_name}) if is_main() else None

    def track(self, step, row):
        """on_step for train.run_steps: --report-to's step line."""
        if self.tracker:
            self.tracker.step(row, step)

    @contextlib.contextmanager
    def stops_cleanly(self):
        """The training: a non-finite step (exit 1) or a Ctrl-C / SIGTERM (exit 130) says so in one line; nothing is
        saved (a one-task run does not resume: rerun it)."""
        sigterm_as_ctrl_c()
        try:
            yield
        except NonFiniteError as e:
            print(f"error: stopped at a non-finite step ({e}); nothing saved from this run", file=sys.stderr)
            sys.exit(1)
        except KeyboardInterrupt as e:
            done = f" after step {e.completed_steps}" if isinstance(e, Interrupted) else ""
            print(f"\ninterrupted{done}: nothing saved from this run (a one-task run does not resume; rerun it)",
                  file=sys.stderr)
            sys.exit(130)

    def save(self, before, after, train_s, teacher=None):
        """The trained model's checkpoint (and the teacher's), summary.json and curves.png; prints what it saved."""
        args, out = self.args, self.out
        processes = process_count()
        if self.tracker:   # the task's accuracy after training, and its change (A3's G or F) against before
            change = (after - before) / before if before else None
            self.tracker.stage({args.task: after}, None if change is None else max(change, 0.0),
                               None if change is None else max(-change, 0.0), args.steps)
            self.tracker.close()
        try:
            save_checkpoint(self.model, self.tok, os.path.join(out, "model"))   # (torchrun: every process takes part)
            if teacher is not None:                                              # SDPO: the teacher as it ended
                save_checkpoint(teacher, self.tok, os.path.join(out, "teacher"))
        except OSError as e:   # a full disk: one line, nothing half-written left (save_checkpoint removed its .tmp)
            sys.exit(f"error: {e.filename}: {e.strerror or e}; free space or give another --out and rerun")
        if not is_main():
            return
        rows = read_jsonl(self.log_path)[0]
        first, last = rows[:10], rows[-10:]
        print(f"{self.method_name} on {args.task}: Acc@{args.eval_k} {100 * before:.1f}% -> {100 * after:.1f}% "
              f"in {args.steps} steps ({train_s:.0f}s training); mean reward first/last 10 steps "
              f"{sum(r['reward'] for r in first) / len(first):.2f} / {sum(r['reward'] for r in last) / len(last):.2f}")
        if processes > 1:
            print(f"{processes} processes, FSDP2: each held 1/{processes} of the weights, gradients and AdamW states")
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump({"method": self.method_name, "task": args.task, "seed": args.seed, "acc_before": before,
                       "acc_after": after,
                       "train_seconds": train_s, "world_size": processes, "args": vars(args)}, f, indent=1)
        curves = plots.plot_curves(rows, os.path.join(out, "curves.png"))
        saved = [f"{out}/model"] + ([f"{out}/teacher"] if teacher is not None else []) + \
            [f"{out}/log.jsonl", f"{out}/summary.json"] + ([curves] if curves else [])
        print("saved " + ", ".join(saved))


def over_seeds(args, method_name, train_one):
    """`--seed 0,1,2`: train_one(args of one seed) once per seed, each in its own directory (…-s<seed>), all scored
    on the same test prompts (--eval-seed); then the change in accuracy, mean over seeds with its 95% interval.
    Returns [(before, after)] per seed."""
    runs = []
    for one in per_seed(args):
        if args.out and len(args.seed) > 1:
            one.out = f"{args.out}-s{one.seed}"
        runs.append(train_one(one))
    if len(runs) > 1 and is_main():
        mean, lo, hi = mean_interval([after - before for before, after in runs])
        print(f"\n{method_name} on {args.task} over seeds {','.join(map(str, args.seed))}: Acc@{args.eval_k} change "
              f"{100 * mean:+.1f} points, 95% interval [{100 * lo:+.1f}, {100 * hi:+.1f}] "
              f"(t-interval over {len(runs)} seeds; " + ", ".join(f"s{s}: {100 * (a - b):+.1f}" for s, (b, a) in
                                                                  zip(args.seed, runs)) + ")")
    return runs
