"""analysis/claims.py — the paper's claims, each measured over seeds with a 95% interval and given a verdict.

    python continual.py --method grpo,sdpo_0,sdpo_5,s_sdpo_0,stable_sdpo --seed 0,1,2   # writes the claims table

A claim compares two configurations A and B on one metric, e.g. "SDPO_5% forgets more of the earlier
domains than GRPO": A = SDPO_5%, B = GRPO, metric = F on the earlier domains (A3). Every configuration of
one seed sees the same training prompts in the same order and is scored on the same test prompts
(--eval-seed), so the comparison is paired: per seed s, d_s = metric(A, s) − metric(B, s). The effect
is the mean of d_s over seeds with its 95% Student-t interval (stats.mean_interval). The verdict:

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

from analysis import archive
from analysis.results_file import read_results
from experiment.metrics import (ALPHAS, METRICS, final_drift, forget_points, per_seed_metric_of, reference_role,
                                role_of)
from infra.checkpoints import file_digest
from infra.commands import run_command
from analysis.significance import holm, p_value
from infra.stats import mean_interval, spread, t_quantile


# The relative metrics (A2–A3: % of the base's accuracy) that decide a claim, and their companion in
# absolute accuracy points, printed next to them: in the committed reference, +10.1 of relative F was
# +1.9 points of accuracy (docs/HISTORY.md).
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


def result_changed(path):
    """Whether a result is not as it was written (its .sha256 disagrees); None when it has no checksum (written
    before they were kept, or by hand: nothing to check against)."""
    try:
        saved = open(path + ".sha256").read().split()[0]
    except (OSError, IndexError):
        return None
    return file_digest(path) != saved


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


def seeds_for_half_width(diffs, target):
    """Power: the fewest seeds n for which the 95% half-width t(0.975, n−1) · s/√n of a paired difference
    reaches `target`, with s the spread (sample standard deviation) of the per-seed differences measured
    so far. None when fewer than 2 seeds were measured; more than 200 seeds is reported as 201."""
    if diffs is None or len(diffs) < 2:
        return None
    s = spread(diffs)
    for n in range(2, 201):
        t = t_quantile(n - 1)
        if t * s / n ** 0.5 <= target:
            return n
    return 201


def power_table(claims, target=0.05):
    """For every claim with a G or F difference in accuracy points: its spread between seeds and the
    seeds it would take for a 95% half-width of `target` (0.05 = 5 points; docs/WORLD.md's precision)."""
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


# ==============================================================================================
# The confirmatory reference (docs/studies/reference.md): the paper's claims as the paper states them, declared on
# 2026-12-03 before any of its seeds ran (docs/studies/reference.md). Each claim is
# one number per seed, d_s (a paired difference A − B, or a value less a reference), read from that seed's
# experiments; the verdict is the rule above on d's 95% interval (raw), and the same after Holm's
# correction over the whole family (corrected). Nothing here may change once a seed has run.
# ==============================================================================================
# What held here, in one place: the README's and docs/HANDOUT.md's table of the paper's main claims is this one
# (tests/test_claims_declared.py checks that both print it as `headline_table()` gives it, and that every link lands
# on a heading of docs/RESULTS.md). Each verdict is a declared family's, read from its report.
HELD, OPPOSITE, NOT_REPRODUCED, DEPENDS, NOT_TESTABLE = ("held", "opposite", "not reproduced", "depends on the footing",
                                                        "not testable here")
HEADLINE = [
    ("SDPO specialises faster than GRPO (§4)", OPPOSITE,
     "GRPO gains 9.3 points more on its own domain (stages 1–2, each at its own rate, 20 seeds)",
     "the-claims-at-each-footing"),
    ("SDPO forgets more of the earlier domains (§4)", HELD,
     "SDPO_0 +2.3 points at SCIENCE, +3.7 at CODING at matched gain (interval over seeds); not separable at "
     "TOOLUSE, nor at SCIENCE from a shared start on fresh prompts (+0.6)",
     "forgetting-at-matched-gain-on-one-code-version"),
    ("a fast-moving teacher (SDPO_5%) forgets most, and degenerates (§3.1, §5)", HELD,
     "SDPO_5% +4.2 points at SCIENCE at matched gain; more degenerate answers at every footing (+9.7 at own rates)",
     "forgetting-at-matched-gain-on-one-code-version"),
    ("SDPO forgets through a larger forward KL to the base (App. B)", NOT_REPRODUCED,
     "at matched gain SDPO_0 moves no further (−0.3 nats at SCIENCE) yet forgets 5.6 points above GRPO's line",
     "does-the-forward-kl-to-θ_0-go-with-it-not-for-sdpo_0-appendix-b"),
    ("GRPO generalises better from one domain (§4)", DEPENDS,
     "+3.7 points with each method at its own rate; −1.0 (opposite) with both at 1e-4",
     "the-claims-at-each-footing"),
    ("six further claims (D1–D3, H7, P2, H8b)", NOT_TESTABLE,
     "the tiny model or the world lacks their premise", "the-claims-at-each-footing"),
]


def headline_table(results="docs/RESULTS.md"):
    """The table of the paper's main claims and what this world says of each (markdown, links into `results`)."""
    rows = ["| the paper's claim | here | the number, and what was compared |", "|---|---|---|"]
    rows += [f"| {claim} | **{verdict}** | {number} ([evidence]({results}#{anchor})) |"
             for claim, verdict, number, anchor in HEADLINE]
    return "\n".join(rows)


# ==============================================================================================
# The reference's experiments: run directory prefix -> (the continual.py flags that make it)
EXPERIMENTS = {
    "continual": "--method grpo,sdpo_0,sdpo_5",                                       # 4 stages, tiny
    "math": "--stages math --method grpo,sdpo,stable_sdpo --alpha 0,0.005,0.01,0.02,0.05",   # single-domain
    "tooluse": "--stages tooluse --method grpo,sdpo,stable_sdpo --alpha 0,0.005,0.01,0.02,0.05",
    "cot-math": "--model tiny_think --stages math --benchmarks math --method sdpo_0,sdpo_cot_0,sdpo_5 "
                "--max-new-tokens 96 --curve-every 0",                                   # CoT needs <think>
    "cot-science": "--model tiny_think --stages science --benchmarks science --method sdpo_0,sdpo_cot_0,sdpo_5 "
                   "--max-new-tokens 96 --curve-every 0",
    "cot-tooluse": "--model tiny_think --stages tooluse --benchmarks tooluse --method sdpo_0,sdpo_cot_0,sdpo_5 "
                   "--max-new-tokens 96 --curve-every 0",
}
# The equal-rate arm (declared in docs/studies/equal-footing.md before any of its runs): the
# configurations the reference lacks at one shared learning rate. At 1e-4 (GRPO's own) the reference has GRPO, so
# the arm adds SDPO; at 4e-4 (SDPO's own) it has SDPO, so the arm adds GRPO. Paired by seed with the reference.
SHARED_RATES = {"1e-4": 1e-4, "4e-4": 4e-4}
EQUAL_RATE = {
    "lr1e-4-continual": "--method sdpo_0,sdpo_5 --lr 1e-4",
    "lr4e-4-continual": "--method grpo --lr 4e-4",
    "lr1e-4-math": "--stages math --method sdpo --alpha 0 --lr 1e-4",
    "lr4e-4-math": "--stages math --method grpo --lr 4e-4",
    "lr1e-4-tooluse": "--stages tooluse --method sdpo --alpha 0 --lr 1e-4",
    "lr4e-4-tooluse": "--stages tooluse --method grpo --lr 4e-4",
}
REFERENCE_SEEDS = range(10, 30)    # the arm's single-domain and continual claims, paired with the reference
EXTRA_SEEDS = range(30, 42)        # the continual claims only (H2's relative F needs 32 seeds): the reference's
                                   # continual experiment runs on them too, into the arm's directory


# Forgetting at matched gain (declared in docs/studies/frontier.md before its first
# run): each method at five learning rates. The committed cells at 1e-4 and 4e-4 (seeds 10–41) are the frontier's
# points there; the new rates run on seeds 10–19. The committed runs kept no checkpoints, so the forward KL of the
# law needs the four committed cells rerun on seeds 10–19 (`kl-…`, used by the KL law only).
FRONTIER_RATES = {"GRPO": (2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4), "SDPO": (5e-5, 1e-4, 2e-4, 4e-4, 8e-4)}
# The single-version re-reading (declared in docs/studies/frontier.md before its new cell ran): every cell from the
# code of the frontier's declaration, f2d367e — the new rates, the `kl-` reruns in place of the committed cells at
# 1e-4 and 4e-4, and GRPO at 1.25e-5 (run at that commit from a worktree pinned to it).
FRONTIER_CODE = "f2d367e1cc1bcfb45ff8ffd639469e7b0c34987f"
SINGLE_VERSION_RATES = {"GRPO": (1.25e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4), "SDPO": (5e-5, 1e-4, 2e-4, 4e-4, 8e-4)}
FRONTIER_SEEDS = range(10, 20)
FRONTIER = {
    "fr-grpo-1.25e-5": "--method grpo --lr 1.25e-5",   # the single-version re-reading's new cell
    "fr-grpo-2.5e-5": "--method grpo --lr 2.5e-5",
    "fr-grpo-5e-5": "--method grpo --lr 5e-5",
    "fr-grpo-2e-4": "--method grpo --lr 2e-4",
    "fr-sdpo-5e-5": "--method sdpo_0,sdpo_5 --lr 5e-5",
    "fr-sdpo-2e-4": "--method sdpo_0,sdpo_5 --lr 2e-4",
    "fr-sdpo-8e-4": "--method sdpo_0,sdpo_5 --lr 8e-4",
    "kl-grpo-1e-4": "--method grpo --lr 1e-4",
    "kl-grpo-4e-4": "--method grpo --lr 4e-4",
    "kl-sdpo-1e-4": "--method sdpo_0,sdpo_5 --lr 1e-4",
    "kl-sdpo-4e-4": "--method sdpo_0,sdpo_5 --lr 4e-4",
}


def equal_rate_experiments(seed):
    """{experiment: flags} of the equal-rate arm for one seed: all six on a reference seed; on an extra seed the
    two continual ones and the reference's own continual experiment (the cells they pair with)."""
    if seed in REFERENCE_SEEDS:
        return EQUAL_RATE
    return {"continual": EXPERIMENTS["continual"],
            **{e: f for e, f in EQUAL_RATE.items() if e.endswith("-continual")}}
DISTANCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "reference",
                         "distances.json")   # probes.benchmark_distances of the base, fixed before the runs


