"""classroom/lab.py — the class in one command: every exercise of LAB.md, in order, timed.

    python classroom/lab.py --all               # every exercise at class settings: the commands exactly as LAB.md gives them
    python classroom/lab.py 7                   # one exercise (or a few: 3 4 5)
    python classroom/lab.py --all --fast        # every exercise at small settings: does everything run here? (minutes)
    python classroom/lab.py --all --out DIR     # where it all goes (default runs/class; --fast: runs/class-fast)
    python classroom/lab.py --all --check       # ... and compare every exercise's key numbers with classroom/SOLUTIONS.md

The commands are read from LAB.md itself (the first ```bash block under each "## N." heading), so the
sheet and this script cannot disagree. Each runs in DIR (its `runs/...` land in DIR/runs/), one at a
time: two jobs on two cores slow each other ten-fold. Then DIR holds what a teacher hands out:

    DIR/LAB.md            the sheet (classroom/SOLUTIONS.md is not copied: the answers stay with the teacher)
    DIR/HANDOUT.md        the one-page handout (docs/HANDOUT.md)
    DIR/timings.md        exercise, command, seconds, exit status: this machine's timings for the class
    DIR/key_numbers.md    each exercise's key numbers (classroom/SOLUTIONS.md's last table), read from its output
    DIR/runs/             every exercise's output
    DIR/logs/N.txt        each command's output

A command that fails is reported and the others still run; the exit status is then 1.
"""
import argparse
import ast
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

from experiment import metrics
from experiment.report import seed_log
from infra import safety

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --fast: flags appended to an exercise's command (argparse keeps the last value of a flag); None: as written
TINY_RUN = ["--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
            "--max-new-tokens", "32", "--curve-every", "0"]
FAST = {
    1: None,     # (exercises 1, 2 and 9-11 take seconds as written: --fast runs them so, and the suite checks
    2: None,     # their key numbers against classroom/SOLUTIONS.md)
    3: TINY_RUN + ["--seed", "0,1"],     # (two seeds still give differences.png its band)
    4: TINY_RUN + ["--seed", "0,1"],
    5: TINY_RUN + ["--seed", "0,1"],
    6: TINY_RUN,
    7: TINY_RUN + ["--benchmarks", "math,tooluse,math_hard"],   # (a training domain, a new one, an OOD one)
    8: ["--kl-samples", "1"],
    9: None,
    10: None,
    11: None,
    12: TINY_RUN + ["--benchmarks", "math,tooluse,math_hard"],
    13: None,    # (it reads the committed cells of results/collapse: seconds)
    14: None,    # (it reads the committed runs of results/reference and results/equal_rate: seconds)
    15: None,    # (it reads the committed runs of results/mediation: seconds)
}


# ----------------------------------------------------------------------------------------------
# Key numbers: what classroom/SOLUTIONS.md states of each exercise, read back from the exercise's own output
# ----------------------------------------------------------------------------------------------
# tolerance of a key number by its kind: accuracy points, a relative share (JS, entropy, drift), exact
# (nats: an absolute difference of per-token JS)
TOLERANCE = {"points": 3.0, "relative": 0.10, "exact": 1e-3, "nats": 0.002}


def log_text(out_dir, number):
    return open(os.path.join(out_dir, "logs", f"{number}.txt")).read()


def table_rows(text, header):
    """The rows (lists of cells) of the markdown table printed right after the line `header`."""
    lines = text[text.index(header):].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def seeds_numbers(out_dir, name):
    """Exercises 3-5: each run's final accuracy (mean over seeds, points) and JS over the last 10 steps
    (mean over seeds), and the second run minus the first in JS."""
    summary_dir = sorted(glob.glob(os.path.join(out_dir, "runs", f"{name}-s0-*")))[0]   # lab3-s0-1-2 (--fast: -s0-1)
    summary = json.load(open(os.path.join(summary_dir, "results.json")))
    out, js = {}, {}
    for run_name, run in summary["runs"].items():
        label = run["role"] or run_name
        out[(f"{label}: accuracy after the stage", "points")] = 100 * run["acc"][-1][0]["mean"]
        last = []
        for d in summary["seed_dirs"]:
            mine = [r["js"] for r in seed_log(os.path.join(out_dir, d))
                    if r.get("run") == run_name and "step" in r][-10:]
            last.append(sum(mine) / len(mine))
        js[label] = sum(last) / len(last)
        out[(f"{label}: JS, last 10 steps", "relative")] = js[label]
    first, second = list(js)
    out[(f"{second} − {first}: JS, last 10 steps", "nats")] = js[second] - js[first]
    return out


