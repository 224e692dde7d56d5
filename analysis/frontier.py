"""analysis/frontier.py — forgetting at matched new-task gain, along each method's learning-rate frontier, and
the KL-forgetting law (declared in docs/studies/frontier.md before its first run).

    python tools/reference.py --family frontier --seeds 10,11 --jobs 2 --into-results   # the cells, seed by seed
    python tools/reference.py --family frontier --summary                              # the tables below

A shared learning rate does not hold the update equal (GRPO takes 4 optimizer steps per batch, SDPO 1), and a
matched step does not hold the *gain* equal. The field (RL's Razor, arXiv 2509.04259; Retaining by Doing, arXiv
2510.18874) and the paper's Appendix B compare forgetting among policies matched in new-task success. So each
method runs at five rates, from barely learning to unstable; at each stage k its cells are points (mean gain on
stage k's own domain, mean forgetting after stage k), its *frontier* the rates in increasing order up to the one
with the largest mean gain (a larger rate that learns less and forgets more is dominated), joined piecewise-
linearly. Two methods are compared where both frontiers reach the same gain:

    d(g) = y_SDPO(g) − y_GRPO(g),  g = the midpoint of the gains both frontiers reach (fixed from the means),

with a 95% interval from a bootstrap over seeds (each cell's seeds resampled, 2,000 draws), a two-sided p from
the same draws, and Holm over the declared family. Gains that one frontier does not reach: "not comparable".

The KL law (RL's Razor's): forgetting = a + b · KL, with KL = E_{x~D_k}[KL(π_0 ‖ π_θ)] on stage k's own domain
(drift.forward_kl_new_task), fitted over every run that measured it (methods, rates, seeds) at each stage; R². Then
the paper's chain at matched gain: does SDPO reach a gain with more forward KL (the same d(g) on KL), and does that
KL account for its forgetting (SDPO's runs on GRPO's line: the mean residual of SDPO's runs from the line fitted to
GRPO's, with its bootstrap interval)?
"""
import json
import os
import random
import re

from analysis import archive, claims, significance

ROLES = ("GRPO", "SDPO_0", "SDPO_5%")
PAIRS = (("SDPO_0", "GRPO"), ("SDPO_5%", "GRPO"))
# the measures of forgetting after stage k, in accuracy points (F: relative, in % of the base's accuracy)
MEASURES = {"peak": "forgetting from the peak, earlier domains (points)",
            "F": "the paper's F, earlier domains (% of the base, floored at 0)",
            "ood": "drop on the OOD benchmarks from the base (points)"}
STAGES_OF = {"peak": (2, 3, 4), "F": (2, 3, 4), "ood": (1, 2, 3, 4), "fkl": (1, 2, 3, 4)}
BOOTSTRAP = 2000
OOD = ("math_hard", "science_boxed", "tool_unseen", "logic")


# ----------------------------------------------------------------------------------------------
# One run's points: its own-domain gain and its forgetting after each stage
# ----------------------------------------------------------------------------------------------
def run_points(res, run):
    """{"gain": [per stage k: Acc_k(d_k) − Acc_{k−1}(d_k), points], "peak", "F", "ood", "fkl": [per stage or None]}."""
    bench, stages, acc = res["benchmarks"], res["stages"], run["acc"]
    at = lambda k, b: 100 * acc[k][bench.index(b)]   # noqa: E731  (points)
    out = {key: [] for key in ("gain", "peak", "F", "ood", "fkl")}
    for k in range(1, len(stages) + 1):
        out["gain"].append(at(k, stages[k - 1]) - at(k - 1, stages[k - 1]))
        earlier = stages[:k - 1]
        # forgetting from the peak: max_{j ≤ l < k} Acc_l(d_j) − Acc_k(d_j), mean over the earlier domains d_j
        out["peak"].append(sum(max(at(l, d) for l in range(j, k)) - at(k, d) for j, d in enumerate(earlier, start=1))
                           / len(earlier) if earlier else None)
        # (A3) F = max(−δ, 0) with δ = (Acc_k − Acc_0) / Acc_0, mean over the earlier domains, in %
        rel = [max(at(0, d) - at(k, d), 0) / at(0, d) * 100 for d in earlier if at(0, d) > 0]
        out["F"].append(sum(rel) / len(rel) if rel else None)
        ood = [b for b in OOD if b in bench]
        out["ood"].append(sum(at(0, b) - at(k, b) for b in ood) / len(ood) if ood else None)
        drift = (run.get("drift") or [None] * len(stages))[k - 1] or {}
        out["fkl"].append((drift.get("forward_kl_new") or {}).get("kl"))
    return out


