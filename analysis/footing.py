"""analysis/footing.py — the claims on equal footing, and what this world can decide (docs/studies/equal-footing.md).

    python tools/reference.py --family equal --summary     # the table of docs/studies/equal-footing.md

The reference (analysis/claims.py, DECLARED) compares SDPO at 4e-4 with GRPO at 1e-4. The equal-rate arm
(claims.EQUAL_RATE) runs the configuration the reference lacks at each shared rate: SDPO at 1e-4, GRPO at 4e-4.
A seed's bundle merges both directories ({experiment: results.json}); `at_rate(x, rate)` is the view of it that
keeps only the runs trained at `rate`, named as the reference's experiments, so that every claim of
claims.DECLARED reads it unchanged: H2 at 1e-4 is the reference's GRPO against the arm's SDPO_5%, paired by seed.

An adequacy test per claim (`adequacy`) asks whether the world can test the claim's premise, from the world alone
(the base model, the benchmarks, one method's own run), never from an SDPO-versus-GRPO difference. A claim whose
test fails is "not testable on this world", with the measured reason: neither shown nor opposite.
Everything here was declared, thresholds included, before the arm's first run (docs/RESULTS.md).
"""
import json
import math
import os
import statistics

from analysis import archive, claims, significance
from experiment import metrics
from analysis.claims import diff, find, forget, verdict
from analysis.significance import p_value
from infra.stats import mean_interval

RATES = {"per-method": None, "1e-4": 1e-4, "4e-4": 4e-4}
PREFIXES = ("continual", "math", "tooluse")


# ----------------------------------------------------------------------------------------------
# Bundles: the reference's and the arm's directories of one seed, and the view at one rate
# ----------------------------------------------------------------------------------------------
def read_bundles(reference_root, arm_root):
    """{seed: {experiment: results.json, "distances": …, "dirs": {experiment: its directory}}} over both
    folders (`<experiment>-s<seed>/results.json`); the arm's `continual-sN` (extra seeds) joins the reference's."""
    reference_root, arm_root = archive.materialized(reference_root), archive.materialized(arm_root)
    known = set(claims.EXPERIMENTS) | set(claims.EQUAL_RATE)
    found = {}
    for root in (reference_root, arm_root):
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            exp, _, seed = name.rpartition("-s")
            path = os.path.join(root, name, "results.json")
            if exp in known and seed.isdigit() and os.path.lexists(path):
                x = found.setdefault(int(seed), {"dirs": {}})
                x[exp] = claims.checked_results(path, exp, int(seed), claims.experiment_flags(exp))
                x["dirs"][exp] = os.path.join(root, name)
    distances = json.load(open(claims.distances_path(reference_root)))
    return {s: {**x, "distances": distances} for s, x in sorted(found.items())}


def runs_at(res, rate):
    """The runs of one results.json trained at learning rate `rate` (all of them for rate None)."""
    if res is None:
        return {}
    return {n: r for n, r in res["runs"].items() if rate is None or math.isclose(r["settings"]["lr"], rate)}


def at_rate(x, rate):
    """The bundle as the reference's experiments, holding only the runs trained at `rate`: for each of continual,
    math and tooluse, the reference's runs at that rate and the arm's `lr<rate>-<experiment>` runs. rate None: the
    reference as it is (each method at its own rate)."""
    if rate is None:
        return x
    name = f"lr{rate:.0e}".replace("e-0", "e-")
    view = dict(x)
    for prefix in PREFIXES:
        ref, arm = x.get(prefix), x.get(f"{name}-{prefix}")
        runs = {**runs_at(ref, rate), **{f"arm:{n}": r for n, r in runs_at(arm, rate).items()}}
        base = ref or arm
        view[prefix] = None if base is None or not runs else {**base, "runs": runs}
    return view


# ----------------------------------------------------------------------------------------------
# The new claims (declared with the arm): H4 with SDPO_0, H5b by category, §5's drift statements
# ----------------------------------------------------------------------------------------------
CATEGORIES = {"MATH": ("math", "math_hard"), "SCIENCE": ("science", "science_boxed"),
              "TOOLUSE": ("tooluse", "tool_unseen"), "CODING": ("coding",), "LOGIC": ("logic",)}


def smallest_category_delta(res, role):
    """The smallest, over CATEGORIES, of the category's mean Δ (A2) of the final model vs the base."""
    d = claims.final_deltas(res, role)
    if d is None:
        return None
    means = [sum(d[b] for b in names) / len(names) for names in CATEGORIES.values() if all(b in d for b in names)]
    return min(means) if means else None


