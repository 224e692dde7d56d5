"""tools/reference.py — the confirmatory reference of the paper's claims (docs/studies/reference.md), seed by seed.

    python tools/reference.py --distances --into-results    # once, before any seed: the benchmarks' distances (X2)
    python tools/reference.py --seeds 10,11 --into-results  # the seeds' experiments into results/reference/
    python tools/reference.py --seeds 10,11 --jobs 2 --root runs/reference   # two side by side, into a folder of yours
    python tools/reference.py --seeds 12,13 --jobs 2 --only math,tooluse --root runs/reference   # some experiments
    python tools/reference.py --summary                     # the declared claims over every finished seed (printed)
    python tools/reference.py --summary --into-results      # … and written to results/reference/report.md
    python tools/reference.py --family defences --seeds 100,101,102 --jobs 2 --root runs/defences
    python tools/reference.py --family defences --summary
    python tools/reference.py --family followup --seeds 100,101,102 --jobs 2 --root runs/defences
    python tools/reference.py --family equal --seeds 10,11 --jobs 2 --into-results   # the equal-rate arm
    python tools/reference.py --family regen --seeds 10 --jobs 2        # the reference's continual, checkpoints kept
    python tools/reference.py --family frontier --seeds 10,11 --jobs 2 --into-results   # the rate frontier
    python tools/reference.py --family frontier --summary --figures docs/img --overwrite-committed

Nothing is written under results/ without --into-results (the committed reference lives there); --root DIR runs a
family into a folder of your own, and --summary --root DIR reads it. From any directory.

Every seed runs the experiments of analysis/claims.py's EXPERIMENTS (the continual run of GRPO, SDPO_0 and
SDPO_5%; the single-domain MATH and TOOLUSE runs of GRPO, the α sweep and StableSDPO; the CoT runs on the
thinking model), each a plain `python continual.py ... --seed S --runs-dir results/reference --name EXP-sS`.
An experiment whose results.json is there is finished and skipped, so the reference resumes seed by seed
and experiment by experiment; commit each finished directory (its checkpoints are not kept: .gitignore).
The claims, their metrics and the seeds were declared before any seed ran (docs/studies/reference.md).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import evaluate  # noqa: E402
from analysis import archive, claims, footing, frontier, probes  # noqa: E402
from analysis.figures import plot_footing, plot_frontier, plot_kl_law  # noqa: E402
from infra import flags, safety  # noqa: E402
from infra.children import run_all, run_child  # noqa: E402
from world import tasks  # noqa: E402
from infra.models import load_model  # noqa: E402
from infra.checkpoints import write_atomically  # noqa: E402
from infra.commands import read_json, run_command  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "reference")
# Where each family's run directories go. The equal-rate arm pairs by seed with the reference's;
# "regen" reruns the reference's continual experiment with its checkpoints kept (the collapse's interventions,
# docs/studies/collapse.md, start from them; its results.json must equal the committed one byte for byte).
ROOTS = {"paper": ROOT, "defences": ROOT, "followup": ROOT, "equal": os.path.join("results", "equal_rate"),
         "regen": os.path.join("runs", "regen"), "frontier": os.path.join("results", "frontier")}
# (relative ones: under the repository)


def finished(exp, seed, root=ROOT):
    """Has the experiment run: its results.json in the family's folder, loose or in its archive?"""
    return archive.archived(root, os.path.join(f"{exp}-s{seed}", "results.json"))


def experiments(family, seed=None):
    """{experiment: its continual.py flags} of a family: the paper's claims, the defences, the
    defences' follow-up (replay under the base teacher), the equal-rate arm (which of its experiments
    a seed runs depends on the seed) or the reference's continual experiment rerun with its checkpoints."""
    if family == "paper":
        return claims.EXPERIMENTS
    if family == "equal":
        return claims.EQUAL_RATE if seed is None else claims.equal_rate_experiments(seed)
    if family == "regen":
        return {"continual": claims.EXPERIMENTS["continual"]}
    if family == "frontier":
        return claims.FRONTIER
    return {exp: claims.defence_flags(exp) for exp in (claims.DEFENCES if family == "defences" else claims.FOLLOW_UP)}


