"""tools/tables.py — every committed family of runs as one table (experiment/tables.py's rows), loadable in one line.

    python tools/tables.py                          # print what each family's table would hold
    python tools/tables.py --into-results           # write results/tables/<family>.parquet and .csv

    import pandas as pd; df = pd.read_parquet("results/tables/reference.parquet")
    from datasets import load_dataset; ds = load_dataset("parquet", data_files="results/tables/reference.parquet")

Families: `reference` (results/reference/: the confirmatory reference and the defences), `equal_rate`
(results/equal_rate/: the equal-rate arm). Each run directory's results.json is checked against its directory
(claims.checked_results) before it joins the table; the table's values are results.json's, nothing recomputed.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from analysis import archive, claims  # noqa: E402
from experiment import tables  # noqa: E402
from infra import safety  # noqa: E402

FAMILIES = {f: os.path.join(safety.REPO, "results", f) for f in ("reference", "equal_rate")}
KNOWN = {**claims.EXPERIMENTS, **claims.EQUAL_RATE, **{e: "" for e in (*claims.DEFENCES, *claims.FOLLOW_UP)}}


def family_rows(root):
    """The rows of every finished run directory `<experiment>-s<seed>` of a family folder, in name order (a
    committed family: from its archive)."""
    rows, root = [], archive.materialized(root)
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        exp, _, seed = name.rpartition("-s")
        path = os.path.join(root, name, "results.json")
        if exp in KNOWN and seed.isdigit() and os.path.lexists(path):
            res = claims.checked_results(path, exp, int(seed), claims.experiment_flags(exp))
            rows += tables.rows_of(res, exp)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--into-results", action="store_true", help="write results/tables/ (committed); without it, "
                                                                "print the tables' sizes only")
    ap.add_argument("--out", default=os.path.join(safety.REPO, "results", "tables"), help="where the tables go")
    args = ap.parse_args(argv)
    if not args.into_results and safety.committed_path(args.out):
        print(f"(printing only: --into-results writes {args.out}/)")
        args.out = None
    for family, root in FAMILIES.items():
        try:
            rows = family_rows(root)
        except ValueError as e:
            ap.exit(2, f"error: {e}; no table was written\n")
        runs = {(r["experiment"], r["seed"]) for r in rows}
        print(f"{family}: {len(rows)} rows from {len(runs)} run directories")
        if args.out and rows:
            print("  wrote", ", ".join(tables.write_tables(rows, os.path.join(args.out, family))))


if __name__ == "__main__":
    main()