def cells_of(runs):
    """{(role, lr): {seed: run_points}} from [(seed, role, lr, points)]."""
    cells = {}
    for seed, role, lr, points in runs:
        cells.setdefault((role, lr), {})[seed] = points
    return cells


# ----------------------------------------------------------------------------------------------
# The frontier and the matched-gain difference
# ----------------------------------------------------------------------------------------------
def cell_means(cells, role, measure, k):
    """[(lr, mean gain at stage k, mean measure at stage k, seeds)] of one method, rates ascending."""
    out = []
    for (r, lr), per_seed in sorted(cells.items(), key=lambda c: c[0][1]):
        pts = [(p["gain"][k - 1], p[measure][k - 1]) for p in per_seed.values() if p[measure][k - 1] is not None]
        if r == role and pts:
            out.append((lr, sum(g for g, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts), len(pts)))
    return out


def frontier(points):
    """The rates in increasing order up to the one with the largest mean gain: [(gain, y)]."""
    if not points:
        return []
    top = max(range(len(points)), key=lambda i: points[i][1])
    return [(g, y) for _, g, y, _ in points[:top + 1]]


def fewest_seeds(points):
    """The fewest seeds of a cell on the frontier (a bootstrap over one seed has no spread to show)."""
    if not points:
        return 0
    top = max(range(len(points)), key=lambda i: points[i][1])
    return min(n for _, _, _, n in points[:top + 1])


def interpolate(front, g):
    """y at gain g along the frontier, piecewise-linear between consecutive rates (the first segment that holds g);
    None when g is outside the gains the frontier reaches."""
    if len(front) == 1:
        return front[0][1] if abs(front[0][0] - g) < 1e-12 else None
    for (g0, y0), (g1, y1) in zip(front, front[1:]):
        if min(g0, g1) <= g <= max(g0, g1):
            return y0 if g1 == g0 else y0 + (y1 - y0) * (g - g0) / (g1 - g0)
    return None


def common_range(front_a, front_b):
    """(lo, hi): the gains both frontiers reach, or None when their ranges do not overlap."""
    if not front_a or not front_b:
        return None
    lo = max(min(g for g, _ in front_a), min(g for g, _ in front_b))
    hi = min(max(g for g, _ in front_a), max(g for g, _ in front_b))
    return None if lo > hi else (lo, hi)


def common_gain(front_a, front_b):
    """The midpoint of the gains both frontiers reach, or None when their ranges do not overlap."""
    span = common_range(front_a, front_b)
    return None if span is None else (span[0] + span[1]) / 2


def resampled(cells, rng):
    """The cells with each one's seeds drawn with replacement (one bootstrap draw)."""
    out = {}
    for key, per_seed in cells.items():
        seeds = list(per_seed)
        out[key] = {i: per_seed[rng.choice(seeds)] for i in range(len(seeds))}
    return out


def matched_difference(cells, a, b, measure, k, draws=BOOTSTRAP, seed=0):
    """d = y_a(g) − y_b(g) at the common gain g of stage k: {g, d, low, high, p, draws, verdict} (verdict "not
    comparable" when the frontiers' gains do not overlap, or when more than 5% of the draws leave g outside one)."""
    ma, mb = cell_means(cells, a, measure, k), cell_means(cells, b, measure, k)
    fa, fb = frontier(ma), frontier(mb)
    g = common_gain(fa, fb)
    if g is not None and min(fewest_seeds(ma), fewest_seeds(mb)) < 2:
        return {"g": g, "d": interpolate(fa, g) - interpolate(fb, g), "low": None, "high": None, "p": None,
                "draws": 0, "verdict": "too few seeds", "range": (fa, fb)}
    if g is None:
        return {"g": None, "d": None, "low": None, "high": None, "p": None, "draws": 0, "verdict": "not comparable",
                "range": (fa, fb)}
    d = interpolate(fa, g) - interpolate(fb, g)
    rng, ds = random.Random(seed), []
    for _ in range(draws):
        c = resampled(cells, rng)
        ya = interpolate(frontier(cell_means(c, a, measure, k)), g)
        yb = interpolate(frontier(cell_means(c, b, measure, k)), g)
        if ya is not None and yb is not None:
            ds.append(ya - yb)
    if len(ds) < 0.95 * draws:
        return {"g": g, "d": d, "low": None, "high": None, "p": None, "draws": len(ds),
                "verdict": "not comparable", "range": (fa, fb)}
    low, high, p = bootstrap_interval(ds)
    return {"g": g, "d": d, "low": low, "high": high, "p": p, "draws": len(ds),
            "verdict": claims.verdict(low, high, +1), "range": (fa, fb)}


