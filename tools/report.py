"""tools/report.py — a finished continual.py run's report.md and figures, drawn from its files (nothing is recomputed).

    python continual.py --method sdpo --alpha 0.05        # prints the accuracy matrix, writes results.json
    python tools/report.py runs/sdpo_a0.05-s0             # report.md and five figures, beside its results.json
    python tools/report.py runs/grpo+sdpo_a0.05-s0-1-2    # a summary over seeds: means ± 95% intervals, differences.png
    python tools/report.py results/reference/continual-s10 --out runs/reference-s10      # a committed run, elsewhere

One seed's report (experiment/report.py): each run's accuracy matrix, the final model's δ (A2), G and F (A3), the
drift after every stage (A4–A8), and accuracy.png, accuracy_matrix.png, gain.png, drift.png, curves.png. Over
seeds: the same as means with their 95% intervals, and differences.png (each run minus the first, step by step).
A run does not draw them itself (nanochat's choice: the run writes its numbers, a command reports them).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra import safety  # noqa: E402
from analysis import archive  # noqa: E402
from analysis.results_file import read_results  # noqa: E402
from experiment import report  # noqa: E402
from infra.commands import run_command  # noqa: E402


def read_run(error, run_dir):
    """A run directory's results.json, or error() with one line."""
    path = os.path.join(run_dir, "results.json")
    try:
        return read_results(path)   # (a regular file, valid JSON, every accuracy a number in [0, 1])
    except OSError as e:
        error(f"{path}: {e.strerror or e} (give a finished continual.py run directory)")
    except ValueError as e:
        error(str(e))


def seed_dir_of(summary_dir, recorded):
    """A seed's directory as the summary recorded it (relative to where the command ran), else beside the summary."""
    if os.path.isfile(os.path.join(recorded, "results.json")):
        return recorded
    return os.path.join(os.path.dirname(os.path.normpath(summary_dir)), os.path.basename(os.path.normpath(recorded)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", help="a finished continual.py run directory, or the summary directory over its seeds")
    ap.add_argument("--out", help="where report.md and the figures go (default: the run directory itself)")
    ap.add_argument("--overwrite-committed", action="store_true", help="let --out be a committed folder")
    args = ap.parse_args(argv)
    run_dir = archive.resolve(args.run_dir)   # (a committed run: read from its family's archive)
    if run_dir != args.run_dir and not args.out:
        ap.error(f"{args.run_dir}: a committed run, read from its family's archive; give --out DIR for its report")
    out = args.out or run_dir
    safety.refuse_committed(ap.error, "--out" if args.out else "run directory", out, args.overwrite_committed)
    results = read_run(ap.error, run_dir)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:   # (a file in its place, no permission)
        ap.error(f"--out {out}: {e.strerror or e}; nothing was written")
    if "seeds" in results:   # the summary over seeds (continual.py --seed 0,1,2)
        dirs = [seed_dir_of(run_dir, d) for d in results["seed_dirs"]]
        seed_results = [read_run(ap.error, d) for d in dirs]
        report.write_seeds_report({**results, "seed_dirs": dirs}, seed_results, out)
    else:
        report.write_report(results, run_dir, out)
    print(f"wrote {os.path.join(out, 'report.md')} and its figures: " +
          ", ".join(sorted(f for f in os.listdir(out) if f.endswith(".png"))))


if __name__ == "__main__":
    run_command(main)   # (a failure it did not name itself: one error: line, never a traceback)
