"""experiment/rundir.py — a continual run's directory: claiming it, resuming it, its reports.

continual.py holds the experiment (C1–C2, A2–A3); this file holds what makes it safe to stop and rerun:
one directory per seed (runs/<configurations>-s<seed>[-<hash>]) with config.json (which command it
belongs to), progress.json (the completed stages: a stage is done once it is written there), log.jsonl,
a checkpoint per stage (checksummed), and a Ctrl-C's mid-stage state in partial/. Damage to any of them
stops the run with one line naming the file and a safe next step, or is set aside loudly; nothing is
deleted silently. Then report.md and its figures, one seed's or the summary over several seeds.
"""
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time

import torch

import drift
from infra import stats
import grpo
import sdpo
from experiment import claims, tables
from infra import plots, safety
from world import tasks
from infra.stops import Interrupted, sigterm_as_ctrl_c
from infra.distributed import NonFiniteError, barrier, is_main, shard, under_torchrun
from infra.checkpoints import append_jsonl, atomic_json, check_states, damaged_files, read_jsonl, save_checkpoint, stage_checkpoint, with_stage_checkpoints, write_atomically
from infra.models import load_model


# ----------------------------------------------------------------------------------------------
# One directory per seed, claimed before any work starts
# ----------------------------------------------------------------------------------------------
def seed_dirs(args, seeds, configs, defaults):
    """Each seed's run directory: runs/<--name>[-s<seed>], else named by the configurations and flags."""
    return [os.path.join(args.runs_dir, (f"{args.name}-s{one.seed}" if len(seeds) > 1 else args.name)
                         if args.name else run_dir_name(one, configs, defaults)) for one in seeds]


@contextlib.contextmanager
def file_errors_stop_cleanly():
    """A file of the run directory that cannot be read or written (a directory in its place, a link loop,
    an immutable file, a full disk): one line naming it; the completed stages stay. SIGTERM stops the run as
    Ctrl-C does from here on (infra.sigterm_as_ctrl_c)."""
    sigterm_as_ctrl_c()
    try:
        yield
    except OSError as e:
        fail(f"{e.filename or 'a file of the run directory'}: {e.strerror or e}. Completed stages are kept: "
             f"repair or move that path and rerun the same command")


@contextlib.contextmanager
def saved_if_interrupted(run, stage, partial_dir, k, steps_done=None):
    """A Ctrl-C or SIGTERM at a step boundary of stage k: save everything needed to continue exactly (the
    weights, the optimizer, the teacher, the steps done and the rows so far) in partial_dir, then stop.
    steps_done: the stage's steps are all done (its end-of-stage evaluation and drift run inside): a stop there
    saves the trained stage, and the rerun goes straight to its evaluation."""
    try:
        yield
    except (Interrupted, KeyboardInterrupt) as e:
        if not isinstance(e, Interrupted) and steps_done is None:
            raise
        done = e.completed_steps if isinstance(e, Interrupted) else steps_done
        extra = {"partial.pt": {"run": run["name"], "stage": k, "step": done,
                                "rows": stage["rows"], "curve": stage["curve"]}}
        # (sharded: every rank takes part, each writing its own shard of the optimizer and teacher)
        save_checkpoint(run["model"], run["tok"], partial_dir, extra, opt=stage["opt"], teacher=stage["teacher"])
        if isinstance(e, Interrupted):
            raise
        raise Interrupted(done) from None


def finish(args, configs, defaults, seeds, dirs, results, t_start):
    """The run's last words: one seed's directory, or the summary over several seeds (written and printed)."""
    if not is_main():
        return None
    if len(seeds) == 1:
        print(f"\n{dirs[0]}/: results.json, report.md, log.jsonl, checkpoints — {time.time() - t_start:.0f}s this invocation")
        return results[0]
    summary_dir, summary = write_seeds_summary(args, configs, defaults, results, dirs)
    print(f"\n{summary_dir}/: results.json, report.md over seeds {','.join(map(str, args.seed))} (each seed in "
          f"{', '.join(dirs)}) — {time.time() - t_start:.0f}s this invocation")
    return summary


