"""infra/steps.py — the training loop's bookkeeping, kept out of train.run_steps: the progress bar, each step's log
line (reward and length over every process, the update's size, seconds), and clean stops at a step boundary.

    with StepLog(model, args.steps, start, desc, on_step) as log:
        for step in log.steps():
            batch = ...                 # rollout
            log.sampled()               # the rollout's seconds end here; the weights before the update are kept
            stats = ...                 # update
            log.step(batch, stats)      # the step's line; a Ctrl-C or SIGTERM during the step stops here

Nothing here is in the paper.
"""
import sys
import time
import warnings

import torch
from tqdm import tqdm

from infra.distributed import EmptyLossWarning, global_sum, is_main, update_size, weights_snapshot
from infra.stops import Interrupted, StepBoundarySigint


class StepLog:
    """Steps start+1 … steps of one task or stage. on_step(step, row): runs after each step's line, and keeps it
    (continual.py: the stage's log.jsonl, the in-stage curve; experiment/rundir.stage_logger)."""

    def __init__(self, model, steps, start=0, desc="train", on_step=None):
        self.model, self.n_steps, self.start, self.on_step = model, steps, start, on_step
        self.bar = tqdm(total=steps - start, desc=desc, dynamic_ncols=True, leave=False, disable=not is_main())

    def __enter__(self):
        self.stops = StepBoundarySigint().__enter__()   # Ctrl-C / SIGTERM: stop at the end of the step
        self.caught = warnings.catch_warnings(record=True)   # the loop's warnings: said above the bar, counted
        self.warned = self.caught.__enter__()
        warnings.simplefilter("always", EmptyLossWarning)
        self.empty = []                                   # the steps that put no token in the loss
        self.rows, self.said_busy = [], False              # each step's line (busy_note reads their seconds)
        return self

    def __exit__(self, *exc):
        self.bar.close()
        self.caught.__exit__(*exc)
        self.say_warnings()
        if len(self.empty) > 1:
            print(f"warning: {self.bar.desc}: {len(self.empty)} of {self.bar.n} steps had no token in the loss "
                  f"(steps {', '.join(self.empty[:8])}{', …' if len(self.empty) > 8 else ''})", file=sys.stderr)
        return self.stops.__exit__(*exc)

    def say_warnings(self):
        """The steps' warnings, above the bar: the first empty step in full (the rest counted at the end), others as is."""
        for w in self.warned:
            if issubclass(w.category, EmptyLossWarning):
                self.empty.append(str(w.message).split()[-1])
                if len(self.empty) == 1:
                    tqdm.write(f"warning: {self.bar.desc}: {w.message}: no token in the loss (SDPO: no successful sibling "
                               f"or feedback): a zero gradient, AdamW steps anyway as the release; more are counted at the "
                               f"end", file=sys.stderr)
            else:
                tqdm.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno).rstrip(), file=sys.stderr)
        self.warned.clear()

    def steps(self):
        """The step indices to run (0-based), each timed from its start."""
        for step in range(self.start, self.n_steps):
            self.index, self.t0 = step, time.time()
            yield step

    def sampled(self):
        """The rollout is done: its seconds end here, and the weights before the update are kept (its size)."""
        self.t1, self.before = time.time(), weights_snapshot(self.model)

    def step(self, batch, stats):
        """The step's line: mean reward and response length over every process's responses, the method's
        statistics, the update's size ‖Δθ‖/‖θ‖ (update_rel, update_max), rollout and update seconds, this
        process's peak GPU memory; shown on the bar, handed to on_step (which writes it). A Ctrl-C or SIGTERM
        received during the step stops the loop here (Interrupted: the steps done so far are whole)."""
        total = global_sum(len(batch["response_ids"]))
        row = {"step": self.index + 1, "reward": global_sum(batch["rewards"].sum().item()) / total,
               "response_len": global_sum(sum(len(r) for r in batch["response_ids"])) / total,
               **stats, **update_size(self.model, self.before),
               "rollout_s": round(self.t1 - self.t0, 3), "update_s": round(time.time() - self.t1, 3)}
        if torch.cuda.is_available() and next(self.model.parameters()).is_cuda:   # this process's peak this step
            row["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
            torch.cuda.reset_peak_memory_stats()
        # GRPO's loss is ≈ 0 by construction (advantages sum to 0 in a group, ρ ≈ 1): show its clip fraction;
        # SDPO's per-token JS is its signal
        signal = {"js": f"{row['js']:.3f}"} if "js" in row else {"clip": f"{row.get('clip_frac', 0):.3f}"}
        self.bar.set_postfix(reward=f"{row['reward']:.2f}", **signal)
        self.bar.update(1)
        self.say_warnings()
        self.rows.append(row)
        note = None if self.said_busy else busy_note(self.rows)
        if note:
            tqdm.write(f"note: {self.bar.desc}: {note}", file=sys.stderr)
            self.said_busy = True
        if self.on_step:
            self.on_step(self.index + 1, row)
        if self.stops.requested:
            raise Interrupted(self.index + 1)
        return row


def busy_note(rows, window=5, factor=2.5):
    """A sentence when the median of the last `window` steps' seconds per response token (rollout and update) is
    `factor` times the first `window`'s or more, else None: measured, and longer responses alone do not count."""
    if len(rows) < 2 * window:
        return None
    first, last = (sorted((r["rollout_s"] + r["update_s"]) / max(r["response_len"], 1e-9) for r in part)[window // 2]
                   for part in (rows[:window], rows[-window:]))
    if last < factor * first:
        return None
    return (f"its steps now take {last / first:.1f}× as long per response token as its first {window} (median "
            f"{1000 * last:.0f} ms against {1000 * first:.0f} ms): the machine is busy (other jobs share its cores); "
            f"the numbers are the same, only later")