def find(res, role):
    """The run entry of one experiment's results.json that plays `role`, or None."""
    if res is None:
        return None
    return next((run for run in res["runs"].values() if reference_role(run) == role), None)


def acc_of(res, run, stage, bench):
    return run["acc"][stage][res["benchmarks"].index(bench)]


def own_after(res, role, k=1):
    """Accuracy on stage k's own domain right after stage k."""
    run = find(res, role)
    return None if run is None else acc_of(res, run, k, res["stages"][k - 1])


def final_deltas(res, role, skip=()):
    """{benchmark: Δ (A2) of the final model vs the base}, leaving out `skip`."""
    run = find(res, role)
    return None if run is None else {b: run["acc"][-1][i] - run["acc"][0][i] for i, b in enumerate(res["benchmarks"])
                                     if b not in skip}


def final_delta(res, role, how):
    """The mean ("mean") or the smallest ("min") Δ over all benchmarks of the final model vs the base."""
    d = final_deltas(res, role)
    if d is None:
        return None
    return sum(d.values()) / len(d) if how == "mean" else min(d.values())


def final_degenerate(res, role):
    """The share of degenerate responses (A8) after the last stage."""
    run = find(res, role)
    return None if run is None else run["degenerate"][-1]


def mean_final_acc(res, role):
    run = find(res, role)
    return None if run is None else sum(run["acc"][-1]) / len(run["acc"][-1])