def key_numbers(number, out_dir):
    """{(name, kind): value} of exercise `number`'s key numbers, read from what its command wrote in out_dir
    (kind: a TOLERANCE key). Exercise 11 has none here: tests/test_lab.py checks each changed line."""
    runs = os.path.join(out_dir, "runs")
    if number == 1:
        return {(f"{r[0]}: {col} demo %", "points"): float(r[i]) for r in
                table_rows(log_text(out_dir, 1), "Teacher check") for i, col in ((2, "without"), (3, "with"))
                if r[i] != "—"}   # (— : no prompt of the domain had a success to show)
    if number == 2:
        m = re.search(r"(\d+) of (\d+) responses have a teacher signal; mean GJSD per distilled token ([\d.]+)",
                      log_text(out_dir, 2))
        return {("responses with a teacher signal", "exact"): int(m.group(1)),
                ("mean GJSD per distilled token", "relative"): float(m.group(3))}
    if number in (3, 4, 5):
        return seeds_numbers(out_dir, f"lab{number}")
    if number == 6:
        rows = [r for r in seed_log(os.path.join(runs, "lab6")) if "step" in r]
        results = json.load(open(os.path.join(runs, "lab6", "results.json")))
        return {("CODING after 30 steps %", "points"): 100 * results["runs"]["grpo"]["acc"][-1][0],
                ("clip fraction, mean over steps %", "relative"): 100 * sum(r["clip_frac"] for r in rows) / len(rows),
                ("clip fraction of the first of the four steps, max %", "exact"):
                    100 * max(r["clip_frac_by_step"][0] for r in rows)}
    if number == 7:
        results = json.load(open(os.path.join(runs, "lab7", "results.json")))
        return {(f"{metrics.role_of(run) or name}: {b} after the last stage %", "points"): 100 * acc
                for name, run in results["runs"].items() for b, acc in zip(results["benchmarks"], run["acc"][-1])
                if b in ("math", "tooluse")}   # the exercise's question: gained TOOLUSE, lost MATH
    if number == 12:   # the same question as 7's, with a lever: what SDPO_5% keeps of MATH, and gains on TOOLUSE
        results = json.load(open(os.path.join(runs, "lab12", "results.json")))
        return {(f"{name}: {b} after the last stage %", "points"): 100 * acc
                for name, run in results["runs"].items() for b, acc in zip(results["benchmarks"], run["acc"][-1])
                if b in ("math", "tooluse")}
    if number == 8:
        drift = json.load(open(os.path.join(runs, "lab7", "drift.json")))
        return {**{(f"{name}: NSS vs base, mean over matrices", "relative"): rows[-1]["params_vs_base"]["all"]["nss_mean"]
                   for name, rows in drift.items()},
                **{(f"{name}: KL to the base, nats", "relative"): rows[-1]["kl_to_base_mean"] for name, rows in drift.items()}}
    if number == 9:
        return {(f"line {i + 1}: {k}", "exact"): v for i, line in enumerate(log_text(out_dir, 9).splitlines()[:2])
                for k, v in ast.literal_eval(line).items() if isinstance(v, float)}
    if number == 14:   # what one learning rate gives each method, from the committed runs' logs
        text = log_text(out_dir, 14)
        size = {(r[0], r[1]): r for r in table_rows(text, "What one learning rate gives each method")}
        learns = {(r[0], r[1]): r for r in table_rows(text, "Does each method learn each stage?")}
        return {("SDPO_0 ÷ GRPO, per-batch update at one rate (1e-4), stage 1", "exact"):
                    float(size[("SDPO_0", "1e-04")][3].split(" / ")[0]),
                ("SDPO_0 at 4e-4 ÷ GRPO at 1e-4, per-batch update, stage 1", "exact"):
                    float(size[("SDPO_0", "4e-04")][4].split(" / ")[0]),
                ("GRPO at 4e-4: seeds whose MATH rose in stage 1, of 32", "exact"):
                    int(learns[("GRPO", "4e-04")][2].split("/")[0])}
    if number == 15:   # the mediation's declared tests, from the committed runs
        tests = {r[0]: r for r in table_rows(log_text(out_dir, 15), "## The declared tests")}
        named = {"M1": "SDPO_0 − GRPO, MATH drop at matched gain (points)",
                 "M2": "SDPO_0 − GRPO, KL_old at matched gain (nats)",
                 "M5": "failed-only − SDPO_0, MATH drop at matched gain (points)"}
        return {(f"{t}: {name}", "exact"): float(tests[t][4].split(" [")[0]) for t, name in named.items()}
    if number == 10:
        m = re.search(r"moves ([\d.]+)x as far", log_text(out_dir, 10))
        return {("the teacher's KL to the base over the Razor policy's", "exact"): float(m.group(1))}
    return {}