def final_measure(res, role, key):
    """A drift measure of `role`'s final model vs the base: nss (A4), iou (A6), cos (A7 mean), cos_p5 (A7's 5th
    percentile), kl (mean over the benchmarks); None when drift was not measured."""
    run = find(res, role)
    d = None if run is None else (run.get("drift") or [None])[-1]
    if not d:
        return None
    return {"nss": lambda: d["params_vs_base"]["all"]["nss_mean"], "iou": lambda: d["params_vs_base"]["all"]["iou_mean"],
            "cos": lambda: d["responses_vs_base"]["mean"], "cos_p5": lambda: d["responses_vs_base"]["p5"],
            "kl": lambda: d["kl_to_base_mean"]}[key]()


def drift_claim(cid, text, key, unit, sign):
    return (cid, text, "§5", "SDPO_CoT_0 > SDPO_5% > SDPO_0 > GRPO", unit, 1, sign,
            lambda x: diff(lambda r: final_measure(x.get("continual"), r, key), "SDPO_5%", "GRPO"))


NEW_CLAIMS = [
    ("H4b", "SDPO_0 forgets more than GRPO on the OOD benchmarks: F after the last stage (A3)", "§4",
     "SDPO_0 falls below the base on LOGIC and KNOWLEDGE", "F %", 100, +1,
     lambda x: diff(lambda r: forget(x.get("continual"), r, "ood"), "SDPO_0", "GRPO")),
    ("H5c", "GRPO improves over the base across evaluated categories: the smallest category mean Δ after the last "
     "stage", "§4", "improves over the base across evaluated categories", "points", 100, +1,
     lambda x: smallest_category_delta(x.get("continual"), "GRPO")),
    drift_claim("P1", "SDPO's spectral shift is larger: NSS (A4) vs the base, SDPO_5% − GRPO", "nss", "NSS", +1),
    drift_claim("P2", "GRPO keeps its principal mask better: IoU (A6) vs the base, SDPO_5% − GRPO", "iou", "IoU", -1),
    drift_claim("P3", "SDPO shifts response similarities down: mean cosine to the base's (A7), SDPO_5% − GRPO",
                "cos", "cosine", -1),
    drift_claim("P4", "… with a heavier lower tail: 5th percentile of that cosine, SDPO_5% − GRPO", "cos_p5",
                "cosine", -1),
    drift_claim("P5", "SDPO's KL to the base is larger: mean over the benchmarks, SDPO_5% − GRPO", "kl", "nats", +1),
]
SHARED_IDS = ["H1", "H2", "H3", "H4", "H4b", "H5a", "H5b", "H5c", "H8a", "X1", "X2", "P1", "P2", "P3", "P4", "P5"]
# rows whose value at a shared rate is the per-method one (one method at its own rate): shown once, not retested
SAME_AS_PER_METHOD = {"1e-4": {"H5a", "H5b", "H5c"}, "4e-4": {"X2"}}
NEW_AT_PER_METHOD = ["H4b", "H5c", "P1", "P2", "P3", "P4", "P5"]
CONTINUAL_IDS = {"H1", "H2", "H3", "H4", "H4b", "H5a", "H5b", "H5c", "H8a", "P1", "P2", "P3", "P4", "P5"}


def claim_defs():
    """{id: (id, text, where, paper, unit, scale, sign, d_of)} of every claim the table reads."""
    return {c[0]: c for c in claims.DECLARED + NEW_CLAIMS}


def family():
    """The new family's (footing, id) pairs, the 35 tests Holm corrects over (declared)."""
    tests = [("per-method", c) for c in NEW_AT_PER_METHOD]
    for rate in ("1e-4", "4e-4"):
        tests += [(rate, c) for c in SHARED_IDS if c not in SAME_AS_PER_METHOD[rate]]
    return tests


def seeds_of(cid, footing):
    """The declared seeds of a row: continual claims at a shared rate on 10–41, everything else on 10–29."""
    if footing != "per-method" and cid in CONTINUAL_IDS:
        return set(claims.REFERENCE_SEEDS) | set(claims.EXTRA_SEEDS)
    return set(claims.REFERENCE_SEEDS)


