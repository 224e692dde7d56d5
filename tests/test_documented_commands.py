"""Every documented command runs: each command of README.md, LAB.md, docs/, classroom/SOLUTIONS.md and
results/README.md, in its smallest form (tests/documented.py says how), in a fresh checkout of the repository (its
tracked files copied to a folder of their own, so a command that writes results writes there), each document's
commands in their order (a later one may read what an earlier one made). The notebook's commands are LAB.md's,
which tests/test_lab.py runs through the notebook itself. A template (a placeholder in it) must name its script's
flags only."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import documented  # noqa: E402
from scripts_at_once import run_scripts  # noqa: E402


def fresh_checkout(dst):
    """The repository's tracked files (as they are in the working tree) copied into dst, with their git history
    absent: what a fresh clone holds. The committed models and results come with them."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    if not any(tracked):
        pytest.skip("not a git checkout")
    for rel in filter(None, tracked):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dst, rel))
    return dst


def telling(log, n=12):
    """The last n lines of a failed command's log that say something (a rule of "=" or "-", as torchrun closes
    its failure report with, says nothing), each cut at 200 characters: what CI prints of the failure."""
    said = [line[:200] for line in log if any(c.isalnum() for c in line)]
    return said[-n:] or ["(no output)"]


def test_every_documented_command_runs(tmp_path, request):
    if not request.config.getoption("--documented"):
        pytest.skip("every documented command takes minutes (13 on 2 cores): python -m pytest -q "
                    "tests/test_documented_commands.py --documented")
    checkout, logs = fresh_checkout(str(tmp_path / "checkout")), tmp_path / "logs"
    logs.mkdir()
    by_doc, seen = {}, set()
    for command, doc in documented.commands():
        kind, what = documented.how(command)
        if kind == "run" and json.dumps(what) not in seen:   # (two commands with one smallest form: run once)
            seen.add(json.dumps(what))
            by_doc.setdefault(doc, []).append(what)
    # first what the consumers of finished runs read; then two workers, each a document at a time (its commands in
    # order), the longest documents first
    workers = [[], []]
    for doc, argvs in sorted(by_doc.items(), key=lambda kv: -len(kv[1])):
        min(workers, key=len).extend(argvs)
    (tmp_path / "setup.json").write_text(json.dumps(documented.SETUP))
    (logs / "setup").mkdir()
    setup = subprocess.run([sys.executable, os.path.join(checkout, "tests", "documented.py"), "--run",
                            str(tmp_path / "setup.json"), checkout, str(logs / "setup")], cwd=checkout,
                           capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=1800)
    made = [json.loads(line) for line in setup.stdout.splitlines() if line.startswith("{")]
    assert [r["status"] for r in made] == [0] * len(documented.SETUP), (made, setup.stdout[-2000:])
    procs = []
    for w, argvs in enumerate(workers):
        plan = tmp_path / f"plan{w}.json"
        plan.write_text(json.dumps(argvs))
        (logs / str(w)).mkdir()
        mine = f"{checkout}-{w}"   # each worker in a checkout of its own (after the set-up): no two write one run
        shutil.copytree(checkout, mine, symlinks=True)
        procs.append(subprocess.Popen([sys.executable, os.path.join(mine, "tests", "documented.py"), "--run",
                                       str(plan), mine, str(logs / str(w))], cwd=mine, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    failed, ran = [], 0
    for w, p in enumerate(procs):
        out, _ = p.communicate(timeout=3600)
        for k, line in enumerate(row for row in out.splitlines() if row.startswith("{")):
            r = json.loads(line)
            ran += 1
            if r["status"] != 0:
                log = (logs / str(w) / f"{k}.log").read_text(errors="replace").splitlines()
                failed.append(f"{' '.join(r['argv'])} -> {r['status']}:\n    " + "\n    ".join(telling(log)))
    assert ran == sum(len(a) for a in workers), f"a worker stopped early after {ran} commands"
    assert not failed, "\n".join(failed)


def test_every_template_names_its_script_s_flags_only(tmp_path):
    """A documented command with a placeholder: its script exists and knows every flag the command gives."""
    templates = [(command, doc, documented.how(command)[1]) for command, doc in documented.commands()
                 if documented.how(command)[0] == "template" and documented.how(command)[1]]
    for command, doc, script in templates:
        assert os.path.isfile(os.path.join(ROOT, script)), (doc, command)
    scripts = sorted({script for _, _, script in templates})
    # each script's --help-all (else its --help), all in one process (tests/scripts_at_once.py)
    runs = run_scripts([(script, [flag], tmp_path) for script in scripts for flag in ("--help-all", "--help")])
    helps = {}
    for i, script in enumerate(scripts):
        (code, full, _), (_, short, _) = runs[2 * i], runs[2 * i + 1]
        helps[script] = full if code == 0 else short   # (a script without --help-all)
    for command, doc, script in templates:
        flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command.split(script, 1)[1])   # (the script's own)
        unknown = [f for f in flags if f not in helps[script]]
        assert not unknown, (doc, command, unknown)


def test_a_failed_command_is_reported_by_its_telling_lines():
    # torchrun's failure report ends in a rule of "="; CI once printed that rule and nothing else
    log = ["GPU check passed", "terminate called without an active exception", "  rank      : 0", "=" * 54, ""]
    assert telling(log) == log[:3]
    assert telling(log, 1) == ["  rank      : 0"]
    assert telling(["x" * 500]) == ["x" * 200]
    assert telling(["", "-" * 10]) == ["(no output)"]
