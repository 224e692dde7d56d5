"""tools/compare.py — does my run look right? A finished run of the headline's configuration set against the
committed distribution of that configuration over seeds (results/headline/: `python continual.py --method sdpo
--alpha 0.05 --threads 1 --seed K`, K = 0…9, one processor).

    python tools/compare.py runs/sdpo_a0.05-s0      # the cells of your run outside the seeds' range, one short table
    python tools/compare.py --table                  # the distribution: median (min–max) of every cell (the README's)
    python tools/compare.py --report                 # the same, written as results/headline/report.md (committed)

A cell is an accuracy (Acc@8 %, after a stage, on a benchmark), or G, F on the earlier domains, F out of domain
(A3, %) or the degenerate share after the last stage. "Outside" means below the smallest or above the largest
value the seeds gave: with 10 seeds a cell of a like-for-like run falls outside by chance about 2 times in 11 (the
chance a new draw is the lowest or the highest of 11), so a few cells out of 45 is what an honest run shows; many
say something differs. The base's row is the same for every seed (the same test prompts and sampling), so a base
cell outside is never chance: the model, the evaluation or the code differs. Settings that differ from the
distribution's (other than the seed, the thread count, the name and where runs go) are named first.
"""
import argparse
import glob
import os
import statistics
import sys

from scipy.stats import binom

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

from analysis import archive  # noqa: E402
from analysis.results_file import read_results  # noqa: E402
from infra.checkpoints import write_atomically  # noqa: E402
from infra.commands import read_json, run_command  # noqa: E402

FAMILY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "headline")
RUN = "sdpo_a0.05"
# settings a run may differ in and still be one draw of the distribution
NOT_COMPARED = {"seed", "name", "runs_dir", "threads", "code", "runs", "program", "device", "config"}


def cells_of(results, run=RUN):
    """{cell name: value in %}: every accuracy after every stage, then G, F (earlier, OOD) and the last degenerate
    share, from a results.json dict."""
    r, stages, benches = results["runs"][run], results["stages"], results["benchmarks"]
    out = {}
    for k, row in enumerate(r["acc"]):
        after = "base" if k == 0 else f"{k}: {stages[k - 1]}"
        out.update({(after, b): 100 * v for b, v in zip(benches, row)})
    for key, name in (("avg_gain_trained", "G %"), ("avg_forget_earlier", "F earlier %"),
                      ("avg_forget_ood", "F OOD %")):
        if r.get(key) is not None:
            out[("A3", name)] = 100 * r[key]
    out[("A8", "degenerate at the end %")] = 100 * r["degenerate"][-1]
    return out


def distribution(family=FAMILY):
    """({cell: [value per seed]}, [seeds], the seeds' config.json): the committed seeds of the headline."""
    root = archive.materialized(family)
    dirs = sorted(glob.glob(os.path.join(root, f"{RUN}-s*")), key=lambda d: int(d.rsplit("-s", 1)[1]))
    if not dirs:
        raise ValueError(f"{family}: no seed of the headline ({RUN}-s<K>) is there")
    per_seed = [cells_of(read_results(os.path.join(d, "results.json"))) for d in dirs]
    config = read_json(os.path.join(dirs[0], "config.json"))
    return {c: [p[c] for p in per_seed] for c in per_seed[0]}, [int(d.rsplit("-s", 1)[1]) for d in dirs], config


def differing_settings(mine, theirs):
    """[(setting, mine, theirs)] for every setting both configs hold that differs, NOT_COMPARED aside."""
    return [(k, mine[k], theirs[k]) for k in sorted(set(mine) & set(theirs))
            if k not in NOT_COMPARED and mine[k] != theirs[k]]


def outside(mine, dist):
    """[(cell, my value, median, low, high)] of the cells of mine outside the seeds' [min, max]."""
    return [(c, v, statistics.median(dist[c]), min(dist[c]), max(dist[c])) for c, v in mine.items()
            if c in dist and not min(dist[c]) - 1e-9 <= v <= max(dist[c]) + 1e-9]


def distribution_table(dist, seeds):
    """The README's table: median (min–max) of every accuracy cell over the seeds, stage by benchmark."""
    rows = list(dict.fromkeys(a for a, _ in dist if a not in ("A3", "A8")))
    benches = list(dict.fromkeys(b for a, b in dist if a not in ("A3", "A8")))
    short = {b: b.replace("science_boxed", "sci_boxed").replace("tool_unseen", "tool_new") for b in benches}
    lines = ["| after | " + " | ".join(short[b] for b in benches) + " |", "|---|" + "---|" * len(benches)]
    for a in rows:
        lines.append(f"| {a} | " + " | ".join(cell(dist[(a, b)], bold=a.endswith(f": {b}")) for b in benches) + " |")
    extra = [c for c in dist if c[0] in ("A3", "A8")]
    lines += ["", "| " + " | ".join(name for _, name in extra) + " |", "|" + "---|" * len(extra),
              "| " + " | ".join(cell(dist[c]) for c in extra) + " |", "",
              f"Median (min–max) over seeds {seeds[0]}–{seeds[-1]} ({len(seeds)} seeds); one number: every seed's."]
    return "\n".join(lines)


