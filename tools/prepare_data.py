"""tools/prepare_data.py — the paper's datasets written once as release-format record files, which a run then reads.

    python tools/prepare_data.py hf:dapo_math hf:aime24 hf:math500 --out data/     # data/dapo_math.jsonl, …
    python tools/prepare_data.py hf:mmlu_redux:college_physics --out data/          # data/mmlu_redux_college_physics.jsonl
    python tools/prepare_data.py hf:toolalpaca:train_data.json --out data/          # a downloaded GitHub file
    python continual.py --stages data/dapo_math.jsonl --benchmarks data/aime24.jsonl,data/math500.jsonl ...

Each `hf:` task is read through its adapter (world/hub.py: the release's prompt text and the grader it uses) and
written as JSON lines, one record per line (`prompt`, `answer`, `kind`, `dataset`, `system`, `tests`), as verl's
data_preprocess scripts and the release do. Gated datasets (GPQA, ZebraLogic) need `hf auth login` first. A file
that is already there is left alone unless --overwrite (this command replaces only what it wrote).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra import safety  # noqa: E402
from infra.checkpoints import write_atomically  # noqa: E402
from world import hub  # noqa: E402

MARK = ".prepared"   # (beside the files: which of them this command wrote, so that --overwrite replaces only those)


def file_name(spec):
    """'hf:NAME' -> NAME.jsonl; 'hf:NAME:CONFIG' -> NAME_CONFIG.jsonl; 'hf:NAME:FILE' -> NAME_<file stem>.jsonl."""
    parts = spec.split(":", 2)
    tail = os.path.splitext(os.path.basename(parts[2]))[0] if len(parts) > 2 else ""
    return "_".join(p for p in (parts[1], tail) if p) + ".jsonl"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tasks", nargs="+", metavar="hf:NAME", help=f"of {', '.join('hf:' + n for n in hub.HUB_TASKS)}")
    ap.add_argument("--out", default="data", help="the folder the record files go to")
    ap.add_argument("--overwrite", action="store_true", help="replace a file this command wrote before")
    args = ap.parse_args(argv)
    for spec in args.tasks:
        try:
            hub.check_hub_task(spec)
        except ValueError as e:
            ap.error(str(e))
    safety.refuse_committed(ap.error, "--out", args.out)
    mark = os.path.join(args.out, MARK)
    mine = set(open(mark).read().split()) if os.path.isfile(mark) else set()
    for spec in args.tasks:
        path = os.path.join(args.out, file_name(spec))
        if os.path.exists(path) and not (args.overwrite and os.path.basename(path) in mine):
            ap.error(f"{path} is there already; nothing was written" + (
                " (add --overwrite to replace it)" if os.path.basename(path) in mine else
                " and this command did not write it: move it, or give another --out"))
    for spec in args.tasks:
        try:
            records = hub.load_hub_task(spec)
        except Exception as e:   # (a gated dataset without a login, no network, a bad file: each its own type)
            sys.exit(f"error: {spec}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}; "
                     f"the files written before it are kept")
        path = os.path.join(args.out, file_name(spec))
        os.makedirs(args.out, exist_ok=True)
        write_atomically(path, lambda f: f.writelines(json.dumps(r) + "\n" for r in records))
        mine.add(os.path.basename(path))
        write_atomically(mark, lambda f: f.write("\n".join(sorted(mine)) + "\n"))
        print(f"{spec}: {len(records)} records -> {path}")


if __name__ == "__main__":
    main()