RANGE_POINTS = 5   # gains at which d(g) is read across the common range, its two ends included


def along_range(cells, a, b, measure, k, n=RANGE_POINTS, draws=BOOTSTRAP, seed=0):
    """d(g) = y_a(g) − y_b(g) at n gains evenly spaced across the common range [lo, hi] of stage k (ends included),
    each with its 95% bootstrap interval over seeds (the same draws for every g): [{g, d, low, high, kept}], empty
    when the frontiers share no gain. The declared verdict reads the midpoint; this shows how much the size depends
    on where in the range it is read. `kept` is the share of draws whose resampled frontiers both still reach g; an
    interval is given only where it is at least 95% (the declared rule's)."""
    fa, fb = frontier(cell_means(cells, a, measure, k)), frontier(cell_means(cells, b, measure, k))
    span = common_range(fa, fb)
    if span is None:
        return []
    lo, hi = span
    gains = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if hi > lo and n > 1 else [lo]
    rng, ds = random.Random(seed), [[] for _ in gains]
    for _ in range(draws):
        c = resampled(cells, rng)
        fa2, fb2 = frontier(cell_means(c, a, measure, k)), frontier(cell_means(c, b, measure, k))
        for i, g in enumerate(gains):
            ya, yb = interpolate(fa2, g), interpolate(fb2, g)
            if ya is not None and yb is not None:
                ds[i].append(ya - yb)
    out = []
    for g, d in zip(gains, ds):
        low, high, _ = bootstrap_interval(d) if len(d) >= 0.95 * draws else (None, None, None)
        out.append({"g": g, "d": interpolate(fa, g) - interpolate(fb, g), "low": low, "high": high,
                    "kept": len(d) / draws})
    return out


def range_table(cells, measure="peak", draws=BOOTSTRAP):
    """Each pair × stage: d(g) across the common range of gain, its ends and three points between, with intervals."""
    lines = [f"| stage | SDPO − GRPO | common gain, points | d(g) [95% bootstrap] at {RANGE_POINTS} gains across it, "
             "low to high |", "|---|---|---|---|"]
    for k in STAGES_OF[measure]:
        for a, b in PAIRS:
            rows = along_range(cells, a, b, measure, k, draws=draws)
            if not rows:
                lines.append(f"| {k} | {a} − {b} | none (not comparable) | — |")
                continue
            cells_text = "; ".join(f"{r['g']:.1f}: {r['d']:+.1f}" + (
                f" [{r['low']:+.1f}, {r['high']:+.1f}]" if r["low"] is not None else f" (kept {r['kept']:.0%})")
                for r in rows)
            lines.append(f"| {k} | {a} − {b} | {rows[0]['g']:.1f}–{rows[-1]['g']:.1f} | {cells_text} |")
    return "\n".join(lines)


def bootstrap_interval(draws):
    """(low, high, p) of bootstrap draws of a difference: the 2.5th and 97.5th percentiles, and the two-sided p
    2·min(P(d ≤ 0), P(d ≥ 0))."""
    ds = sorted(draws)
    low, high = ds[int(0.025 * len(ds))], ds[min(len(ds) - 1, int(0.975 * len(ds)))]
    return low, high, min(1.0, 2 * min(sum(x <= 0 for x in ds), sum(x >= 0 for x in ds)) / len(ds))


def family(cells, draws=BOOTSTRAP):
    """The declared family: each pair × each measure × its stages, with Holm's correction over all of it."""
    rows = [{"pair": (a, b), "measure": m, "stage": k, **matched_difference(cells, a, b, m, k, draws)}
            for m in MEASURES for k in STAGES_OF[m] for a, b in PAIRS]
    return with_holm(rows)


def with_holm(rows):
    for r, rejected in zip(rows, significance.holm([r["p"] for r in rows])):
        r["corrected"] = r["verdict"] if r["verdict"] in ("not comparable", "too few seeds") else (
            ("shown" if r["d"] > 0 else "opposite") if rejected else "not separable")
    return rows