def within(value, stated, kind):
    """Whether a measured key number agrees with the stated one at its kind's tolerance."""
    if kind == "relative":
        return abs(value - stated) <= TOLERANCE[kind] * max(abs(stated), 1e-12)
    return abs(value - stated) <= TOLERANCE[kind]


def fmt(value):
    return f"{value:.4g}"


def key_numbers_table(numbers):
    """numbers: {exercise: {(name, kind): value}} -> the markdown table classroom/SOLUTIONS.md keeps."""
    lines = ["| exercise | key number | value | tolerance |", "|---|---|---|---|"]
    for number, found in numbers.items():
        for (name, kind), value in found.items():
            tol = f"±{TOLERANCE[kind]:g}" + (" relative" if kind == "relative" else f" {kind}")
            lines.append(f"| {number} | {name} | {fmt(value)} | {tol} |")
    return "\n".join(lines) + "\n"


def stated_numbers(solutions=os.path.join(ROOT, "classroom", "SOLUTIONS.md")):
    """{exercise: {name: (value, kind)}} from classroom/SOLUTIONS.md's key-number table."""
    text = open(solutions).read()
    kinds = {f"±{t:g}" + (" relative" if k == "relative" else f" {k}"): k for k, t in TOLERANCE.items()}
    stated = {}
    for number, name, value, tol in table_rows(text, "## Key numbers"):
        stated.setdefault(int(number), {})[name] = (float(value), kinds[tol])
    return stated


def check_numbers(number, out_dir, stated=None):
    """[(name, measured, stated, ok)] of one exercise against classroom/SOLUTIONS.md."""
    stated = (stated or stated_numbers()).get(number, {})
    measured = {name: value for (name, _), value in key_numbers(number, out_dir).items()}
    return [(name, measured.get(name), value, name in measured and within(measured[name], value, kind))
            for name, (value, kind) in stated.items()]


# ----------------------------------------------------------------------------------------------
# The notebook (classroom/lab.ipynb): each exercise's question from LAB.md, then its command, output and figures
# ----------------------------------------------------------------------------------------------
# the figures LAB.md tells students to look at, per exercise (paths under the class folder)
# ('-s0-*': the seeds' summary, runs/lab3-s0-1-2 at class settings, runs/lab3-s0-1 with --fast)
FIGURES = {2: ["runs/lab2/tokens.png"],
           3: ["runs/lab3-s0-*/differences.png", "runs/lab3-s0/curves.png"],
           4: ["runs/lab4-s0-*/differences.png", "runs/lab4-s0/curves.png"],
           5: ["runs/lab5-s0-*/differences.png"],
           6: ["runs/lab6/curves.png"],
           7: ["runs/lab7/accuracy.png", "runs/lab7/gain.png"],
           8: ["runs/lab7/drift.png"],
           13: ["runs/lab13/loop_steps.png", "runs/lab13/loop_stages.png"]}


def where_to_look(number, out_dir):
    """The lines that say where an exercise's report and figures are (LAB.md's paths, under the class folder)."""
    shown = [p for pattern in FIGURES.get(number, []) for p in sorted(glob.glob(os.path.join(out_dir, pattern)))]
    reports = sorted({os.path.join(os.path.dirname(p), "report.md") for p in shown
                      if os.path.isfile(os.path.join(os.path.dirname(p), "report.md"))})
    return ([f"its report: {', '.join(reports)}"] if reports else []) + \
        ([f"look at: {', '.join(shown)}"] if shown else [])


def question(number, sheet=os.path.join(ROOT, "LAB.md")):
    """LAB.md's section of exercise `number`: its question, the prediction asked, its command, what to look at."""
    text = open(sheet).read()
    m = re.search(rf"^(## {number}\. .*?)(?=^## |\Z)", text, flags=re.S | re.M)
    return m.group(1).strip()


def readable_log(text, last=60):
    """A command's output without its progress bars and weight-loading lines: its last `last` lines."""
    lines = [line.split("\r")[-1] for line in text.splitlines()]
    keep = [line for line in lines if "it/s]" not in line and "s/it]" not in line and "Loading weights" not in line]
    return "\n".join(keep[-last:])


