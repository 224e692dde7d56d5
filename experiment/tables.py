"""experiment/tables.py — a run's results as one table: a row per configuration × seed × stage × benchmark.

    import pandas as pd; df = pd.read_parquet("runs/<run>/results.parquet")          # one run
    from datasets import load_dataset; ds = load_dataset("parquet", data_files="results/tables/reference.parquet")

Columns: experiment, run (continual.py's name of the configuration), role (the paper's name: GRPO, SDPO_5%, …),
method, lr, alpha, seed, stage (0 = the base θ_0), trained (the stage's domain; "" for the base), benchmark,
acc (Acc@k), delta (Δ vs the base, A2), rel (δ, A2), degenerate (A8, after the stage), and the drift of the stage's
model vs the base (nss A4, angle A5, iou A6, cos and cos_p5 A7, kl), empty where not measured. Written beside
results.json as results.parquet and results.csv (the same rows); pandas and pyarrow come with `datasets`.
The accuracy matrix and A3's gain and forgetting as markdown (`accuracy_tables`): what a run prints at its end,
and the start of the report that `python tools/report.py RUN_DIR` writes beside it.
"""
import csv
import os

import pyarrow as pa
import pyarrow.parquet as pq

from experiment import metrics

COLUMNS = ["experiment", "run", "role", "method", "lr", "alpha", "seed", "stage", "trained", "benchmark", "acc",
           "delta", "rel", "degenerate", "nss", "angle", "iou", "cos", "cos_p5", "kl"]


def drift_of(run, k):
    """The drift measures of stage k's model (1-based) vs the base, or Nones."""
    drifts = run.get("drift") or []
    d = drifts[k - 1] if 1 <= k <= len(drifts) else None
    if not d:
        return dict.fromkeys(("nss", "angle", "iou", "cos", "cos_p5", "kl"))
    p, r = d["params_vs_base"]["all"], d.get("responses_vs_base") or {}
    return {"nss": p["nss_mean"], "angle": p["angle_max"], "iou": p["iou_mean"], "cos": r.get("mean"),
            "cos_p5": r.get("p5"), "kl": d.get("kl_to_base_mean")}


def rows_of(results, experiment=""):
    """Every (configuration, stage, benchmark) of one results.json as a row (COLUMNS)."""
    rows, stages, benches = [], results["stages"], results["benchmarks"]
    for name, run in results["runs"].items():
        s = run["settings"]
        for k, accs in enumerate(run["acc"]):
            extra = drift_of(run, k)
            for i, b in enumerate(benches):
                base = run["acc"][0][i]
                rows.append({"experiment": experiment, "run": name, "role": metrics.reference_role(run) or "",
                             "method": run["method"], "lr": s.get("lr"), "alpha": s.get("alpha"),
                             "seed": results["seed"], "stage": k, "trained": stages[k - 1] if k else "",
                             "benchmark": b, "acc": accs[i], "delta": accs[i] - base,
                             "rel": (accs[i] - base) / base if base else None,
                             "degenerate": run["degenerate"][k - 1] if k else None, **extra})
    return rows


def write_tables(rows, stem):
    """stem.parquet and stem.csv of the rows (the same rows, COLUMNS in order)."""
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, stem + ".parquet")
    with open(stem + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return stem + ".parquet", stem + ".csv"


SCHEMA = pa.schema([(c, pa.string()) for c in ("experiment", "run", "role", "method")] +
                   [("lr", pa.float64()), ("alpha", pa.float64()), ("seed", pa.int64()), ("stage", pa.int64()),
                    ("trained", pa.string()), ("benchmark", pa.string())] +
                   [(c, pa.float64()) for c in ("acc", "delta", "rel", "degenerate", "nss", "angle", "iou", "cos",
                                                "cos_p5", "kl")])


# ----------------------------------------------------------------------------------------------
# The accuracy matrix and A3 as markdown: printed by a run, the start of its report.md
# ----------------------------------------------------------------------------------------------
def pct(v, signed=False):
    """A fraction as a percentage with one decimal; None as "—"; never "-0.0" (a tiny negative rounds to 0.0)."""
    if v is None:
        return "—"
    v = 0.0 if round(100 * v, 1) == 0 else v
    return f"{100 * v:+.1f}" if signed and v != 0 else f"{100 * v:.1f}"


def short_names(benches):
    return {b: b.replace("science_boxed", "sci_boxed").replace("tool_unseen", "tool_new") for b in benches}


def accuracy_tables(results):
    """One seed's results.json as markdown: each run's accuracy matrix (base, then after each stage; the stage's own
    domain in bold), the final model's δ per benchmark (A2), and each run's G and F (A3)."""
    stages, benches = results["stages"], results["benchmarks"]
    short, lines = short_names(benches), []
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
    return lines + ["", "G of a stage is measured right after it (θ_k on d_k); F on the final model θ_K. "
                    "All relative to the base θ_0 (A2–A3)."]