def run_dir_name(args, configs, defaults):
    """runs/<configurations>-s<seed>[-<hash>]: the hash of every other flag that differs from its default,
    so two different experiments never share a directory (the same command always finds its own)."""
    per_config = {"method", "alpha", "name", "runs_dir", "overwrite", "overwrite_committed", "config", "seed", "threads",
                  "plain",
                  *grpo.SETTINGS,
                  *sdpo.SETTINGS}
    changed = {k: v for k, v in sorted(vars(args).items()) if k not in per_config and v != defaults.get(k)}
    suffix = "-" + hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:6] if changed else ""
    seeds = args.seed if isinstance(args.seed, list) else [args.seed]   # several: the summary over the seeds
    return f"{'+'.join(c[2] for c in configs)}-s{'-'.join(map(str, seeds))}{suffix}"


def write_seeds_summary(args, configs, defaults, all_results, dirs):
    """Several seeds: their summary (mean accuracies with intervals, every claim's verdict) in its own
    directory, printed; returns (the directory, the summary). With --name it sits beside the seeds' directories,
    <name>-s0-1-2, so a single-seed run named <name> keeps its own files."""
    summary_dir = os.path.join(args.runs_dir, f"{args.name}-s{'-'.join(map(str, args.seed))}" if args.name
                               else run_dir_name(args, configs, defaults))
    summary = summarize_seeds(all_results, args.seed, dirs, [seconds_of(d) for d in dirs])
    os.makedirs(summary_dir, exist_ok=True)
    atomic_json(os.path.join(summary_dir, "results.json"), summary)
    print("\n" + write_seeds_report(summary, all_results, summary_dir))
    return summary_dir, summary


def fingerprint_of(args, stages, benchmarks, configs=()):
    """What config.json records: every flag except where the run is written, and under "runs" each
    configuration's own settings (a sweep's --alpha is a list; each run has one α)."""
    fingerprint = {k: v for k, v in vars(args).items()
                   if k not in ("overwrite", "overwrite_committed", "config", "name", "runs_dir", "threads", "plain")}
    fingerprint.update(program=PROGRAM, stages=stages, benchmarks=benchmarks,
                       runs={name: {"method": method, **settings} for method, settings, name in configs})
    return json.loads(json.dumps(fingerprint))


def same_run(old, fingerprint):
    """Whether a run directory's config.json is this command's ("runs" is derived from the flags, and
    older run directories have none)."""
    drop = lambda d: {k: v for k, v in d.items() if k not in ("runs", "program")}   # noqa: E731
    return drop(old) == drop(fingerprint)


PROGRAM = "continual.py"   # the marker of a run directory this program made (config.json's "program")
LOCKS = []                 # the run directories this process writes, locked until it exits (safety.RunLock)


def lock_run_dir(run_dir):
    """Hold the run directory's lock (a file beside it) for as long as this process lives; a second writer
    stops here with one line naming the holder's pid."""
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
            fail(f"{config_path} is damaged ({tasks.one_line(e)}); it says which command {run_dir} belongs to. Restore "
                 f"it from a copy and rerun, or use --name for a new run (--overwrite would delete the completed stages)")
        if not safety.owned_by(run_dir, PROGRAM):   # parsed, but not ours: never replaced
            ap.error(f"{run_dir} holds a config.json that continual.py did not write; nothing was changed. Give "
                     f"another --name or --runs-dir")
        if not same_run(old, fingerprint):
            if not args.overwrite:
                ap.error(f"{run_dir} holds a different run; use --name for a new one or --overwrite to replace it")
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
    atomic_json(config_path, fingerprint)
    barrier()


@contextlib.contextmanager
def stops_cleanly(run_dir):
    """A run stopped by a non-finite loss or gradient (exit 1) or by Ctrl-C (exit 130) says so in one line;
    its completed stages (and a Ctrl-C's mid-stage state) are kept in run_dir for the rerun to resume."""
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
    """Wall seconds a seed's run took in all (base evaluation, then training, evaluation and drift of
    every stage, summed over invocations), from progress.json; results.json holds no timings, so that
    an interrupted and resumed run writes the same file as an uninterrupted one."""
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
        fail(f"{path} is damaged ({tasks.one_line(e)}). It records the completed stages: restore it from a copy and "
             f"rerun the same command, or use --name for a new run (--overwrite would delete the completed stages)")