# ----------------------------------------------------------------------------------------------
# The KL-forgetting law
# ----------------------------------------------------------------------------------------------
def line_fit(xs, ys):
    """Least squares y = a + b x: (a, b, R²)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1 - res / ss) if ss else None


def law_points(cells, measure, k, roles=ROLES):
    """[(role, forward KL, forgetting)] of every run at stage k that measured the forward KL."""
    return [(r, p["fkl"][k - 1], p[measure][k - 1]) for (r, lr), per_seed in cells.items() if r in roles
            for p in per_seed.values() if p["fkl"][k - 1] is not None and p[measure][k - 1] is not None]


def kl_law(cells, measure, k, draws=BOOTSTRAP, seed=0):
    """The law at stage k: the line over every run (a, b, R², n), and for each SDPO configuration its mean residual
    from the line fitted to GRPO's runs alone, with a bootstrap interval (runs resampled within each method).
    Not declared, added once the interim figure showed SDPO's runs at forward KLs no GRPO run reaches (and their
    forgetting near its ceiling): GRPO's own line (a, b, R²) and each SDPO offset again over its runs inside GRPO's
    range of KL alone ("within"), where the line is not extrapolated, with how many runs lie beyond it."""
    every = law_points(cells, measure, k)
    if len(every) < 3:
        return None
    a, b, r2 = line_fit([x for _, x, _ in every], [y for _, _, y in every])
    grpo = [(x, y) for r, x, y in every if r == "GRPO"]
    out = {"a": a, "b": b, "r2": r2, "n": len(every), "offsets": {}, "within": {}}
    if len(grpo) < 3:
        return out
    out["grpo_line"] = line_fit(*zip(*grpo))
    rng, rng_within = random.Random(seed), random.Random(seed + 1)
    reach = max(x for x, _ in grpo)
    for role in ("SDPO_0", "SDPO_5%"):
        mine = [(x, y) for r, x, y in every if r == role]
        if len(mine) >= 2:
            out["offsets"][role] = offset_from_line(grpo, out["grpo_line"], mine, rng, draws)
        inside = [(x, y) for x, y in mine if x <= reach]
        if len(inside) >= 2:
            out["within"][role] = {**offset_from_line(grpo, out["grpo_line"], inside, rng_within, draws),
                                   "beyond": len(mine) - len(inside)}
    return out


def offset_from_line(grpo, line, mine, rng, draws):
    """The mean residual of the runs `mine` [(KL, forgetting)] from `line`, the (a, b, R²) fitted to GRPO's runs,
    with a bootstrap interval (both sets resampled, the line refitted each draw) and its verdict."""
    ga, gb, _ = line
    off = sum(y - ga - gb * x for x, y in mine) / len(mine)
    ds = []
    for _ in range(draws):
        g2 = [rng.choice(grpo) for _ in grpo]
        m2 = [rng.choice(mine) for _ in mine]
        ga2, gb2, _ = line_fit(*zip(*g2))
        ds.append(sum(y - ga2 - gb2 * x for x, y in m2) / len(m2))
    low, high, p = bootstrap_interval(ds)
    return {"d": off, "low": low, "high": high, "p": p, "n": len(mine),
            "verdict": "above GRPO's line" if low > 0 else "below GRPO's line" if high < 0 else "on GRPO's line"}


# ----------------------------------------------------------------------------------------------
# Reading the cells, and the report
# ----------------------------------------------------------------------------------------------
COMMITTED_CELLS = ("continual", "lr1e-4-continual", "lr4e-4-continual")


def code_of(run_dir):
    """The commit a run directory's config.json records ('code'), or None."""
    try:
        return json.load(open(os.path.join(run_dir, "config.json"))).get("code")
    except (OSError, ValueError, AttributeError):
        return None


def read_runs(roots):
    """[(seed, role, lr, experiment, run_points)] of every continual run of GRPO, SDPO_0 and SDPO_5% in the family
    folders (the reference's and the equal-rate arm's committed cells, the frontier's `fr-` and `kl-` ones); each
    run's points carry the commit that made it ("code")."""
    out = []
    for root in roots:
        root = archive.materialized(root)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            exp, _, seed = name.rpartition("-s")
            path = os.path.join(root, name, "results.json")
            if (exp in COMMITTED_CELLS or exp in claims.FRONTIER) and seed.isdigit() and os.path.lexists(path):
                res = claims.checked_results(path, exp, int(seed), claims.experiment_flags(exp))
                code = code_of(os.path.join(root, name))
                for run in res["runs"].values():
                    role = claims.reference_role(run)
                    if role in ROLES:
                        out.append((int(seed), role, run["settings"]["lr"], exp, {**run_points(res, run), "code": code}))
    return out


