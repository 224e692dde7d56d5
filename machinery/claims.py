"""machinery/claims.py — the paper's claims, each measured over seeds with a 95% interval and given a verdict.

    python continual.py --method grpo,sdpo_0,sdpo_5,s_sdpo_0,stable_sdpo --seed 0,1,2   # writes the claims table

A claim compares two configurations A and B on one metric, e.g. "SDPO_5% forgets more of the earlier
domains than GRPO": A = SDPO_5%, B = GRPO, metric = F on the earlier domains (A3). Every configuration of
one seed sees the same training prompts in the same order and is scored on the same test prompts
(--eval-seed), so the comparison is paired: per seed s, d_s = metric(A, s) − metric(B, s). The effect
is the mean of d_s over seeds with its 95% Student-t interval (evaluate.mean_interval). The verdict:

    shown          the interval lies entirely on the side the paper reports
    opposite       the interval lies entirely on the other side
    not separable  the interval contains 0 (with one seed there is no interval: always this)

The t-interval over seeds holds every source of noise that differs between seeds (the training run,
the sampling of the test responses); it assumes the per-seed differences are roughly normal, and with
3 seeds its half-width is 4.3 × s/√3 ≈ 2.5 standard deviations of d, so only clear effects count.
The configurations are found by their settings, so any run of continual.py that holds two of them gets
the claims that compare them; the others are listed as "not run".
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

from evaluate import T975, mean_interval


# ----------------------------------------------------------------------------------------------
# The configurations, recognised by their settings (the paper's Table D.6 names)
# ----------------------------------------------------------------------------------------------
def role_of(run):
    """The paper's name of a configuration (GRPO, SDPO_0, SDPO_5%, SDPO-CoT_5%, S-SDPO_0, StableSDPO)
    from a results.json run entry, or None for any other setting (a different α, masking, feedback…)."""
    s = run["settings"]
    if run["method"] == "grpo":
        return "GRPO" if (s["mini_batches"], s["epochs"], s["clip_ratio_c"]) == (4, 1, 3.0) else None
    # (S8) the release's per-domain feedback is the paper's protocol; "off" (or False) is the protocol of the
    # reference committed before 2026-12-02; feedback on everywhere is another setting
    if s.get("mask_ratio") or s.get("feedback") in (True, "on") or s.get("skip_empty_steps") \
            or s.get("teacher_init", "restart") != "restart":
        return None
    if s["refresh_every"]:
        return None if s["cot"] else ("S-SDPO_0" if s["gamma"] == 1 else "StableSDPO")
    if s["alpha"] == 0.05:
        return "SDPO-CoT_5%" if s["cot"] else "SDPO_5%"
    if s["alpha"] == 0 and not s["cot"]:
        return "SDPO_0"
    return None


# ----------------------------------------------------------------------------------------------
# Metrics of one run of one seed (a results.json run entry; stages/benchmarks from the same file)
# ----------------------------------------------------------------------------------------------
def average_accuracy(run, stages, benchmarks):
    """Mean over stages k of the mean accuracy of θ_k on the domains trained so far, d_1 … d_k: how well
    the sequence holds up as a whole (a standard continual-learning average)."""
    per_k = [sum(run["acc"][k][benchmarks.index(d)] for d in stages[:k]) / k for k in range(1, len(stages) + 1)]
    return sum(per_k) / len(per_k)


def final_drift(key):
    """A drift figure of the final model vs the base (A4–A7, KL), or None when drift was not measured."""
    def get(run, stages, benchmarks):
        d = (run.get("drift") or [None])[-1]
        if not d:
            return None
        return {"nss": lambda: d["params_vs_base"]["all"]["nss_mean"],
                "angle": lambda: d["params_vs_base"]["all"]["angle_max"],
                "iou": lambda: d["params_vs_base"]["all"]["iou_mean"],
                "cos": lambda: d["responses_vs_base"]["mean"],
                "kl": lambda: d["kl_to_base_mean"]}[key]()
    return get


def own_domain_change(domain):
    """Δ (A2) on `domain` right after the stage that trains it, in accuracy points; None if not a stage."""
    def get(run, stages, benchmarks):
        if domain not in stages or domain not in benchmarks:
            return None
        k = stages.index(domain) + 1
        return run["acc"][k][benchmarks.index(domain)] - run["acc"][0][benchmarks.index(domain)]
    return get


def gain_points(run, stages, benchmarks):
    """G in accuracy points: the mean over stages k of max(Δ, 0) on d_k right after stage k (A2's Δ, not δ)."""
    per = [max(own_domain_change(d)(run, stages, benchmarks), 0.0) for d in stages if d in benchmarks]
    return sum(per) / len(per) if per else None


def forget_points(which):
    """F in accuracy points: the mean of max(−Δ, 0) of the final model on the earlier domains or on the OOD
    benchmarks (A3's F with Δ for δ: a point lost counts the same whatever the base's accuracy)."""
    def get(run, stages, benchmarks):
        names = stages[:-1] if which == "earlier" else [b for b in benchmarks if b not in stages]
        per = [max(run["acc"][0][benchmarks.index(b)] - run["acc"][-1][benchmarks.index(b)], 0.0)
               for b in names if b in benchmarks]
        return sum(per) / len(per) if per else None
    return get


def forgetting_from_peak(run, stages, benchmarks):
    """The continual-learning field's forgetting (Chaudhry et al., 2018), in points: for each earlier domain
    d_j (j < K), the best accuracy it had after its own stage and before the last, max_{j ≤ l < K} acc_l(d_j),
    minus its final accuracy acc_K(d_j); the mean over j. Reported beside F, never used for a verdict."""
    K = len(stages)
    per = [max(run["acc"][l][benchmarks.index(d)] for l in range(j, K)) - run["acc"][K][benchmarks.index(d)]
           for j, d in enumerate(stages[:-1], start=1) if d in benchmarks]
    return sum(per) / len(per) if per else None


def backward_transfer(run, stages, benchmarks):
    """Backward transfer (Lopez-Paz & Ranzato, 2017), in points: (1/(K−1)) Σ_{j<K} [acc_K(d_j) − acc_j(d_j)],
    what the later stages did to each earlier domain's accuracy right after its own stage (negative:
    forgetting). Reported beside F, never used for a verdict."""
    K = len(stages)
    per = [run["acc"][K][benchmarks.index(d)] - run["acc"][j][benchmarks.index(d)]
           for j, d in enumerate(stages[:-1], start=1) if d in benchmarks]
    return sum(per) / len(per) if per else None


def collapse_at(stage):
    """The degenerate share of all evaluation responses after stage `stage` (A8), or the last stage's."""
    return lambda run, stages, benchmarks: run["degenerate"][min(stage, len(run["degenerate"])) - 1]


METRICS = {   # name: (how to compute it, its unit, how to print it: scale)
    "gain": (lambda r, s, b: r["avg_gain_trained"], "G %", 100),
    "reward": (lambda r, s, b: sum(r["mean_reward"]) / len(r["mean_reward"]), "reward", 1),
    "forget_earlier": (lambda r, s, b: r["avg_forget_earlier"], "F %", 100),
    "forget_ood": (lambda r, s, b: r["avg_forget_ood"], "F %", 100),
    "nss": (final_drift("nss"), "NSS", 1),
    "angle": (final_drift("angle"), "degrees", 1),
    "iou": (final_drift("iou"), "IoU", 1),
    "cos": (final_drift("cos"), "cosine", 1),
    "kl": (final_drift("kl"), "nats", 1),
    "collapse3": (collapse_at(3), "% degenerate", 100),
    "avg_acc": (average_accuracy, "acc %", 100),
    "cot_math": (own_domain_change("math"), "Δ points", 100),
    "cot_science": (own_domain_change("science"), "Δ points", 100),
    "cot_tooluse": (own_domain_change("tooluse"), "Δ points", 100),
    # in accuracy points, beside the paper's relative G and F (POINTS); never used for a verdict
    "gain_points": (gain_points, "points", 100),
    "forget_earlier_points": (forget_points("earlier"), "points", 100),
    "forget_ood_points": (forget_points("ood"), "points", 100),
    # the continual-learning field's standard measures, reported with their intervals (seeds report)
    "forget_peak": (forgetting_from_peak, "points", 100),
    "bwt": (backward_transfer, "points", 100),
}
# The relative metrics (A2–A3: % of the base's accuracy) that decide a claim, and their companion in
# absolute accuracy points, printed next to them: in the committed reference, +10.1 of relative F was
# +1.9 points of accuracy (docs/RESULTS.md).
POINTS = {"gain": "gain_points", "forget_earlier": "forget_earlier_points", "forget_ood": "forget_ood_points"}

# (claim as the paper states it, metric, A, B, +1 if the paper has A above B, −1 if below)
CLAIMS = [
    ("SDPO specialises faster: gain on each stage's own domain, right after it (A3, mean over stages)",
     "gain", "SDPO_5%", "GRPO", +1),
    ("SDPO specialises faster, per step: mean training reward within each stage (mean over stages)",
     "reward", "SDPO_5%", "GRPO", +1),
    ("SDPO forgets more: F of the final model on the earlier domains (A3)", "forget_earlier", "SDPO_5%", "GRPO", +1),
    ("SDPO forgets more: F of the final model on the OOD benchmarks (A3)", "forget_ood", "SDPO_5%", "GRPO", +1),
    ("SDPO forgets more (frozen teacher): F on the earlier domains", "forget_earlier", "SDPO_0", "GRPO", +1),
    ("SDPO drifts more: spectral shift NSS of the final model vs the base (A4)", "nss", "SDPO_5%", "GRPO", +1),
    ("SDPO drifts more: largest principal angle vs the base (A5)", "angle", "SDPO_5%", "GRPO", +1),
    ("SDPO drifts more: principal-mask overlap with the base is lower (A6)", "iou", "SDPO_5%", "GRPO", -1),
    ("SDPO drifts more: responses less similar to the base's (A7)", "cos", "SDPO_5%", "GRPO", -1),
    ("SDPO drifts more: KL to the base", "kl", "SDPO_5%", "GRPO", +1),
    ("SDPO_5% collapses at stage 3: share of degenerate responses (A8)", "collapse3", "SDPO_5%", "GRPO", +1),
    ("α = 5% is worse than α = 0 over the stages: average accuracy on the domains trained so far",
     "avg_acc", "SDPO_5%", "SDPO_0", -1),
    ("StableSDPO repairs α = 5%: average accuracy on the domains trained so far", "avg_acc", "StableSDPO",
     "SDPO_5%", +1),
    ("CoT hurts MATH: Δ on math after its stage", "cot_math", "SDPO-CoT_5%", "SDPO_5%", -1),
    ("CoT hurts SCIENCE: Δ on science after its stage", "cot_science", "SDPO-CoT_5%", "SDPO_5%", -1),
    ("CoT helps TOOLUSE: Δ on tooluse after its stage", "cot_tooluse", "SDPO-CoT_5%", "SDPO_5%", +1),
]


def verdict(low, high, sign):
    """shown / opposite / not separable, from the 95% interval [low, high] of A − B and the paper's side."""
    if low is None:
        return "not separable (one seed)"
    if sign * low > 0 and sign * high > 0:
        return "shown"
    if sign * low < 0 and sign * high < 0:
        return "opposite"
    return "not separable"


def per_seed_metric(seed_results, role, metric):
    """[value per seed] of one metric for the configuration playing `role`, or None if it is missing."""
    names = [name for name, run in seed_results[0]["runs"].items() if role_of(run) == role]
    if not names or any(names[0] not in res["runs"] for res in seed_results):
        return None
    return per_seed_metric_of(seed_results, names[0], metric)


def per_seed_metric_of(seed_results, run_name, metric):
    """[value per seed] of one metric for the run called `run_name`, or None where it is not defined."""
    values = [METRICS[metric][0](res["runs"][run_name], res["stages"], res["benchmarks"]) for res in seed_results]
    return None if any(v is None for v in values) else values


def measure_claims(seed_results):
    """Every claim over the seeds' results.json dicts (one per seed, the same configurations in each).
    Returns [{claim, metric, unit, a, b, paper, a_mean, b_mean, effect, low, high, per_seed, verdict}]."""
    out = []
    for text, metric, a, b, sign in CLAIMS:
        va, vb = per_seed_metric(seed_results, a, metric), per_seed_metric(seed_results, b, metric)
        row = {"claim": text, "metric": metric, "unit": METRICS[metric][1], "a": a, "b": b,
               "paper": f"{a} {'>' if sign > 0 else '<'} {b}"}
        if va is None or vb is None:
            row.update(verdict="not run", effect=None, low=None, high=None, per_seed=None)
        else:
            diffs = [x - y for x, y in zip(va, vb)]   # paired per seed: same data order, same test prompts
            effect, low, high = mean_interval(diffs)
            row.update(a_mean=sum(va) / len(va), b_mean=sum(vb) / len(vb), effect=effect, low=low, high=high,
                       per_seed=diffs, verdict=verdict(low, high, sign))
            if metric in POINTS:   # the same difference in accuracy points (reported, not a verdict)
                pa, pb = (per_seed_metric(seed_results, r, POINTS[metric]) for r in (a, b))
                if pa is not None and pb is not None:
                    d = [x - y for x, y in zip(pa, pb)]
                    row["points"] = dict(zip(("effect", "low", "high"), mean_interval(d)), per_seed=d)
        out.append(row)
    return out


def expected_by_chance(n_claims, level=0.95):
    """With no real effect anywhere, each claim's interval lies wholly on the paper's side with probability
    (1 − level)/2: the expected number of "shown" verdicts among n_claims, and the chance of at least one
    (as if the claims were independent; they share runs, so read it as a rough guide)."""
    p = (1 - level) / 2
    return n_claims * p, 1 - (1 - p) ** n_claims


def spread(values):
    """The sample standard deviation s of per-seed values (n − 1 in the denominator)."""
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def seeds_for_half_width(diffs, target):
    """Power: the fewest seeds n for which the 95% half-width t(0.975, n−1) · s/√n of a paired difference
    reaches `target`, with s the spread (sample standard deviation) of the per-seed differences measured
    so far. None when fewer than 2 seeds were measured; more than 200 seeds is reported as 201."""
    if diffs is None or len(diffs) < 2:
        return None
    s = spread(diffs)
    for n in range(2, 201):
        t = T975[n - 2] if n - 1 <= len(T975) else 1.96
        if t * s / n ** 0.5 <= target:
            return n
    return 201


def power_table(claims, target=0.05):
    """For every claim with a G or F difference in accuracy points: its spread between seeds and the
    seeds it would take for a 95% half-width of `target` (0.05 = 5 points; issue 25's precision)."""
    lines = [f"| claim | A − B | spread s of the per-seed difference, points | half-width now | seeds for ±{100 * target:g} "
             "points |", "|---|---|---|---|---|"]
    for c in claims:
        pts = c.get("points")
        if not pts or pts["low"] is None:
            continue
        d = pts["per_seed"]
        n = seeds_for_half_width(d, target)
        lines.append(f"| {c['claim']} | {c['a']} − {c['b']} | {100 * spread(d):.1f} | "
                     f"±{100 * (pts['high'] - pts['effect']):.1f} | "
                     f"{'more than 200' if n == 201 else n} |")
    return "\n".join(lines)


def fmt(v, scale, signed=True):
    if v is None:
        return "—"
    v = scale * v
    digits = 1 if scale == 100 else (4 if abs(v) < 0.1 else 2)
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def claims_table(claims, n_seeds):
    """The markdown table of measure_claims' rows (effect = A − B, in the metric's unit)."""
    lines = [f"| claim (paper) | A − B | mean A / mean B | effect | 95% interval ({n_seeds} seed{'s' * (n_seeds > 1)}) "
             "| verdict | the same in accuracy points |", "|---|---|---|---|---|---|---|"]
    for c in claims:
        scale = METRICS[c["metric"]][2]
        if c["verdict"] == "not run":
            lines.append(f"| {c['claim']} | {c['a']} − {c['b']} | — | — | — | not run | — |")
            continue
        interval = "—" if c["low"] is None else f"[{fmt(c['low'], scale)}, {fmt(c['high'], scale)}]"
        pts = c.get("points")
        points = "—" if not pts else fmt(pts["effect"], 100) + (
            "" if pts["low"] is None else f" [{fmt(pts['low'], 100)}, {fmt(pts['high'], 100)}]")
        lines.append(f"| {c['claim']} | {c['a']} − {c['b']} | {fmt(c['a_mean'], scale, False)} / "
                     f"{fmt(c['b_mean'], scale, False)} | {fmt(c['effect'], scale)} {c['unit']} | {interval} | "
                     f"**{c['verdict']}** | {points} |")
    tested = [c for c in claims if c["verdict"] != "not run" and c["low"] is not None]
    if tested:
        mean, at_least_one = expected_by_chance(len(tested))
        lines += ["", f"With {len(tested)} claims tested at once and no real effect anywhere, about {mean:.2f} would "
                      f"come out \"shown\" by chance (at least one with probability {100 * at_least_one:.0f}%)."]
    return "\n".join(lines)


CLAIMS_NOTE = ("Effect: the mean over seeds of the paired difference A − B (same seed: same training prompts, "
               "same test prompts); 95% interval: mean ± t(0.975, n−1) · s/√n over the seeds. **shown**: the "
               "interval lies on the side the paper reports; **opposite**: on the other side; **not separable**: "
               "it contains 0. G and F are relative changes in % of the base accuracy (A2–A3), as the paper defines "
               "them, and decide the verdict; the last column gives the same difference in absolute accuracy "
               "points (never used for a verdict). Drift figures are of the final model vs the base. \"not "
               "run\": the run lacks one of the two configurations.")


def read_seed_results(paths):
    """The per-seed results.json dicts behind `paths`: seed directories (…-s0, …-s1) or a summary directory
    of continual.py --seed 0,1,2 (its results.json lists the seed directories)."""
    found = []
    for path in paths:
        f = os.path.join(path, "results.json")
        if not os.path.isfile(f):
            raise ValueError(f"{path}: no results.json (give run directories written by continual.py)")
        try:
            res = json.load(open(f))
        except ValueError as e:
            raise ValueError(f"{f} is damaged ({str(e).splitlines()[0]})") from None
        if not isinstance(res, dict) or ("runs" not in res and "seed_dirs" not in res):
            raise ValueError(f"{f} is not a continual.py results file")
        if "seed_dirs" in res:   # a summary over seeds: its seeds' own directories, beside it (as written)
            beside = [os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(d)) for d in res["seed_dirs"]]
            inside = sorted(os.path.join(path, d) for d in os.listdir(path)   # (or inside it, as in results/)
                            if os.path.isfile(os.path.join(path, d, "results.json")))
            dirs = beside if all(os.path.isdir(d) for d in beside) else inside
            if len(dirs) != len(res["seed_dirs"]):
                raise ValueError(f"{path}: the summary lists {len(res['seed_dirs'])} seed directories; "
                                 f"give them directly")
            found += read_seed_results(dirs)
        else:
            found.append(res)
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description="The paper's claims, each a paired difference over seeds with its 95% "
                                 "interval and a verdict, from finished continual.py runs.",
                                 usage="python machinery/claims.py RUN_DIR [RUN_DIR ...]  (seed directories, or a summary "
                                       "directory of --seed 0,1,2)")
    ap.add_argument("run_dirs", nargs="+", help="run directories written by continual.py")
    args = ap.parse_args(argv)
    try:
        results = read_seed_results(args.run_dirs)
    except (ValueError, OSError) as e:
        ap.error(str(e))
    if not results:
        ap.error("no seed results found")
    claims = measure_claims(results)
    print(claims_table(claims, len(results)) + "\n\n" + CLAIMS_NOTE)
    if len(results) > 1:
        print("\nPower of the G and F differences (in accuracy points):\n\n" + power_table(claims))
    return results


if __name__ == "__main__":
    main()
