"""tools/figures.py — a finished run directory's figures, drawn again into a folder of your choice.

    python tools/figures.py results/reference/continual-s10 --out runs/figures            # five PNGs
    python tools/figures.py results/reference/continual-s10 --out docs/img --prefix reference_ --overwrite-committed

The figures `python tools/report.py RUN_DIR` draws beside a run's report (infra/plots.py): the accuracy lines with
each domain's training stage shaded, the accuracy matrix as a heatmap, the signed change δ, the drift after every
stage, and the per-step curves, read from the run's results.json and log.jsonl (nothing is recomputed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra import safety  # noqa: E402
from analysis import archive  # noqa: E402
from analysis.results_file import read_results  # noqa: E402
from experiment import report  # noqa: E402
from infra import errors  # noqa: E402
from infra.commands import run_command  # noqa: E402


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
    if os.path.basename(args.prefix) != args.prefix or args.prefix in (".", ".."):   # (each name stays inside --out)
        ap.error(f"--prefix {args.prefix!r}: a file-name prefix, without a path separator")
    safety.refuse_committed(ap.error, "--out", args.out, args.overwrite_committed)
    try:
        results = read_results(path)
    except (OSError, ValueError) as e:
        ap.error(errors.one_line(e))
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:   # (a file in its place, no permission)
        ap.error(f"--out {args.out}: {e.strerror or e}; nothing was written")
    made = report.run_figures(results, args.run_dir, args.out, args.prefix)
    print("wrote " + ", ".join(p for p, _ in made if p))

if __name__ == "__main__":
    run_command(main)   # (a failure it did not name itself: one error: line, never a traceback)