def checked_log(log_path):
    """The rows of log.jsonl. Lines cut by a kill or otherwise damaged are dropped, loudly; the file as it
    was is kept beside it as log.jsonl.damaged."""
    rows, bad = read_jsonl(log_path)
    if bad:
        shutil.copyfile(log_path, log_path + ".damaged")
        print(f"warning: {log_path}: dropped {len(bad)} damaged line(s) ({', '.join(map(str, bad[:5]))}"
              f"{'…' if len(bad) > 5 else ''}); the file as it was is kept in {log_path}.damaged", file=sys.stderr)
    return rows


def repair_log(log_path):
    """On a rerun, log.jsonl without its damaged lines (a line cut by a kill): said on stderr, the file as it
    was kept beside it (checked_log)."""
    if is_main() and os.path.isfile(log_path) and read_jsonl(log_path)[1]:
        rows = checked_log(log_path)
        write_atomically(log_path, lambda f: f.writelines(json.dumps(r) + "\n" for r in rows))


def load_checkpoint(path, device, dtype, grad_checkpointing=False, what="checkpoint", enable_thinking=None):
    """A saved model, or a clear stop naming the directory and what to do."""
    try:
        return load_model(path, device, dtype, grad_checkpointing, enable_thinking=enable_thinking)
    except Exception as e:   # a truncated safetensors file, a garbage config.json, a missing file...
        fail(f"the {what} {path} cannot be loaded ({tasks.one_line(e)[:200]}). Delete that directory and rerun "
             f"the same command: that stage and the ones after it are trained again")


def load_partial(partial_dir, run_name, stage, has_teacher, device, args):
    """The state a Ctrl-C saved mid-stage, if it belongs to this run and stage: (saved, model, tok), else None.
    A damaged one is set aside as partial.damaged/ (said on stderr) and the stage restarts from its
    beginning, which ends exactly where the interrupted stage would have (every step has its own seed)."""
    if not os.path.exists(os.path.join(partial_dir, "partial.pt")):
        return None
    try:
        saved = torch.load(os.path.join(partial_dir, "partial.pt"))
        if saved["run"] != run_name or saved["stage"] != stage:
            return None
        check_states(partial_dir, ["optimizer", "teacher"] if has_teacher else ["optimizer"], under_torchrun())
        model, tok = load_model(partial_dir, device, args.dtype, args.grad_checkpointing,
                                enable_thinking=args.enable_thinking)
        return saved, model, tok
    except Exception as e:
        aside = partial_dir.rstrip("/") + ".damaged"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(partial_dir, aside)
        print(f"warning: the saved mid-stage state in {partial_dir} is damaged ({tasks.one_line(e)[:200]}); it is "
              f"kept in {aside} and stage {stage + 1} of {run_name} restarts from its beginning", file=sys.stderr)
        return None


