"""analysis/mediation.py — where SDPO's extra forgetting lands: the declared tests of the mediation experiment
(declared in docs/studies/mediation.md before its first run).

    python tools/mediation.py --seeds 10,11 --jobs 2 --root runs/mediation   # the runs (tools/mediation.py)
    python tools/mediation.py --summary --root runs/mediation                # this file's tables

Every arm starts SCIENCE from its seed's θ_1 (one MATH stage of GRPO). Per run (tools/mediation.py's measures):
    gain    = Acc_θ(SCIENCE) − Acc_θ1(SCIENCE)              on SCIENCE's first 160 test prompts, points
    drop    = Acc_θ1(MATH) − Acc_θ(MATH)                     on MATH's 288 fresh test prompts (33rd to 320th), points
    KL_old  = E_MATH[KL(π_1 ‖ π_θ)],  KL_new = E_SCIENCE[KL(π_1 ‖ π_θ)],  KL_0 = E_SCIENCE[KL(π_0 ‖ π_θ)]   (nats)
Each test reads a difference at matched SCIENCE gain along each arm's rates, by analysis/frontier.py's rule (the
frontier up to the largest mean gain, piecewise-linear, read at the midpoint of the common gains). Its interval is a
**two-way bootstrap**: every draw resamples each cell's seeds *and* the test prompts (MATH's committed 32 and fresh
288 apart, SCIENCE's 160; one draw of prompts shared by every run, as every run is scored on the same prompts), so
the interval holds both the training seeds and the prompts. Holm over the declared family of six.
"""
import json
import math
import os

import numpy as np

from analysis import archive, frontier, significance

ROLES = ("GRPO", "SDPO_0", "SDPO_0 failed-only")
ARM_ROLE = {"grpo": "GRPO", "sdpo0": "SDPO_0", "sdpo0-failed": "SDPO_0 failed-only"}
# the declared rates of each arm (tools/mediation.py runs them), chosen from the frontier's stage-2 gains so that
# the three arms' SCIENCE gains overlap
ARM_RATES = {"grpo": (1.25e-5, 2.5e-5, 5e-5, 1e-4), "sdpo0": (2.5e-5, 5e-5, 1e-4, 2e-4),
             "sdpo0-failed": (2.5e-5, 5e-5, 1e-4, 2e-4)}
SEEDS = range(10, 20)
COMMITTED = 32          # MATH's first 32 test prompts are the committed ones; the rest are fresh
BOOTSTRAP = 2000
# the declared family: (id, what it asks, pair a − b, measure)
TESTS = [("M1", "replication: SDPO_0 forgets more MATH than GRPO at matched gain (fresh prompts)",
          ("SDPO_0", "GRPO"), "drop"),
         ("M2", "spillover: SDPO_0 moves MATH's inputs more than GRPO at matched gain", ("SDPO_0", "GRPO"), "kl_old"),
         ("M3", "SDPO_0 moves SCIENCE's inputs more than GRPO at matched gain", ("SDPO_0", "GRPO"), "kl_new"),
         ("M4", "SDPO_0 forgets more than GRPO's law of drop on log(1 + KL_old) gives", ("SDPO_0", "GRPO"), "law"),
         ("M5", "projection: failed-only SDPO_0 forgets less than SDPO_0 at matched gain",
          ("SDPO_0 failed-only", "SDPO_0"), "drop"),
         ("M6", "failed-only SDPO_0 forgets more than GRPO at matched gain", ("SDPO_0 failed-only", "GRPO"), "drop")]


# ----------------------------------------------------------------------------------------------
# Reading the runs
# ----------------------------------------------------------------------------------------------
def per_prompt(rows, bench):
    """{sample seed: ([sha1], [per-prompt mean score])} of one benchmark's per-prompt records."""
    out = {}
    for r in rows:
        if r["benchmark"] == bench:
            out.setdefault(r["eval_seed"], []).append((r["prompt"], r["sha1"], sum(r["scores"]) / len(r["scores"])))
    return {s: ([h for _, h, _ in sorted(v)], [a for _, _, a in sorted(v)]) for s, v in out.items()}


