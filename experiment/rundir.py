"""experiment/rundir.py — a continual run's directories, which make it safe to stop and rerun.

continual.main walks them: Experiment (one directory per seed, claimed before any work) → Seed (θ_0 loaded,
row 0 of the accuracy matrix) → Run (one configuration, from θ_0 or where it stopped) → Run.stage (one stage,
saved if stopped) → Run.complete. The calls go one way: nothing here calls continual.py.
A seed's directory, runs/<configurations>-s<seed>[-<hash>], holds config.json (the command it belongs to),
progress.json (a stage is done once it is written there), log.jsonl, a checksummed checkpoint per stage and a
stop's mid-stage state in partial/. Damage stops the run with one line naming the file and a safe next step, or
is set aside loudly; nothing is deleted silently."""
import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time

import torch

from experiment.metrics import summarize_seeds
from experiment.tables import accuracy_tables, rows_of, write_tables
from infra import errors, safety, trackers
from infra.checkpoints import (CHECKSUMS, append_jsonl, atomic_json, check_states, damaged_files, file_digest,
                               load_optimizer, load_teacher, read_jsonl, read_responses, responses_path,
                               save_checkpoint, save_responses, stage_checkpoint, with_stage_checkpoints,
                               write_atomically, write_result_checksum)
from infra.distributed import NonFiniteError, barrier, clone_model, init_distributed, is_main, shard, under_torchrun
from infra.flags import per_seed
from infra.models import load_model, load_policy
from infra.stops import Interrupted, sigterm_as_ctrl_c
from world import tasks


# ----------------------------------------------------------------------------------------------
# The run object: an experiment's directories, one seed's, one configuration's, one stage's
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Stage:
    """Stage k of a configuration as train.run_steps takes it and a stop saves it: settings, prompts D_k, optimizer,
    frozen model, the step it starts from, its step rows and in-stage curve."""
    k: int
    domain: str
    args: argparse.Namespace
    records: list
    opt: torch.optim.Optimizer
    frozen: object                 # the method's frozen model: SDPO's teacher, GRPO's reference (or None)
    teacher: object = None         # what is saved beside the student (method.frozen_state(frozen))
    start: int = 0
    rows: list = dataclasses.field(default_factory=list)
    curve: list = dataclasses.field(default_factory=list)
    desc: str = ""
    on_step: object = None
    t0: float = 0.0
    trained_at: float = None       # when its last step ended (the training's seconds, before the evaluation)