def late_rise(res, role, key):
    """A per-step curve's late rise in a one-stage run: mean over steps 31–40 − mean over steps 11–20."""
    run = find(res, role)
    steps = None if run is None else (run.get(key) or [None])[0]
    if not steps or len(steps) < 40 or any(v is None for v in steps):
        return None
    return sum(steps[30:40]) / 10 - sum(steps[10:20]) / 10


def js_collapse_ratio(res, role):
    """(§5) In the stage after which `role` has its largest degenerate share (stages 2…K): its mean JS over
    steps 6–10, as a fraction of the mean JS over the stage before it."""
    run = find(res, role)
    if run is None or len(run["degenerate"]) < 2 or not all(run.get("js_steps") or [None]):
        return None
    c = max(range(1, len(run["degenerate"])), key=lambda k: run["degenerate"][k])   # 0-based stage index
    before, early = run["js_steps"][c - 1], run["js_steps"][c][5:10]
    return (sum(early) / len(early)) / max(1e-12, sum(before) / len(before))


def distance_contrast(res, role, distances):
    """(§4, Table D.4) For one single-domain run: the other benchmarks ranked by their distance to the
    source (probes.benchmark_distances of the base): the 2 nearest, the 2 farthest, the rest intermediate.
    Returns mean Δ(intermediate) − (mean Δ(near) + mean Δ(far)) / 2; negative when forgetting is strongest
    in between."""
    source = None if res is None else res["stages"][0]
    d = None if res is None else final_deltas(res, role, skip=(source,))
    if d is None:
        return None
    ranked = sorted(d, key=lambda b: distances[source][b])
    near, mid, far = ranked[:2], ranked[2:-2], ranked[-2:]
    m = lambda names: sum(d[b] for b in names) / len(names)
    return m(mid) - (m(near) + m(far)) / 2


def diff(f, a, b):
    """f(a) − f(b), or None when either is missing."""
    x, y = f(a), f(b)
    return None if x is None or y is None else x - y


def mean2(x, y):
    return None if x is None or y is None else (x + y) / 2


def minus(x, ref):
    return None if x is None else x - ref


def principal_angle(res, role):
    run = find(res, role)
    return None if run is None or not (run.get("drift") or [None])[-1] else final_drift("angle")(run, None, None)


def mask_overlap(res, role):
    run = find(res, role)
    return None if run is None or not (run.get("drift") or [None])[-1] else final_drift("iou")(run, None, None)