SINGLE_VERSION_NEW = ("fr-grpo-1.25e-5",)   # the re-reading's own cell: not part of the two-version reading


def frontier_cells(runs):
    """The two-version frontier's cells (the first reading, kept as history): the committed cells (seeds 10–41, older code)
    and the new rates (`fr-`); the `kl-` reruns were for the law alone."""
    return cells_of([(s, r, lr, p) for s, r, lr, exp, p in runs
                     if not exp.startswith("kl-") and exp not in SINGLE_VERSION_NEW])


def single_version_cells(runs):
    """The single-version re-reading's cells (docs/studies/frontier.md): every `fr-` and `kl-` experiment, all made by the frontier
    declaration's code (claims.FRONTIER_CODE); a run made by any other commit is refused (ValueError)."""
    mine = [(s, r, lr, exp, p) for s, r, lr, exp, p in runs if exp in claims.FRONTIER]
    other = sorted({f"{exp}-s{s}" for s, r, lr, exp, p in mine if p.get("code") != claims.FRONTIER_CODE})
    if other:
        raise ValueError(f"the single-version reading takes runs of commit {claims.FRONTIER_CODE[:7]} only; "
                         f"{len(other)} are of another: {', '.join(other[:4])}")
    return cells_of([(s, r, lr, p) for s, r, lr, exp, p in mine])


def law_cells(runs):
    """The law's runs: every run that measured the forward KL (the new rates and the `kl-` reruns)."""
    return cells_of([(s, r, lr, p) for s, r, lr, exp, p in runs if any(v is not None for v in p["fkl"])])


def rate_label(lr):
    """A learning rate as the tables and figures say it: 1.25e-5, 1e-4 (no rounding to 1.3e-5, no trailing zeros)."""
    return re.sub(r"\.?0+e", "e", f"{lr:.2e}").replace("e-0", "e-")


