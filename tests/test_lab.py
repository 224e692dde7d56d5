"""LAB.md never rots: every exercise's command runs (lab.py, with its --fast settings appended: argparse keeps
the last value of a flag) and exits 0. An exercise added to the sheet without --fast settings fails."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import lab  # noqa: E402


def test_every_exercise_has_fast_settings():
    numbers = [n for n, _, _ in lab.exercises()]
    assert len(numbers) >= 8 and numbers == sorted(numbers)
    assert set(numbers) == set(lab.FAST)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("lab")


@pytest.mark.parametrize("number,title,command", lab.exercises())
def test_exercise_command_runs(number, title, command, workdir):
    seconds, status = lab.run_exercise(number, command, str(workdir), fast=True)
    log = (workdir / "logs" / f"{number}.txt").read_text()
    assert status == 0, f"exercise {number}: {command}\n{log[-3000:]}"


def test_lab_py_runs_an_exercise_and_writes_the_class_folder(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "lab.py"), "9", "--out", str(tmp_path / "class")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for f in ("LAB.md", "timings.md", "logs/9.txt"):
        assert (tmp_path / "class" / f).is_file()
    assert "| 9. The metrics by hand" in (tmp_path / "class" / "timings.md").read_text()
    assert not (tmp_path / "class" / "SOLUTIONS.md").exists()   # the answers stay with the teacher


@pytest.mark.parametrize("argv,message", [([], "give --all or exercise numbers"), (["99"], "no exercise 99"),
                                          (["--all", "3"], "not both")])
def test_lab_py_bad_input_is_one_line(argv, message):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "lab.py"), *argv], capture_output=True, text=True)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