def measure_row(bundles, cid, footing):
    """One claim on one footing over the declared seeds with a value: {per_seed, n, effect, low, high, p, verdict}."""
    _, text, where, paper, unit, scale, sign, d_of = claim_defs()[cid]
    d = [v for s, x in bundles.items() if s in seeds_of(cid, footing)
         for v in [d_of(at_rate(x, RATES[footing]))] if v is not None]
    row = {"id": cid, "footing": footing, "claim": text, "unit": unit, "scale": scale, "sign": sign, "per_seed": d,
           "n": len(d)}
    if not d:
        return {**row, "effect": None, "low": None, "high": None, "p": None, "verdict": "not run"}
    effect, low, high = mean_interval(d)
    return {**row, "effect": effect, "low": low, "high": high, "p": p_value(d), "verdict": verdict(low, high, sign)}


def measure_family(bundles):
    """Every test of the new family, raw and with Holm's correction over the family."""
    rows = [measure_row(bundles, cid, footing) for footing, cid in family()]
    for r, rejected in zip(rows, significance.holm([r["p"] for r in rows])):
        r["corrected"] = "not run" if r["verdict"] == "not run" else (
            ("shown" if r["sign"] * r["effect"] > 0 else "opposite") if rejected else "not separable")
    return rows


# ----------------------------------------------------------------------------------------------
# What this world can decide: one adequacy test per claim (declared thresholds)
# ----------------------------------------------------------------------------------------------
EARLIER, OOD = ("math", "science", "tooluse"), ("math_hard", "science_boxed", "tool_unseen", "logic")


def something_to_lose(base, names):
    low = [b for b in names if base["acc"][b] < 0.20 or base["acc"][b] < base["chance"][b] + 0.10]
    return (not low, "base Acc ≥ 20% and ≥ chance + 10 on " + ", ".join(names) if not low else
            "base at the floor on " + ", ".join(f"{b} ({100 * base['acc'][b]:.1f}%)" for b in low))


def room_to_specialise(base):
    bad = [d for d in ("math", "science") if base["acc"][d] > 0.80 or
           base["teacher_check"][d]["with_demo"] - base["teacher_check"][d]["without_demo"] < 0.10]
    gains = ", ".join(f"{d} {100 * base['acc'][d]:.1f}%, teacher +"
                      f"{100 * (base['teacher_check'][d]['with_demo'] - base['teacher_check'][d]['without_demo']):.1f}"
                      for d in ("math", "science"))
    return not bad, gains


def room_to_improve(base):
    high = [b for b, a in base["acc"].items() if a > 0.90]
    return not high, ("base ≤ 90% everywhere (highest " + max(base["acc"], key=base["acc"].get) + f" "
                      f"{100 * max(base['acc'].values()):.1f}%)" if not high else "base above 90% on " + ", ".join(high))


def room_for_the_sweep(base):
    ok = all(0.20 <= base["acc"][d] <= 0.80 for d in ("math", "tooluse"))
    return ok, f"base math {100 * base['acc']['math']:.1f}%, tooluse {100 * base['acc']['tooluse']:.1f}% (in [20, 80])"


def traces_premise(traces):
    """D1–D3: TOOLUSE's traces at most half as long as MATH's and SCIENCE's, and at least 10 points more reliable."""
    t, m, s = traces["tooluse"], traces["math"], traces["science"]
    short = t["length_mean"] <= 0.5 * m["length_mean"] and t["length_mean"] <= 0.5 * s["length_mean"]
    reliable = t["reliability"] >= m["reliability"] + 0.10 and t["reliability"] >= s["reliability"] + 0.10
    why = (f"trace length (tokens) tooluse {t['length_mean']:.1f}, math {m['length_mean']:.1f}, science "
           f"{s['length_mean']:.1f} ({'' if short else 'not '}at most half); reliability tooluse "
           f"{100 * t['reliability']:.1f}%, math {100 * m['reliability']:.1f}%, science {100 * s['reliability']:.1f}% "
           f"({'' if reliable else 'not '}10 points above both)")
    return short and reliable, why


def null_premise(null):
    """H7, P2: a structure-free update of GRPO's per-matrix size keeps IoU > 0.99 (mean over seeds and draws)."""
    draws = [v for seed in null.values() for v in seed["null_iou"]]
    own = [seed["own_iou"] for seed in null.values()]
    m = sum(draws) / len(draws)
    return m > 0.99, (f"a random update of GRPO's per-matrix norm has IoU {m:.3f} (GRPO's own {sum(own) / len(own):.3f}; "
                      f"{len(null)} seeds × {len(draws) // len(null)} draws): "
                      + ("above 0.99" if m > 0.99 else "the update's size alone keeps the IoU below 0.99"))


