"""lab.py — the class in one command: every exercise of LAB.md, in order, timed.

    python lab.py --all               # every exercise at class settings: the commands exactly as LAB.md gives them
    python lab.py 7                   # one exercise (or a few: 3 4 5)
    python lab.py --all --fast        # every exercise at small settings: does everything run here? (minutes)
    python lab.py --all --out DIR     # where it all goes (default runs/class; --fast: runs/class-fast)

The commands are read from LAB.md itself (the first ```bash block under each "## N." heading), so the
sheet and this script cannot disagree. Each runs in DIR (its `runs/...` land in DIR/runs/), one at a
time: two jobs on two cores slow each other ten-fold. Then DIR holds what a teacher hands out:

    DIR/LAB.md            the sheet (SOLUTIONS.md is not copied: the answers stay with the teacher)
    DIR/HANDOUT.md        the one-page handout (docs/HANDOUT.md)
    DIR/timings.md        exercise, command, seconds, exit status: this machine's timings for the class
    DIR/runs/             every exercise's output
    DIR/logs/N.txt        each command's output

A command that fails is reported and the others still run; the exit status is then 1.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
# --fast: flags appended to an exercise's command (argparse keeps the last value of a flag); None: as written
TINY_RUN = ["--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
            "--max-new-tokens", "32", "--curve-every", "0"]
FAST = {
    1: ["--n", "4", "--k", "2", "--max-new-tokens", "32"],
    2: ["--prompts", "2", "--group-size", "4", "--max-new-tokens", "32"],
    3: TINY_RUN,
    4: TINY_RUN,
    5: TINY_RUN,
    6: ["--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "2", "--eval-k", "2",
        "--max-new-tokens", "32"],
    7: TINY_RUN + ["--benchmarks", "math,tooluse,math_hard"],   # (a training domain, a new one, an OOD one)
    8: ["--kl-samples", "1"],
    9: None,
    10: None,
    11: None,
}


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


def run_exercise(number, command, out_dir, fast):
    """Run one exercise in out_dir, its output to out_dir/logs/N.txt: (seconds, exit status)."""
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    t0 = time.time()
    with open(os.path.join(out_dir, "logs", f"{number}.txt"), "w") as log:
        status = subprocess.run(argv_of(command, number, fast), cwd=out_dir, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONPATH=ROOT)).returncode
    return time.time() - t0, status


def timing_table(rows, fast):
    lines = [f"# The class's timings ({'--fast: small settings' if fast else 'class settings: the commands of LAB.md'})",
             "", f"Measured by `python lab.py --all{' --fast' if fast else ''}`, one exercise at a time, on this "
             f"machine ({os.cpu_count()} cores).", "", "| exercise | command | seconds | status |", "|---|---|---|---|"]
    lines += [f"| {n}. {title} | `{command}` | {seconds:.0f} | {'ok' if status == 0 else f'failed ({status})'} |"
              for n, title, command, seconds, status in rows]
    lines += ["", f"In all: {sum(r[3] for r in rows) / 60:.1f} minutes."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Every exercise of LAB.md, in order, timed; a folder to hand out.",
                                 usage="python lab.py (--all | N [N ...]) [--fast] [--out DIR]")
    ap.add_argument("numbers", nargs="*", type=int, help="exercise numbers (default with --all: every one)")
    ap.add_argument("--all", action="store_true", help="every exercise, in order")
    ap.add_argument("--fast", action="store_true", help="small settings (checks that everything runs, in minutes)")
    ap.add_argument("--out", default=None, help="the folder everything goes to (default runs/class, or "
                    "runs/class-fast with --fast: the two settings are different runs)")
    args = ap.parse_args(argv)
    args.out = args.out or os.path.join("runs", "class-fast" if args.fast else "class")
    sheet = exercises()
    known = [n for n, _, _ in sheet]
    if args.all == bool(args.numbers):
        ap.error("give --all or exercise numbers (not both)")
    wrong = [n for n in args.numbers if n not in known]
    if wrong:
        ap.error(f"no exercise {', '.join(map(str, wrong))} in LAB.md (it has {', '.join(map(str, known))})")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        ap.error(f"--out: '{args.out}' is a file")
    chosen = [e for e in sheet if args.all or e[0] in args.numbers]
    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(os.path.join(ROOT, "LAB.md"), os.path.join(args.out, "LAB.md"))
    if os.path.isfile(os.path.join(ROOT, "docs", "HANDOUT.md")):
        shutil.copyfile(os.path.join(ROOT, "docs", "HANDOUT.md"), os.path.join(args.out, "HANDOUT.md"))
    rows = []
    for number, title, command in chosen:
        print(f"== {number}. {title}\n$ {command}{' (--fast)' if args.fast else ''}", flush=True)
        seconds, status = run_exercise(number, command, args.out, args.fast)
        print(f"   {'ok' if status == 0 else f'FAILED (exit {status}): see logs/{number}.txt'}, {seconds:.0f} s",
              flush=True)
        rows.append((number, title, command, seconds, status))
    table = timing_table(rows, args.fast)
    with open(os.path.join(args.out, "timings.md"), "w") as f:
        f.write(table)
    print("\n" + table + f"\n{args.out}/: LAB.md, HANDOUT.md, timings.md, runs/, logs/")
    return 1 if any(r[4] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
