"""experiment/report.py — a finished continual run's report, drawn from its files by `python tools/report.py RUN_DIR`
(the run itself prints its accuracy matrix and writes results.json, results.csv and log.jsonl): one seed's
report.md (its accuracy matrix, A2–A3's changes, drift) with its five figures; over several seeds, report.md of the
means with their intervals. The paper's claims, each a paired difference over seeds with its verdict, are
analysis/claims.py's, a command over finished runs (the report names it)."""
import json
import os

from experiment import metrics, tables
from infra import plots
from infra.checkpoints import read_jsonl, write_atomically


# ----------------------------------------------------------------------------------------------
# One seed's report: report.md and its figures
# ----------------------------------------------------------------------------------------------
def run_figures(results, run_dir, out_dir=None, prefix=""):
    """One seed's five figures (infra/plots.py), with the paper's names in the legends, drawn into out_dir (the run
    directory unless given), each name after `prefix`: [(path or None, alt text)]."""
    rows, names = seed_log(run_dir), paper_names(results)
    out = lambda name: os.path.join(out_dir or run_dir, prefix + name)   # noqa: E731
    return [(plots.plot_accuracy(results, out("accuracy.png"), labels=names), "accuracy per benchmark across stages"),
            (plots.plot_accuracy_matrix(results, out("accuracy_matrix.png"), labels=names),
             "the accuracy matrix, stage × benchmark"),
            (plots.plot_gain_forgetting(results, out("gain.png"), labels=names),
             "signed change δ on each stage's domain and of the final model"),
            (plots.plot_drift(results, out("drift.png"), labels=names), "drift after every stage"),
            (plots.plot_curves(rows, out("curves.png"), results["stages"], labels=names),
             "reward, JS and entropies per step")]


def paper_names(results):
    """{run name: the paper's name of its configuration (metrics.role_of), or the run name}, for legends."""
    return {name: metrics.role_of(run) or name for name, run in results["runs"].items()}


def write_report(results, run_dir, out_dir=None):
    """report.md: accuracy matrix per run, the G/F table of the final models, averages, drift and collapse, and
    the five figures beside it."""
    stages, benches = results["stages"], results["benchmarks"]
    ood = [b for b in benches if b not in stages]
    config = os.path.join(run_dir, "config.json")
    threads = json.load(open(config)).get("threads") if os.path.isfile(config) else None
    lines = ["# Continual post-training report", "",
             f"Stages: {' → '.join(stages)}. Acc@{results['eval']['k']} in % on {results['eval']['n']} test prompts "
             f"per benchmark (T=0.6, top-p 0.95). OOD: {', '.join(ood) if ood else 'none'}."
             + (f" Run with {threads} torch threads (another count or processor gives other numbers)." if threads else ""),
             ""] + tables.accuracy_tables(results)
    for name, run in results["runs"].items():
        if run.get("drift") and all(run["drift"]):
            lines += ["", f"## {name}: drift after each stage (A4–A8)", "", drift_table(run["drift"], stages)]
    if any(run.get("drift") and all(run["drift"]) for run in results["runs"].values()):
        lines += ["", "NSS: normalised spectral shift (A4), mean over all weight matrices; max angle: largest principal "
                  "angle of the top-10% singular subspaces (A5); mask IoU / update in base mask: principal-mask overlap "
                  "(A6); resp. cos: cosine similarity of base-model embeddings of the responses to the same prompts (A7); "
                  "KL(π‖π0): Monte-Carlo sequence KL to the base, mean over benchmarks (an estimate from the trained "
                  "model's samples: a true KL near 0 can come out slightly negative, within its standard error, which "
                  "results.json keeps per benchmark); collapse: responses repeating one "
                  "short pattern to the length limit (A8), with the most common pattern."]
    lines += [""] + [f"![{alt}]({os.path.basename(p)})" for p, alt in run_figures(results, run_dir, out_dir) if p]
    text = "\n".join(lines) + "\n"
    write_atomically(os.path.join(out_dir or run_dir, "report.md"), lambda f: f.write(text))
    return text