def detector_quiet(bundles):
    shares = [v for x in bundles.values() if x.get("continual") for v in x["continual"]["base"]["degenerate"].values()]
    worst = max(shares) if shares else None
    return worst is not None and worst <= 0.05, f"the base's degenerate share at most {100 * (worst or 0):.1f}% per benchmark"


def collapse_present(bundles):
    """H8b: SDPO_5%'s degenerate share after its worst stage ≥ 50% on at least half of the seeds."""
    worst = [max(run["degenerate"]) for x in bundles.values() if x.get("continual")
             for run in [find(x["continual"], "SDPO_5%")] if run]
    hit = sum(w >= 0.5 for w in worst)
    return bool(worst) and hit >= len(worst) / 2, (
        f"SDPO_5%'s worst stage has {100 * min(worst):.1f}–{100 * max(worst):.1f}% degenerate answers; ≥ 50% on "
        f"{hit} of {len(worst)} seeds" if worst else "no SDPO_5% run")


def log_rows(run_dir, run_name):
    """The per-step lines of one run in a run directory's log.jsonl."""
    rows = []
    for line in open(os.path.join(run_dir, "log.jsonl")):
        row = json.loads(line)
        if row.get("run") == run_name:
            rows.append(row)
    return rows


def run_name_of(res, role):
    return next((n for n, r in res["runs"].items() if claims.reference_role(r) == role), None)


def distils_late(bundles):
    """L3a, L3b: SDPO_0's and SDPO_5%'s single-domain MATH runs distil on ≥ 90% of steps 11–40."""
    shares = []
    for x in bundles.values():
        if not x.get("math"):
            continue
        for role in ("SDPO_0", "SDPO_5%"):
            steps = [r for r in log_rows(x["dirs"]["math"], run_name_of(x["math"], role)) if 11 <= r["step"] <= 40]
            shares.append(sum(r["distilled_token_frac"] > 0 for r in steps) / max(1, len(steps)))
    return bool(shares) and min(shares) >= 0.9, (f"steps 11–40 that distil: at least {100 * min(shares):.0f}%"
                                                 if shares else "no MATH run")


def ood_to_generalise_to(base):
    ok = all(sum(0.20 <= base["acc"][b] <= 0.90 for b in base["acc"] if b != src) >= 4 for src in ("math", "tooluse"))
    return ok, "at least 4 benchmarks besides each source with base Acc in [20, 90]%"


def distances_separate(distances):
    """X2: near < intermediate < far by at least 0.05 between the groups' mean distances, for MATH and TOOLUSE."""
    parts = []
    ok = True
    for src in ("math", "tooluse"):
        ranked = sorted((b for b in distances[src] if b != src), key=lambda b: distances[src][b])
        m = lambda names: sum(distances[src][b] for b in names) / len(names)
        near, mid, far = m(ranked[:2]), m(ranked[2:-2]), m(ranked[-2:])
        ok = ok and mid - near >= 0.05 and far - mid >= 0.05
        parts.append(f"{src}: {near:.2f} < {mid:.2f} < {far:.2f}")
    return ok, "; ".join(parts)


def measurable(bundles, cid):
    """H6a–c, P1, P3, P5: the measure is finite for every run the claim reads (its premise is only that)."""
    vals = [claim_defs()[cid][7](x) for x in bundles.values()]
    vals = [v for v in vals if v is not None]
    ok = bool(vals) and all(math.isfinite(v) for v in vals)
    return ok, "finite on every run it reads" if ok else "not measured on every run"


def adequacy(bundles, base, traces, null):
    """{claim id: (testable, the measured reason)} for every claim of the reference and of the arm."""
    to_lose_earlier, to_lose_ood = something_to_lose(base, EARLIER), something_to_lose(base, OOD)
    out = {"H1": room_to_specialise(base), "H2": to_lose_earlier, "H3": to_lose_earlier,
           "H4": to_lose_ood, "H4b": to_lose_ood}
    out.update({c: room_to_improve(base) for c in ("H5a", "H5b", "H5c")})
    out.update({c: measurable(bundles, c) for c in ("H6a", "H6b", "H6c", "P1", "P3", "P4", "P5")})
    out.update({c: null_premise(null) if null else (False, "the null model was not measured") for c in ("H7", "P2")})
    out["H8a"], out["H8b"] = detector_quiet(bundles), collapse_present(bundles)
    out.update({c: room_for_the_sweep(base) for c in ("L1", "L2", "L4", "L5")})
    out.update({c: distils_late(bundles) for c in ("L3a", "L3b")})
    out.update({c: traces_premise(traces) for c in ("D1", "D2", "D3")})
    out["X1"], out["X2"] = ood_to_generalise_to(base), distances_separate(next(iter(bundles.values()))["distances"])
    return out