class Experiment:
    """The run directories of one command, one per seed, each claimed (and locked) before any work starts. As a
    context: SIGTERM stops like Ctrl-C, and an unreadable or unwritable file stops the run with one line."""

    def __init__(self, ap, args, stages, benchmarks, configs, defaults, naming):
        self.ap, self.args, self.stages, self.benchmarks, self.configs, self.defaults, self.naming = \
            ap, args, stages, benchmarks, configs, defaults, naming
        self.seed_args = per_seed(args)
        self.dirs = seed_dirs(args, self.seed_args, configs, defaults, naming)
        self.device = init_distributed(args.device, args.threads)   # torchrun: data parallel; rank 0 writes files
        self.t_start, self.base_evals, self.results = time.time(), {}, []   # (the base is evaluated once)
        self.stages_total = len(self.seed_args) * len(configs) * len(stages)   # (the overall ETA: stage_done)
        self.stages_at_start = self.stages_now = 0

    def __enter__(self):
        sigterm_as_ctrl_c()
        try:
            for one, run_dir in zip(self.seed_args, self.dirs):   # every directory is checked before any work
                claim_run_dir(self.ap, one, run_dir, self.stages, self.benchmarks, self.configs)
        except OSError as e:
            self.__exit__(OSError, e, None)
        return self

    def __exit__(self, kind, e, traceback):
        if isinstance(e, errors.BadData):   # data the run cannot run (rollout.drop_long_prompts, prompt_room)
            fail(f"{e}. Completed stages are kept: change the flag or the data and rerun")
        if isinstance(e, OSError):   # a directory in a file's place, a link loop, an immutable file, a full disk
            fail(f"{e.filename or 'a file of the run directory'}: {e.strerror or e}. Completed stages are kept: "
                 f"repair or move that path and rerun the same command")
        return False

    @contextlib.contextmanager
    def seed(self, args):
        """One seed's directory, opened (Seed), inside stops_cleanly."""
        run_dir = self.dirs[self.seed_args.index(args)]
        progress = load_progress(os.path.join(run_dir, "progress.json"))
        with stops_cleanly(run_dir):
            yield Seed(self, args, run_dir, progress)

    def stage_done(self):
        """After each stage, with several seeds or configurations: the stages done of all, the time left at this pace."""
        self.stages_now += 1
        done, total = self.stages_at_start + self.stages_now, self.stages_total
        if total <= len(self.stages) or not is_main():
            return
        spent = time.time() - self.t_start
        left = spent / self.stages_now * (total - done)
        print(f"overall: {done} of {total} stages done ({len(self.seed_args)} seed(s) × {len(self.configs)} "
              f"configuration(s) × {len(self.stages)} stages), {minutes(spent)} this invocation"
              + (f", about {minutes(left)} left at this pace" if done < total else ""))

    def finish(self):
        """The run's last words: one seed's directory, or the summary over several seeds (written and printed)."""
        if not is_main():
            return None
        seeds, dirs, args = self.seed_args, self.dirs, self.args
        tracked = {"tensorboard": lambda d: f"; TensorBoard's events in {d}/tensorboard/ (tensorboard --logdir {d})",
                   "trackio": lambda d: f"; trackio's project {os.path.basename(os.path.abspath(d))} (trackio show "
                                        f"--project {os.path.basename(os.path.abspath(d))})"}.get(args.report_to)
        if len(seeds) == 1:
            print(f"\n{dirs[0]}/: results.json, results.csv (the table), log.jsonl, checkpoints/"
                  f"{tracked(dirs[0]) if tracked else ''} — {time.time() - self.t_start:.0f}s this invocation\n"
                  f"its report.md and figures: python tools/report.py {dirs[0]}")
            return self.results[0]
        summary_dir, summary = write_seeds_summary(args, self.configs, self.defaults, self.naming, self.results, dirs)
        print(f"\n{summary_dir}/: results.json over seeds {','.join(map(str, args.seed))} (each seed in "
              f"{', '.join(dirs)}) — {time.time() - self.t_start:.0f}s this invocation\n"
              f"its report.md and figures, means with 95% intervals: python tools/report.py {summary_dir}")
        return summary