def forget(res, role, which, points=False):
    run = find(res, role)
    if run is None:
        return None
    return forget_points(which)(run, res["stages"], res["benchmarks"]) if points else \
        run["avg_forget_" + which]


def generalisation(res, role):
    """Mean Δ of the final model over the benchmarks other than the single-domain run's source."""
    d = None if res is None else final_deltas(res, role, skip=(res["stages"][0],))
    return None if d is None else sum(d.values()) / len(d)


# (id, the claim, where the paper states it, what the paper reports, its unit, its scale for printing,
#  +1 if the paper has d > 0, −1 if d < 0, d of one seed from {experiment: results.json}). An id's letter is never an
# equation tag's (EQUATIONS.md): H the continual claims (§4–5), L §3.1's teacher rate, D CoT, X one domain's
# transfer.
DECLARED = [
    ("H1", "SDPO_0 specialises faster than GRPO: its own domain's accuracy right after stages 1 and 2 "
     "(MATH, SCIENCE), mean of the two", "§4", "+10.5 points (MATH 56.42 vs 44.67, SCIENCE 65.70 vs 56.39)",
     "points", 100, +1,
     lambda x: mean2(diff(lambda r: own_after(x.get("continual"), r, 1), "SDPO_0", "GRPO"),
                     diff(lambda r: own_after(x.get("continual"), r, 2), "SDPO_0", "GRPO"))),
    ("H2", "SDPO_5% forgets more than GRPO: F on the earlier domains after the last stage (A3)", "§4, Table D.6",
     "SDPO collapses in the third stage; GRPO preserves", "F %", 100, +1,
     lambda x: diff(lambda r: forget(x.get("continual"), r, "earlier"), "SDPO_5%", "GRPO")),
    ("H3", "SDPO_0 forgets more than GRPO: F on the earlier domains after the last stage (A3)", "§4",
     "SDPO_0 falls to 34.38% on MATH and 9.93% on TOOLUSE", "F %", 100, +1,
     lambda x: diff(lambda r: forget(x.get("continual"), r, "earlier"), "SDPO_0", "GRPO")),
    ("H4", "SDPO_5% forgets more than GRPO on the OOD benchmarks: F after the last stage (A3)", "§4",
     "SDPO_0 falls below the base on LOGIC and KNOWLEDGE", "F %", 100, +1,
     lambda x: diff(lambda r: forget(x.get("continual"), r, "ood"), "SDPO_5%", "GRPO")),
    ("H5a", "GRPO retains and improves over the base: mean Δ over all benchmarks after the last stage", "§4",
     "improves over the base across evaluated categories", "points", 100, +1,
     lambda x: final_delta(x.get("continual"), "GRPO", "mean")),
    ("H5b", "GRPO improves over the base on every benchmark: the smallest Δ after the last stage", "§4",
     "improves over the base across evaluated categories", "points", 100, +1,
     lambda x: final_delta(x.get("continual"), "GRPO", "min")),
    ("H6a", "Drift ordering, first link: SDPO-CoT_0 rotates the subspace more than SDPO_5% (A5, largest "
     "principal angle vs the base; thinking model, single-domain MATH)", "§5", "SDPO-CoT_0 shows the largest "
     "subspace change", "degrees", 1, +1,
     lambda x: diff(lambda r: principal_angle(x.get("cot-math"), r), "SDPO-CoT_0", "SDPO_5%")),
    ("H6b", "Drift ordering: SDPO_5% rotates the subspace more than SDPO_0 (A5, after the last stage)", "§5",
     "SDPO-CoT_0 > SDPO_5% > SDPO_0 > GRPO", "degrees", 1, +1,
     lambda x: diff(lambda r: principal_angle(x.get("continual"), r), "SDPO_5%", "SDPO_0")),
    ("H6c", "Drift ordering: SDPO_0 rotates the subspace more than GRPO (A5, after the last stage)", "§5",
     "SDPO-CoT_0 > SDPO_5% > SDPO_0 > GRPO", "degrees", 1, +1,
     lambda x: diff(lambda r: principal_angle(x.get("continual"), r), "SDPO_0", "GRPO")),
    ("H7", "GRPO's principal-mask overlap with the base stays near 99.9%: IoU (A6) after the last stage, less 0.99",
     "§5", "99.9%", "IoU", 1, +1,
     lambda x: minus(mask_overlap(x.get("continual"), "GRPO"), 0.99)),
    ("H8a", "SDPO_5% collapses: share of degenerate responses (one pattern repeated, A8) after the last stage, "
     "against GRPO's", "§5", "SDPO_5% repeats \\boxed endlessly", "% degenerate", 100, +1,
     lambda x: diff(lambda r: final_degenerate(x.get("continual"), r), "SDPO_5%", "GRPO")),
    ("H8b", "The collapse's JS falls to 0 within the first steps: SDPO_5%'s mean JS over steps 6–10 of its "
     "collapse stage, as a fraction of the stage before, less 0.1", "§5", "JS reaches zero within the first few "
     "steps", "ratio", 1, -1,
     lambda x: minus(js_collapse_ratio(x.get("continual"), "SDPO_5%"), 0.1)),
    ("L1", "No single EMA rate is best: [MATH(α=1%) − MATH(α=0)] − [TOOLUSE(α=1%) − TOOLUSE(α=0)], own "
     "domain after single-domain training", "§3.1, Table D.1", "α = 1% best on MATH; the frozen teacher leads TOOLUSE",
     "points", 100, +1,
     lambda x: diff(lambda e: diff(lambda r: own_after(x.get(e), r), "SDPO_1%", "SDPO_0"), "math", "tooluse")),
    ("L2", "α = 5% is the worst rate on MATH: MATH(α=5%) − the lowest of MATH(α) over α ∈ {0, 0.5, 1, 2}%",
     "§3.1, Table D.1", "α = 5% is worst", "points", 100, -1,
     lambda x: (lambda v: None if None in v else v[-1] - min(v[:-1]))(
         [own_after(x.get("math"), ALPHAS[a]) for a in sorted(ALPHAS)])),
    ("L3a", "Fast EMA teachers' JS rises late: late rise (steps 31–40 − steps 11–20) of the JS at α = 5% − at "
     "α = 0, single-domain MATH", "§3.1", "late-stage JS increases for α = 2% and 5%", "nats", 1, +1,
     lambda x: diff(lambda r: late_rise(x.get("math"), r, "js_steps"), "SDPO_5%", "SDPO_0")),
    ("L3b", "Fast EMA teachers' entropy rises late: the same for the student's entropy", "§3.1",
     "late-stage entropy increases for α = 2% and 5%", "nats", 1, +1,
     lambda x: diff(lambda r: late_rise(x.get("math"), r, "entropy_steps"), "SDPO_5%", "SDPO_0")),
    ("L4", "StableSDPO repairs α = 5%: mean accuracy over all benchmarks after single-domain MATH", "§3.1",
     "+6.5 points (average 65.34% → 71.84%)", "points", 100, +1,
     lambda x: diff(lambda r: mean_final_acc(x.get("math"), r), "StableSDPO", "SDPO_5%")),
    ("L5", "StableSDPO repairs α = 5%, second domain: the same after single-domain TOOLUSE", "§3.1 (its MATH "
     "result, on TOOLUSE)", "(MATH only in the paper)", "points", 100, +1,
     lambda x: diff(lambda r: mean_final_acc(x.get("tooluse"), r), "StableSDPO", "SDPO_5%")),
    ("D1", "CoT hurts MATH: SDPO-CoT_0 − SDPO_0, MATH after single-domain MATH (thinking model)", "§3.2, Table D.2",
     "CoT impairs MATH", "points", 100, -1,
     lambda x: diff(lambda r: own_after(x.get("cot-math"), r), "SDPO-CoT_0", "SDPO_0")),
    ("D2", "CoT hurts SCIENCE: the same on SCIENCE", "§3.2, Table D.2", "CoT impairs SCIENCE", "points", 100, -1,
     lambda x: diff(lambda r: own_after(x.get("cot-science"), r), "SDPO-CoT_0", "SDPO_0")),
    ("D3", "CoT helps TOOLUSE: the same on TOOLUSE", "§3.2, Table D.2", "CoT enhances TOOLUSE", "points", 100, +1,
     lambda x: diff(lambda r: own_after(x.get("cot-tooluse"), r), "SDPO-CoT_0", "SDPO_0")),
    ("X1", "GRPO generalises better than SDPO from one domain: mean Δ on the benchmarks other than the source, "
     "GRPO − SDPO_0, mean over the sources MATH and TOOLUSE", "§4, Table D.3", "GRPO outperforms SDPO at "
     "generalization", "points", 100, +1,
     lambda x: mean2(diff(lambda r: generalisation(x.get("math"), r), "GRPO", "SDPO_0"),
                     diff(lambda r: generalisation(x.get("tooluse"), r), "GRPO", "SDPO_0"))),
    ("X2", "Forgetting is strongest at an intermediate distance: SDPO_0's Δ(intermediate) − mean of Δ(near) and "
     "Δ(far), benchmarks ranked by distance to the source, mean over MATH and TOOLUSE", "§4, Table D.4",
     "intermediate-distance targets forget most; source-like and far ones are stable or improve", "points", 100, -1,
     lambda x: mean2(distance_contrast(x.get("math"), "SDPO_0", x.get("distances")),
                     distance_contrast(x.get("tooluse"), "SDPO_0", x.get("distances")))),
]