def collapse_js(bundles):
    """H8b's report: in SDPO_5%'s collapse stage (its largest degenerate share), per seed: the JS per distilled
    token averaged over the steps that distilled anything, the stage before's, and the shares of steps and of
    tokens distilled. [(seed, stage, js_distilled, js_before, steps_distilled, tokens_distilled)]"""
    out = []
    for seed, x in bundles.items():
        res = x.get("continual")
        name = res and run_name_of(res, "SDPO_5%")
        if not name:
            continue
        run = res["runs"][name]
        c = max(range(1, len(run["degenerate"])), key=lambda k: run["degenerate"][k]) + 1   # 1-based stage
        rows = log_rows(x["dirs"]["continual"], name)

        def js(stage):
            st = [r for r in rows if r["stage"] == stage]
            on = [r for r in st if r["distilled_token_frac"] > 0]
            return (sum(r["js"] for r in on) / len(on) if on else None, len(on) / max(1, len(st)),
                    sum(r["distilled_token_frac"] for r in st) / max(1, len(st)))
        (j, steps, toks), (jb, _, _) = js(c), js(c - 1)
        out.append((seed, c, j, jb, steps, toks))
    return out


# ----------------------------------------------------------------------------------------------
# The table: each claim at the per-method rates | at 1e-4 shared | at 4e-4 shared, with the adequacy column
# ----------------------------------------------------------------------------------------------
def cell(row, testable, footing_ok=True):
    """'effect [low, high] (n) raw / Holm', or 'not testable' (the world) / 'not testable at this footing' (the
    footing: a method does not learn, or the metric sits at its floor) in place of the verdicts."""
    if row is None:
        return "—"
    if row["effect"] is None:
        return "not run"
    s = row["scale"]
    here = claims.fmt(row["effect"], s) + ("" if row["low"] is None else
                                           f" [{claims.fmt(row['low'], s)}, {claims.fmt(row['high'], s)}]")
    says = (f"{row['verdict']} / {row['corrected']}" if testable and footing_ok else
            "**not testable**" if not testable else "*not testable at this footing*")
    return f"{here} ({row['n']}) {says}"


def footing_table(bundles, base, traces, null):
    """The markdown table of docs/studies/equal-footing.md, and the rows it was made from."""
    reference = {s: x for s, x in bundles.items() if s in claims.REFERENCE_SEEDS and "continual" in x}
    ref_rows = {r["id"]: {**r, "footing": "per-method"} for r in claims.measure_declared(list(reference.values()))}
    new = {(r["footing"], r["id"]): r for r in measure_family(bundles)}
    ok = adequacy(bundles, base, traces, null)
    at_footing = {(f, c): footing_adequacy(bundles, c, f) for f in RATES for c in SHARED_IDS}
    ids = [c[0] for c in claims.DECLARED] + [c for c in NEW_AT_PER_METHOD if c not in ref_rows]
    lines = ["| id | unit | can this world decide it? | per-method rates (GRPO 1e-4, SDPO 4e-4) | both at 1e-4 | "
             "both at 4e-4 |", "|---|---|---|---|---|---|"]
    for cid in ids:
        testable, why = ok.get(cid, (True, ""))
        per = ref_rows.get(cid) or new.get(("per-method", cid))
        shared = []
        for rate in ("1e-4", "4e-4"):
            if cid not in SHARED_IDS:
                shared.append("—")
            elif cid in SAME_AS_PER_METHOD[rate]:
                shared.append("= per-method")
            else:
                shared.append(cell(new.get((rate, cid)), testable, at_footing[(rate, cid)][0]))
        lines.append(f"| {cid} | {claim_defs()[cid][4]} | {'yes' if testable else '**no**'}: {why} | "
                     f"{cell(per, testable, at_footing.get(('per-method', cid), (True,))[0])} | {shared[0]} | "
                     f"{shared[1]} |")
    lines += ["", "Not testable at a footing (declared with the frontier's correction, docs/studies/equal-footing.md: each method the claim compares "
              "learns every stage its premise reads, own-domain gain > 0 on ≥ 80% of seeds, and an F claim's metric is "
              "not 0 on every run):", ""]
    lines += [f"- {c} at {f}: {why}" for (f, c), (good, why) in at_footing.items()
              if not good and not (f != "per-method" and c in SAME_AS_PER_METHOD[f])]
    return "\n".join(lines), {"reference": ref_rows, "family": new, "adequacy": ok, "footing": at_footing}


