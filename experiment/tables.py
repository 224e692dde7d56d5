"""experiment/tables.py — a run's results as one table: a row per configuration × seed × stage × benchmark.

    import pandas as pd; df = pd.read_parquet("runs/<run>/results.parquet")          # one run
    from datasets import load_dataset; ds = load_dataset("parquet", data_files="results/tables/reference.parquet")

Columns: experiment, run (continual.py's name of the configuration), role (the paper's name: GRPO, SDPO_5%, …),
method, lr, alpha, seed, stage (0 = the base θ_0), trained (the stage's domain; "" for the base), benchmark,
acc (Acc@k), delta (Δ vs the base, A2), rel (δ, A2), degenerate (A8, after the stage), and the drift of the stage's
model vs the base (nss A4, angle A5, iou A6, cos and cos_p5 A7, kl), empty where not measured. Written beside
results.json as results.parquet and results.csv (the same rows); pandas and pyarrow come with `datasets`.
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
