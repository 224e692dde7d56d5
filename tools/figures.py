"""tools/figures.py — a finished run directory's figures, drawn again into a folder of your choice.

    python tools/figures.py results/reference/continual-s10 --out runs/figures            # five PNGs
    python tools/figures.py results/reference/continual-s10 --out docs/img --prefix reference_ --overwrite-committed

The same figures continual.py draws for every run (infra/plots.py): the accuracy lines with each domain's
training stage shaded, the accuracy matrix as a heatmap, the signed change δ, the drift after every stage, and the
per-step curves, read from the run's results.json and log.jsonl (nothing is recomputed).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra import plots, safety  # noqa: E402
from analysis import archive  # noqa: E402
from experiment import report  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", help="a finished continual.py run directory (its results.json and log.jsonl)")
    ap.add_argument("--out", default=os.path.join("runs", "figures"), help="where the PNGs go")
    ap.add_argument("--prefix", default="", help="put before each file name")
    ap.add_argument("--overwrite-committed", action="store_true", help="let --out be a committed folder (docs/img)")
    args = ap.parse_args(argv)
    args.run_dir = archive.resolve(args.run_dir)   # (a committed run: read from its family's archive)
    path = os.path.join(args.run_dir, "results.json")
    if not os.path.isfile(path):
        ap.error(f"{args.run_dir}: no results.json (give a finished continual.py run directory)")
    safety.refuse_committed(ap.error, "--out", args.out, args.overwrite_committed)
    results = json.load(open(path))
    names = report.paper_names(results)
    out = lambda name: os.path.join(args.out, args.prefix + name)   # noqa: E731
    os.makedirs(args.out, exist_ok=True)
    made = [plots.plot_accuracy(results, out("accuracy.png"), labels=names),
            plots.plot_accuracy_matrix(results, out("accuracy_matrix.png"), labels=names),
            plots.plot_gain_forgetting(results, out("gain.png"), labels=names),
            plots.plot_drift(results, out("drift.png"), labels=names),
            plots.plot_curves(report.seed_log(args.run_dir), out("curves.png"), results["stages"], labels=names)]
    print("wrote " + ", ".join(m for m in made if m))


if __name__ == "__main__":
    main()