def cell(values, bold=False):
    """"66.8 (63.7–74.2)": the median (min–max) over the seeds; one number where every seed gave it."""
    lo, hi = min(values), max(values)
    text = f"{statistics.median(values):.1f}" + (f" ({lo:.1f}–{hi:.1f})" if hi - lo > 1e-9 else "")
    return f"**{text}**" if bold else text


def main(argv=None):
    ap = argparse.ArgumentParser(description="A finished headline run against the committed distribution over "
                                 "seeds: the cells outside the seeds' range.",
                                 usage="python tools/compare.py RUN_DIR | --table")
    ap.add_argument("run_dir", nargs="?", help="a finished run of `continual.py --method sdpo --alpha 0.05`")
    ap.add_argument("--table", action="store_true", help="print the distribution (median (min–max) per cell)")
    ap.add_argument("--report", action="store_true", help="write the distribution as the family's report.md (a "
                    "committed file: this flag says so)")
    ap.add_argument("--family", default=FAMILY, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not (args.table or args.report) and not args.run_dir:
        ap.error("give a finished run directory (or --table)")
    try:
        dist, seeds, theirs = distribution(args.family)
    except (ValueError, OSError) as e:
        ap.error(str(e))
    if args.table:
        print(distribution_table(dist, seeds))
        return dist
    if args.report:
        path = os.path.join(args.family, "report.md")
        text = ("# The headline over seeds\n\n`python continual.py --method sdpo --alpha 0.05 --threads 1 --seed K` for "
                f"K = {', '.join(map(str, seeds))}, one directory each (packed in runs.parquet), on one processor. "
                "Acc@8 in % on the same 32 test prompts per benchmark for every seed; each cell the median "
                "(min–max) over the seeds; bold: a stage's own domain, right after it. G and F are A3's, relative to the base "
                "(%). `python tools/compare.py RUN_DIR` lists the cells of a run outside these ranges.\n\n"
                + distribution_table(dist, seeds) + "\n")
        write_atomically(path, lambda f: f.write(text))
        print(f"wrote {path}")
        return dist
    path = os.path.join(args.run_dir, "results.json")
    try:
        results = read_results(path)   # (a regular file: a FIFO would wait forever; every accuracy in [0, 1])
        mine_config = read_json(os.path.join(args.run_dir, "config.json"))
        mine = cells_of(results)
    except FileNotFoundError as e:
        ap.error(f"{args.run_dir}: {os.path.basename(e.filename)} is not there (a finished continual.py run has it)")
    except (ValueError, KeyError, TypeError, IndexError) as e:
        ap.error(f"{path}: not a finished run of the headline's configuration {RUN} ({type(e).__name__}: {e})")
    diff = differing_settings(mine_config, theirs)
    print(f"{args.run_dir}: seed {mine_config.get('seed')}, {mine_config.get('threads')} torch threads, against "
          f"{len(seeds)} seeds ({seeds[0]}–{seeds[-1]}, 1 thread) in {os.path.relpath(args.family)}/")
    if diff:
        print("not like for like: " + ", ".join(f"--{k.replace('_', '-')} {v} (theirs {t})" for k, v, t in diff))
    out = outside(mine, dist)
    print(f"{len(mine) - len(out)} of {len(mine)} cells inside the seeds' range [min, max]; by chance about "
          f"{2 / (len(seeds) + 1) * len(mine):.0f} of {len(mine)} fall outside it")
    if out:
        print("\n| cell | yours | median | seeds' range |\n|---|---|---|---|")
        for (a, b), v, med, lo, hi in out:
            print(f"| {a} {b} | {v:.1f} | {med:.1f} | [{lo:.1f}, {hi:.1f}] |")
    base = [b for (a, b), *_ in out if a == "base"]
    if base:
        print(f"\nthe base is outside on {', '.join(base)}: it is the same for every seed (the same test prompts and "
              f"sampling), so the model, the evaluation settings or the code differ from the distribution's")
    print(verdict(diff, base, out, len(mine), len(seeds)))
    return out


def verdict(diff, base, out, n_cells, n_seeds):
    """The comparison's last line. A like-for-like run's cell falls outside the [min, max] of n seeds with chance
    2/(n+1) (exchangeable seeds); more cells outside than the binomial's 99th percentile of that is a difference."""
    if diff:
        return "verdict: not like for like: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v, _ in diff)
    if base:
        return f"verdict: not the reference's base ({', '.join(base)}): the model, the evaluation or the code differ"
    chance = int(binom.ppf(0.99, n_cells, 2 / (n_seeds + 1)))
    if len(out) > chance:
        return (f"verdict: outside the range on {len(out)} cells (chance gives at most {chance}): "
                + ", ".join(f"{a} {b}" for (a, b), *_ in out[:6]) + (" …" if len(out) > 6 else ""))
    return f"verdict: looks like the reference ({len(out)} of {n_cells} cells outside, chance gives up to {chance})"


if __name__ == "__main__":
    run_command(main)   # (a failure it did not name itself: one error: line, never a traceback)