FIGURE_TITLES = {"H1": "SDPO_0 learns its domain faster", "H2": "SDPO_5% forgets earlier domains more",
                 "H3": "SDPO_0 forgets earlier domains more", "H4": "SDPO_5% forgets OOD more",
                 "H4b": "SDPO_0 forgets OOD more", "H5a": "GRPO ends above the base (mean)",
                 "H5b": "GRPO ends above the base everywhere", "H5c": "GRPO above the base per category",
                 "H8a": "SDPO_5% more degenerate answers", "X1": "GRPO generalises better from one domain",
                 "X2": "forgetting peaks at middle distance", "P1": "SDPO's larger spectral shift",
                 "P2": "GRPO keeps its principal mask", "P3": "SDPO moves response similarity",
                 "P4": "… with a heavier lower tail", "P5": "SDPO's larger KL to the base"}


def footing_figure_rows(rows):
    """The claims that compare the methods at a shared rate, as plots.plot_footing takes them, from footing_table's
    rows: each with its per-method, 1e-4 and 4e-4 cells (a row read once is drawn in each column it stands for)."""
    out = []
    for cid in SHARED_IDS:
        per = rows["reference"].get(cid) or rows["family"].get(("per-method", cid))
        if per is None:
            continue
        ok = lambda f: rows.get("footing", {}).get((f, cid), (True,))[0]   # noqa: E731
        cells = {"per-method": {**per, "footing_ok": ok("per-method")}}
        for rate in ("1e-4", "4e-4"):
            r = rows["family"].get((rate, cid))
            cells[rate] = cells["per-method"] if cid in SAME_AS_PER_METHOD[rate] else \
                (None if r is None else {**r, "footing_ok": ok(rate)})
        out.append({"id": cid, "title": FIGURE_TITLES.get(cid, cid), "unit": per["unit"], "sign": per["sign"], "rows": cells,
                    "testable": rows["adequacy"].get(cid, (True, ""))[0]})
    return out


def collapse_js_table(bundles):
    rows = collapse_js(bundles)
    lines = ["| seed | collapse stage | JS per distilled token, steps that distil | the stage before | steps that "
             "distil | tokens distilled |", "|---|---|---|---|---|---|"]
    for seed, c, j, jb, steps, toks in rows:
        f = lambda v: "—" if v is None else f"{v:.4f}"
        lines.append(f"| {seed} | {c} | {f(j)} | {f(jb)} | {100 * steps:.0f}% | {100 * toks:.1f}% |")
    return "\n".join(lines)


FOOTING_NOTE = ("Each cell: the mean paired difference d [95% interval] (seeds) and its verdict raw / after Holm's "
                "correction. The per-method column of the reference's 23 claims is the confirmatory reference "
                "(seeds 10–29; Holm over its 23); every other cell is the new family (35 tests, Holm over them; "
                "continual claims at a shared rate on seeds 10–41, the rest on 10–29). \"= per-method\": the row "
                "reads one method at its own rate, so it equals the per-method cell. A claim whose adequacy test "
                "fails is **not testable** on this world: its effect is shown, its verdicts are not.")


# ----------------------------------------------------------------------------------------------
# What a shared rate holds equal, and whether a footing can test a claim (declared with the frontier's correction)
# ----------------------------------------------------------------------------------------------
CONTINUAL_EXPERIMENTS = ("continual", "lr1e-4-continual", "lr4e-4-continual")
ROLES = ("GRPO", "SDPO_0", "SDPO_5%")


def continual_runs(bundles):
    """Every continual run of the bundles: [(seed, role, lr, its results.json, run name, its directory)]."""
    out = []
    for seed, x in bundles.items():
        for exp in CONTINUAL_EXPERIMENTS:
            res = x.get(exp)
            for name, run in (res or {"runs": {}})["runs"].items():
                role = claims.reference_role(run)
                if role in ROLES:
                    out.append((seed, role, run["settings"]["lr"], res, name, x["dirs"][exp]))
    return out


def median(values):
    return statistics.median(values) if values else None