class Seed:
    """One seed's run directory, opened: θ_0 loaded, the log without lines a kill cut, and (C2) row 0 once
    continual.py has evaluated θ_0 (once per command: it does not depend on the training seed)."""

    def __init__(self, experiment, args, run_dir, progress):
        self.experiment, self.args, self.run_dir, self.progress = experiment, args, run_dir, progress
        self.stages, self.benchmarks, self.configs = experiment.stages, experiment.benchmarks, experiment.configs
        self.progress_path = os.path.join(run_dir, "progress.json")
        self.log_path, self.partial_dir = os.path.join(run_dir, "log.jsonl"), os.path.join(run_dir, "partial")
        self.base_model, self.tok = load_policy(args.model, experiment.device, args.dtype,
                                                enable_thinking=args.enable_thinking)   # θ_0
        repair_log(self.log_path)
        seeds = [one.seed for one in experiment.seed_args]   # 'seed 1 (2/3) ' on a bar of a several-seed command
        self.label = f"seed {args.seed} ({seeds.index(args.seed) + 1}/{len(seeds)}) " if len(seeds) > 1 else ""

    def has_base_row(self):
        """Whether row 0 is in progress.json with its responses, or taken from another seed of this command."""
        if "base" in self.progress and not os.path.exists(responses_path(self.run_dir, "base")):
            print("the base model's saved responses are missing: evaluating it again (same prompts, same result)")
            del self.progress["base"]
        self.t_base, args = time.time(), self.args
        self.base_key = json.dumps([args.model, args.dtype, self.benchmarks, args.eval_n, args.eval_k,
                                    args.max_new_tokens, args.eval_seed, args.max_prompt_len, args.sample_batch])
        if "base" not in self.progress and self.base_key in self.experiment.base_evals:
            self.save_base_row(*self.experiment.base_evals[self.base_key])
        return "base" in self.progress

    def save_base_row(self, acc, deg, resp):
        """(C2) Row 0 of the accuracy matrix in progress.json, its responses saved for the drift measures."""
        self.experiment.base_evals[self.base_key] = (acc, deg, resp)
        if is_main():
            save_responses(self.run_dir, "base", resp)
        self.progress["base"] = {"acc": acc, "degenerate": deg, "seconds": round(time.time() - self.t_base, 1)}
        atomic_json(self.progress_path, self.progress)
        print(f"{self.run_dir}: seed {self.args.seed}, {torch.get_num_threads()} torch threads (the numbers depend on it)")
        print(f"base: {fmt_row(acc)} ({time.time() - self.t_base:.0f}s)")

    def run(self, method, settings, name):
        """Where a configuration starts (Run): its completed stages, and θ_0, the last stage's checkpoint or a stop's
        state. method: what train.run_steps is handed (experiment/configurations.method_of)."""
        args, n_stages = self.args, len(self.stages)
        done = self.progress.setdefault(name, {"stages": []})["stages"]
        check_saved_stages(self.run_dir, name, done, n_stages)
        gone = [k for k, st in enumerate(done) if not os.path.isdir(st["checkpoint"])]
        if gone:   # a stage checkpoint deleted (say, because it was damaged): retrain from that stage on
            print(f"{name}: the checkpoint of stage {gone[0] + 1} is missing: stages {gone[0] + 1}–{n_stages} "
                  f"are trained again")
            del done[gone[0]:]
            atomic_json(self.progress_path, self.progress)
        self.experiment.stages_at_start += len(done)   # (a resumed command's count: what each seed found done)
        run = Run(self, method, settings, name, done)
        if len(done) == n_stages:
            return run
        if is_main():   # --report-to: this configuration's steps and stages in TensorBoard or trackio
            run.tracker = trackers.open_tracker(args.report_to, self.run_dir, name, {
                **vars(args), **settings, "method": {n: m for m, _, n in self.configs}[name]})
        device = self.experiment.device
        partial = load_partial(self.partial_dir, name, len(done), device, args)
        run.resume = partial[0] if partial else None
        if partial:
            model, tok = partial[1], partial[2]
        elif done:
            model, tok = load_checkpoint(done[-1]["checkpoint"], device, args.dtype, args.grad_checkpointing,
                                         f"stage {len(done)} checkpoint", args.enable_thinking)
        else:
            model, tok = load_model(args.model, device, args.dtype, args.grad_checkpointing,
                                    enable_thinking=args.enable_thinking)
        run.model, run.tok = shard(model, device), tok   # torchrun: FSDP2 (infra/distributed.py); one process: as is
        if run.resume:
            print(f"{name}: resuming stage {len(done) + 1} after step {run.resume['step']}")
        elif done:
            print(f"{name}: resuming after stage {len(done)} ({done[-1]['domain']})")
        return run

    def write_results(self, results):
        """results.json (the accuracy matrix, A2–A3, drift: evaluate.results_of) and the same as one table,
        results.csv and results.parquet (rank 0); with one seed, the accuracy matrix and A3 printed."""
        if not is_main():
            return None
        atomic_json(os.path.join(self.run_dir, "results.json"), results)
        write_result_checksum(os.path.join(self.run_dir, "results.json"))   # (the summaries check against it)
        n = len(self.experiment.seed_args)
        write_tables(rows_of(results), os.path.join(self.run_dir, "results"))
        if n == 1:
            print("\n" + "\n".join(accuracy_tables(results)))
        else:   # several seeds: one compact line each here, the full report once, over the seeds, at the end
            own = "; ".join(f"{name} " + " ".join(f"{100 * run['acc'][k + 1][results['benchmarks'].index(d)]:.0f}"
                                                 for k, d in enumerate(results["stages"]) if d in results["benchmarks"])
                            for name, run in results["runs"].items())
            print(f"seed {self.args.seed} ({len(self.experiment.results) + 1}/{n}) done, each stage's own domain after "
                  f"it, %: {own}")
        self.experiment.results.append(results)
        return results