# --quick: every experiment in its smallest form (one step, a few prompts), to see that the commands run
QUICK = ["--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "2", "--eval-k", "1",
         "--max-new-tokens", "16", "--curve-every", "0", "--kl-samples", "1"]


def run_experiment(exp, seed, threads=1, root=ROOT, family="paper", committed=False, quick=False):
    """One experiment of one seed, unless finished: `continual.py` with its flags; its time in
    <dir>/seconds.txt. Its output goes to <root>/<name>.out, appended to an older one (a rerun keeps the log of
    the run it resumes). A child that fails raises ExperimentFailed with its own last line."""
    if finished(exp, seed, root):
        return
    flags = experiments(family, seed)[exp]
    name = f"{exp}-s{seed}"
    cmd = [sys.executable, os.path.join(safety.REPO, "continual.py"), *flags.split(), "--seed", str(seed), "--runs-dir", root,
           "--name", name, "--threads", str(threads)] + (["--overwrite-committed"] if committed else []) + \
        (QUICK if quick else [])
    print("$", " ".join(cmd[1:]), flush=True)
    os.makedirs(root, exist_ok=True)
    t0, out = time.time(), os.path.join(root, f"{name}.out")
    run_child(cmd, out, name, safety.REPO)
    with open(os.path.join(root, name, "seconds.txt"), "w") as f:
        f.write(f"{time.time() - t0:.0f}\n")
    os.remove(out)
    print(f"finished {name} in {time.time() - t0:.0f} s", flush=True)


def run_seed(seed, threads=1, root=ROOT, family="paper", only=None):
    """Every experiment of one seed not yet finished (or those of `only`), in the family's order."""
    for exp in experiments(family):
        if not only or exp in only:
            run_experiment(exp, seed, threads, root, family)


def work_units(seeds, family="paper", only=None, root=ROOT):
    """The (experiment, seed) pairs left to run, seed by seed in the family's order: what --jobs workers share,
    so that no worker idles while another seed still has experiments."""
    return [(exp, s) for s in seeds for exp in experiments(family, s)
            if (not only or exp in only) and not finished(exp, s, root)]


def distances(root=ROOT, n=32, k=8, seed=0):
    """probes.benchmark_distances of the base model's evaluation responses (the reference's: 32 test prompts
    × 8 samples per benchmark, evaluation seed 0), written to <root>/distances.json."""
    model, tok = load_model("tiny")
    resp = {}
    evaluate.evaluate(model, tok, list(tasks.GENERATORS), n=n, k=k, seed=seed, responses=resp)
    out = probes.benchmark_distances(model, tok, resp)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "distances.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out