def update_sizes(bundles):
    """{(role, lr): {"rel": [per stage: median over seeds of the stage's median ‖Δθ‖/‖θ‖ per batch],
    "max": the first batch's largest coordinate move |Δθ_i| (median over seeds; a fresh AdamW's first step moves
    each coordinate by about lr per optimizer step), "seeds": n}} from each run's log.jsonl (update_rel, update_max;
    GRPO's four optimizer steps of a batch are one row)."""
    per = {}
    for seed, role, lr, res, name, directory in continual_runs(bundles):
        rows = log_rows(directory, name)
        stages = [[r["update_rel"] for r in rows if r.get("stage") == k and "update_rel" in r]
                  for k in range(1, len(res["stages"]) + 1)]
        first = next((r["update_max"] for r in rows if r.get("stage") == 1 and "update_max" in r), None)
        cell = per.setdefault((role, lr), {"rel": [[] for _ in stages], "max": [], "seeds": 0})
        for k, values in enumerate(stages):
            if values:
                cell["rel"][k].append(median(values))
        if first is not None:
            cell["max"].append(first)
        cell["seeds"] += 1
    return {key: {"rel": [median(v) for v in c["rel"]], "max": median(c["max"]), "seeds": c["seeds"]}
            for key, c in per.items()}


def update_size_table(bundles):
    """The markdown table of what one learning rate gives each method: the per-batch update, per stage."""
    sizes = update_sizes(bundles)
    grpo = {lr: sizes[("GRPO", lr)]["rel"] for (role, lr) in sizes if role == "GRPO"}
    lines = ["| configuration | lr | ‖Δθ‖/‖θ‖ per batch, stages 1 / 2 / 3 / 4 (×1e-3) | ÷ GRPO's at the same lr | "
             "÷ GRPO's at 1e-4 | first batch's largest coordinate move | seeds |", "|---|---|---|---|---|---|---|"]
    for role in ROLES:
        for lr in sorted(lr for (r, lr) in sizes if r == role):
            c = sizes[(role, lr)]
            ratio = lambda ref: " / ".join("—" if a is None or b is None else f"{a / b:.2f}" for a, b in zip(c["rel"], ref))
            lines.append(f"| {role} | {lr:.0e} | {' / '.join('—' if v is None else f'{1e3 * v:.2f}' for v in c['rel'])} | "
                         f"{ratio(grpo[lr]) if lr in grpo else '—'} | {ratio(grpo[1e-4]) if 1e-4 in grpo else '—'} | "
                         f"{c['max']:.1e} | {c['seeds']} |")
    return "\n".join(lines)


# Which runs and stages a claim's premise reads (declared with the correction, before the frontier): the methods
# it compares, the experiment(s), and the stages each method must have learned for the comparison to mean what it
# says. Forgetting of the earlier domains needs those domains learned (stages 1..K−1); every claim on the final
# model reads the same stages; H1 reads the stages it measures; H8a is about failure, so it needs no learning.
READS = {"H1": (("SDPO_0", "GRPO"), ("continual",), (1, 2)),
         "H2": (("SDPO_5%", "GRPO"), ("continual",), (1, 2, 3)), "H3": (("SDPO_0", "GRPO"), ("continual",), (1, 2, 3)),
         "H4": (("SDPO_5%", "GRPO"), ("continual",), (1, 2, 3)), "H4b": (("SDPO_0", "GRPO"), ("continual",), (1, 2, 3)),
         **{c: (("GRPO",), ("continual",), (1, 2, 3)) for c in ("H5a", "H5b", "H5c")},
         "H8a": (("SDPO_5%", "GRPO"), ("continual",), ()),
         **{c: (("SDPO_5%", "GRPO"), ("continual",), (1, 2, 3)) for c in ("P1", "P2", "P3", "P4", "P5")},
         "X1": (("GRPO", "SDPO_0"), ("math", "tooluse"), (1,)), "X2": (("SDPO_0",), ("math", "tooluse"), (1,))}
LEARNS_ON = 0.8      # a method learns a stage: its own domain's accuracy rises over the stage on ≥ 80% of seeds


def stage_gain(res, role, k):
    """Own-domain gain of stage k in points: Acc(d_k) right after stage k − right before it (None: no such run)."""
    run = find(res, role)
    if run is None:
        return None
    i = res["benchmarks"].index(res["stages"][k - 1])
    return run["acc"][k][i] - run["acc"][k - 1][i]