def drift_table(drift_rows, stages):
    """Markdown: one row per stage, the headline numbers of stage_drift."""
    def f(v, spec):
        return "—" if v is None else format(v, spec)
    lines = ["| after | NSS vs base (mean / max) | max angle ° vs base | mask IoU vs base % | update in base mask % "
             "| NSS vs prev | resp. cos vs base (mean / p5) | resp. cos vs prev (mean) | KL(π‖π0) nats | collapse % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k, d in enumerate(drift_rows):
        pb, pp = d["params_vs_base"]["all"], d["params_vs_prev"]["all"]
        rb, rp, col = d["responses_vs_base"], d["responses_vs_prev"], d["collapse"]
        top = next(iter(col["patterns"]), None)
        lines.append(
            f"| {k + 1}: {os.path.basename(stages[k])} | {f(pb['nss_mean'], '.4f')} / {f(pb['nss_max'], '.4f')} "
            f"| {f(pb['angle_max'], '.1f')} | {f(pb['iou_mean'] and 100 * pb['iou_mean'], '.1f')} "
            f"| {f(pb['in_mask_mean'] and 100 * pb['in_mask_mean'], '.1f')} | {f(pp['nss_mean'], '.4f')} "
            f"| {f(rb['mean'], '.3f')} / {f(rb['p5'], '.3f')} | {f(rp['mean'], '.3f')} "
            f"| {f(d['kl_to_base_mean'], '.2f')} | {100 * col['share']:.2f}"
            + (f" ({col['patterns'][top]}× `{top}`)" if top else "") + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Several seeds: means with 95% intervals (the claims' verdicts: analysis/claims.py over the seeds)
# ----------------------------------------------------------------------------------------------
def pm(cell, scale=100):
    """"18.4 ± 2.1": the mean and the half-width of its 95% interval over seeds; the mean alone, marked †, when the
    interval is wider than the whole scale (two seeds: t_0.975,1 = 12.7 times their spread), which says nothing."""
    half = cell["high"] - cell["mean"]
    return f"{scale * cell['mean']:.1f} †" if wide(cell) else f"{scale * cell['mean']:.1f} ± {scale * half:.1f}"


def wide(cell):
    """Is a cell's 95% interval wider than the scale of an accuracy (more than ±100 points)?"""
    return cell["high"] - cell["mean"] > 1.0


def seed_log(run_dir):
    """One seed's log.jsonl rows (none if it has no log)."""
    path = os.path.join(run_dir, "log.jsonl")
    return read_jsonl(path)[0] if os.path.exists(path) else []


def write_seeds_report(summary, seed_results, out_dir):
    """report.md over seeds: each run's accuracy matrix as mean ± half-width, G and F, the figures; first, the
    command that gives the paper's claims over these seeds (analysis/claims.py)."""
    stages, benches, n = summary["stages"], summary["benchmarks"], len(summary["seeds"])
    short = tables.short_names(benches)
    lines = ["# Continual post-training over seeds", "",
             f"Seeds {', '.join(map(str, summary['seeds']))} (one directory each: "
             f"{', '.join(os.path.basename(d) for d in summary['seed_dirs'])}). Stages: {' → '.join(stages)}. "
             f"Acc@{summary['eval']['k']} on the same {summary['eval']['n']} test prompts per benchmark for every seed "
             f"and run (--eval-seed {summary['eval']['seed']}). Wall time per seed: "
             f"{', '.join(f'{s:.0f} s' for s in summary['seconds_per_seed'])}.", "",
             "The paper's claims over these seeds, each a paired difference with its 95% interval and a verdict: "
             f"`python analysis/claims.py {out_dir}`.", ""]
    for name, run in summary["runs"].items():
        lines += [f"## {name}{' (' + run['role'] + ')' if run['role'] else ''}: accuracy after each stage, "
                  f"mean ± 95% half-width over {n} seeds", "",
                  "| after | " + " | ".join(short[b] for b in benches) + " |", "|---|" + "---|" * len(benches)]
        for k, row in enumerate(run["acc"]):
            label = "base" if k == 0 else f"{k}: {stages[k - 1]}"
            lines.append(f"| {label} | " + " | ".join(
                f"**{pm(c)}**" if k > 0 and benches[i] == stages[k - 1] else pm(c) for i, c in enumerate(row)) + " |")
        lines.append("")
    cells = [c for run in summary["runs"].values() for row in run["acc"] for c in row] + \
        [c for run in summary["runs"].values() for c in run["metrics"].values() if isinstance(c, dict) and "high" in c]
    if any(wide(c) for c in cells):
        lines += [f"†: over {n} seeds this cell's 95% interval is wider than the whole scale, so it is left out: {n} "
                  "seeds cannot bound it (the claims use 10–32 seeds; docs/RESULTS.md).", ""]
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
    write_atomically(os.path.join(out_dir, "report.md"), lambda f: f.write(text))
    return text