class Run:
    """One configuration of one seed: its method, settings, name, completed stages (`done`), model, a stop's state."""

    def __init__(self, seed, method, settings, name, done):
        self.seed, self.method, self.settings, self.name, self.done = seed, method, settings, name, done
        self.model = self.tok = self.resume = self.prev_teacher = self.tracker = None

    def stages_left(self):
        return range(len(self.done), len(self.seed.stages))

    def carried_teacher(self, k):
        """(T3) With --teacher-init carry: the teacher stage k−1 ended with; else None."""
        if self.settings.get("teacher_init") != "carry":   # (SDPO's T3 knob)
            return None
        if self.prev_teacher is None and k > 0:
            self.prev_teacher = clone_model(self.model).eval().requires_grad_(False)   # (the teacher's shape)
            load_teacher(self.done[-1]["checkpoint"], self.prev_teacher)
        return self.prev_teacher

    @contextlib.contextmanager
    def stage(self, k, stage_args, records, opt, frozen, curve=None):
        """Stage k, ready to train (Stage): the log cut back to what was saved, a carried optimizer, a stop's state on
        a rerun; curve(step): the in-stage curve's point at that step, or None (evaluate.in_stage_curve). A Ctrl-C or SIGTERM inside saves the weights, optimizer, teacher, steps
        and rows in partial/ and stops; once the steps are all done, a stop saves the trained stage and the rerun
        goes straight to its evaluation."""
        seed, args, model = self.seed, self.seed.args, self.model
        t0 = time.time()
        forget_lost_steps(seed.log_path, self.name, k, self.resume)
        if k > 0 and args.stage_optimizer == "carry" and not self.resume:   # the moments and step count go on
            load_optimizer(stage_checkpoint(seed.run_dir, self.name, k - 1, seed.stages[k - 1]), model, opt)
        teacher = self.method.frozen_state(frozen)   # SDPO's teacher, GRPO's reference (G4), or None
        stage = Stage(k, seed.stages[k], stage_args, records, opt, frozen, teacher,
                      desc=f"{seed.label}{self.name} {k + 1}:{seed.stages[k]}", t0=t0)
        if self.resume:   # (sharded: rank 0 reads the whole states, every rank takes its shard)
            load_optimizer(seed.partial_dir, model, opt)
            if stage.teacher is not None:
                load_teacher(seed.partial_dir, stage.teacher)
            stage.curve, stage.rows, stage.start = self.resume["curve"], self.resume["rows"], self.resume["step"]
        stage.on_step = stage_logger(stage, seed.log_path, self.name, curve, track=self.track_step)
        try:
            yield stage
        except (Interrupted, KeyboardInterrupt) as e:
            trained = len(stage.rows) >= stage_args.steps   # (the evaluation and drift were running)
            if not isinstance(e, Interrupted) and not trained:
                raise
            done = e.completed_steps if isinstance(e, Interrupted) else stage_args.steps
            extra = {"partial.pt": {"run": self.name, "stage": k, "step": done, "rows": stage.rows,
                                    "curve": stage.curve, "teacher": stage.teacher is not None}}
            # (sharded: every rank takes part, each writing its own shard of the optimizer and teacher)
            save_checkpoint(model, self.tok, seed.partial_dir, extra, opt=stage.opt, teacher=stage.teacher)
            if isinstance(e, Interrupted):
                raise
            raise Interrupted(done) from None

    def track_step(self, stage, step, row):
        """--report-to: a step's row, at the step counted over every stage."""
        if self.tracker:
            self.tracker.step(row, stage.k * stage.args.steps + step)

    def track_stage(self, stage, acc, change):
        """--report-to: a stage's accuracies, its gain G and the mean forgetting F of the earlier domains (A3,
        `change`: evaluate.stage_change); the tracked run closes after the last stage."""
        if not self.tracker:
            return
        self.tracker.stage(acc, change["gain"], change["forget"], (stage.k + 1) * stage.args.steps)
        if stage.k + 1 == len(self.seed.stages):
            self.tracker.close()
            self.tracker = None

    def complete(self, stage, acc, deg, stage_drift, change):
        """Stage k is done: its checkpoint (with the teacher or optimizer when carried or kept), its row in
        progress.json (done once that is written), the stop's state removed, one line printed; change: its G and
        the earlier domains' mean F (A3, for --report-to)."""
        seed, args, k = self.seed, self.seed.args, stage.k
        self.prev_teacher = stage.teacher if self.settings.get("teacher_init") == "carry" else None   # (T3 carry)
        self.resume, train_s = None, (stage.trained_at or stage.t0) - stage.t0
        keep_opt = args.stage_optimizer == "carry" or args.keep_optimizer
        ckpt = stage_checkpoint(seed.run_dir, self.name, k, stage.domain)   # (torchrun: every rank takes part)
        save_checkpoint(self.model, self.tok, ckpt, opt=stage.opt if keep_opt else None, teacher=self.prev_teacher)
        rows = stage.rows
        self.done.append({"domain": stage.domain, "acc": acc, "degenerate": deg, "drift": stage_drift,
                          "curve": stage.curve, "checkpoint": ckpt,
                          # the digest of its checksums file: a resume checks this very checkpoint, not one copied in
                          "checksums": file_digest(os.path.join(ckpt, CHECKSUMS)) if is_main() else True,
                          "made_by": {"code": safety.code_version(), "threads": torch.get_num_threads()},
                          "train_seconds": round(train_s, 1),
                          "seconds": round(time.time() - stage.t0, 1),   # training, evaluation and drift
                          "mean_reward": sum(r["reward"] for r in rows) / len(rows),
                          "last_js": rows[-1].get("js"), "last_entropy": rows[-1].get("entropy"),
                          "js_steps": [r.get("js") for r in rows], "entropy_steps": [r.get("entropy") for r in rows]})
        atomic_json(seed.progress_path, seed.progress)   # the stage is complete only once this is written
        if is_main():
            shutil.rmtree(seed.partial_dir, ignore_errors=True)
        print_stage(self.name, k, seed.stages, seed.progress, acc, deg, train_s)
        self.track_stage(stage, acc, change)
        seed.experiment.stage_done()