# ----------------------------------------------------------------------------------------------
# What keeps SDPO from forgetting (docs/studies/defences.md): exploratory, declared before its runs, on seeds of its own
# ----------------------------------------------------------------------------------------------
# Each defence is SDPO_5%'s continual run with one lever of another implementation added; the control is
# SDPO_5% itself, on the same seeds (same prompts, same test prompts): d = defence − control per seed.
# The two coefficients, fixed before any run of the family by a rule that looks only at the undefended
# SDPO_5% headline run (seed 0, stage 1; docs/HISTORY.md, "What keeps SDPO from forgetting: declared"):
#   anchor λ = ‖∇L‖ at the stage's first step / ‖θ_1 − θ_0‖ = 0.0775 / 3.04  -> 0.026 (two figures)
#   base_kl β = GJSD per token at the first step / k3 per token of θ_1 vs θ_0 = 0.0317 / 0.174 -> 0.18
DEFENCE_COEF = {"anchor": 0.026, "base_kl": 0.18}
DEFENCES = {   # experiment: (what it adds, its continual.py flags beyond the control's)
    "def-control": ("SDPO_5% (the control)", ""),
    "def-replay": ("replay 20% of earlier prompts (R1; the nanochat fork's share)", "--replay 0.2"),
    "def-anchor": ("L2 anchoring to θ_0 (R2)", "--anchor {anchor}"),
    "def-basekl": ("KL-to-base penalty (R3, RL's Razor)", "--base-kl {base_kl}"),
    "def-live": ("live teacher (T4, TRL)", "--teacher live"),
    "def-base": ("base teacher θ_0 (T5, TRL)", "--teacher base"),
    "def-trust": ("trust-region teacher, λ = 5% (T6, the official SDPO)", "--teacher trust_region"),
}
DEFENCE_CONTROL_FLAGS = "--method sdpo_5"