def notebook_exercise(number, out_dir, fast):
    """classroom/lab.ipynb's cell of one exercise: run its LAB.md command (as `python classroom/lab.py N` does), show what it
    printed, its figures inline and its key numbers. Returns the exit status."""
    from IPython.display import Image, Markdown, display   # (classroom/lab.py itself runs without IPython)
    command = dict((n, c) for n, _, c in exercises())[number]
    os.makedirs(out_dir, exist_ok=True)
    seconds, status = run_exercise(number, command, out_dir, fast)
    display(Markdown(f"`$ {command}`{' (with --fast settings)' if fast else ''}: exit {status}, {seconds:.0f} s"))
    print(readable_log(log_text(out_dir, number)))
    for pattern in FIGURES.get(number, []):
        for path in sorted(glob.glob(os.path.join(out_dir, pattern))):
            display(Markdown(f"`{os.path.relpath(path, out_dir)}`"), Image(filename=path))
    if status == 0 and key_numbers(number, out_dir):
        display(Markdown("Key numbers (classroom/SOLUTIONS.md has the class settings' values):\n\n" +
                         key_numbers_table({number: key_numbers(number, out_dir)})))
    return status


def exercises(sheet=os.path.join(ROOT, "LAB.md")):
    """[(number, title, command)] of every exercise: the first ```bash block under each '## N.' heading."""
    text = open(sheet).read()
    return [(int(m.group(1)), m.group(2).strip(), m.group(3).strip())
            for m in re.finditer(r"^## (\d+)\. (.*?)\n.*?```bash\n(.*?)\n```", text, flags=re.S | re.M)]


def argv_of(command, number, fast):
    """The command as this Python runs it: `python X.py ...` -> [sys.executable, ROOT/X.py, ..., FAST flags]."""
    argv = shlex.split(command)
    if argv[0] != "python":
        raise ValueError(f"exercise {number}: '{command}' does not start with python")
    if argv[1] == "-c":
        return [sys.executable, "-c", argv[2]]
    return [sys.executable, os.path.join(ROOT, argv[1]), *argv[2:], *((FAST.get(number) or []) if fast else [])]


# classroom/SOLUTIONS.md's key numbers were measured with 2 torch threads (a 2-core machine, every core): a result
# depends on the thread count (floating-point sums change order, then sampling diverges), so --check pins it
SOLUTIONS_THREADS = 2


def run_exercise(number, command, out_dir, fast, threads=None):
    """Run one exercise in out_dir, its output to out_dir/logs/N.txt: (seconds, exit status). threads: the torch
    thread count of its processes (OMP_NUM_THREADS, which every entry point honours); None leaves it as it is."""
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    t0 = time.time()
    with open(os.path.join(out_dir, "logs", f"{number}.txt"), "w") as log:
        status = subprocess.run(argv_of(command, number, fast), cwd=out_dir, stdout=log, stderr=subprocess.STDOUT,
                                env=env).returncode
        for run_dir in runs_of(command, out_dir) if status == 0 else []:   # its report.md and figures
            status = status or subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report.py"), run_dir],
                                              cwd=out_dir, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    return time.time() - t0, status


def runs_of(command, out_dir):
    """The run directories a `python continual.py ... --name N` exercise wrote (runs/N, or each seed's runs/N-sS and
    the summary runs/N-s0-1-2), which `python tools/report.py` then draws."""
    argv = shlex.split(command)
    if argv[1:2] != ["continual.py"] or "--name" not in argv:
        return []
    name = argv[argv.index("--name") + 1]
    found = glob.glob(os.path.join(out_dir, "runs", name)) + glob.glob(os.path.join(out_dir, "runs", f"{name}-s*"))
    return sorted(os.path.relpath(d, out_dir) for d in found if os.path.isfile(os.path.join(d, "results.json")))