def stage_logger(stage, log_path, run_name, curve=None, measure=None, track=None):
    """on_step for train.run_steps: each step's row in the stage's rows and log.jsonl, and the in-stage curve's
    points (curve(step): a point or None; evaluate.in_stage_curve). measure(step, row): an extra measure
    (tools/coding_ablation.py); track: --report-to's."""
    def on_step(step, row):
        row.update({"run": run_name, "stage": stage.k + 1, "domain": stage.domain})
        stage.trained_at = time.time()
        point = curve(step) if curve else None
        if point is not None:
            stage.curve.append([step, point])
        if measure:
            measure(step, row)
        stage.rows.append(row)
        if is_main():
            append_jsonl(log_path, row)
        if track:
            track(stage, step, row)
    return on_step


# ----------------------------------------------------------------------------------------------
# One directory per seed, claimed before any work starts
# ----------------------------------------------------------------------------------------------
def seed_dirs(args, seeds, configs, defaults, naming):
    """Each seed's run directory: runs/<--name>[-s<seed>], else named by the configurations and flags."""
    return [os.path.join(args.runs_dir, (f"{args.name}-s{one.seed}" if len(seeds) > 1 else args.name)
                         if args.name else run_dir_name(one, configs, defaults, naming)) for one in seeds]


def run_dir_name(args, configs, defaults, naming):
    """runs/<configurations>-s<seed>[-<hash>], the hash of every other flag away from its default: two
    experiments never share a directory, and a command always finds its own. naming: the knobs the configurations'
    names carry (experiment/configurations.naming_knobs), left out of the hash."""
    per_config = {"method", "name", "runs_dir", "overwrite", "overwrite_committed", "config", "seed", "threads",
                  "plain", "report_to", *naming}
    resolved = lambda k, v: tasks.resolve_benchmarks(v) if k == "benchmarks" and isinstance(v, str) else v  # noqa: E731
    changed = {k: v for k, v in sorted(vars(args).items())   # (a config.json records "all" resolved: the same run)
               if k not in per_config and resolved(k, v) != resolved(k, defaults.get(k))}
    suffix = "-" + hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:6] if changed else ""
    seeds = args.seed if isinstance(args.seed, list) else [args.seed]   # several: the summary over the seeds
    return f"{'+'.join(c[2] for c in configs)}-s{'-'.join(map(str, seeds))}{suffix}"


def write_seeds_summary(args, configs, defaults, naming, all_results, dirs):
    """Several seeds: their summary in its own directory (<name>-s0-1-2 beside the seeds' with --name); returns
    (the directory, the summary)."""
    summary_dir = os.path.join(args.runs_dir, f"{args.name}-s{'-'.join(map(str, args.seed))}" if args.name
                               else run_dir_name(args, configs, defaults, naming))
    summary = summarize_seeds(all_results, args.seed, dirs, [seconds_of(d) for d in dirs])
    os.makedirs(summary_dir, exist_ok=True)
    atomic_json(os.path.join(summary_dir, "results.json"), summary)
    return summary_dir, summary


def fingerprint_of(args, stages, benchmarks, configs=()):
    """What config.json records: every flag but where the run is written, and each configuration's settings."""
    fingerprint = {k: v for k, v in vars(args).items()
                   if k not in ("overwrite", "overwrite_committed", "config", "name", "runs_dir", "threads", "plain",
                                "report_to")}
    fingerprint.update(program=PROGRAM, stages=stages, benchmarks=benchmarks, code=safety.code_version(),
                       runs={name: {"method": method, **settings} for method, settings, name in configs})
    return json.loads(json.dumps(fingerprint))


def same_run(old, fingerprint):
    """Whether a run directory's config.json is this command's (RECORDED_ONLY is not compared)."""
    drop = lambda d: {k: v for k, v in d.items() if k not in RECORDED_ONLY}   # noqa: E731
    return drop(old) == drop(fingerprint)


