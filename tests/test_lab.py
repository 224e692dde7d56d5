"""LAB.md never rots: every exercise's command runs, with small settings appended (argparse keeps the
last value of a flag), and exits 0. An exercise added to the sheet without an entry here fails."""
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_RUN = ["--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
            "--max-new-tokens", "32", "--curve-every", "0"]
SMALL = {   # exercise number -> flags appended to its command (None: run it as written, it is quick)
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
}


def exercises():
    """(number, command) for every exercise of LAB.md: the first ```bash block under each '## N.' heading."""
    text = open(os.path.join(ROOT, "LAB.md")).read()
    out = []
    for m in re.finditer(r"^## (\d+)\. .*?```bash\n(.*?)\n```", text, flags=re.S | re.M):
        out.append((int(m.group(1)), m.group(2).strip()))
    return out


def test_every_exercise_has_small_settings_here():
    numbers = [n for n, _ in exercises()]
    assert len(numbers) >= 8 and numbers == sorted(numbers)
    assert set(numbers) == set(SMALL)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("lab")


@pytest.mark.parametrize("number,command", exercises())
def test_exercise_command_runs(number, command, workdir):
    argv = shlex.split(command)
    assert argv[0] == "python"
    if argv[1] == "-c":
        cmd = [sys.executable, "-c", argv[2]]
    else:
        cmd = [sys.executable, os.path.join(ROOT, argv[1]), *argv[2:], *(SMALL[number] or [])]
    out = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, f"exercise {number}: {command}\n{out.stdout[-1500:]}\n{out.stderr[-2500:]}"