# A follow-up, declared after the family's table showed replay *raising* SDPO_5%'s forgetting and before its own
# runs (docs/HISTORY.md, "Why replay does not defend SDPO_5%"): the same replay under the base teacher θ_0
# (T5), against the base teacher alone. If replay's harm comes from the self-teacher (the replayed prompts
# distilled toward the stage's drifted starting student), it goes away under a teacher that never drifts.
FOLLOW_UP = {"def-base-replay": ("replay 20% with the base teacher θ_0 (R1 with T5)", "--teacher base --replay 0.2")}


def defence_flags(exp):
    """The continual.py flags of one experiment of the defences' family (or of its follow-up)."""
    return (DEFENCE_CONTROL_FLAGS + " " + {**DEFENCES, **FOLLOW_UP}[exp][1].format(**DEFENCE_COEF)).strip()


def defence_metric(x, exp, metric):
    """A metric of the one SDPO run of experiment `exp` in a seed's bundle, or None."""
    res = x.get(exp)
    if res is None:
        return None
    (run,) = res["runs"].values()
    return METRICS[metric][0](run, res["stages"], res["benchmarks"])


def defence_diff(exp, metric):
    return lambda x: diff(lambda e: defence_metric(x, e, metric), exp, "def-control")


EXPLORATORY = [(f"E-{exp[4:]}", f"{label} reduces SDPO_5%'s forgetting of the earlier domains: F (A3) after "
                f"stage 4, defence − SDPO_5%", "docs/studies/defences.md (exploratory)", "—", "F %", 100, -1,
                defence_diff(exp, "forget_earlier"))
               for exp, (label, _) in DEFENCES.items() if exp != "def-control"]
# Reported beside each, with intervals and no verdict: what the defence costs or changes
DEFENCE_REPORT = [("forget_earlier_points", "F earlier, points"), ("gain", "G %"), ("gain_points", "G, points"),
                  ("nss", "NSS (A4)"), ("angle", "angle (A5)"), ("iou", "IoU (A6)"), ("cos", "response cos (A7)"),
                  ("kl", "KL to base"), ("collapse_last", "degenerate after stage 4")]


# The F claims in absolute accuracy points beside the paper's relative F (reported, never a verdict)
IN_POINTS = {
    "H2": lambda x: diff(lambda r: forget(x.get("continual"), r, "earlier", points=True), "SDPO_5%", "GRPO"),
    "H3": lambda x: diff(lambda r: forget(x.get("continual"), r, "earlier", points=True), "SDPO_0", "GRPO"),
    "H4": lambda x: diff(lambda r: forget(x.get("continual"), r, "ood", points=True), "SDPO_5%", "GRPO"),
}