def timing_table(rows, fast):
    lines = [f"# The class's timings ({'--fast: small settings' if fast else 'class settings: the commands of LAB.md'})",
             "", f"Measured by `python classroom/lab.py --all{' --fast' if fast else ''}`, one exercise at a time, on this "
             f"machine ({os.cpu_count()} cores).", "", "| exercise | command | seconds | status |", "|---|---|---|---|"]
    lines += [f"| {n}. {title} | `{command}` | {seconds:.0f} | {'ok' if status == 0 else f'failed ({status})'} |"
              for n, title, command, seconds, status in rows]
    lines += ["", f"In all: {sum(r[3] for r in rows) / 60:.1f} minutes."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Every exercise of LAB.md, in order, timed; a folder to hand out.",
                                 usage="python classroom/lab.py (--all | N [N ...]) [--fast | --check] [--out DIR]")
    ap.add_argument("numbers", nargs="*", type=int, help="exercise numbers (default with --all: every one)")
    ap.add_argument("--all", action="store_true", help="every exercise, in order")
    ap.add_argument("--fast", action="store_true", help="small settings (checks that everything runs, in minutes)")
    ap.add_argument("--check", action="store_true", help="compare each exercise's key numbers with classroom/SOLUTIONS.md "
                    "(class settings only, with the 2 torch threads they were measured with) and exit 1 if one differs "
                    "by more than its tolerance")
    ap.add_argument("--out", default=None, help="the folder everything goes to (default runs/class, or "
                    "runs/class-fast with --fast: the two settings are different runs)")
    args = ap.parse_args(argv)
    if args.out is not None and not args.out.strip():
        ap.error("--out: give a folder (it was empty)")
    args.out = args.out or os.path.join("runs", "class-fast" if args.fast else "class")
    sheet = exercises()
    known = [n for n, _, _ in sheet]
    if args.all == bool(args.numbers):
        ap.error("give --all or exercise numbers (not both)")
    wrong = [n for n in args.numbers if n not in known]
    if wrong:
        ap.error(f"no exercise {', '.join(map(str, wrong))} in LAB.md (it has {', '.join(map(str, known))})")
    if args.check and args.fast:
        ap.error("--check compares the class settings' numbers with classroom/SOLUTIONS.md: not with --fast")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        ap.error(f"--out: '{args.out}' is a file")
    safety.refuse_committed(ap.error, "--out", args.out)   # (its runs/, logs/ and copies of LAB.md go there)
    chosen = [e for e in sheet if args.all or e[0] in args.numbers]
    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(os.path.join(ROOT, "LAB.md"), os.path.join(args.out, "LAB.md"))
    if os.path.isfile(os.path.join(ROOT, "docs", "HANDOUT.md")):
        shutil.copyfile(os.path.join(ROOT, "docs", "HANDOUT.md"), os.path.join(args.out, "HANDOUT.md"))
    rows = []
    for number, title, command in chosen:
        print(f"== {number}. {title}\n$ {command}{' (--fast)' if args.fast else ''}", flush=True)
        seconds, status = run_exercise(number, command, args.out, args.fast, SOLUTIONS_THREADS if args.check else None)
        print(f"   {'ok' if status == 0 else f'FAILED (exit {status}): see logs/{number}.txt'}, {seconds:.0f} s "
              f"(its output: {os.path.join(args.out, 'logs', f'{number}.txt')})", flush=True)
        found = key_numbers(number, args.out) if status == 0 else {}
        for (name, _), value in found.items():   # the exercise's answer, on the console (SOLUTIONS.md has the class's)
            print(f"   {name}: {fmt(value)}", flush=True)
        for line in where_to_look(number, args.out) if status == 0 else []:
            print(f"   {line}", flush=True)
        rows.append((number, title, command, seconds, status))
    table = timing_table(rows, args.fast)
    with open(os.path.join(args.out, "timings.md"), "w") as f:
        f.write(table)
    numbers = {n: key_numbers(n, args.out) for n, _, _, _, status in rows if status == 0}
    with open(os.path.join(args.out, "key_numbers.md"), "w") as f:   # (for the teacher: classroom/SOLUTIONS.md's table)
        f.write(key_numbers_table(numbers))
    print("\n" + table + f"\n{args.out}/: LAB.md, HANDOUT.md, timings.md, key_numbers.md, runs/, logs/")
    failed = any(r[4] for r in rows)
    if args.check:
        failed |= not report_check(numbers, args.out)
    return 1 if failed else 0


def report_check(numbers, out_dir):
    """--check: print every key number against classroom/SOLUTIONS.md's; True when all agree."""
    stated, ok = stated_numbers(), True
    print("\nKey numbers against classroom/SOLUTIONS.md (tolerances: " + ", ".join(f"{k} ±{t:g}" for k, t in TOLERANCE.items()) + ")")
    for number in numbers:
        for name, measured, value, agrees in check_numbers(number, out_dir, stated):
            ok &= agrees
            print(f"  {'ok  ' if agrees else 'DIFF'} {number}. {name}: {'missing' if measured is None else fmt(measured)}"
                  f" (classroom/SOLUTIONS.md: {fmt(value)})")
    return ok


if __name__ == "__main__":
    sys.exit(main())