def seconds_table(root=ROOT, family="paper"):
    """Each finished experiment's wall time (its seconds.txt), experiment by seed, and each seed's total: a
    markdown table (an empty string when nothing has finished)."""
    exps = list(experiments(family)) + (list(claims.FOLLOW_UP) if family == "defences" else []) + \
        (["continual"] if family == "equal" else [])
    secs, root = {}, archive.materialized(root)
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        exp, _, seed = name.rpartition("-s")
        path = os.path.join(root, name, "seconds.txt")
        if exp in exps and seed.isdigit() and os.path.isfile(path):
            secs[(exp, int(seed))] = int(open(path).read().split()[0])
    seeds = sorted({s for _, s in secs})
    if not seeds:
        return ""
    rows = ["| experiment | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
    rows += [f"| `{e}` | " + " | ".join(f"{secs[e, s]} s" if (e, s) in secs else "—" for s in seeds) + " |"
             for e in exps]
    totals = [sum(v for (_, s2), v in secs.items() if s2 == s) for s in seeds]
    rows.append("| all | " + " | ".join(f"{t} s ({t / 60:.0f} min)" for t in totals) + " |")
    return "\n".join(rows)


def load_optional(path):
    return read_json(path) if os.path.lexists(path) else None   # (a regular file of valid JSON, or ValueError)


def equal_summary(root=os.path.join(safety.REPO, ROOTS["equal"]), write=True, figures=None):
    """The equal-rate arm (docs/studies/equal-footing.md): every claim at the per-method rates and at each shared rate, with the
    world's adequacy test beside it; written to <root>/report.md, and drawn to <figures>/equal_footing.png."""
    bundles = footing.read_bundles(ROOT, root)
    arm = sorted({s for s, x in bundles.items() if any(e in x for e in claims.EQUAL_RATE)})
    if not arm:
        raise ValueError(f"{root} holds no finished seed to summarise; nothing was written")
    base = json.load(open(os.path.join(safety.REPO, "results", "base", "tiny.json")))
    traces = load_optional(os.path.join(archive.materialized(root), "adequacy", "traces.json"))
    null = load_optional(os.path.join(archive.materialized(root), "adequacy", "null-iou.json"))
    table, rows = footing.footing_table(bundles, base, traces, null)
    if figures:
        os.makedirs(figures, exist_ok=True)
        print("wrote", plot_footing(footing.footing_figure_rows(rows), os.path.join(figures, "equal_footing.png")))
    text = (f"arm seeds with a finished experiment: {', '.join(map(str, arm)) or 'none yet'}\n\n"
            "What one learning rate gives each method (each run's log.jsonl; GRPO takes 4 optimizer steps per batch, "
            "SDPO 1, so at a shared rate GRPO's update is about 3× SDPO's; the per-method rates match the step):\n\n"
            + footing.update_size_table(bundles) + "\n\nDoes each method learn each stage? Seeds whose own domain "
            "rose over the stage / seeds, and the mean gain in points:\n\n" + footing.learning_table(bundles) +
            "\n\nForgetting from the peak (points, unfloored; the best accuracy an earlier domain had after its own "
            "stage − its final one, mean over the earlier domains), beside the paper's F; not declared:\n\n"
            + footing.peak_forgetting_table(bundles) + "\n\n" + table +
            "\n\n" + footing.FOOTING_NOTE + "\n\nH8b's report: SDPO_5%'s JS in its collapse stage, over the steps "
            "that distil anything (reference seeds)\n\n" + footing.collapse_js_table(
                {s: x for s, x in bundles.items() if s in claims.REFERENCE_SEEDS}))
    times = seconds_table(root, "equal")
    if times:
        text += "\n\nWall time per experiment (each directory's seconds.txt; two at a time on 2 cores):\n\n" + times
    print(text)
    if not write:
        print(f"\n(printed only: add --into-results to write {os.path.relpath(root)}/report.md)")
        return
    write_own_report(os.path.join(root, "report.md"), "# Equal footing: the claims at one shared learning rate "
                     "(`python tools/reference.py --family equal --summary`)", text, arm)


def frontier_summary(root=os.path.join(safety.REPO, ROOTS["frontier"]), write=True, figures=None):
    """Forgetting at matched gain (docs/studies/frontier.md): the frontier's cells (the committed ones at 1e-4 and 4e-4 with the
    new rates), the matched-gain family with Holm, the KL law; written to <root>/report.md, drawn to
    <figures>/frontier.png and kl_law.png."""
    runs = frontier.read_runs([ROOT, os.path.join(safety.REPO, ROOTS["equal"]), root])
    text, rows = frontier.summary_text(runs)
    new = sorted({s for s, r, lr, exp, p in runs if exp in claims.FRONTIER})
    text = f"frontier seeds with a finished experiment: {', '.join(map(str, new)) or 'none yet'}\n\n" + text
    times = seconds_table(root, "frontier")
    if times:
        text += "\n\nWall time per experiment (each directory's seconds.txt; two at a time on 2 cores):\n\n" + times
    if figures:
        os.makedirs(figures, exist_ok=True)
        one = frontier.single_version_cells(runs)   # the figures draw the single-version reading
        print("wrote", plot_frontier(one, os.path.join(figures, "frontier.png")))
        print("wrote", plot_kl_law(one, os.path.join(figures, "kl_law.png")))
    print(text)
    if not write:
        print(f"\n(printed only: add --into-results to write {os.path.relpath(root)}/report.md)")
        return
    write_own_report(os.path.join(root, "report.md"),
                     "# Forgetting at matched gain (`python tools/reference.py --family frontier --summary`)", text, new)


def summary(root=ROOT, family="paper", write=True, figures=None):
    """The family's declared claims over every seed with a finished experiment (and, for the defences, the
    table of what each costs, and the follow-up's when it has run); written to <root>/report*.md when `write`.
    Every results.json is checked against its directory first: a damaged or mismatched one stops it (ValueError)
    before anything is written."""
    if family == "equal":
        return equal_summary(root, write, figures)
    if family == "frontier":
        return frontier_summary(root, write, figures)
    family = "defences" if family == "followup" else family   # the follow-up's table is the defences' report's
    bundles = claims.read_reference(root)
    if family == "paper":
        bundles = {s: x for s, x in bundles.items() if any(e in x for e in claims.EXPERIMENTS)}
        rows = claims.measure_declared(list(bundles.values()))
    else:
        bundles = {s: x for s, x in bundles.items() if any(e in x for e in claims.DEFENCES)}
        rows = claims.measure_declared(list(bundles.values()), claims.EXPLORATORY)
    text = f"seeds: {', '.join(map(str, bundles)) or 'none finished yet'}\n\n" + claims.declared_table(rows)
    if family == "defences":
        text += "\n\nEach run's own level, mean [95% interval] over the seeds:\n\n" + \
            claims.defence_levels(list(bundles.values()))
        text += "\n\nEach defence − SDPO_5%, mean [95% interval] over the seeds:\n\n" + \
            claims.defence_table(list(bundles.values()))
        if any(e in x for x in bundles.values() for e in claims.FOLLOW_UP):
            text += "\n\nThe follow-up (declared after this table, before its runs): replay under each teacher\n\n" + \
                claims.follow_up_table(list(bundles.values()))
    times = seconds_table(root, family)
    if times:
        text += "\n\nWall time per experiment (each directory's seconds.txt; two at a time on 2 cores):\n\n" + times
    print(text)
    if not write:
        print(f"\n(printed only: add --into-results to write the report into {os.path.relpath(root)}/)")
        return rows
    name = "report.md" if family == "paper" else "report_defences.md"
    write_own_report(os.path.join(root, name),   # the table as it stands, committed with the seeds
                     f"# {'The paper' if family == 'paper' else 'The defences'}: the declared claims (`python "
                     f"tools/reference.py{'' if family == 'paper' else ' --family defences'} --summary`)", text, bundles)
    return rows


def write_own_report(path, title, text, seeds):
    """A summary's report: written only where it summarises something (a finished seed), and only over a report
    of its own (the same first line), never over a file it did not make (ValueError: one line, nothing written)."""
    if not seeds:
        raise ValueError(f"{os.path.dirname(path) or '.'} holds no finished seed to summarise; nothing was written")
    if os.path.lexists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if f.readline().rstrip("\n") != title:
                raise ValueError(f"{path} is not a report this command wrote (its first line differs); nothing was "
                                 f"written: move it, or summarise into another --root")
    write_atomically(path, lambda f: f.write(title + "\n\n" + text + "\n"))


def checked_seeds_and_only(ap, args):
    """--seeds (distinct, >= 0), --jobs and --only, each checked before anything runs: (seeds, only)."""
    if args.seeds is None:
        return None, None
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: a comma list of integers, got {args.seeds!r}")
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        ap.error(f"--seeds: distinct seeds >= 0, got {args.seeds!r}")
    if not 1 <= args.jobs <= 64:
        ap.error(f"--jobs must be in [1, 64], got {args.jobs}")
    only = args.only.split(",") if args.only else None
    if only and not set(only) <= set(experiments(args.family)) | ({"continual"} if args.family == "equal" else set()):
        ap.error(f"--only: unknown {sorted(set(only) - set(experiments(args.family)))}; "
                 f"known: {', '.join(experiments(args.family))}")
    return seeds, only


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default=None, help="comma list of seeds to run (the declared ones start at 10)")
    ap.add_argument("--jobs", type=int, default=1, help="experiments side by side, one thread each (default 1)")
    ap.add_argument("--distances", action="store_true", help="compute the benchmarks' distances (before any seed)")
    ap.add_argument("--summary", action="store_true", help="the declared claims over the finished seeds")
    ap.add_argument("--only", default=None, help="comma list of experiments to run (default: all of the family's)")
    ap.add_argument("--family", default="paper", choices=["paper", "defences", "followup", "equal", "regen", "frontier"],
                    help="the paper's claims (seeds 10-29), the defences (seeds 100-102), or the "
                         "defences' follow-up (replay under the base teacher, the same seeds; its table is in the "
                         "defences' summary), the equal-rate arm (into results/equal_rate/), a rerun of the "
                         "reference's continual experiment with its checkpoints (runs/regen/), or the learning-rate "
                         "frontier (seeds 10-19, into results/frontier/); docs/studies/ has each family's page")
    ap.add_argument("--into-results", action="store_true",
                    help="write into the committed folder results/ (the family's runs, its report.md, the distances): "
                         "without it, nothing is written there and --summary only prints")
    ap.add_argument("--root", default=None, help="the family's run folder (default: its committed one under results/, "
                                                  "which needs --into-results to be written)")
    ap.add_argument("--figures", metavar="DIR", help="with --family equal --summary: draw the claims at each rate to "
                    "DIR/equal_footing.png")
    ap.add_argument("--overwrite-committed", action="store_true", help="let --figures be a committed folder (docs/img)")
    ap.add_argument("--quick", action="store_true", help="every experiment in its smallest form (one step, a few "
                    "prompts): to see that the commands run, never for a result")
    args = ap.parse_args(argv)
    # every path is the repository's or absolute: the runner works from any directory, and changes none
    root = os.path.abspath(args.root) if args.root else os.path.join(safety.REPO, ROOTS[args.family])
    if not (args.seeds is not None or args.summary or args.distances):
        ap.error("nothing to do: give --seeds to run, --summary for the table, or --distances")
    seeds, only = checked_seeds_and_only(ap, args)
    if args.figures and not (args.summary and args.family in ("equal", "frontier")):
        ap.error("--figures draws the equal-rate arm's or the frontier's summary: give it with --family equal (or "
                 "frontier) --summary")
    if args.figures:
        flags.check_dir_flag(ap, "--figures", args.figures)
        safety.refuse_committed(ap.error, "--figures", args.figures, args.overwrite_committed)
    writes = (args.seeds is not None or args.distances) and safety.committed_path(root)
    if writes and not args.into_results:
        ap.error(f"this would write into {os.path.relpath(root)}/, committed results: add --into-results to do that "
                 f"on purpose, or --root DIR for a folder of your own")
    if args.distances:
        print(json.dumps(distances(root, **({"n": 2, "k": 1} if args.quick else {})), indent=1))
    if args.seeds is not None:
        units = work_units(seeds, args.family, only, root)
        if not units:
            print(f"nothing to do: every experiment of seeds {args.seeds} is finished in {os.path.relpath(root)}/")
        committed = bool(safety.committed_path(root))
        run_all(units, lambda unit: run_experiment(*unit, max(1, 2 // args.jobs), root=root, family=args.family,
                                                   committed=committed, quick=args.quick),
                args.jobs, f"{args.family} experiments")
    if args.summary:
        try:
            summary(root, family=args.family, write=args.into_results or not safety.committed_path(root),
                    figures=args.figures)
        except ValueError as e:
            print(f"error: {e}; the report was left as it was", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    run_command(main)   # (a failure it did not name itself: one error: line, never a traceback)