PROGRAM = "continual.py"   # the marker of a run directory this program made (config.json's "program")
# What config.json records beside the run's settings and never compares on a rerun: the configurations (derived),
# the program, the code's commit, and where and how it ran (its directory, so `--config` reruns this very run; the
# torch thread count, which changes the floating-point sums and so the numbers: a rerun by --config uses it again)
RECORDED_ONLY = ("runs", "program", "code", "name", "runs_dir", "threads", "invocations")
LOCKS = []                 # the run directories this process writes, locked until it exits (safety.RunLock)


def lock_run_dir(run_dir):
    """Hold the run directory's lock while this process lives; a second writer stops with the holder's pid."""
    lock = safety.RunLock(run_dir)
    if any(held.path == lock.path for held in LOCKS):   # this process holds it already (continual.main called again)
        return
    if not lock.acquire():
        pid = lock.held_by()
        fail(f"{run_dir} is being written by another process (pid {pid}); wait for it to finish, or stop it "
             f"(kill {pid}: it keeps its completed stages) and rerun this command to resume")
    LOCKS.append(lock)


def claim_run_dir(ap, args, run_dir, stages, benchmarks, configs=()):
    """Make sure run_dir holds this run or nothing (--overwrite replaces another run), then write config.json."""
    config_path = os.path.join(run_dir, "config.json")
    fingerprint = fingerprint_of(args, stages, benchmarks, configs)
    progress_path = os.path.join(run_dir, "progress.json")
    safety.refuse_committed(ap.error, "--runs-dir/--name:", run_dir, args.overwrite_committed)
    if is_main():
        lock_run_dir(run_dir)
    if is_main() and os.path.isfile(config_path):
        try:
            with open(config_path) as f:
                old = json.load(f)
        except ValueError as e:
            fail(f"{config_path} is damaged ({errors.one_line(e)}); it says which command {run_dir} belongs to. Restore "
                 f"it from a copy and rerun, or use --name for a new run (--overwrite would delete the completed stages)")
        if not safety.owned_by(run_dir, PROGRAM):   # parsed, but not ours: never replaced
            ap.error(f"{run_dir} holds a config.json that continual.py did not write; nothing was changed. Give "
                     f"another --name or --runs-dir")
        if not same_run(old, fingerprint):
            if not args.overwrite:
                differ = [k for k in sorted(set(old) | set(fingerprint)) if k not in RECORDED_ONLY
                          and old.get(k) != fingerprint.get(k)]
                shown = ", ".join(f"--{k.replace('_', '-')} {old.get(k)!r} there, {fingerprint.get(k)!r} here"
                                  for k in differ[:3]) + (f" (and {len(differ) - 3} more)" if len(differ) > 3 else "")
                ap.error(f"{run_dir} holds a different run ({shown}); use --name for a new one or --overwrite to "
                         f"replace it")
            shutil.rmtree(run_dir)
    elif is_main() and not args.overwrite and os.path.exists(progress_path):
        fail(f"{config_path} is missing, but {run_dir} holds a run's completed stages (progress.json), so it cannot be "
             f"checked against this command. Restore config.json from a copy and rerun, or use --name for a new run "
             f"(--overwrite would delete the completed stages)")
    elif is_main() and os.path.isdir(run_dir) and os.listdir(run_dir):   # never replaced, whatever the flags
        ap.error(f"{run_dir} exists and is not a run of continual.py; nothing was changed. Give another --name or "
                 f"--runs-dir")
    if is_main():
        os.makedirs(run_dir, exist_ok=True)
    this = invocation(fingerprint)
    if is_main() and os.path.isfile(config_path):   # the same run again: its first record stays, this one is added
        first = {"code": old.get("code"), "threads": old.get("threads")}
        if {k: this[k] for k in first} != first:
            print(f"warning: {run_dir} was started by code {first['code']} with {first['threads']} torch threads; this "
                  f"invocation is code {this['code']} with {this['threads']}: the stages it adds are recorded as its own "
                  f"(config.json's invocations, each stage's made_by in progress.json)", file=sys.stderr)
        atomic_json(config_path, {**old, "invocations": old.get("invocations", []) + [this]})
    else:
        atomic_json(config_path, {**fingerprint, "name": os.path.basename(os.path.normpath(run_dir)),
                                  "runs_dir": os.path.dirname(os.path.normpath(run_dir)), "threads": this["threads"]})
    barrier()