def starting_point(exp, method, settings, run_name, device):
    """Where a configuration starts, as a dict: its completed stages ("done"), the model and tokenizer (θ_0,
    the last completed stage's checkpoint, or the state saved mid-stage) and the Ctrl-C's saved state or
    None ("resume"); None when every stage is done."""
    args, progress, progress_path, partial_dir = exp["args"], exp["progress"], exp["progress_path"], exp["partial_dir"]
    n_stages = len(exp["stages"])
    done = progress.setdefault(run_name, {"stages": []})["stages"]
    check_saved_stages(os.path.dirname(progress_path), run_name, done, n_stages)
    gone = [k for k, st in enumerate(done) if not os.path.isdir(st["checkpoint"])]
    if gone:   # a stage checkpoint deleted (say, because it was damaged): retrain from that stage on
        print(f"{run_name}: the checkpoint of stage {gone[0] + 1} is missing: stages {gone[0] + 1}–{n_stages} "
              f"are trained again")
        del done[gone[0]:]
        atomic_json(progress_path, progress)
    if len(done) == n_stages:
        return None
    partial = load_partial(partial_dir, run_name, len(done), method == "sdpo", device, args)
    resume = partial[0] if partial else None
    if partial:
        model, tok = partial[1], partial[2]
    elif done:
        model, tok = load_checkpoint(done[-1]["checkpoint"], device, args.dtype, args.grad_checkpointing,
                                     f"stage {len(done)} checkpoint", args.enable_thinking)
    else:
        model, tok = load_model(args.model, device, args.dtype, args.grad_checkpointing,
                                enable_thinking=args.enable_thinking)
    model = shard(model, device)   # torchrun: FSDP2 (infra.shard); one process: as it is
    if resume:
        print(f"{run_name}: resuming stage {len(done) + 1} after step {resume['step']}")
    elif done:
        print(f"{run_name}: resuming after stage {len(done)} ({done[-1]['domain']})")
    return {"method": method, "settings": settings, "name": run_name, "done": done, "model": model, "tok": tok,
            "resume": resume, "prev_teacher": None}


def forget_lost_steps(log_path, run_name, k, resume):
    """Drop the log lines of work that was lost: this configuration's lines after its last saved state
    (stage k, 0-based, starts at the resumed step, or at 0)."""
    kept_steps = resume["step"] if resume else 0
    if not is_main() or not os.path.exists(log_path):
        return
    rows = checked_log(log_path)
    keep = [json.dumps(r) + "\n" for r in rows
            if not (r.get("run") == run_name and (r.get("stage", 0) > k + 1 or
                                                  (r.get("stage") == k + 1 and r["step"] > kept_steps)))]
    write_atomically(log_path, lambda f: f.writelines(keep))


def check_saved_stages(run_dir, run_name, done, n_stages):
    """On a rerun, the completed stages' files as they were saved: each checkpoint against the checksums
    recorded when it was written (infra.damaged_files), and the saved evaluation responses. Damage stops
    the run with one line naming the file and a safe next step; the results (progress.json) are intact."""
    for k, st in enumerate(done):
        later = f"stages {k + 1}–{n_stages}" if k + 1 < n_stages else f"stage {k + 1}"
        again = (f"delete {st['checkpoint']} and rerun the same command: {later} of {run_name} will be trained again "
                 f"(the results in progress.json are intact until then)")
        bad = damaged_files(st["checkpoint"]) if os.path.isdir(st["checkpoint"]) else []
        if bad:
            fail(f"{os.path.join(st['checkpoint'], bad[0][0])} is {bad[0][1]} since it was saved"
                 f"{f' ({len(bad) - 1} more file(s) too)' if len(bad) > 1 else ''}: the checkpoint of stage {k + 1} is "
                 f"damaged. Restore the directory from a copy, or {again}")
        path = drift.responses_path(run_dir, f"{run_name}-stage{k + 1}")
        try:
            drift.read_responses(path)
        except FileNotFoundError:
            continue   # (--no-drift runs of old kept none)
        except (ValueError, AssertionError, TypeError, AttributeError) as e:
            fail(f"{path} is damaged ({tasks.one_line(e)[:120]}): stage {k + 1}'s saved evaluation responses. "
                 f"Restore it from a copy, or {again}")


def save_stage(model, tok, run_dir, run_name, k, domain, teacher=None, opt=None):
    """Stage k's Hugging Face checkpoint, with the stage's final teacher when it is carried and its
    final AdamW state when that is carried or kept (torchrun: every rank takes part); returns its directory."""
    ckpt = stage_checkpoint(run_dir, run_name, k, domain)
    save_checkpoint(model, tok, ckpt, opt=opt, teacher=teacher)
    return ckpt


def print_stage(run_name, k, stages, progress, acc, deg, train_s):
    domain, done = stages[k], progress[run_name]["stages"]
    base_d = progress["base"]["acc"][domain]
    print(f"{run_name} stage {k + 1}/{len(stages)} {domain}: {domain} {100 * base_d:.1f}% -> "
          f"{100 * acc[domain]:.1f}%, mean reward {done[-1]['mean_reward']:.2f}, "
          f"degenerate {100 * sum(deg.values()) / len(deg):.1f}%, {train_s:.0f}s training | {fmt_row(acc)}")


