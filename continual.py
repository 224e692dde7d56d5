"""continual.py — the paper's continual post-training experiment (§4, SPEC C1–C3, A2–A3) in one command.

    python continual.py --method sdpo --alpha 0.05            # the headline: SDPO_5% through four stages
    python continual.py --method grpo,sdpo --seed 0           # the paper's comparison, side by side
    python continual.py --method sdpo --alpha 0,0.01,0.05     # the teacher-EMA sweep
    python continual.py --method grpo,sdpo_0,sdpo_5,sdpo_cot_5,s_sdpo_0   # the paper's Table D.6 configurations

(C1) Stages d_1 … d_K are trained in order (default math → science → tooluse → coding); stage k
starts from stage k−1's weights, θ_k = train(method, θ_{k−1}, D_k), with a fresh AdamW each stage.
For SDPO the teacher restarts from each stage's starting student (T3; --teacher-init carry keeps it).
(C2) The base θ_0 and every θ_k are evaluated on every training domain's test split and every OOD
benchmark: an accuracy matrix acc[stage][benchmark] (Acc@k, C3).
(A2) Δ = Acc(θ, b) − Acc(θ_0, b), δ = Δ / Acc(θ_0, b); (A3) G = max(δ, 0), F = max(−δ, 0).

Every configuration (method × α) starts from the same base with the same seed and the same data
order. Results go to runs/<name>/: log.jsonl (one line per step), a Hugging Face checkpoint per
stage, results.json, report.md and its plots (infra/plots.py). Rerunning the same
command resumes after the last completed stage and ends with the same results.json (experiment/rundir.py
keeps the run directory: claiming it, resuming it, its reports).

Read `main` first: it is the experiment, the stage loop C1–C2 in the paper's order. Each stage calls
train.run_steps, whose `update` calls the method's loss on every micro-batch (grpo.micro_batch_loss or
sdpo.micro_batch_loss), then backward, clip and step.
"""
import copy
import json
import os
import random
import shutil
import time

import torch

import drift
import evaluate
import grpo
import sdpo
import train
from experiment import claims, rundir
from infra import flags
from infra.flags import per_seed
from infra.checkpoints import append_jsonl, atomic_json, load_optimizer, load_teacher, stage_checkpoint
from infra.distributed import init_distributed, is_main
from infra.models import load_policy
from rollout import acc_at_k, drop_long_prompts

# ----------------------------------------------------------------------------------------------
# Metrics (Appendix A)
# ----------------------------------------------------------------------------------------------
def change_metrics(acc, base):
    """(A2) Δ = acc − base, δ = Δ / base;  (A3) G = max(δ, 0), F = max(−δ, 0).

    acc, base: accuracies in [0, 1]. δ, G, F are fractions (×100 for %). When base = 0, δ is
    undefined unless Δ = 0: then δ, G, F are None (reported as "—") and Δ still says what happened.
    Example: base 0.40, acc 0.30 -> Δ = −0.10, δ = −0.25, G = 0, F = 0.25.
    """
    # (A2) absolute change
    delta = acc - base
    if base == 0:
        rel = 0.0 if delta == 0 else None
    else:
        # (A2) relative change δ = Δ / Acc(θ_0, b)
        rel = delta / base
    if rel is None:
        return {"delta": delta, "rel": None, "gain": None, "forget": None}
    # (A3) gain and forgetting
    return {"delta": delta, "rel": rel, "gain": max(rel, 0.0), "forget": max(-rel, 0.0)}