def frontier_table(cells, measure="peak"):
    """configuration × rate × stage → mean gain and mean `measure` with their 95% t-intervals, and the seeds."""
    lines = ["| configuration | lr | seeds | " + " | ".join(f"stage {k}: gain / {measure}" for k in (1, 2, 3, 4)) + " |",
             "|---|---|---|---|---|---|---|"]
    for role in ROLES:
        for (r, lr) in sorted(c for c in cells if c[0] == role):
            per = list(cells[(r, lr)].values())
            row = []
            for k in (1, 2, 3, 4):
                gain = claims.interval_cell([p["gain"][k - 1] / 100 for p in per], 100)
                ys = [p[measure][k - 1] / 100 for p in per if p[measure][k - 1] is not None]
                row.append(f"{gain} / {claims.interval_cell(ys, 100) if ys else '—'}")
            lines.append(f"| {role} | {rate_label(lr)} | {len(per)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def family_table(rows):
    lines = ["| measure | stage | SDPO − GRPO | matched gain, points | d at that gain [95% bootstrap] | raw / Holm |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda v: "—" if v is None else f"{v:+.1f}"   # noqa: E731
        interval = "" if r["low"] is None else f" [{f(r['low'])}, {f(r['high'])}]"
        lines.append(f"| {r['measure']} | {r['stage']} | {r['pair'][0]} − {r['pair'][1]} | "
                     f"{'—' if r['g'] is None else format(r['g'], '.1f')} | {f(r['d'])}{interval} | "
                     f"{r['verdict']} / {r['corrected']} |")
    return "\n".join(lines)


def law_table(cells, measure="peak"):
    """The declared law per stage, then (not declared) GRPO's own line and SDPO's offsets inside GRPO's range of KL."""
    laws = {k: kl_law(cells, measure, k) for k in STAGES_OF[measure]}
    fmt = lambda o: "{d:+.1f} [{low:+.1f}, {high:+.1f}] {verdict}".format(**o)   # noqa: E731
    lines = ["| stage | runs | forgetting = a + b · KL: a, b | R² | SDPO_0 − GRPO's line [95%] | SDPO_5% − GRPO's line [95%] |",
             "|---|---|---|---|---|---|"]
    for k, law in laws.items():
        if law is None:
            lines.append(f"| {k} | — | not enough runs with the forward KL | — | — | — |")
            continue
        off = lambda role: fmt(law["offsets"][role]) if role in law["offsets"] else "—"   # noqa: E731
        r2 = "—" if law["r2"] is None else f"{law['r2']:.2f}"
        lines.append(f"| {k} | {law['n']} | {law['a']:.2f}, {law['b']:.2f} | {r2} | {off('SDPO_0')} | "
                     f"{off('SDPO_5%')} |")
    lines += ["", "Not declared (added when the interim figure showed SDPO's runs at forward KLs no GRPO run reaches, "
              "where the line above is extrapolated): GRPO's own line, and each SDPO offset over its runs inside GRPO's "
              "range of KL alone.", "",
              "| stage | GRPO's line: a, b, R² | SDPO_0 − GRPO's line, within its range [95%] (runs beyond it) | "
              "SDPO_5% − GRPO's line, within its range [95%] (runs beyond it) |", "|---|---|---|---|"]
    for k, law in laws.items():
        if law is None or "grpo_line" not in law:
            continue
        ga, gb, gr2 = law["grpo_line"]
        within = lambda role: (f"{fmt(law['within'][role])} ({law['within'][role]['beyond']} of "   # noqa: E731
                               f"{law['offsets'][role]['n']} beyond)" if role in law["within"] else "—")
        lines.append(f"| {k} | {ga:.2f}, {gb:.2f}, {'—' if gr2 is None else f'{gr2:.2f}'} | {within('SDPO_0')} | "
                     f"{within('SDPO_5%')} |")
    return "\n".join(lines)


def summary_text(runs, draws=BOOTSTRAP):
    """The report: the single-version re-reading first, then the first, two-version reading as
    history. Each: the frontier's cells, the matched-gain family with Holm and its difference across the common
    range, the forward KL at matched gain, the KL law."""
    one = single_version_cells(runs)
    new = [len(per_seed) for (r, lr), per_seed in one.items() if len(per_seed) < len(claims.FRONTIER_SEEDS)]
    cell_count = sum(1 for c in one)
    declared = sum(len(v) for v in claims.SINGLE_VERSION_RATES.values()) + len(claims.SINGLE_VERSION_RATES["SDPO"])
    interim = ((f"**Interim**: {cell_count} of the {declared} cells are in" + (
        f", and some have {min(new)} of the {len(claims.FRONTIER_SEEDS)} seeds" if new else "")
        + "; no verdict of this reading is final.\n\n") if new or cell_count < declared else "")
    single, single_rows = section_text(one, one, draws, interim)
    history, _ = history_text(runs, draws)
    return ("# The single-version re-reading: every cell made by commit " + claims.FRONTIER_CODE[:7]
            + "\n\n" + single + "\n\n# History: the first, two-version reading (the committed cells at 1e-4 and "
            "4e-4 from older code, seeds 10–41)\n\n" + history), single_rows


def section_text(cells, law, draws, preface=""):
    """One reading's tables: (text, the family's rows)."""
    rows = family(cells, draws)
    kl_rows = with_holm([{"pair": (a, b), "measure": "fkl", "stage": k, **matched_difference(law, a, b, "fkl", k, draws)}
                         for k in STAGES_OF["fkl"] for a, b in PAIRS])
    return (preface + "## The frontier's cells (gain on the stage's own domain / forgetting from the peak, points)\n\n"
            + frontier_table(cells) + "\n\n## Forgetting at matched gain (the declared family, Holm over it)\n\n"
            + family_table(rows) + "\n\n## The same difference across the whole common range of gain (forgetting "
            "from the peak; the verdicts above read its midpoint)\n\n" + range_table(cells, draws=draws)
            + "\n\n## Forward KL at matched gain (nats; the runs that measured it)\n\n" + family_table(kl_rows)
            + "\n\n## The KL-forgetting law (forgetting from the peak on the forward KL)\n\n" + law_table(law)), rows


def history_text(runs, draws=BOOTSTRAP):
    """The first, two-version reading, as it was reported (its cells, family, law)."""
    return section_text(frontier_cells(runs), law_cells([x for x in runs if x[3] not in SINGLE_VERSION_NEW]), draws)
