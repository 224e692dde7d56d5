"""Bad command-line values end in a one-line error and exit code 2, before any work (nothing written)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    ("continual.py", ["--alpha", "1.5"], "--alpha must be in [0, 1]"),
    ("continual.py", ["--beta", "-0.1"], "--beta must be in [0, 1]"),
    ("continual.py", ["--gamma", "0"], "--gamma must be in (0, 1]"),
    ("continual.py", ["--steps", "0"], "--steps must be in [1, 1000000]"),
    ("continual.py", ["--group-size", "1"], "--group-size must be in [2, 1024]"),
    ("continual.py", ["--eval-k", "0"], "--eval-k must be in [1, 1024]"),
    ("continual.py", ["--method", "ppo"], "unknown 'ppo'; known: grpo, sdpo, sdpo_0"),
    ("continual.py", ["--method", "sdpo,sdpo_5"], "the same configuration twice"),
    ("continual.py", ["--method", "grpo", "--mini-batches", "3"], "must be divisible by it"),
    ("continual.py", ["--clip-ratio-c", "0.5"], "--clip-ratio-c must be 0 (off) or finite > 1"),
    ("continual.py", ["--mask-ratio", "1"], "--mask-ratio must be in [0, 1)"),
    ("continual.py", ["--teacher-mix", "2"], "--teacher-mix must be in [0, 1]"),
    ("grpo.py", ["--loss-agg", "sum"], "invalid choice"),
    ("continual.py", ["--stages", "math,poetry"], "unknown task 'poetry'"),
    ("continual.py", ["--benchmarks", "mmlu"], "unknown task 'mmlu'"),
    ("continual.py", ["--model", "./no/such/dir"], "no such model directory"),
    ("grpo.py", ["--task", "poetry"], "unknown task 'poetry'"),
    ("sdpo.py", ["--alpha", "-1"], "--alpha must be in [0, 1]"),
    ("evaluate.py", ["--k", "0"], "--k must be in [1, 1024]"),
    ("grpo.py", ["--task", "hf:bfcl"], "read from its downloaded file"),
    ("continual.py", ["--benchmarks", "hf:nope"], "unknown hub task"),
    ("continual.py", ["--prompts-per-step", "6", "--sample-blocks", "4"], "must be divisible by the 4 sample blocks"),
    ("continual.py", ["--max-prompt-len", "-1"], "--max-prompt-len must be >= 0"),
    ("continual.py", ["--rank-frac", "0"], "--rank-frac must be in (0, 1]"),
    ("drift.py", ["no_such_run"], "is not a continual.py run directory"),
    ("tools/bench.py", ["--group-size", "1"], "--group-size must be >= 2"),
    ("razor.py", ["--a", "0"], "--a must be in (0, 1]"),
]


@pytest.mark.parametrize("script,args,message", CASES)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, script, args, message):
    out = subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3, out.stderr   # a short usage line and the error, no flag list
    assert os.listdir(tmp_path) == []


def test_bad_data_files_name_file_and_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    bad = data / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": "1", "kind": "math"}\n{"prompt": "b", "answer": \n')
    empty = data / "empty.jsonl"
    empty.write_text("\n")
    kindless = data / "kindless.jsonl"
    kindless.write_text('{"prompt": "a", "answer": "1", "kind": "poem"}\n')
    work = tmp_path / "work"
    work.mkdir()
    for path, message in [(bad, f"{bad}:2: not valid JSON"), (empty, f"{empty}: no records"),
                          (kindless, f"{kindless}:1: 'kind' must be one of")]:
        for script, flag in [("continual.py", "--stages"), ("grpo.py", "--task")]:
            out = subprocess.run([sys.executable, os.path.join(ROOT, script), flag, str(path)], cwd=work,
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 2 and message in out.stderr, (script, out.stderr)
            assert "Traceback" not in out.stderr
            assert os.listdir(work) == []


def test_unreachable_hub_dataset_is_one_line(tmp_path):
    """No network (offline mode): a hub task stops the run before any work, in one line."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "grpo.py"), "--task", "hf:math500"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf")))
    assert out.returncode == 2 and "--task" in out.stderr and "math-ai/math500" in out.stderr, out.stderr[-800:]
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()       # nothing written


def test_a_knob_is_declared_once_in_its_method_file():
    """(issue 44) Every row of grpo.KNOBS and sdpo.KNOBS is a flag of its scripts with the row's default, its
    check gives one error line, and a new row becomes a flag, checked and (if "config") part of the settings,
    with no edit anywhere else."""
    import grpo
    import sdpo
    from infra import flags
    for method, knobs in (("grpo", grpo.KNOBS), ("sdpo", sdpo.KNOBS)):
        args = flags.parser(method, "", "", knobs).parse_args([])
        for k in knobs:
            if k.get("only") != "continual":
                assert getattr(args, k["name"]) == k["default"], k["name"]
    row = dict(name="new_knob", default=0.5, group="paper", config=True, ok=lambda v: v < 1, allowed="below 1",
               help="a knob a student adds")
    knobs = [*sdpo.KNOBS, row]
    assert flags.one_task_args("sdpo", ["--new-knob", "0.25"], knobs)[1].new_knob == 0.25
    with pytest.raises(SystemExit):
        flags.one_task_args("sdpo", ["--new-knob", "2"], knobs)
    assert "--new-knob" in flags.parser("continual", "", "", knobs).format_help()
    assert sdpo.SETTINGS == tuple(k["name"] for k in sdpo.KNOBS if k.get("config"))
    assert grpo.SETTINGS == ("mini_batches", "epochs", "clip_ratio_c")