def invocation(fingerprint):
    """Who runs now: the code's version, the torch thread count (it changes the numbers) and the time."""
    return {"code": fingerprint["code"], "threads": torch.get_num_threads(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


@contextlib.contextmanager
def stops_cleanly(run_dir):
    """A non-finite loss (exit 1) or Ctrl-C (exit 130) says so in one line; the completed stages (and a
    Ctrl-C's mid-stage state) are kept for the rerun."""
    try:
        yield
    except NonFiniteError as e:
        if is_main():
            append_jsonl(os.path.join(run_dir, "log.jsonl"), {"event": "non-finite", "message": str(e)})
        print(f"error: a non-finite loss or gradient stopped the run ({e}); the step was not applied and "
              f"the last completed stage's checkpoint is kept in {run_dir}", file=sys.stderr)
        sys.exit(1)
    except Interrupted as e:
        print(f"\ninterrupted: the current stage is saved after step {e.completed_steps} and completed stages "
              f"are kept in {run_dir}; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print(f"\ninterrupted: completed stages are kept in {run_dir}; rerun the same command to resume",
              file=sys.stderr)
        sys.exit(130)


def seconds_of(run_dir):
    """Wall seconds a seed's run took, summed over invocations, from progress.json (results.json holds no
    timings, so a resumed run writes the same file)."""
    progress = load_progress(os.path.join(run_dir, "progress.json"))
    return progress.get("base", {}).get("seconds", 0.0) + sum(
        st.get("seconds", 0.0) for k, v in progress.items() if k != "base" for st in v["stages"])


# ----------------------------------------------------------------------------------------------
# Damaged state: say which file and what to do, or recover safely (nothing is deleted silently)
# ----------------------------------------------------------------------------------------------
def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def load_progress(path):
    """progress.json (which stages are done), or {} for a new run; a damaged one stops the run."""
    if os.path.islink(path) and not os.path.exists(path):
        fail(f"{path} is a symbolic link that leads nowhere (a loop, or its target is gone). It records the completed "
             f"stages: replace the link with the file (restore it from a copy) and rerun the same command")
    if not os.path.exists(path):
        done = os.path.join(os.path.dirname(path), "checkpoints")
        if os.path.isdir(done) and os.listdir(done):
            print(f"warning: {path} is missing, so no stage is known to be complete: every stage is trained again "
                  f"and the checkpoints in {done} are replaced as it goes (restore progress.json from a copy to "
                  f"keep them)", file=sys.stderr)
        return {}
    try:
        progress = json.load(open(path))
        assert isinstance(progress, dict) and all(
            isinstance(v, dict) and ("stages" in v or k == "base") for k, v in progress.items()), "unexpected content"
        assert progress, "it is empty, and a run writes the base model's row first"
        return with_stage_checkpoints(progress, os.path.dirname(path))
    except (ValueError, TypeError, KeyError, AssertionError) as e:
        fail(f"{path} is damaged ({errors.one_line(e)}). It records the completed stages: restore it from a copy and "
             f"rerun the same command, or use --name for a new run (--overwrite would delete the completed stages)")


def checked_log(log_path):
    """The rows of log.jsonl; damaged lines are dropped loudly, the file as it was kept as log.jsonl.damaged."""
    rows, bad = read_jsonl(log_path)
    if bad:
        shutil.copyfile(log_path, log_path + ".damaged")
        print(f"warning: {log_path}: dropped {len(bad)} damaged line(s) ({', '.join(map(str, bad[:5]))}"
              f"{'…' if len(bad) > 5 else ''}); the file as it was is kept in {log_path}.damaged", file=sys.stderr)
    return rows


def repair_log(log_path):
    """On a rerun, log.jsonl without its damaged lines (a line cut by a kill), said on stderr."""
    if is_main() and os.path.isfile(log_path) and read_jsonl(log_path)[1]:
        rows = checked_log(log_path)
        write_atomically(log_path, lambda f: f.writelines(json.dumps(r) + "\n" for r in rows))


def load_checkpoint(path, device, dtype, grad_checkpointing=False, what="checkpoint", enable_thinking=None):
    """A saved model, or a clear stop naming the directory and what to do."""
    try:
        return load_model(path, device, dtype, grad_checkpointing, enable_thinking=enable_thinking)
    except Exception as e:   # a truncated safetensors file, a garbage config.json, a missing file...
        fail(f"the {what} {path} cannot be loaded ({errors.one_line(e)[:200]}). Delete that directory and rerun "
             f"the same command: that stage and the ones after it are trained again")


def load_partial(partial_dir, run_name, stage, device, args):
    """The state a Ctrl-C saved mid-stage, if it is this run's and stage's: (saved, model, tok), else None; with the
    frozen model it saved beside the student (SDPO's teacher, GRPO's reference) when it saved one. A damaged one is
    set aside as partial.damaged/ and the stage restarts (every step has its own seed)."""
    if not os.path.exists(os.path.join(partial_dir, "partial.pt")):
        return None
    try:
        saved = torch.load(os.path.join(partial_dir, "partial.pt"))
        if saved["run"] != run_name or saved["stage"] != stage:
            return None
        check_states(partial_dir, ["optimizer", "teacher"] if saved.get("teacher", True) else ["optimizer"],
                     under_torchrun())
        model, tok = load_model(partial_dir, device, args.dtype, args.grad_checkpointing,
                                enable_thinking=args.enable_thinking)
        return saved, model, tok
    except Exception as e:
        aside = partial_dir.rstrip("/") + ".damaged"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(partial_dir, aside)
        print(f"warning: the saved mid-stage state in {partial_dir} is damaged ({errors.one_line(e)[:200]}); it is "
              f"kept in {aside} and stage {stage + 1} of {run_name} restarts from its beginning", file=sys.stderr)
        return None


def forget_lost_steps(log_path, run_name, k, resume):
    """Drop this configuration's log lines after its last saved state (stage k, 0-based)."""
    kept_steps = resume["step"] if resume else 0
    if not is_main() or not os.path.exists(log_path):
        return
    rows = checked_log(log_path)
    keep = [json.dumps(r) + "\n" for r in rows
            if not (r.get("run") == run_name and (r.get("stage", 0) > k + 1 or
                                                  (r.get("stage") == k + 1 and r["step"] > kept_steps)))]
    write_atomically(log_path, lambda f: f.writelines(keep))


def check_saved_stages(run_dir, run_name, done, n_stages):
    """On a rerun, the completed stages' checkpoints against their checksums and their saved responses;
    damage stops the run with one line naming the file and a safe next step."""
    for k, st in enumerate(done):
        later = f"stages {k + 1}–{n_stages}" if k + 1 < n_stages else f"stage {k + 1}"
        again = (f"delete {st['checkpoint']} and rerun the same command: {later} of {run_name} will be trained again "
                 f"(the results in progress.json are intact until then)")
        bad = damaged_files(st["checkpoint"]) if os.path.isdir(st["checkpoint"]) else []
        if bad is None and st.get("checksums"):   # saved with checksums, and they are gone: nothing vouches for it
            bad = [(CHECKSUMS, "missing")]
        elif not bad and isinstance(st.get("checksums"), str) and os.path.isdir(st["checkpoint"]) and \
                file_digest(os.path.join(st["checkpoint"], CHECKSUMS)) != st["checksums"]:
            fail(f"{st['checkpoint']} is not the checkpoint stage {k + 1} saved (its {CHECKSUMS} differs from the digest "
                 f"progress.json recorded: copied in from another run?). Restore this run's own, or {again}")
        if bad:
            fail(f"{os.path.join(st['checkpoint'], bad[0][0])} is {bad[0][1]} since it was saved"
                 f"{f' ({len(bad) - 1} more file(s) too)' if len(bad) > 1 else ''}: the checkpoint of stage {k + 1} is "
                 f"damaged. Restore the directory from a copy, or {again}")
        path = responses_path(run_dir, f"{run_name}-stage{k + 1}")
        try:
            read_responses(path)
        except FileNotFoundError:
            continue   # (--no-drift runs of old kept none)
        except (ValueError, AssertionError, TypeError, AttributeError) as e:
            fail(f"{path} is damaged ({errors.one_line(e)[:120]}): stage {k + 1}'s saved evaluation responses. "
                 f"Restore it from a copy, or {again}")


def minutes(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def fmt_row(acc):
    return " ".join(f"{b} {100 * a:.0f}" for b, a in acc.items())


def print_stage(run_name, k, stages, progress, acc, deg, train_s):
    domain, done = stages[k], progress[run_name]["stages"]
    base_d = progress["base"]["acc"][domain]
    print(f"{run_name} stage {k + 1}/{len(stages)} {domain}: {domain} {100 * base_d:.1f}% -> "
          f"{100 * acc[domain]:.1f}%, mean reward {done[-1]['mean_reward']:.2f}, "
          f"degenerate {100 * sum(deg.values()) / len(deg):.1f}%, {train_s:.0f}s training | {fmt_row(acc)}")