# ----------------------------------------------------------------------------------------------
# One seed's report: report.md and its figures
# ----------------------------------------------------------------------------------------------
def run_figures(results, run_dir):
    """One seed's figures (infra/plots.py), with the paper's names in the legends: [(path or None, alt text)]."""
    rows = seed_log(run_dir)
    names = paper_names(results)
    return [(plots.plot_accuracy(results, os.path.join(run_dir, "accuracy.png"), labels=names),
             "accuracy per benchmark across stages"),
            (plots.plot_accuracy_matrix(results, os.path.join(run_dir, "accuracy_matrix.png"), labels=names),
             "the accuracy matrix, stage × benchmark"),
            (plots.plot_gain_forgetting(results, os.path.join(run_dir, "gain.png"), labels=names),
             "signed change δ on each stage's domain and of the final model"),
            (plots.plot_drift(results, os.path.join(run_dir, "drift.png"), labels=names), "drift after every stage"),
            (plots.plot_curves(rows, os.path.join(run_dir, "curves.png"), results["stages"], labels=names),
             "reward, JS and entropies per step")]


def paper_names(results):
    """{run name: the paper's name of its configuration (claims.role_of), or the run name}, for legends."""
    return {name: claims.role_of(run) or name for name, run in results["runs"].items()}


def fmt_row(acc):
    return " ".join(f"{b} {100 * a:.0f}" for b, a in acc.items())


def pct(v, signed=False):
    """A fraction as a percentage with one decimal; None as "—"; never "-0.0" (a tiny negative rounds to 0.0)."""
    if v is None:
        return "—"
    v = 0.0 if round(100 * v, 1) == 0 else v
    return f"{100 * v:+.1f}" if signed and v != 0 else f"{100 * v:.1f}"


