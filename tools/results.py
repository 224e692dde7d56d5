"""tools/results.py — the committed results as a few files: pack a family's run directories into its archive, unpack
it, and recompute every committed number from the archives in one command.

    python tools/results.py --check                                        # every number, from the archives
    python tools/results.py --pack results/reference --into-results        # run directories -> runs.parquet
    python tools/results.py --unpack results/reference --out runs/reference-unpacked

--check reads every family's archive (each file against its saved sha256), rebuilds each committed report and
table from it into a temporary folder with the command that wrote it, and compares them with the committed ones:
one line per file, "same" or what differs; exit 1 if any differs. results/README.md names each file and the
command that rebuilds it. Nothing is written under results/ without --into-results.
"""
import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from analysis import archive  # noqa: E402
from infra import safety  # noqa: E402
from infra.commands import run_command  # noqa: E402

RESULTS = os.path.join(safety.REPO, "results")
FAMILIES = ("reference", "equal_rate", "frontier", "headline", "collapse", "coding_ablation", "continual", "cot",
            "mediation")
# each committed file a command rebuilds, and the command (run from the repository, its output into OUT)
REBUILT = {
    "reference/report.md": "tools/reference.py --summary --root {OUT}/reference",
    "reference/report_defences.md": "tools/reference.py --family defences --summary --root {OUT}/reference",
    "equal_rate/report.md": "tools/reference.py --family equal --summary --root {OUT}/equal_rate",
    "frontier/report.md": "tools/reference.py --family frontier --summary --root {OUT}/frontier",
    "mediation/report.md": "tools/mediation.py --summary --root {OUT}/mediation",
    "coding_ablation/report.md": "tools/coding_ablation.py --summary-only --out {OUT}/coding_ablation",
    "headline/report.md": "tools/compare.py --report --family {OUT}/headline",
    "tables/reference.parquet": "tools/tables.py --out {OUT}/tables",
    "tables/equal_rate.parquet": "tools/tables.py --out {OUT}/tables",
}


def check(out):
    """Every family read from its archive, every REBUILT file rebuilt into `out` and compared: [(file, verdict)]."""
    verdicts = []
    for family in FAMILIES:
        root = os.path.join(RESULTS, family)
        if not os.path.isfile(os.path.join(root, archive.ARCHIVE)):
            verdicts.append((f"{family}/{archive.ARCHIVE}", "missing"))
            continue
        try:
            n = len(archive.read(os.path.join(root, archive.ARCHIVE)))
            verdicts.append((f"{family}/{archive.ARCHIVE}", f"{n} files, each as saved"))
        except ValueError as e:
            verdicts.append((f"{family}/{archive.ARCHIVE}", f"DAMAGED: {e}"))
            continue
        shutil.copytree(archive.materialized(root), os.path.join(out, family), dirs_exist_ok=True)
    for rel, command in REBUILT.items():
        argv = [sys.executable, *[a.format(OUT=out) for a in command.split()]]
        if "--into-results" not in argv and ("--root" in argv or "--out" in argv):
            argv.append("--into-results")   # (into OUT, a folder of its own: the flag lets the report be written)
        run = subprocess.run(argv, cwd=safety.REPO, capture_output=True, text=True)
        rebuilt, committed = os.path.join(out, rel), os.path.join(RESULTS, rel)
        if run.returncode or not os.path.isfile(rebuilt):
            verdicts.append((rel, f"NOT REBUILT: {(run.stderr.strip().splitlines() or ['?'])[-1][:160]}"))
        else:
            verdicts.append((rel, "same" if same_file(rebuilt, committed) else "DIFFERS"))
    return verdicts


def same_file(a, b):
    """Two committed files alike: parquet tables by their content, text byte for byte."""
    if a.endswith(".parquet"):
        import pandas as pd   # (pandas: pyarrow's and datasets' companion; only this check reads a table whole)
        return pd.read_parquet(a).equals(pd.read_parquet(b))
    return open(a, "rb").read() == open(b, "rb").read()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute every committed report and table from the archives")
    ap.add_argument("--pack", metavar="FAMILY_DIR", help="pack the family's run directories into its runs.parquet")
    ap.add_argument("--unpack", metavar="FAMILY_DIR", help="write the family's archive out as directories (--out)")
    ap.add_argument("--out", default=None, help="where --unpack writes (a folder of yours)")
    ap.add_argument("--remove-packed", action="store_true", help="with --pack: then remove the run directories it "
                    "packed (each file checked in the archive first)")
    ap.add_argument("--into-results", action="store_true", help="let --pack write under results/ (the committed archives)")
    args = ap.parse_args(argv)
    if sum(map(bool, (args.check, args.pack, args.unpack))) != 1:
        ap.error("give one of --check, --pack FAMILY_DIR, --unpack FAMILY_DIR")
    if args.unpack:
        if not os.path.isfile(os.path.join(args.unpack, archive.ARCHIVE)):
            ap.error(f"--unpack {args.unpack}: no {archive.ARCHIVE} there")
        if not args.out:
            ap.error("--unpack needs --out, a folder of yours")
        safety.refuse_committed(ap.error, "--out", args.out)
        try:
            archive.unpack(os.path.join(args.unpack, archive.ARCHIVE), args.out)
        except ValueError as e:
            sys.exit(f"error: {e}")
        print(f"unpacked {args.unpack} into {args.out}")
    elif args.pack:
        if os.path.isfile(os.path.join(args.pack, archive.ARCHIVE)) and not archive.run_dirs(args.pack):
            print(f"nothing to pack: {args.pack} holds no run directories outside its {archive.ARCHIVE}")
            return
        if not os.path.isdir(args.pack) or not archive.run_dirs(args.pack):
            ap.error(f"--pack {args.pack}: no run directories there to pack")
        safety.refuse_committed(ap.error, "--pack", os.path.join(args.pack, archive.ARCHIVE), args.into_results,
                                "--into-results")
        live = archive.live_runs(args.pack)
        for d, pid in live.items():
            print(f"skipped {d}: a process (pid {pid}) is writing it; pack it again once it has finished")
        path, n = archive.pack(args.pack)
        print(f"packed {n} files into {path}")
        if args.remove_packed:
            left = archive.remove_packed(args.pack, archive.read(path))
            print(f"removed the files it holds from the run directories; {len(left)} folders keep files it does not "
                  f"hold (checkpoints, figures, folders that are no run)" if left else
                  "removed the run directories it holds")
    else:
        with tempfile.TemporaryDirectory(prefix="results-check-") as out:
            with contextlib.redirect_stdout(io.StringIO()):
                verdicts = check(out)
        for rel, verdict in verdicts:
            print(f"{rel}: {verdict}")
        if any(v.startswith(("DIFFERS", "NOT", "DAMAGED", "missing")) for _, v in verdicts):
            sys.exit(1)


if __name__ == "__main__":
    run_command(main)   # (a damaged archive, a file where a folder belongs, a full disk: one error: line)