def model_measures(run_dir):
    """One measured model: {'math': [320] acc, 'science': [160] acc, 'sha': {bench: [sha1]}, 'kl': {key: [per-prompt
    mean term]}} (accuracies averaged over the sampling seeds)."""
    path = os.path.join(run_dir, "measures.json")
    try:
        m = json.load(open(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"{archive.shown(path)} cannot be read ({type(e).__name__})") from None
    out = {"sha": {}, "kl": {}}
    for bench in ("math", "science"):
        seeds = sorted(int(key.split("-s")[1]) for key in m["acc"] if key.startswith(bench + "-"))
        accs, shas = [], None
        for s in seeds:
            rows = archive_rows(os.path.join(run_dir, "prompts", f"measure-{bench}-s{s}.jsonl"))
            sha, acc = per_prompt(rows, bench)[s]
            if shas is not None and sha != shas:
                raise ValueError(f"{archive.shown(run_dir)}: {bench}'s prompts differ between sampling seeds")
            shas = sha
            accs.append(acc)
        out[bench] = np.mean(np.array(accs, dtype=float), axis=0)
        out["sha"][bench] = shas
        if not (np.isfinite(out[bench]).all() and ((out[bench] >= 0) & (out[bench] <= 1)).all()):
            raise ValueError(f"{archive.shown(run_dir)}: a {bench} accuracy is outside [0, 1] or not a number")
    for key, kl in m.get("kl", {}).items():
        terms = np.array(kl["terms"], dtype=float)
        if not np.isfinite(terms).all():
            raise ValueError(f"{archive.shown(run_dir)}: a KL term of '{key}' is not a number")
        out["kl"][key] = terms.reshape(-1, kl["samples"]).mean(axis=1)   # per prompt: the mean of its samples
    return out


def archive_rows(path):
    """The per-prompt records evaluate.save_prompt_records wrote: [{'benchmark', 'eval_seed', 'prompt', 'sha1',
    'scores'}]; a damaged file raises ValueError naming it."""
    try:
        rows = [json.loads(line) for line in open(path) if line.strip()]
        assert all(isinstance(r, dict) and isinstance(r.get("scores"), list) for r in rows)
        return rows
    except (OSError, ValueError, AssertionError, UnicodeDecodeError) as e:
        raise ValueError(f"{archive.shown(path)} is not a file of per-prompt records ({type(e).__name__})") from None


def read_runs(root):
    """Every finished run of the family: {'theta1': {seed: model_measures}, 'runs': [{'seed', 'role', 'lr', 'name',
    'm': model_measures}], 'code': the one commit they record, 'seconds': summed wall time}. Runs of more than one
    commit, or an arm scored on other prompts than its θ_1, raise ValueError."""
    root = archive.materialized(root)
    out, codes, secs = {"theta1": {}, "runs": []}, set(), 0
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    done = [n for n in names if n.startswith("med-") and os.path.isfile(os.path.join(root, n, "measures.json"))]
    for name in done:
        arm, _, seed = name[len("med-"):].rpartition("-s")
        run_dir = os.path.join(root, name)
        codes.add(json.load(open(os.path.join(run_dir, "config.json"))).get("code"))
        secs += int(open(os.path.join(run_dir, "seconds.txt")).read().split()[0]) \
            if os.path.isfile(os.path.join(run_dir, "seconds.txt")) else 0
        if arm == "theta1":
            out["theta1"][int(seed)] = model_measures(run_dir)
            continue
        kind, _, lr = arm.rpartition("-lr")   # med-ARM-lrRATE-sSEED
        out["runs"].append({"seed": int(seed), "role": ARM_ROLE[kind], "lr": float(lr), "name": name,
                            "m": model_measures(run_dir)})
    out["runs"] = [r for r in out["runs"] if r["seed"] in out["theta1"]]
    for r in out["runs"]:
        if r["m"]["sha"] != out["theta1"][r["seed"]]["sha"]:
            raise ValueError(f"{r['name']} was scored on other test prompts than its θ_1")
    if len(codes) > 1:
        raise ValueError(f"the runs record {len(codes)} commits ({', '.join(sorted(str(c)[:7] for c in codes))}): "
                         "the family's runs are of one code version")
    out["code"], out["seconds"] = (codes.pop() if codes else None), secs
    return out


# ----------------------------------------------------------------------------------------------
# Each run's measures under one draw of the prompts
# ----------------------------------------------------------------------------------------------
def stacked(family):
    """The runs' per-prompt arrays stacked, each beside its seed's θ_1: {name: [R, P]}, and the runs' keys."""
    runs, t1 = family["runs"], family["theta1"]
    arr = lambda f: np.stack([f(r) for r in runs]) if runs else np.zeros((0, 0))   # noqa: E731
    return {"sci": arr(lambda r: r["m"]["science"]), "sci1": arr(lambda r: t1[r["seed"]]["science"]),
            "math": arr(lambda r: r["m"]["math"]), "math1": arr(lambda r: t1[r["seed"]]["math"]),
            "kl_old": arr(lambda r: r["m"]["kl"]["old"]), "kl_new": arr(lambda r: r["m"]["kl"]["new"]),
            "kl_zero": arr(lambda r: r["m"]["kl"]["zero"])}


def identity_prompts(s):
    """The prompts as they are (the point estimate): {'sci', 'math_all', 'fresh', 'committed'} index arrays."""
    n_sci, n_math = s["sci"].shape[1], s["math"].shape[1]
    return {"sci": np.arange(n_sci), "math_all": np.arange(n_math), "fresh": np.arange(COMMITTED, n_math),
            "committed": np.arange(min(COMMITTED, n_math))}


def drawn_prompts(s, rng):
    """One bootstrap draw of the prompts: SCIENCE's, MATH's committed and fresh ones apart, each with replacement."""
    n_sci, n_math = s["sci"].shape[1], s["math"].shape[1]
    c = rng.integers(0, min(COMMITTED, n_math), min(COMMITTED, n_math))
    f = rng.integers(COMMITTED, n_math, n_math - COMMITTED) if n_math > COMMITTED else np.zeros(0, dtype=int)
    return {"sci": rng.integers(0, n_sci, n_sci), "math_all": np.concatenate([c, f]), "fresh": f, "committed": c}


def measures(s, idx):
    """Every run's measures under prompt draw `idx`: {measure: [R]} (points; KLs in nats)."""
    # gain = Acc_θ(SCIENCE) − Acc_θ1(SCIENCE); drop = Acc_θ1(MATH) − Acc_θ(MATH), on the fresh prompts
    out = {"gain": 100 * (s["sci"][:, idx["sci"]] - s["sci1"][:, idx["sci"]]).mean(1),
           "drop": 100 * (s["math1"][:, idx["fresh"]] - s["math"][:, idx["fresh"]]).mean(1),
           "drop_committed": 100 * (s["math1"][:, idx["committed"]] - s["math"][:, idx["committed"]]).mean(1),
           "kl_old": s["kl_old"][:, idx["math_all"]].mean(1), "kl_new": s["kl_new"][:, idx["sci"]].mean(1),
           "kl_zero": s["kl_zero"][:, idx["sci"]].mean(1)}
    return out


# ----------------------------------------------------------------------------------------------
# Matched gain, the law, the family
# ----------------------------------------------------------------------------------------------
def cell_points(values, picks, role, measure):
    """[(lr, mean gain, mean measure, seeds)] of one arm, rates ascending: each cell's runs `picks[(role, lr)]`
    (row indices, the seeds drawn), its means of `values`."""
    out = []
    for (r, lr), rows in sorted(picks.items(), key=lambda c: c[0][1]):
        if r == role and len(rows):
            out.append((lr, float(values["gain"][rows].mean()), float(values[measure][rows].mean()), len(rows)))
    return out


def cells_of(runs):
    """{(role, lr): [row indices]} of the runs."""
    cells = {}
    for i, r in enumerate(runs):
        cells.setdefault((r["role"], r["lr"]), []).append(i)
    return cells


def drawn_cells(cells, rng):
    """One bootstrap draw of the seeds: each cell's rows with replacement."""
    return {key: rng.choice(rows, len(rows)) for key, rows in cells.items()}


def matched(values, cells, a, b, measure, g):
    """y_a(g) − y_b(g) along the two arms' frontiers (analysis/frontier.py's rule), None where g is outside one."""
    ya = frontier.interpolate(frontier.frontier(cell_points(values, cells, a, measure)), g)
    yb = frontier.interpolate(frontier.frontier(cell_points(values, cells, b, measure)), g)
    return None if ya is None or yb is None else ya - yb


def law_fit(values, rows):
    """drop = a + b · log(1 + KL_old) over the runs `rows` (GRPO's): (a, b)."""
    a, b, _ = frontier.line_fit([math.log1p(x) for x in values["kl_old"][rows]], list(values["drop"][rows]))
    return a, b


def law_offset(values, cells, role):
    """The mean residual of `role`'s runs from GRPO's law (M4)."""
    grpo = np.concatenate([rows for (r, _), rows in cells.items() if r == "GRPO"])
    mine = np.concatenate([rows for (r, _), rows in cells.items() if r == role])
    a, b = law_fit(values, grpo)
    return float((values["drop"][mine] - a - b * np.log1p(values["kl_old"][mine])).mean())


def family(fam, draws=BOOTSTRAP, seed=0):
    """The six declared tests with the two-way bootstrap and Holm: [{id, question, pair, measure, g, d, low, high,
    p, kept, verdict, corrected}]."""
    s = stacked(fam)
    cells = cells_of(fam["runs"])
    point = measures(s, identity_prompts(s))
    rows = []
    for tid, question, (a, b), measure in TESTS:
        row = {"id": tid, "question": question, "pair": (a, b), "measure": measure, "g": None, "d": None}
        if measure == "law":
            if any(r == a for r, _ in cells) and any(r == "GRPO" for r, _ in cells):
                row["d"] = law_offset(point, cells, a)
        else:
            fa = frontier.frontier(cell_points(point, cells, a, measure))
            fb = frontier.frontier(cell_points(point, cells, b, measure))
            row["g"] = frontier.common_gain(fa, fb)
            if row["g"] is not None:
                row["d"] = matched(point, cells, a, b, measure, row["g"])
        rows.append(row)
    rng, ds = np.random.default_rng(seed), [[] for _ in rows]
    for _ in range(draws if any(r["d"] is not None for r in rows) else 0):
        v, c = measures(s, drawn_prompts(s, rng)), drawn_cells(cells, rng)
        for row, out in zip(rows, ds):
            if row["d"] is None:
                continue
            d = law_offset(v, c, row["pair"][0]) if row["measure"] == "law" else \
                matched(v, c, *row["pair"], row["measure"], row["g"])
            if d is not None and math.isfinite(d):
                out.append(d)
    few = min((len(rows_) for rows_ in cells.values()), default=0) < 2
    for row, d in zip(rows, ds):
        row["kept"] = len(d) / draws if draws else 0
        if row["d"] is None or not math.isfinite(row["d"]) or len(d) < 0.95 * draws or len(d) < 2 or few:
            row.update(low=None, high=None, p=None, verdict="too few seeds" if few and row["d"] is not None
                       else "not comparable")
            continue
        row["low"], row["high"], row["p"] = frontier.bootstrap_interval(d)
        row["verdict"] = "> 0" if row["low"] > 0 else "< 0" if row["high"] < 0 else "not separable"
    for row, rejected in zip(rows, significance.holm([r["p"] for r in rows])):
        row["corrected"] = row["verdict"] if row["verdict"] in ("not comparable", "too few seeds") else (
            ("> 0" if row["d"] > 0 else "< 0") if rejected else "not separable")
    return rows


def along_range(fam, n=frontier.RANGE_POINTS, draws=BOOTSTRAP, seed=2):
    """Each matched-gain test (not M4's law) read at n gains evenly spaced across its common range, ends included,
    each with its two-way 95% bootstrap interval (the same draws for every gain): [(test id, pair, measure,
    [{g, d, low, high, kept}])]. The declared verdict reads the midpoint only; this shows how much the size depends on
    where in the range it is read (exploratory: no p, no Holm). An interval is given where at least 95% of the draws'
    frontiers still reach the gain (the declared rule's)."""
    s, cells = stacked(fam), cells_of(fam["runs"])
    point = measures(s, identity_prompts(s))
    tests = [(tid, pair, m) for tid, _, pair, m in TESTS if m != "law"]
    tests.append(("M1 on the committed 32", ("SDPO_0", "GRPO"), "drop_committed"))   # beside, as the frontier read
    spans = {}
    for tid, (a, b), m in tests:
        span = frontier.common_range(frontier.frontier(cell_points(point, cells, a, m)),
                                     frontier.frontier(cell_points(point, cells, b, m)))
        if span is not None:
            lo, hi = span
            spans[tid] = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if hi > lo and n > 1 else [lo]
    rng, ds = np.random.default_rng(seed), {tid: [[] for _ in g] for tid, g in spans.items()}
    for _ in range(draws if spans else 0):
        v, c = measures(s, drawn_prompts(s, rng)), drawn_cells(cells, rng)
        for tid, (a, b), m in tests:
            for i, g in enumerate(spans.get(tid, ())):
                d = matched(v, c, a, b, m, g)
                if d is not None and math.isfinite(d):
                    ds[tid][i].append(d)
    out = []
    for tid, pair, m in tests:
        rows = []
        for g, d in zip(spans.get(tid, ()), ds.get(tid, ())):
            low, high, _ = frontier.bootstrap_interval(d) if len(d) >= 0.95 * draws and len(d) >= 2 else \
                (None, None, None)
            rows.append({"g": g, "d": matched(point, cells, *pair, m, g), "low": low, "high": high,
                         "kept": len(d) / draws if draws else 0})
        out.append((tid, pair, m, rows))
    return out


def range_table(fam, draws=BOOTSTRAP):
    """along_range as a table: each test's d(g) at its common range's ends and three gains between."""
    units = {"drop": "points", "drop_committed": "points", "kl_old": "nats", "kl_new": "nats"}
    lines = [f"| test | a − b | common SCIENCE gain | d(g) [95%, seeds × prompts] at {frontier.RANGE_POINTS} gains "
             "across it, low to high |", "|---|---|---|---|"]
    for tid, (a, b), m, rows in along_range(fam, draws=draws):
        if not rows:
            lines.append(f"| {tid} | {a} − {b} | none (not comparable) | — |")
            continue
        fmt = "+.1f" if m.startswith("drop") else "+.2f"
        text = "; ".join(f"{r['g']:.1f}: {r['d']:{fmt}}" + (
            f" [{r['low']:{fmt}}, {r['high']:{fmt}}]" if r["low"] is not None else f" (kept {r['kept']:.0%})")
            for r in rows)
        lines.append(f"| {tid} | {a} − {b} ({units[m]}) | {rows[0]['g']:.1f}–{rows[-1]['g']:.1f} | {text} |")
    return "\n".join(lines)


def reading(rows):
    """What the family says, by the rule declared before the first run (docs/studies/mediation.md)."""
    v = {r["id"]: r["corrected"] for r in rows}
    lines = []
    if v["M1"] != "> 0":
        lines.append("M1: SDPO_0's extra forgetting does not replicate from a shared θ_1 on fresh prompts "
                     f"({v['M1']}); the other tests are read as exploratory.")
    spill = v["M2"] == "> 0" and v["M4"] == "not separable"
    proj = v["M5"] == "< 0" and v["M6"] != "> 0"
    if spill:
        lines.append("Spillover: at matched gain SDPO_0 moves MATH's inputs more (M2), and GRPO's law of drop on "
                     "KL_old accounts for its drop (M4 on the law).")
    if proj:
        lines.append("Projection: distilling the failed responses only removes SDPO_0's excess (M5 < 0, M6 not > 0).")
    if not spill and not proj:
        lines.append("Neither spillover nor projection: the next step is token-level (which tokens SDPO moves on "
                     "MATH's inputs).")
    return " ".join(lines)


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------
def cell_table(fam, draws=BOOTSTRAP, seed=1):
    """Arm × rate: the means of every measure with their two-way 95% bootstrap intervals, and the seeds."""
    s, cells = stacked(fam), cells_of(fam["runs"])
    point, rng = measures(s, identity_prompts(s)), np.random.default_rng(seed)
    keys = ("gain", "drop", "drop_committed", "kl_old", "kl_new", "kl_zero")
    boot = {key: {c: [] for c in cells} for key in keys}
    for _ in range(draws):
        v, c = measures(s, drawn_prompts(s, rng)), drawn_cells(cells, rng)
        for key in keys:
            for cell, rows in c.items():
                boot[key][cell].append(float(v[key][rows].mean()))
    lines = ["| arm | lr | seeds | SCIENCE gain | MATH drop, fresh 288 | MATH drop, committed 32 | KL_old | KL_new | "
             "KL_0 (SCIENCE) |", "|---|---|---|---|---|---|---|---|---|"]
    for (role, lr), rows in sorted(cells.items(), key=lambda c: (ROLES.index(c[0][0]), c[0][1])):
        def cell(key, fmt):
            lo, hi, _ = frontier.bootstrap_interval(boot[key][(role, lr)])
            return f"{float(point[key][rows].mean()):{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"
        lines.append(f"| {role} | {frontier.rate_label(lr)} | {len(rows)} | {cell('gain', '+.1f')} | {cell('drop', '+.1f')} | "
                     f"{cell('drop_committed', '+.1f')} | {cell('kl_old', '.2f')} | {cell('kl_new', '.2f')} | "
                     f"{cell('kl_zero', '.2f')} |")
    return "\n".join(lines)


def gain_cell(r):
    if r["measure"] == "law":
        return "law over every run"
    return "—" if r["g"] is None else f"{r['g']:.1f}"


def family_table(rows):
    f = lambda v: "—" if v is None else f"{v:+.2f}"   # noqa: E731
    lines = ["| test | question | a − b | matched SCIENCE gain | d [95%, seeds × prompts] | p | raw / Holm |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = "" if r["low"] is None else f" [{f(r['low'])}, {f(r['high'])}]"
        lines.append(f"| {r['id']} | {r['question']} | {r['pair'][0]} − {r['pair'][1]} | "
                     f"{gain_cell(r)} | {f(r['d'])}{ci} | {'—' if r['p'] is None else format(r['p'], '.4f')} | "
                     f"{r['verdict']} / {r['corrected']} |")
    return "\n".join(lines)


def summary_text(fam, draws=BOOTSTRAP):
    """The report: the cells, the six tests, the reading; (text, rows)."""
    if not fam["runs"]:
        return "no finished arm yet", []
    seeds = sorted(fam["theta1"])
    rows = family(fam, draws)
    per_cell = {(r["role"], r["lr"]) for r in fam["runs"]}
    declared = sum(len(rates) for rates in ARM_RATES.values())
    interim = "" if set(SEEDS) <= set(seeds) and len(per_cell) == declared and all(
        sum(1 for r in fam["runs"] if (r["role"], r["lr"]) == c) >= 10 for c in per_cell) else \
        f"**Interim**: {len(seeds)} of the {len(SEEDS)} declared seeds ({', '.join(map(str, seeds))}); no verdict below " \
        "is final, and the declared reading waits for every seed.\n\n"
    law = law_fit(measures(stacked(fam), identity_prompts(stacked(fam))),
                  np.array([i for i, r in enumerate(fam["runs"]) if r["role"] == "GRPO"], dtype=int)) \
        if any(r["role"] == "GRPO" for r in fam["runs"]) else None
    law_line = "" if law is None else (f"\n\nGRPO's law (M4's): drop = {law[0]:.2f} + {law[1]:.2f} · log(1 + KL_old), "
                                       "fitted over GRPO's runs.")
    return (interim + f"Code: {str(fam['code'])[:7]}; wall time summed over the finished experiments: "
            f"{fam['seconds']} s.\n\n## The arms (means over seeds, 95% two-way bootstrap: seeds × prompts)\n\n"
            + cell_table(fam, draws) + "\n\n## The declared tests, at matched SCIENCE gain (Holm over the six)\n\n"
            + family_table(rows) + law_line + "\n\n**Reading (declared rule):** "
            + ("none yet: it is read once every declared seed is in." if interim else reading(rows))
            + "\n\n## Along the common range (exploratory: the declared tests read the midpoint only)\n\n"
            + range_table(fam, draws)), rows