def measure_declared(bundles, claims=None):
    """Every declared claim over the seeds' bundles ({experiment: results.json, "distances": …} per seed).
    Returns [{id, claim, where, paper, unit, scale, sign, per_seed, effect, low, high, p, verdict, corrected}]."""
    out = []
    for cid, text, where, paper, unit, scale, sign, d_of in claims or DECLARED:
        d = [d_of(x) for x in bundles]
        d = [v for v in d if v is not None]
        row = {"id": cid, "claim": text, "where": where, "paper": paper, "unit": unit, "scale": scale, "sign": sign,
               "per_seed": d, "n": len(d)}
        if not d:
            row.update(effect=None, low=None, high=None, p=None, verdict="not run")
        else:
            effect, low, high = mean_interval(d)
            row.update(effect=effect, low=low, high=high, p=p_value(d), verdict=verdict(low, high, sign))
        points = [v for v in (IN_POINTS[cid](x) for x in bundles) if v is not None] if cid in IN_POINTS else []
        if points:   # the same difference in accuracy points (A3 with Δ for δ)
            row["points"] = mean_interval(points)
        out.append(row)
    rejected = holm([r["p"] for r in out])
    for r, rej in zip(out, rejected):
        r["corrected"] = "not run" if r["verdict"] == "not run" else (
            ("shown" if r["sign"] * r["effect"] > 0 else "opposite") if rej else
            ("not separable (one seed)" if r["n"] < 2 else "not separable"))
    return out


def declared_table(rows):
    """paper | here | raw verdict | corrected verdict, one line per declared claim."""
    lines = ["| id | claim | paper (where) | here: effect [95% interval] | in accuracy points | seeds | raw verdict "
             "| Holm-corrected |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        here = "—" if r["effect"] is None else fmt(r["effect"], r["scale"]) + f" {r['unit']}" + (
            "" if r["low"] is None else f" [{fmt(r['low'], r['scale'])}, {fmt(r['high'], r['scale'])}]")
        m, lo, hi = r.get("points", (None, None, None))
        points = "—" if m is None else fmt(m, 100) + ("" if lo is None else f" [{fmt(lo, 100)}, {fmt(hi, 100)}]")
        lines.append(f"| {r['id']} | {r['claim']} | {r['paper']} ({r['where']}) | {here} | {points} | {r['n']} | "
                     f"**{r['verdict']}** | {r['corrected']} |")
    return "\n".join(lines)


def defence_table(bundles):
    """Per defence: each reported metric's mean difference to the control [95% interval] over the seeds."""
    head = " | ".join(label for _, label in DEFENCE_REPORT)
    lines = [f"| defence | seeds | {head} |", "|---|---|" + "---|" * len(DEFENCE_REPORT)]
    for exp, (label, _) in DEFENCES.items():
        if exp == "def-control":
            continue
        cells, n = [], 0
        for metric, _ in DEFENCE_REPORT:
            d = [v for v in (defence_diff(exp, metric)(x) for x in bundles) if v is not None]
            n = max(n, len(d))
            cells.append(interval_cell(d, METRICS[metric][2]))
        lines.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def interval_cell(values, scale, signed=True):
    """"mean [low, high]" of per-seed values (the mean alone with one seed, "—" with none), printed at `scale`."""
    if not values:
        return "—"
    m, lo, hi = mean_interval(values)
    return fmt(m, scale, signed) + ("" if lo is None else f" [{fmt(lo, scale, signed)}, {fmt(hi, scale, signed)}]")


DEFENCE_LEVELS = [("forget_earlier", "F earlier %"), ("forget_earlier_points", "F earlier, points"), ("gain", "G %"),
                  ("collapse_last", "degenerate after stage 4")]


