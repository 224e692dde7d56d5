"""tools/coding_ablation.py — why SDPO fails CODING: the stage rerun from the reference's stage-3
checkpoints, one factor changed at a time (docs/studies/collapse.md, "The first ablation"; declared there first).

    python tools/coding_ablation.py --runs runs/regen --seeds 0,1,2 --out runs/ablation    # every cell, resumable
    python tools/coding_ablation.py --runs runs/regen --summary-only --out runs/ablation   # the table and the picture
    (--into-results, with the default --out results/coding_ablation: the committed ablation itself)

--runs holds the reference's first three stages, made with --keep-optimizer so that factor (f) can carry
the optimizer over:

    python continual.py --method grpo,sdpo_0,sdpo_5 --stages math,science,tooluse --seed S --no-drift \
        --keep-optimizer --runs-dir runs/regen

The factors, each against (a), the CODING stage exactly as the committed reference ran it:
    a  as committed: no feedback, no warmup, a fresh AdamW at SDPO's rate
    b  environment feedback on (S8), with the built-in world's true report (also the release's CODING protocol)
    c  a 10-batch warmup from 0 (the release's SCIENCE and TOOLUSE setting)
    d  no optimizer step (and so no momentum move) on a batch with no distilled token
    e  SDPO at GRPO's learning rate
    f  the previous stage's AdamW state carried over
Each cell (configuration × factor × seed) writes its own result.json and is skipped once it exists, so
an interrupted run resumes cell by cell. Measured per cell: CODING Acc@8 before and after the stage (the
reference's 32 test prompts, k = 8), the degenerate share after it (A8), every step's log row (reward,
the shares distilled by a demonstration and by feedback, ‖Δθ‖/‖θ‖, max |Δθ|, the learning rate), and
the self-teacher check (evaluate.teacher_check, S1 with and without a demonstration) at the stage's
start and every 10 steps. --teacher-history adds the same check on every stage's checkpoint.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import continual  # noqa: E402
import train  # noqa: E402
import evaluate  # noqa: E402
from infra import flags  # noqa: E402
from infra import stats  # noqa: E402
from analysis import archive, probes  # noqa: E402
from experiment import configurations, rundir  # noqa: E402
from infra import plots  # noqa: E402
from infra import safety  # noqa: E402
from infra.checkpoints import atomic_json, load_optimizer  # noqa: E402
from infra.models import load_policy  # noqa: E402
from infra.distributed import init_distributed  # noqa: E402

STAGES = ["math", "science", "tooluse", "coding"]
CODING_STAGE = 3                      # 0-based: the reference's fourth stage (its prompt order and seeds)
FACTORS = {"a": ["--feedback", "off", "--warmup-steps", "0"],
           "b": ["--feedback", "on", "--warmup-steps", "0"],
           "c": ["--feedback", "off", "--warmup-steps", "10"],
           "d": ["--feedback", "off", "--warmup-steps", "0", "--skip-empty-steps"],
           "e": ["--feedback", "off", "--warmup-steps", "0", "--lr", "2e-4"],   # GRPO's rate when declared
           "f": ["--feedback", "off", "--warmup-steps", "0", "--stage-optimizer", "carry"]}
FACTOR_NAMES = {"a": "as committed", "b": "feedback on (true report)", "c": "10-batch warmup",
                "d": "no step without signal", "e": "GRPO's learning rate", "f": "optimizer carried over"}
RUN_NAMES = {"grpo": "grpo", "sdpo_0": "sdpo_a0", "sdpo_5": "sdpo_a0.05"}
EVAL_N, EVAL_K, CHECK_K, CHECK_EVERY = 32, 8, 4, 10
REMOVES = 0.5   # declared: a factor removes the collapse when CODING after the stage is ≥ 50% on every seed


def stage_dir(runs, seed, run_name, k):
    """Stage k's (1-based) checkpoint of run_name in the seed's regenerated run directory."""
    found = sorted(glob.glob(os.path.join(runs, f"*-s{seed}*", "checkpoints", run_name, f"stage{k}-*")))
    if not found:
        sys.exit(f"error: no stage-{k} checkpoint of {run_name}, seed {seed}, under {runs} (run the command in "
                 f"this script's docstring first)")
    return found[0]


def teacher_check(model, tok, records):
    torch.manual_seed(0)   # the same draws for every cell (training steps seed themselves)
    return evaluate.teacher_check(model, tok, records, CHECK_K, 64)


def coding_acc(model, tok):
    deg = {}
    acc = evaluate.evaluate(model, tok, ["coding"], n=EVAL_N, k=EVAL_K, seed=0, progress=False, degenerate=deg)
    return acc["coding"], deg["coding"]


def run_cell(runs, out, config, factor, seed, steps):
    path = os.path.join(out, config, factor, f"seed{seed}", "result.json")
    if os.path.exists(path):
        return json.load(open(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    argv = ["--method", config, "--stages", ",".join(STAGES), "--seed", str(seed), "--threads", "1",
            "--steps", str(steps), *FACTORS[factor]]
    _, args, _, _, configs, _ = continual.parse_args(argv)
    (method, settings, run_name), = configs
    args = flags.per_seed(args)[0]
    device = init_distributed(args.device, args.threads)
    start = stage_dir(runs, seed, RUN_NAMES[config], CODING_STAGE)
    model, tok = rundir.load_checkpoint(start, device, args.dtype, what="stage-3 checkpoint")
    records = evaluate.benchmark_records("coding", EVAL_N, 0)
    t0 = time.time()
    before, deg_before = coding_acc(model, tok)
    checks = [{"step": 0, **teacher_check(model, tok, records)}]

    def measure(step, row):
        if step % CHECK_EVERY == 0:
            checks.append({"step": step, **teacher_check(model, tok, records)})

    log = os.path.join(os.path.dirname(path), "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    module, cfg = configurations.method_of(method, settings, None), configurations.config_of(method, settings, args)
    stage = rundir.Stage(CODING_STAGE, "coding", *continual.new_stage(model, tok, "coding", CODING_STAGE, module, cfg,
                                                                      settings, args))
    if args.stage_optimizer == "carry":   # the stage-3 AdamW state, carried over
        load_optimizer(start, model, stage.opt)
    on_step = rundir.stage_logger(stage, log, run_name, evaluate.in_stage_curve(model, tok, "coding", stage.args),
                                  measure=measure)
    train.run_steps(model, tok, stage.records, stage.args, module, cfg, stage.frozen, stage.opt,
                    desc=f"{run_name} coding", on_step=on_step)
    rows = stage.rows
    after, deg_after = coding_acc(model, tok)
    result = {"config": config, "factor": factor, "seed": seed, "run_name": run_name, "start": start,
              "coding_before": before, "coding_after": after, "degenerate_before": deg_before,
              "degenerate_after": deg_after, "teacher_checks": checks, "rows": rows,
              "seconds": round(time.time() - t0, 1)}
    atomic_json(path, result)
    print(f"{config} ({factor}) seed {seed}: CODING {100 * before:.1f} -> {100 * after:.1f}%, degenerate "
          f"{100 * deg_after:.1f}%, mean reward {sum(r['reward'] for r in rows) / len(rows):.3f} "
          f"({result['seconds']:.0f}s)", flush=True)
    return result


def along_the_stages(check, runs, out, folder, configs, seed, stages):
    """check(model, tok, CODING's test records) at the base and at each configuration's checkpoint of
    each stage in `stages` (1-based); saved in out/folder/seed<seed>.json, read back if it is there."""
    path = os.path.join(out, folder, f"seed{seed}.json")
    if os.path.exists(path):
        return json.load(open(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    device = init_distributed("cpu", 1)
    records = evaluate.benchmark_records("coding", EVAL_N, 0)
    model, tok = load_policy("tiny", device, "auto")
    found = {"base": check(model, tok, records)}
    for config in configs:
        for k in stages:
            model, tok = rundir.load_checkpoint(stage_dir(runs, seed, RUN_NAMES[config], k), device, "auto")
            found[f"{config}/stage{k}"] = check(model, tok, records)
    atomic_json(path, found)
    return found


def teacher_history(runs, out, configs, seed):
    """The self-teacher check on CODING at the base and after each of the first three stages."""
    history = along_the_stages(teacher_check, runs, out, "teacher_history", configs, seed, range(1, CODING_STAGE + 1))
    print(f"teacher history, seed {seed}: " + ", ".join(
        f"{k} {100 * v['without_demo']:.0f}->{100 * v['with_demo']:.0f}" for k, v in history.items()
        if v.get("with_demo") is not None), flush=True)
    return history


def feedback_check(model, tok, records):
    torch.manual_seed(0)   # the same draws for every cell
    return probes.feedback_check(model, tok, records, CHECK_K, 64)


def feedback_history(runs, out, configs, seed):
    """feedback_check on CODING at the base and at each configuration's stage-3 checkpoint."""
    return along_the_stages(feedback_check, runs, out, "feedback_check", configs, seed, [CODING_STAGE])


def per_token(runs, out, configs, seed):
    """Where SDPO's per-token signal sits at the CODING stage's start (classroom/tokens.py on each stage-3
    checkpoint and on the base, 16 test prompts × 8 samples): the mean GJSD per distilled token, and the
    share of it on the answer's fixed `lambda x: ` prefix against its body."""
    path = os.path.join(out, "per_token", f"seed{seed}.json")
    if os.path.exists(path):
        return json.load(open(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    found = {}
    models = [("base", "tiny")] + [(c, stage_dir(runs, seed, RUN_NAMES[c], CODING_STAGE)) for c in configs]
    for name, model in models:
        view = os.path.join(out, "per_token", f"{name}-s{seed}")
        subprocess.run([sys.executable, os.path.join(safety.REPO, "classroom", "tokens.py"), "--model", model, "--task",
                        "coding", "--prompts", "16", "--show", "128", "--seed", str(seed), "--out", view],
                       check=True, stdout=subprocess.DEVNULL)   # (the class's command, run as a student runs it)
        rows = [r for r in json.load(open(os.path.join(view, "tokens.json"))) if r["has_signal"]]
        prefix = total = n_tok = 0.0
        for r in rows:
            chars = 0
            for t in r["tokens"]:
                total += t["gjsd"]
                n_tok += 1
                prefix += t["gjsd"] if chars < len("lambda x: ") else 0.0
                chars += len(t["text"])
        found[name] = {"distilled_responses": len(rows), "gjsd_per_token": total / max(1, n_tok),
                       "prefix_share": prefix / total if total else None}
    atomic_json(path, found)
    return found


# ----------------------------------------------------------------------------------------------
# The summary: the table (mean and 95% interval over seeds) and the per-step picture
# ----------------------------------------------------------------------------------------------
def cells(out):
    found = {}
    for path in glob.glob(os.path.join(out, "*", "*", "seed*", "result.json")):
        r = json.load(open(path))
        found.setdefault((r["config"], r["factor"]), []).append(r)
    return {key: sorted(rs, key=lambda r: r["seed"]) for key, rs in sorted(found.items())}


def interval(values):
    mean, lo, hi = stats.mean_interval(values)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(values)}


def cell_summary(rs):
    # the first three steps' mean relative update (fewer when a short run has fewer)
    first3 = [sum(x["update_rel"] for x in r["rows"][:3]) / max(1, len(r["rows"][:3])) for r in rs]
    gain = lambda c: None if c.get("with_demo") is None else c["with_demo"] - c["without_demo"]  # noqa: E731
    return {"coding_after": interval([r["coding_after"] for r in rs]),
            "coding_before": interval([r["coding_before"] for r in rs]),
            "mean_reward": interval([sum(x["reward"] for x in r["rows"]) / len(r["rows"]) for r in rs]),
            "update_rel_first3": interval(first3),
            "degenerate_after": interval([r["degenerate_after"] for r in rs]),
            "skipped_steps": interval([sum(x.get("skipped", 0) for x in r["rows"]) for r in rs]),
            "teacher_gain_start": [gain(r["teacher_checks"][0]) for r in rs],
            "teacher_gain_end": [gain(r["teacher_checks"][-1]) for r in rs],
            "removes_collapse": all(r["coding_after"] >= REMOVES for r in rs),
            "per_seed_after": [r["coding_after"] for r in rs]}


def pm(cell, scale=100, digits=1):
    if cell["lo"] is None:   # one seed: no interval
        return f"{scale * cell['mean']:.{digits}f}"
    return f"{scale * cell['mean']:.{digits}f} [{scale * cell['lo']:.{digits}f}, {scale * cell['hi']:.{digits}f}]"


def against_a(found, c, f):
    """CODING after the stage, factor f minus (a), paired by seed: mean and 95% interval."""
    base = {r["seed"]: r["coding_after"] for r in found.get((c, "a"), [])}
    diffs = [r["coding_after"] - base[r["seed"]] for r in found[(c, f)] if r["seed"] in base]
    return interval(diffs) if diffs and f != "a" else None


def write_summary(out):
    """summary.json and report.md of the finished cells under out (a committed ablation: read from its archive)."""
    found = cells(archive.materialized(out))
    summary = {f"{c}/{f}": {**cell_summary(rs), "minus_a": against_a(found, c, f)} for (c, f), rs in found.items()}
    atomic_json(os.path.join(out, "summary.json"), summary)
    lines = ["| configuration | factor | seeds | CODING before | CODING after | after − (a) | mean reward "
             "| ‖Δθ‖/‖θ‖ steps 1–3 (×1e-3) | degenerate after | steps without signal | removes the collapse |",
             "|" + "---|" * 11]
    for (c, f), rs in found.items():
        s = summary[f"{c}/{f}"]
        minus = "—" if s["minus_a"] is None else pm(s["minus_a"])
        lines.append(f"| {c} | ({f}) {FACTOR_NAMES[f]} | {len(rs)} | {pm(s['coding_before'])} | {pm(s['coding_after'])} "
                     f"| {minus} | {pm(s['mean_reward'], 1, 3)} | {pm(s['update_rel_first3'], 1000, 2)} | "
                     f"{pm(s['degenerate_after'])} | {s['skipped_steps']['mean']:.1f} | "
                     f"{'yes' if s['removes_collapse'] else 'no'} |")
    lines += teacher_tables(archive.materialized(out))
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot_collapse(found, os.path.join(out, "collapse.png"))
    return summary


def teacher_tables(out):
    """The teacher check along the stages and in the CODING stage, and where the per-token signal sits."""
    lines = []
    hist = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "teacher_history", "seed*.json")))]
    if hist:
        lines += ["", f"Self-teacher check on CODING (Acc@{CHECK_K}, {EVAL_N} test prompts), mean over {len(hist)} seeds: "
                  "without | with the demonstration (with − without)", "",
                  "| checkpoint | without | with | with − without |", "|---|---|---|---|"]
        for key in hist[0]:
            got = [h[key] for h in hist if h.get(key, {}).get("with_demo") is not None]
            if got:
                w0 = sum(g["without_demo"] for g in got) / len(got)
                w1 = sum(g["with_demo"] for g in got) / len(got)
                lines.append(f"| {key} | {100 * w0:.1f} | {100 * w1:.1f} | {100 * (w1 - w0):+.1f} |")
    fb = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "feedback_check", "seed*.json")))]
    if fb:
        lines += ["", f"The teacher shown feedback on its failed attempt (S8) instead of a demonstration, on CODING "
                  f"(Acc@{CHECK_K}), mean over {len(fb)} seeds", "",
                  "| checkpoint | prompts with a report | without | with the report | with − without |", "|---|---|---|---|---|"]
        for key in fb[0]:
            got = [f[key] for f in fb if f.get(key, {}).get("with_feedback") is not None]
            if got:
                w0 = sum(g["without"] for g in got) / len(got)
                w1 = sum(g["with_feedback"] for g in got) / len(got)
                n = sum(g["prompts_with_feedback"] for g in got) / len(got)
                lines.append(f"| {key} | {n:.1f} | {100 * w0:.1f} | {100 * w1:.1f} | {100 * (w1 - w0):+.1f} |")
    tok = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "per_token", "seed*.json")))]
    if tok:
        lines += ["", f"Per-token signal at the CODING stage's start (classroom/tokens.py, 16 prompts × 8), mean over {len(tok)} "
                  "seeds", "", "| model | distilled responses | GJSD per distilled token | share on `lambda x: ` |",
                  "|---|---|---|---|"]
        for key in tok[0]:
            rows = [t[key] for t in tok]
            share = [r["prefix_share"] for r in rows if r["prefix_share"] is not None]
            lines.append(f"| {key} | {sum(r['distilled_responses'] for r in rows) / len(rows):.1f} | "
                         f"{sum(r['gjsd_per_token'] for r in rows) / len(rows):.4f} | "
                         f"{100 * sum(share) / max(1, len(share)):.1f}% |")
    return lines