def learning_shares(bundles, cid, footing):
    """{(role, experiment, stage): (seeds whose gain > 0, seeds)} of the runs a claim reads at a footing."""
    roles, exps, stages = READS[cid]
    out = {}
    for seed, x in bundles.items():
        if seed not in seeds_of(cid, footing):
            continue
        view = at_rate(x, RATES[footing])
        for role in roles:
            for exp in exps:
                for k in stages:
                    g = stage_gain(view.get(exp), role, k)
                    if g is not None:
                        up, n = out.get((role, exp, k), (0, 0))
                        out[(role, exp, k)] = (up + (g > 0), n + 1)
    return out


def at_floor(bundles, cid, footing):
    """For a claim in F % (floored at 0): (every run it reads has F = 0, the runs). Else (False, 0)."""
    if claim_defs()[cid][4] != "F %":
        return False, 0
    roles, _, _ = READS[cid]
    which = "earlier" if cid in ("H2", "H3") else "ood"
    values = [forget(at_rate(x, RATES[footing]).get("continual"), r, which)
              for s, x in bundles.items() if s in seeds_of(cid, footing) for r in roles]
    values = [v for v in values if v is not None]
    return bool(values) and all(v == 0 for v in values), len(values)


def footing_adequacy(bundles, cid, footing):
    """(testable at this footing?, the measured reason): every method the claim compares learns every stage it
    reads (gain > 0 on ≥ 80% of seeds), and an F claim's metric is not at its floor (0) on every run."""
    if cid not in READS:
        return True, ""
    failed = [f"{role} {'' if exp == 'continual' else exp + ' '}stage {k} on {up}/{n} seeds"
              for (role, exp, k), (up, n) in sorted(learning_shares(bundles, cid, footing).items()) if up < LEARNS_ON * n]
    floor, n = at_floor(bundles, cid, footing)
    reasons = ([f"does not learn: {', '.join(failed)}"] if failed else []) + \
              ([f"F = 0 on all {n} runs (the metric at its floor)"] if floor else [])
    return not reasons, "; ".join(reasons)


def learning_table(bundles):
    """Each method × footing: the share of seeds whose own-domain accuracy rose over each stage, and the mean gain."""
    lines = ["| configuration | lr | stage 1 MATH | stage 2 SCIENCE | stage 3 TOOLUSE | stage 4 CODING | seeds |",
             "|---|---|---|---|---|---|---|"]
    cells = {}
    for seed, role, lr, res, name, directory in continual_runs(bundles):
        for k in range(1, len(res["stages"]) + 1):
            cells.setdefault((role, lr), {}).setdefault(k, []).append(stage_gain(res, role, k))
    for (role, lr) in sorted(cells, key=lambda c: (ROLES.index(c[0]), c[1])):
        per = cells[(role, lr)]
        row = [f"{sum(g > 0 for g in per[k])}/{len(per[k])}, {100 * sum(per[k]) / len(per[k]):+.1f}" for k in sorted(per)]
        lines.append(f"| {role} | {lr:.0e} | " + " | ".join(row) + f" | {len(per[1])} |")
    return "\n".join(lines)


def peak_forgetting(bundles, footing):
    """{role: {seed: forgetting from the peak (points), mean over the earlier domains}} at a footing (the
    continual-learning field's measure, unfloored: what a domain lost since its best, experiment/metrics.py)."""
    out = {}
    for seed, x in bundles.items():
        if seed not in seeds_of("H2", footing):
            continue
        res = at_rate(x, RATES[footing]).get("continual")
        for role in ROLES:
            run = find(res, role)
            if run is not None:
                out.setdefault(role, {})[seed] = metrics.forgetting_from_peak(run, res["stages"], res["benchmarks"])
    return out


def peak_forgetting_table(bundles):
    """Forgetting from the peak, beside the paper's F: each method's level and SDPO − GRPO per footing (undeclared)."""
    lines = ["| footing | GRPO | SDPO_0 | SDPO_5% | SDPO_0 − GRPO | SDPO_5% − GRPO |", "|---|---|---|---|---|---|"]
    for footing in RATES:
        per = peak_forgetting(bundles, footing)
        level = lambda r: claims.interval_cell([v for v in per.get(r, {}).values()], 100, signed=False)
        paired = []
        for r in ("SDPO_0", "SDPO_5%"):
            both = set(per.get(r, {})) & set(per.get("GRPO", {}))
            d = [per[r][s] - per["GRPO"][s] for s in sorted(both)]
            paired.append(claims.interval_cell(d, 100) + f" ({len(d)})" if d else "—")
        lines.append(f"| {footing} | {level('GRPO')} | {level('SDPO_0')} | {level('SDPO_5%')} | {paired[0]} | {paired[1]} |")
    return "\n".join(lines)
