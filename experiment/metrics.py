"""experiment/metrics.py — what a run's results are summarised by: the paper's configurations (`PAPER`, the one table
continual.py's --method names them by) and the paper's name of a run's (`role_of`), and each run's metrics over its
stages (`METRICS`: A3's G and F, drift, collapse, the field's average accuracy, forgetting from the peak, backward
transfer). The claims over them are analysis/claims.py's; no run imports it."""
from infra.stats import mean_interval


# ----------------------------------------------------------------------------------------------
# The paper's configurations: one table, by which continual.py's --method names them and role_of recognises a run
# ----------------------------------------------------------------------------------------------
S_SDPO_REFRESH = 10   # S-SDPO_0's and StableSDPO's refresh period K (a quarter of a 40-step stage); the paper has none
# The paper's name: (its --method name, the method, the settings that make it), Table D.6 and §3.1. A setting the
# configuration leaves inert is not named: α under a refresh schedule (T2), γ without one. An SDPO setting of PLAIN a
# row does not name is at PLAIN's value there; every other setting at the release's (on_release_protocol).
PAPER = {"GRPO": ("grpo", "grpo", {"mini_batches": 4, "epochs": 1, "clip_ratio_c": 3.0}),
         "SDPO_0": ("sdpo_0", "sdpo", {"alpha": 0.0}),                                  # frozen teacher
         "SDPO_5%": ("sdpo_5", "sdpo", {"alpha": 0.05}),                                # EMA 5%
         "SDPO-CoT_0": ("sdpo_cot_0", "sdpo", {"alpha": 0.0, "cot": True}),             # §5's drift ordering
         "SDPO-CoT_5%": ("sdpo_cot_5", "sdpo", {"alpha": 0.05, "cot": True}),
         "S-SDPO_0": ("s_sdpo_0", "sdpo", {"refresh_every": S_SDPO_REFRESH, "gamma": 1.0}),   # restart-and-freeze (T2)
         "StableSDPO": ("stable_sdpo", "sdpo", {"refresh_every": S_SDPO_REFRESH, "gamma": 0.5})}  # refresh-and-freeze
PLAIN = {"cot": False, "refresh_every": 0}
# The α sweep's rates by the paper's naming (SDPO_α%), for the tables' role column
ALPHAS = {0.0: "SDPO_0", 0.005: "SDPO_0.5%", 0.01: "SDPO_1%", 0.02: "SDPO_2%", 0.05: "SDPO_5%"}


def role_of(run):
    """The paper's name of a configuration (PAPER: GRPO, SDPO_0, SDPO_5%, SDPO-CoT_0, SDPO-CoT_5%, S-SDPO_0,
    StableSDPO) from a results.json run entry, or None for any other setting (a different α, masking, feedback…)."""
    s, method = run["settings"], run["method"]
    if method == "sdpo" and not on_release_protocol(s):
        return None
    return next((name for name, (_, m, row) in PAPER.items() if m == method and
                 all(s.get(k) == v for k, v in {**(PLAIN if m == "sdpo" else {}), **row}.items())), None)


def on_release_protocol(s):
    """An SDPO run's settings beyond PAPER's at the release's: no masking, no step skipped, the teacher restarted at
    each stage (T3), no teacher kind or defence of beyond/; (S8) the release's per-domain feedback, or "off" (False),
    the protocol of the reference committed before 2026-12-02 (feedback on everywhere is another setting)."""
    return not (s.get("mask_ratio") or s.get("feedback") in (True, "on") or s.get("skip_empty_steps")
                or s.get("teacher_init", "restart") != "restart" or defence_of(s))


def defence_of(s):
    """The teacher kind or forgetting defence an SDPO run adds (beyond/variants.py), e.g. "teacher live", "replay 0.2";
    "" for none."""
    parts = [f"teacher {s['teacher']}"] if s.get("teacher", "ema") != "ema" else []
    parts += [f"{k} {s[k]:g}" for k in ("replay", "anchor", "base_kl") if s.get(k)]
    parts += [f"distill {s['distill']}"] if s.get("distill", "all") != "all" else []   # (V1)
    return ", ".join(parts)


def reference_role(run):
    """role_of, with the α sweep's rates named too (SDPO_0.5%, SDPO_1%, SDPO_2%)."""
    s = run["settings"]
    if run["method"] == "sdpo" and role_of({**run, "settings": {**s, "alpha": 0.05}}) == "SDPO_5%" \
            and s["alpha"] in ALPHAS:
        return ALPHAS[s["alpha"]]
    return role_of(run)

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
    "collapse_last": (lambda r, s, b: r["degenerate"][-1], "% degenerate", 100),
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

def per_seed_metric_of(seed_results, run_name, metric):
    """[value per seed] of one metric for the run called `run_name`, or None where it is not defined."""
    values = [METRICS[metric][0](res["runs"][run_name], res["stages"], res["benchmarks"]) for res in seed_results]
    return None if any(v is None for v in values) else values


# ----------------------------------------------------------------------------------------------
# Several seeds: means with 95% intervals (the claims' verdicts: analysis/claims.py over the seeds)
# ----------------------------------------------------------------------------------------------
def summarize_seeds(seed_results, seeds, seed_dirs, seconds):
    """results.json over seeds: per run the accuracy matrix and every claim metric as
    {mean, low, high, per_seed} (infra/stats.py's mean_interval)."""
    first = seed_results[0]
    out = {"seeds": seeds, "seed_dirs": seed_dirs, "stages": first["stages"], "benchmarks": first["benchmarks"],
           "eval": first["eval"], "seconds_per_seed": seconds, "runs": {}}
    for name, run in first["runs"].items():
        cells = [[[r["runs"][name]["acc"][k][i] for r in seed_results] for i in range(len(row))]
                 for k, row in enumerate(run["acc"])]
        per_seed = {metric: per_seed_metric_of(seed_results, name, metric) for metric in METRICS}
        out["runs"][name] = {"method": run["method"], "settings": run["settings"], "role": role_of(run),
                             "acc": [[interval_dict(c) for c in row] for row in cells],
                             "metrics": {m: interval_dict(v) for m, v in per_seed.items() if v is not None}}
    return out


def interval_dict(values):
    mean, low, high = mean_interval(values)
    return {"mean": mean, "low": low, "high": high, "per_seed": values}