def plot_collapse(found, path):
    """One picture of the collapse as it happens: per step (mean over seeds) the reward, the shares of
    responses distilled by a demonstration and by feedback, ‖Δθ‖/‖θ‖ and the learning rate."""
    plt = plots.pyplot()
    if plt is None:
        return
    keys = [("reward", "training reward"), ("demo_frac", "share distilled by a demonstration"),
            ("feedback_frac", "share distilled by feedback"), ("update_rel", "‖Δθ‖/‖θ‖ of the step"),
            ("lr", "learning rate in force")]
    configs = sorted({c for c, _ in found})
    fig, axes = plt.subplots(len(keys), len(configs), figsize=(4.2 * len(configs), 2.2 * len(keys)), squeeze=False)
    colors = {f: plt.cm.tab10(i) for i, f in enumerate(FACTORS)}
    for j, c in enumerate(configs):
        for (cc, f), rs in found.items():
            if cc != c:
                continue
            steps = range(1, len(rs[0]["rows"]) + 1)
            for i, (key, label) in enumerate(keys):
                ys = [[r["rows"][t - 1].get(key, 0.0) for r in rs] for t in steps]
                axes[i][j].plot(list(steps), [sum(y) / len(y) for y in ys], color=colors[f], lw=1.3,
                                label=f"({f}) {FACTOR_NAMES[f]}")
                axes[i][j].set_ylabel(label, fontsize=7)
                if key == "update_rel":
                    axes[i][j].set_yscale("log")
        axes[0][j].set_title(f"{c}: CODING stage from its stage-3 checkpoint", fontsize=8)
        axes[-1][j].set_xlabel("step of the CODING stage")
    axes[0][-1].legend(fontsize=6, loc="upper right")
    plots.save(fig, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="python tools/coding_ablation.py [--runs DIR] [--seeds S,…] … (--help lists all)")
    ap.add_argument("--runs", help="the regenerated first three stages (see the docstring); not needed by --summary-only")
    ap.add_argument("--out", default=os.path.join(safety.REPO, "results", "coding_ablation"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--configs", default="sdpo_0,sdpo_5")
    ap.add_argument("--factors", default="a,b,c,d,e,f")
    ap.add_argument("--grpo-factors", default="a,c,f", help="the control: GRPO's CODING stage under these")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--worker", default="0/1", help="i/n: run every n-th cell from the i-th (two processes, one core each)")
    ap.add_argument("--teacher-history", action="store_true", help="the teacher check on every stage checkpoint too")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--into-results", action="store_true", help="write into results/ (the committed ablation, "
                    "--out's default): without it, give --out a folder of your own")
    args = ap.parse_args(argv)
    worker = re.fullmatch(r"(\d+)/(\d+)", args.worker)
    if not worker or not int(worker.group(1)) < int(worker.group(2)):
        ap.error(f"--worker is i/n, this process's share of the cells with 0 <= i < n, got '{args.worker}'")
    try:
        seeds = flags.seed_list(args.seeds)
    except (ValueError, argparse.ArgumentTypeError) as e:
        ap.error(f"--seeds: {e}")
    if not args.summary_only and not args.runs:
        ap.error("--runs is needed to run the cells (the regenerated first three stages; see the docstring)")
    if not args.summary_only and not os.path.isdir(args.runs):
        ap.error(f"--runs {args.runs}: no such directory (make it with the command in this script's docstring)")
    if not glob.glob(os.path.join(archive.materialized(args.out), "*", "*", "seed*", "result.json")) and args.summary_only:
        ap.error(f"--out {args.out}: no cell has finished there; nothing to summarise")
    safety.refuse_committed(ap.error, "--out", args.out, args.into_results, "--into-results")
    if not args.summary_only:
        jobs = [(c, f, s) for s in seeds for c in args.configs.split(",") for f in args.factors.split(",")]
        jobs += [("grpo", f, s) for s in seeds for f in args.grpo_factors.split(",") if f]
        bad = [f for _, f, _ in jobs if f not in FACTORS] + [c for c, _, _ in jobs if c not in RUN_NAMES]
        if bad:
            ap.error(f"unknown factor or configuration: {', '.join(bad)}")
        i, n = (int(x) for x in args.worker.split("/"))
        for c, f, s in jobs[i::n]:
            run_cell(args.runs, args.out, c, f, s, args.steps)
        if args.teacher_history:
            for s in seeds[i::n]:
                teacher_history(args.runs, args.out, ["grpo", *args.configs.split(",")], s)
                per_token(args.runs, args.out, ["grpo", *args.configs.split(",")], s)
                feedback_history(args.runs, args.out, ["grpo", *args.configs.split(",")], s)
    write_summary(args.out)


if __name__ == "__main__":
    main()