def defence_levels(bundles):
    """Each experiment's own level (not a difference), mean [95% interval] over the seeds: what the differences of
    defence_table start from."""
    lines = ["| experiment | seeds | " + " | ".join(label for _, label in DEFENCE_LEVELS) + " |",
             "|---|---|" + "---|" * len(DEFENCE_LEVELS)]
    for exp in {**DEFENCES, **FOLLOW_UP}:
        cells, n = [], 0
        for metric, _ in DEFENCE_LEVELS:
            v = [m for m in (defence_metric(x, exp, metric) for x in bundles) if m is not None]
            n = max(n, len(v))
            cells.append(interval_cell(v, 100, signed=False))
        if n:
            lines.append(f"| `{exp}` | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replay_effect(x, teacher_exp, replay_exp, metric="forget_earlier"):
    """Replay's effect on a metric under one teacher, in one seed's bundle: metric(replay_exp) − metric(teacher_exp)."""
    return diff(lambda e: defence_metric(x, e, metric), replay_exp, teacher_exp)


def follow_up_rows(bundles):
    """The replay follow-up's three rows over the seeds with all four runs: replay's effect on F earlier (A3,
    relative) under the EMA teacher, under the base teacher, and the second less the first, per seed. Returns
    [(label, per-seed values, mean, low, high)] and the declared verdict (docs/RESULTS.md): "the self-teacher's"
    when the difference's interval is below 0 and replay under the base teacher is not separable above 0;
    "replay's own" when replay under the base teacher is separable above 0; else "not decided"."""
    full = [x for x in bundles if all(e in x for e in ("def-control", "def-replay", "def-base", "def-base-replay"))]
    ema = [replay_effect(x, "def-control", "def-replay") for x in full]
    base = [replay_effect(x, "def-base", "def-base-replay") for x in full]
    rows = [(label, d, *(mean_interval(d) if d else (None, None, None)))
            for label, d in [("replay under the EMA teacher: def-replay − def-control", ema),
                             ("replay under the base teacher: def-base-replay − def-base", base),
                             ("the difference: base teacher's − EMA teacher's", [b - a for a, b in zip(ema, base)])]]
    if len(full) < 2:
        return rows, "not decided"
    base_low, dd_high = rows[1][3], rows[2][4]
    if base_low > 0:
        return rows, "replay's own"
    return rows, "the self-teacher's" if dd_high < 0 else "not decided"


def follow_up_table(bundles):
    rows, decided = follow_up_rows(bundles)
    lines = ["| replay's effect on F earlier (A3, relative %) | seeds | per seed | mean [95% interval] |", "|---|---|---|---|"]
    for label, d, *_ in rows:
        lines.append(f"| {label} | {len(d)} | {', '.join(fmt(v, 100) for v in d) or '—'} | {interval_cell(d, 100)} |")
    return "\n".join(lines) + f"\n\nThe declared verdict: replay's harm is **{decided}**."


def stages_of(flags):
    """The stages a continual.py flag string trains (its --stages, else the default four)."""
    words = flags.split()
    return words[words.index("--stages") + 1].split(",") if "--stages" in words else \
        ["math", "science", "tooluse", "coding"]


def checked_results(path, exp, seed, flags):
    """An experiment's results.json, trusted only when it is what its directory says: a readable file, a
    continual.py results dict of that seed, trained on the experiment's stages. Else ValueError naming the file
    (as its user knows it: a file of a family's cached view by the family's folder, archive.shown)."""
    try:
        return checked_results_at(path, exp, seed, flags)
    except ValueError as e:
        raise ValueError(str(e).replace(path, archive.shown(path))) from None


def checked_results_at(path, exp, seed, flags):
    """checked_results's checks, naming `path` as it is given."""
    if not os.path.isfile(path):
        raise ValueError(f"{path} is not a file")
    if result_changed(path):
        raise ValueError(f"{path} is not what its run wrote (its checksum, {os.path.basename(path)}.sha256, differs)")
    res = read_results(path)   # (a regular file, valid JSON, every accuracy a number in [0, 1])
    if res.get("seed") != seed:
        raise ValueError(f"{path} holds seed {res.get('seed')}'s results, not seed {seed}'s (its directory's name)")
    if res.get("stages") != stages_of(flags):
        raise ValueError(f"{path} was trained on {res.get('stages')}, not on {exp}'s stages {stages_of(flags)}")
    return res


def experiment_flags(exp):
    """The continual.py flags of any experiment a reference folder may hold."""
    if exp in EXPERIMENTS:
        return EXPERIMENTS[exp]
    if exp in EQUAL_RATE:
        return EQUAL_RATE[exp]
    if exp in FRONTIER:
        return FRONTIER[exp]
    return defence_flags(exp)


def read_reference(root):
    """{seed: {experiment: results.json}} of a reference directory (<experiment>-s<seed>/results.json), each
    seed's bundle with the distances (DISTANCES) beside it. Every results.json is checked (checked_results). A
    committed family is read from its archive (analysis/archive.py), each file against its saved checksum."""
    root = archive.materialized(root)
    found = {}
    for name in sorted(os.listdir(root)):
        exp, _, seed = name.rpartition("-s")
        f = os.path.join(root, name, "results.json")
        if (exp in EXPERIMENTS or exp in DEFENCES or exp in FOLLOW_UP) and seed.isdigit() and os.path.lexists(f):
            found.setdefault(int(seed), {})[exp] = checked_results(f, exp, int(seed), experiment_flags(exp))
    distances = json.load(open(distances_path(root)))
    return {s: {**x, "distances": distances} for s, x in sorted(found.items())}


def distances_path(root):
    """X2's distances: the folder's own distances.json, else the committed one (fixed before the reference)."""
    own = os.path.join(root, "distances.json")
    return own if os.path.isfile(own) else DISTANCES


def read_seed_results(paths):
    """The per-seed results.json dicts behind `paths`: seed directories (…-s0, …-s1) or a summary directory
    of continual.py --seed 0,1,2 (its results.json lists the seed directories)."""
    found = []
    for path in paths:
        f = os.path.join(path, "results.json")
        if not os.path.isfile(f):
            raise ValueError(f"{path}: no results.json (give run directories written by continual.py)")
        res = read_results(f)   # (a regular file, valid JSON, every accuracy a number in [0, 1])
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
                                 usage="python analysis/claims.py RUN_DIR [RUN_DIR ...]  (seed directories, or a summary "
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
    run_command(main)