def mean_or_none(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(acc_rows, stages, benchmarks):
    """Per run: metrics of every stage vs the base, and the headline averages.

    acc_rows: [K+1][B] accuracies (row 0 = base). Returns
      per_stage[k][b]: change_metrics of θ_k vs θ_0,
      avg_gain_trained: mean over stages k of G(θ_k, d_k) — how much each stage specialised,
      avg_forget_earlier: mean over j < K of F(θ_K, d_j) — what the final model lost on earlier domains,
      avg_forget_ood: mean over OOD benchmarks of F(θ_K, b).
    """
    base = acc_rows[0]
    per_stage = [{b: change_metrics(row[i], base[i]) for i, b in enumerate(benchmarks)} for row in acc_rows[1:]]
    final = per_stage[-1] if per_stage else {}
    ood = [b for b in benchmarks if b not in stages]
    return {
        "per_stage": per_stage,
        "avg_gain_trained": mean_or_none([per_stage[k][d]["gain"] for k, d in enumerate(stages) if d in benchmarks]),
        "avg_forget_earlier": mean_or_none([final[d]["forget"] for d in stages[:-1] if d in final]),
        "avg_forget_ood": mean_or_none([final[b]["forget"] for b in ood]),
    }


# ----------------------------------------------------------------------------------------------
# The configurations
# ----------------------------------------------------------------------------------------------
# The paper's continual configurations (Table D.6), by name. Plain `sdpo` takes --alpha (a comma list:
# one run per value) and the other SDPO flags as given; `grpo` the GRPO flags.
S_SDPO_REFRESH = 10   # S-SDPO_0's refresh period K here (a quarter of a 40-step stage); the paper gives no K
PRESETS = {"sdpo_0": {"alpha": 0.0},                                      # SDPO_0: frozen teacher
           "sdpo_5": {"alpha": 0.05},                                     # SDPO_5%: EMA 5%
           "sdpo_cot_0": {"alpha": 0.0, "cot": True},                     # SDPO-CoT_0 (§5's drift ordering)
           "sdpo_cot_5": {"alpha": 0.05, "cot": True},                    # SDPO-CoT_5%
           "s_sdpo_0": {"refresh_every": S_SDPO_REFRESH, "gamma": 1.0},   # S-SDPO_0: restart-and-freeze (T2, γ = 1)
           "stable_sdpo": {"refresh_every": S_SDPO_REFRESH, "gamma": 0.5}}  # StableSDPO: refresh-and-freeze, γ = 0.5
METHODS = {"grpo": grpo, "sdpo": sdpo}   # the method train.run_steps is handed: the module itself


def run_configs(args):
    """[(method, settings, run name)] for every configuration of --method, in order. A run name carries
    every method setting that differs from its default (grpo.run_name, sdpo.run_name, from the settings
    each method file declares: grpo.SETTINGS, sdpo.SETTINGS, from their KNOBS); the settings also hold the method's learning rate
    (flags.method_lr)."""
    configs = []
    for item in args.method:
        if item == "grpo":
            s = {k: getattr(args, k) for k in grpo.SETTINGS}
            configs.append(("grpo", s, grpo.run_name(s)))
        elif item == "sdpo":
            for a in args.alpha:
                s = {**{k: getattr(args, k) for k in sdpo.SETTINGS}, "alpha": a}
                configs.append(("sdpo", s, sdpo.run_name(s)))
        else:
            s = {**{k: getattr(args, k) for k in sdpo.SETTINGS}, "alpha": 0.0, **PRESETS[item]}
            configs.append(("sdpo", s, sdpo.run_name(s)))
    return [(method, {**s, "lr": flags.method_lr(args, method)}, name) for method, s, name in configs]


def parse_args(argv=None):
    """The flags (infra/flags.py), checked before any work starts: (parser, args, stages, benchmarks, configs,
    defaults)."""
    ap, args, stages, benchmarks, defaults = flags.continual_args(argv, PRESETS, grpo.KNOBS, sdpo.KNOBS)
    configs = run_configs(args)
    names = [c[2] for c in configs]
    if len(set(names)) < len(names):
        ap.error(f"--method: the same configuration twice ({', '.join(names)})")
    return ap, args, stages, benchmarks, configs, defaults


# ----------------------------------------------------------------------------------------------
# The experiment (C1–C2)
# ----------------------------------------------------------------------------------------------
def main(argv=None):
    """(C1–C2) Every seed of --seed in turn, each in its own run directory (resumable on its own): the base
    θ_0 evaluated once, then every configuration through every stage, in order, each stage evaluated on
    every benchmark. With several seeds, the summary over them: mean accuracies with intervals and the
    verdict on every claim."""
    ap, args, stages, benchmarks, configs, defaults = parse_args(argv)
    seeds = per_seed(args)
    dirs = rundir.seed_dirs(args, seeds, configs, defaults)
    device = init_distributed(args.device, args.threads)   # torchrun: data parallel; rank 0 alone writes the run directory
    t_start, base_evals, results = time.time(), {}, []    # (the base is evaluated once for all the seeds)
    with rundir.file_errors_stop_cleanly():        # a file that cannot be read or written: one line, stages kept
        for one, run_dir in zip(seeds, dirs):    # every directory is checked before any work starts
            rundir.claim_run_dir(ap, one, run_dir, stages, benchmarks, configs)
        for one, run_dir in zip(seeds, dirs):    # one seed: every configuration through every stage
            progress = rundir.load_progress(os.path.join(run_dir, "progress.json"))
            with rundir.stops_cleanly(run_dir):    # a non-finite step or a Ctrl-C: one line, its exit code, stages kept
                exp = start_seed(one, stages, benchmarks, run_dir, progress, device, base_evals)   # θ_0, row 0 (C2)
                for method, settings, run_name in configs:
                    run = rundir.starting_point(exp, method, settings, run_name, device)   # θ_0 or where it stopped
                    if run is None:
                        continue                 # every stage of this configuration is done
                    for k in range(len(run["done"]), len(stages)):   # (C1) the stages in order, each from θ_{k−1}
                        stage = start_stage(exp, run, k)   # a fresh AdamW, the stage's teacher (T3), its prompts
                        # (C1) θ_k = train(method, θ_{k−1}, D_k): args.steps steps of the method
                        with rundir.saved_if_interrupted(run, stage, exp["partial_dir"], k):
                            train.run_steps(run["model"], run["tok"], stage["records"], stage["args"],
                                            METHODS[method], stage["frozen"], stage["opt"], desc=stage["desc"],
                                            start_step=stage["start"], on_step=stage["on_step"], base=stage["base"])
                        with rundir.saved_if_interrupted(run, stage, exp["partial_dir"], k, stage["args"].steps):
                            end_stage(exp, run, k, stage)   # (C2) acc[k][b] on every benchmark, drift (A4–A8), saved
            results.append(write_results(one, configs, stages, benchmarks, progress, run_dir))   # A2–A3
    return rundir.finish(args, configs, defaults, seeds, dirs, results, t_start)


def start_seed(args, stages, benchmarks, run_dir, progress, device, base_evals):
    """One seed's run directory opened: θ_0 loaded and (C2) its row of the accuracy matrix, the drift
    meter (A4–A8), a log without the lines a kill cut. Returns what every stage of the seed shares."""
    base_model, tok = load_policy(args.model, device, args.dtype, enable_thinking=args.enable_thinking)   # θ_0
    progress_path = os.path.join(run_dir, "progress.json")
    evaluate_base(args, base_model, tok, benchmarks, eval_settings(args), run_dir, progress, progress_path, base_evals)
    meter = drift.drift_meter(args, base_model, tok, benchmarks, run_dir, device)
    exp = {"args": args, "stages": stages, "benchmarks": benchmarks, "run_dir": run_dir, "progress": progress,
           "progress_path": progress_path, "log_path": os.path.join(run_dir, "log.jsonl"),
           "partial_dir": os.path.join(run_dir, "partial"), "base_model": base_model, "meter": meter}
    rundir.repair_log(exp["log_path"])
    return exp


def start_stage(exp, run, k):
    """Stage k of a configuration, ready to train: θ_{k−1} kept for drift, its log cut back to what was saved,
    (T3) the teacher to carry, then new_stage (a fresh AdamW, the stage's teacher, its prompts) and its log."""
    args, stages, model = exp["args"], exp["stages"], run["model"]
    rundir.forget_lost_steps(exp["log_path"], run["name"], k, run["resume"])
    run["prev_state"] = drift.weights_before_stage(exp["meter"], model, run["done"], args, run["resume"])   # θ_{k−1}
    run["t0"] = time.time()
    run["prev_teacher"] = teacher_to_carry(run["method"], run["settings"], run["prev_teacher"], model, run["done"], k)
    carried_opt = stage_checkpoint(exp["run_dir"], run["name"], k - 1, stages[k - 1]) \
        if k > 0 and args.stage_optimizer == "carry" else None
    stage = new_stage(model, run["tok"], stages[k], k, run["method"], run["settings"], args, run["resume"],
                      exp["partial_dir"], run["prev_teacher"], carried_opt, base=exp["base_model"], earlier=stages[:k])
    stage["on_step"] = stage_logger(stage, model, run["tok"], exp["log_path"], run["name"], k)
    stage["desc"] = f"{run['name']} {k + 1}:{stages[k]}"
    return stage


def new_stage(model, tok, domain, stage_idx, method, settings, args, resume=None, partial_dir=None,
              prev_teacher=None, prev_optimizer=None, base=None, earlier=()):
    """What one stage trains with: its settings and prompts, a fresh optimizer (the release's), and the
    method's frozen model, (T3) the stage's teacher for SDPO or GRPO's reference (G4, --kl-coef only).

    prev_teacher: the previous stage's final teacher (SDPO with --teacher-init carry), else None.
    prev_optimizer: a checkpoint directory holding the previous stage's final AdamW state, to carry it
    over (--stage-optimizer carry); None: a fresh AdamW, as each of the release's stage jobs builds.
    resume: the state a Ctrl-C saved in `partial_dir` (optimizer, teacher, step, rows so far); the
    stage then continues from that step boundary and ends exactly as an uninterrupted stage would.
    base: θ_0 of the whole sequence (the base teacher T5, the defences R2–R3); earlier: the earlier stages'
    domains, for replay (R1).
    """
    stage_args = copy.copy(args)
    vars(stage_args).update(settings)
    stage_args.seed = args.seed * 1000 + stage_idx  # a different prompt order per stage, same across methods
    records = drop_long_prompts(tok, train.train_records(domain, seed=args.seed), args.max_prompt_len,
                                f"{domain} training prompts")
    if settings.get("replay") and earlier:   # (R1) a share of the stage's prompts from the earlier domains
        old = [drop_long_prompts(tok, train.train_records(d, seed=args.seed), args.max_prompt_len, f"{d} prompts")
               for d in earlier]
        records = replay_mix(records, old, settings["replay"], args.steps * args.prompts_per_step, stage_args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=stage_args.lr, weight_decay=args.weight_decay)
    if prev_optimizer and not resume:   # --stage-optimizer carry: the moments and step count go on
        load_optimizer(prev_optimizer, model, opt)
    if method == "sdpo" and settings["teacher"] == "ema":   # (T3) restart from θ_{k−1}, or carry (a mix of)
        frozen = sdpo.stage_teacher(model, prev_teacher if settings["teacher_init"] == "carry" else None,
                                    settings["teacher_mix"])   # the previous stage's teacher
    elif method == "sdpo":   # the other kinds: none (live, T4), θ_0 (base, T5), θ_{k−1} (trust-region's ref, T6)
        frozen = sdpo.frozen_model(model, stage_args, base)
    else:
        frozen = grpo.frozen_model(model, stage_args)
    defended = method == "sdpo" and (settings.get("anchor") or settings.get("base_kl"))   # R2, R3 read θ_0
    stage = {"args": stage_args, "domain": domain, "records": records, "opt": opt, "frozen": frozen,
             "base": base if defended else None,
             "teacher": frozen if method == "sdpo" else None, "curve": [], "rows": [], "start": 0}
    if resume:   # (sharded: rank 0 reads the whole states, every rank takes its shard)
        load_optimizer(partial_dir, model, opt)
        if stage["teacher"] is not None:
            load_teacher(partial_dir, stage["teacher"])
        stage.update(curve=resume["curve"], rows=resume["rows"], start=resume["step"])
    return stage


def replay_mix(records, earlier, share, n_prompts, seed):
    """(R1) Replay: the stage's prompt list with exactly round(share · n_prompts) of its first n_prompts (the
    stage's whole budget, steps × prompts per step, one epoch of train.prompt_order) drawn from the earlier
    domains (in turn, each shuffled by `seed`), the rest from the stage's own domain. Each record keeps its
    own kind, so it is graded by its own domain's grader; the stage's own records come first (its warmup).
    records: the stage's own; earlier: [records of each earlier domain]."""
    rng = random.Random(seed)
    # (R1) round(r · n) replayed prompts, n − round(r · n) of the stage's own
    n_old = round(share * n_prompts)
    pools = [rng.sample(pool, len(pool)) for pool in earlier]
    old = []
    for i in range(n_old):                     # the earlier domains in turn
        pool = pools[i % len(pools)]
        old.append(pool[(i // len(pools)) % len(pool)])
    return records[:n_prompts - n_old] + old


def stage_logger(stage, model, tok, log_path, run_name, stage_idx, measure=None):
    """on_step for train.run_steps: each step's row, tagged with its run and stage, in the stage's rows and
    log.jsonl, and every --curve-every steps the light in-stage curve. measure(step, row, model): an extra
    measurement after each step (tools/coding_ablation.py's teacher check)."""
    args = stage["args"]
    curve_test = evaluate.benchmark_records(stage["domain"], args.curve_n, args.eval_seed) if args.curve_every > 0 else []

    def on_step(step, row):
        row.update({"run": run_name, "stage": stage_idx + 1, "domain": stage["domain"]})
        if args.curve_every > 0 and step % args.curve_every == 0:  # the light in-stage curve
            torch.manual_seed(args.eval_seed)   # (training steps seed themselves: train.run_steps)
            stage["curve"].append([step, acc_at_k(model, tok, curve_test, args.curve_k, args.max_new_tokens,
                                                           batch_size=args.sample_batch)[0]])
        if measure:
            measure(step, row, model)
        stage["rows"].append(row)
        if is_main():
            append_jsonl(log_path, row)
    return on_step


def end_stage(exp, run, k, stage):
    """(C2) θ_k evaluated on every benchmark (the stage's row of the accuracy matrix), (A4–A8) its drift vs
    θ_0 and θ_{k−1}, its checkpoint saved; the stage is complete once progress.json says so."""
    args, model, tok, done, name = exp["args"], run["model"], run["tok"], run["done"], run["name"]
    carry = carries_teacher(run["method"], run["settings"])
    run["prev_teacher"] = stage["teacher"] if carry else None
    run["resume"], train_s = None, time.time() - run["t0"]
    # (C2) acc[stage][benchmark]: every training domain's test set and every OOD benchmark
    deg, resp = {}, {}
    acc = evaluate.evaluate(model, tok, exp["benchmarks"], degenerate=deg, responses=resp, **eval_settings(args))
    # (A4–A8) drift of θ_k vs θ_0 and vs θ_{k−1} (drift.stage_drift)
    stage_drift = drift.measure_drift(exp["meter"], model, exp["base_model"], run["prev_state"], resp, exp["run_dir"],
                                      name, k, tok, args)
    ckpt = rundir.save_stage(model, tok, exp["run_dir"], name, k, stage["domain"], stage["teacher"] if carry else None,
                           stage["opt"] if args.stage_optimizer == "carry" or args.keep_optimizer else None)
    rows = stage["rows"]
    done.append({"domain": stage["domain"], "acc": acc, "degenerate": deg, "drift": stage_drift,
                 "curve": stage["curve"], "checkpoint": ckpt, "train_seconds": round(train_s, 1),
                 "seconds": round(time.time() - run["t0"], 1),   # training, evaluation and drift
                 "mean_reward": sum(r["reward"] for r in rows) / len(rows),
                 "last_js": rows[-1].get("js"), "last_entropy": rows[-1].get("entropy"),
                 "js_steps": [r.get("js") for r in rows], "entropy_steps": [r.get("entropy") for r in rows]})
    atomic_json(exp["progress_path"], exp["progress"])   # the stage is complete only once this is written
    if is_main():
        shutil.rmtree(exp["partial_dir"], ignore_errors=True)
    rundir.print_stage(name, k, exp["stages"], exp["progress"], acc, deg, train_s)


# ----------------------------------------------------------------------------------------------
# The stage loop's helpers: the base, the teacher carried over
# ----------------------------------------------------------------------------------------------
def eval_settings(args):
    """The evaluation's settings (C2, C3): the same for the base and every stage."""
    return dict(n=args.eval_n, k=args.eval_k, max_new_tokens=args.max_new_tokens, seed=args.eval_seed,
                max_prompt_len=args.max_prompt_len, sample_batch=args.sample_batch)


def evaluate_base(args, base_model, tok, benchmarks, ev, run_dir, progress, progress_path, base_evals):
    """(C2) Row 0 of the accuracy matrix, once per run directory (progress.json), with its responses saved
    for the drift measurements."""
    if "base" in progress and not os.path.exists(drift.responses_path(run_dir, "base")):
        print("the base model's saved responses are missing: evaluating it again (same prompts, same result)")
        del progress["base"]
    if "base" in progress:
        return
    # the base's evaluation depends on the test prompts and the evaluation seed, not on the training
    # seed: within one invocation every seed after the first takes the first one's
    key = json.dumps([args.model, args.dtype, benchmarks, ev])
    t0 = time.time()
    if key not in base_evals:
        deg, resp = {}, {}
        torch.manual_seed(args.eval_seed)
        base_evals[key] = (evaluate.evaluate(base_model, tok, benchmarks, degenerate=deg, responses=resp, **ev),
                           deg, resp)
    acc, deg, resp = base_evals[key]
    progress["base"] = {"acc": acc, "degenerate": deg, "seconds": 0.0}
    if is_main():
        drift.save_responses(run_dir, "base", resp)
    progress["base"]["seconds"] = round(time.time() - t0, 1)
    atomic_json(progress_path, progress)
    print(f"base: {rundir.fmt_row(progress['base']['acc'])} ({time.time() - t0:.0f}s)")


def carries_teacher(method, settings):
    return method == "sdpo" and settings["teacher_init"] == "carry"


def teacher_to_carry(method, settings, prev_teacher, model, done, k):
    """(T3) with --teacher-init carry, the previous stage's final teacher (from disk when resuming)."""
    if carries_teacher(method, settings) and prev_teacher is None and k > 0:
        prev_teacher = sdpo.init_teacher(model)
        load_teacher(done[-1]["checkpoint"], prev_teacher)
    return prev_teacher


# ----------------------------------------------------------------------------------------------
# The results (A2–A3): results.json and report.md of one seed
# ----------------------------------------------------------------------------------------------
def build_results(configs, stages, benchmarks, progress, args):
    """results.json: per run the accuracy matrix, Δ/δ/G/F per stage and benchmark, the averages."""
    base = progress["base"]
    out = {"stages": stages, "benchmarks": benchmarks, "seed": args.seed,
           "eval": {"n": args.eval_n, "k": args.eval_k, "seed": args.eval_seed},
           "base": {k: v for k, v in base.items() if k != "seconds"}, "runs": {}}
    for method, settings, run_name in configs:
        done = progress[run_name]["stages"]
        rows = [[base["acc"][b] for b in benchmarks]] + [[s["acc"][b] for b in benchmarks] for s in done]
        out["runs"][run_name] = {
            "method": method, "settings": settings,
            "acc": rows,
            **summarize(rows, stages, benchmarks),
            "degenerate": [sum(s["degenerate"].values()) / len(s["degenerate"]) for s in done],
            "drift": [s.get("drift") for s in done],
            "curves": [s["curve"] for s in done],
            "mean_reward": [s["mean_reward"] for s in done],
            "js_steps": [s.get("js_steps") for s in done],            # per stage, per step (SDPO; GRPO: None)
            "entropy_steps": [s.get("entropy_steps") for s in done],
            "checkpoints": [s["checkpoint"] for s in done],
        }
    out["claims"] = claims.measure_claims([out])
    return out


def write_results(args, configs, stages, benchmarks, progress, run_dir):
    """results.json (A2–A3 from the accuracy matrix: build_results) and report.md of one seed (rank 0)."""
    if not is_main():
        return None
    results = build_results(configs, stages, benchmarks, progress, args)
    atomic_json(os.path.join(run_dir, "results.json"), results)
    report = rundir.write_report(results, run_dir)
    print("\n" + report)
    return results


if __name__ == "__main__":
    main()