def write_report(results, run_dir):
    """report.md: accuracy matrix per run, the G/F table of the final models, averages, collapse markers; and the
    same numbers as a table, results.parquet and results.csv (experiment/tables.py)."""
    tables.write_tables(tables.rows_of(results), os.path.join(run_dir, "results"))
    stages, benches = results["stages"], results["benchmarks"]
    short = {b: b.replace("science_boxed", "sci_boxed").replace("tool_unseen", "tool_new") for b in benches}
    ood = [b for b in benches if b not in stages]
    lines = ["# Continual post-training report", "",
             f"Stages: {' → '.join(stages)}. Acc@{results['eval']['k']} in % on {results['eval']['n']} test prompts "
             f"per benchmark (T=0.6, top-p 0.95). OOD: {', '.join(ood) if ood else 'none'}.", ""]
    for name, run in results["runs"].items():
        lines += [f"## {name}: accuracy after each stage", "",
                  "| after | " + " | ".join(short[b] for b in benches) + " | degenerate % |",
                  "|---|" + "---|" * (len(benches) + 1)]
        for k, row in enumerate(run["acc"]):
            label = "base" if k == 0 else f"{k}: {stages[k - 1]}"
            deg = "—" if k == 0 else pct(run["degenerate"][k - 1])
            cells = [f"**{pct(v)}**" if k > 0 and benches[i] == stages[k - 1] else pct(v) for i, v in enumerate(row)]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {deg} |")
        lines.append("")
    lines += ["## Final model vs base: relative change δ % per benchmark (A2)", "",
              "| run | " + " | ".join(short[b] for b in benches) + " |", "|---|" + "---|" * len(benches)]
    for name, run in results["runs"].items():
        final = run["per_stage"][-1]
        lines.append(f"| {name} | " + " | ".join(pct(final[b]["rel"], True) for b in benches) + " |")
    lines += ["", "## Gain and forgetting (A3)", "",
              "| run | avg gain G on each stage's domain % | avg forgetting F, earlier domains % | avg forgetting F, OOD % | degenerate after last stage % |",
              "|---|---|---|---|---|"]
    for name, run in results["runs"].items():
        lines.append(f"| {name} | {pct(run['avg_gain_trained'])} | {pct(run['avg_forget_earlier'])} | "
                     f"{pct(run['avg_forget_ood'])} | {pct(run['degenerate'][-1])} |")
    lines += ["", "G of a stage is measured right after it (θ_k on d_k); F on the final model θ_K. "
              "All relative to the base θ_0 (A2–A3)."]
    if any(c["verdict"] != "not run" for c in results.get("claims", [])):
        lines += ["", "## The paper's claims, on this one seed", "",
                  "One seed gives no interval, so no claim can be shown or refuted here: run `--seed 0,1,2` "
                  "for verdicts (a reference over 3 seeds is in `results/`).", "",
                  claims.claims_table([c for c in results["claims"] if c["verdict"] != "not run"], 1)]
    for name, run in results["runs"].items():
        if run.get("drift") and all(run["drift"]):
            lines += ["", f"## {name}: drift after each stage (A4–A8)", "", drift.drift_table(run["drift"], stages)]
    if any(run.get("drift") and all(run["drift"]) for run in results["runs"].values()):
        lines += ["", "NSS: normalised spectral shift (A4), mean over all weight matrices; max angle: largest principal "
                  "angle of the top-10% singular subspaces (A5); mask IoU / update in base mask: principal-mask overlap "
                  "(A6); resp. cos: cosine similarity of base-model embeddings of the responses to the same prompts (A7); "
                  "KL(π‖π0): Monte-Carlo sequence KL to the base, mean over benchmarks (an estimate from the trained "
                  "model's samples: a true KL near 0 can come out slightly negative, within its standard error, which "
                  "results.json keeps per benchmark); collapse: responses repeating one "
                  "short pattern to the length limit (A8), with the most common pattern."]
    lines += [""] + [f"![{alt}]({os.path.basename(p)})" for p, alt in run_figures(results, run_dir) if p]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(run_dir, "report.md.tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(run_dir, "report.md.tmp"), os.path.join(run_dir, "report.md"))
    return text


# ----------------------------------------------------------------------------------------------
# Several seeds: means with 95% intervals, and a verdict per claim (experiment/claims.py)
# ----------------------------------------------------------------------------------------------
def summarize_seeds(seed_results, seeds, seed_dirs, seconds):
    """results.json over seeds: per run the accuracy matrix and every claim metric as
    {mean, low, high, per_seed} (stats.mean_interval), then the claims with their verdicts."""
    first = seed_results[0]
    out = {"seeds": seeds, "seed_dirs": seed_dirs, "stages": first["stages"], "benchmarks": first["benchmarks"],
           "eval": first["eval"], "seconds_per_seed": seconds, "runs": {}}
    for name, run in first["runs"].items():
        cells = [[[r["runs"][name]["acc"][k][i] for r in seed_results] for i in range(len(row))]
                 for k, row in enumerate(run["acc"])]
        stats = {metric: claims.per_seed_metric_of(seed_results, name, metric) for metric in claims.METRICS}
        out["runs"][name] = {"method": run["method"], "settings": run["settings"], "role": claims.role_of(run),
                             "acc": [[interval_dict(c) for c in row] for row in cells],
                             "metrics": {m: interval_dict(v) for m, v in stats.items() if v is not None}}
    out["claims"] = claims.measure_claims(seed_results)
    return out


def interval_dict(values):
    mean, low, high = stats.mean_interval(values)
    return {"mean": mean, "low": low, "high": high, "per_seed": values}


def pm(cell, scale=100):
    """"18.4 ± 2.1": the mean and the half-width of its 95% interval over seeds."""
    return f"{scale * cell['mean']:.1f} ± {scale * (cell['high'] - cell['mean']):.1f}"


def seed_log(run_dir):
    """One seed's log.jsonl rows (none if it has no log)."""
    path = os.path.join(run_dir, "log.jsonl")
    return read_jsonl(path)[0] if os.path.exists(path) else []


def write_seeds_report(summary, seed_results, out_dir):
    """report.md over seeds: the claims table first, then each run's accuracy matrix as mean ± half-width."""
    stages, benches, n = summary["stages"], summary["benchmarks"], len(summary["seeds"])
    short = {b: b.replace("science_boxed", "sci_boxed").replace("tool_unseen", "tool_new") for b in benches}
    lines = ["# Continual post-training over seeds", "",
             f"Seeds {', '.join(map(str, summary['seeds']))} (one directory each: "
             f"{', '.join(os.path.basename(d) for d in summary['seed_dirs'])}). Stages: {' → '.join(stages)}. "
             f"Acc@{summary['eval']['k']} on the same {summary['eval']['n']} test prompts per benchmark for every seed "
             f"and run (--eval-seed {summary['eval']['seed']}). Wall time per seed: "
             f"{', '.join(f'{s:.0f} s' for s in summary['seconds_per_seed'])}.", "",
             "## The paper's claims", "", claims.claims_table(summary["claims"], n), "", claims.CLAIMS_NOTE, ""]
    for name, run in summary["runs"].items():
        lines += [f"## {name}{' (' + run['role'] + ')' if run['role'] else ''}: accuracy after each stage, "
                  f"mean ± 95% half-width over {n} seeds", "",
                  "| after | " + " | ".join(short[b] for b in benches) + " |", "|---|" + "---|" * len(benches)]
        for k, row in enumerate(run["acc"]):
            label = "base" if k == 0 else f"{k}: {stages[k - 1]}"
            lines.append(f"| {label} | " + " | ".join(
                f"**{pm(c)}**" if k > 0 and benches[i] == stages[k - 1] else pm(c) for i, c in enumerate(row)) + " |")
        lines.append("")
    lines += ["## Gain and forgetting (A3), mean ± 95% half-width", "",
              "| run | avg G on each stage's domain % | F earlier domains % | F OOD % | average accuracy so far % "
              "| forgetting from the peak, points | backward transfer, points |",
              "|---|---|---|---|---|---|---|"]
    for name, run in summary["runs"].items():
        m = run["metrics"]
        lines.append(f"| {name} | " + " | ".join(pm(m[k]) if k in m else "—" for k in (
            "gain", "forget_earlier", "forget_ood", "avg_acc", "forget_peak", "bwt")) + " |")
    lines += ["", "G and F (A2–A3, the paper's) are relative to the base's accuracy and decide the claims. Beside them, "
              "in accuracy points and never used for a verdict: forgetting from the peak (Chaudhry et al., 2018), "
              "the best accuracy an earlier domain had after its own stage minus its final accuracy, and backward "
              "transfer (Lopez-Paz & Ranzato, 2017), the final minus the right-after-its-stage accuracy (negative: "
              "forgotten); both averaged over the earlier domains."]
    names = paper_names(seed_results[0])
    figures = [(plots.plot_accuracy(seed_results[0], os.path.join(out_dir, "accuracy.png"), seed_results, names),
                "accuracy per benchmark across stages"),
               (plots.plot_gain_forgetting(seed_results[0], os.path.join(out_dir, "gain.png"), seed_results, names),
                "gain and forgetting"),
               (plots.plot_drift(seed_results[0], os.path.join(out_dir, "drift.png"), seed_results, names),
                "drift after every stage"),
               (plots.plot_differences([seed_log(d) for d in summary["seed_dirs"]],
                                       os.path.join(out_dir, "differences.png"), stages, names),
                "each run minus the first, per step, over seeds")]
    lines += ["", "Lines and bars are the means over seeds; bands and whiskers are the same 95% t-intervals over the "
              "seeds as the tables. `differences.png` (with two runs or more): each run minus the first run, step "
              "by step within each seed, smoothed over 5 steps; a band that leaves 0 is a difference the seeds agree on.", ""]
    lines += [f"![{alt}]({os.path.basename(p)})" for p, alt in figures if p]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "report.md.tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(out_dir, "report.md.tmp"), os.path.join(out_dir, "report.md"))
    return text
