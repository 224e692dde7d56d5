"""--report-to: a tiny continual run logged to TensorBoard and to trackio, read back
with each library's own reader: every step's scalars and every stage's accuracies, G and F; without the package,
one error line naming what to install."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--stages", "math,science", "--benchmarks", "math,science", "--steps", "2", "--prompts-per-step", "4",
        "--group-size", "2", "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "16", "--curve-every", "0",
        "--no-drift", "--threads", "1"]


def run(args, cwd, env=None):
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def progress(run_dir):
    return json.load(open(os.path.join(run_dir, "progress.json")))


def test_tensorboard_holds_every_step_and_every_stage(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    run([os.path.join(ROOT, "continual.py"), "--method", "grpo,sdpo", *TINY, "--runs-dir", str(tmp_path), "--name", "tb",
         "--report-to", "tensorboard"], tmp_path)
    done = progress(tmp_path / "tb")
    for config in ("grpo", "sdpo_a0.05"):
        acc = event_accumulator.EventAccumulator(str(tmp_path / "tb" / "tensorboard" / config))
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert {"train/reward", "train/lr", "train/update_rel", "stage/acc/math", "stage/acc/science", "stage/G"} <= set(tags)
        assert [e.step for e in acc.Scalars("train/reward")] == [1, 2, 3, 4]   # steps counted over both stages
        stages = acc.Scalars("stage/acc/math")
        assert [e.step for e in stages] == [2, 4]
        assert [round(e.value, 4) for e in stages] == [round(s["acc"]["math"], 4) for s in done[config]["stages"]]
        assert [e.step for e in acc.Scalars("stage/F")] == [4]   # F: the earlier domains, from the second stage on
        if config != "grpo":
            assert "train/js" in tags and "train/demo_frac" in tags and "train/teacher_entropy" in tags


def test_trackio_holds_every_step_and_every_stage(tmp_path):
    pytest.importorskip("trackio")
    store = tmp_path / "trackio"
    env = {"TRACKIO_DIR": str(store)}
    run([os.path.join(ROOT, "continual.py"), "--method", "sdpo", *TINY, "--runs-dir", str(tmp_path), "--name", "tk",
         "--report-to", "trackio"], tmp_path, env)
    code = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
            "print(json.dumps([SQLiteStorage.get_logs('tk', 'sdpo_a0.05'), SQLiteStorage.get_run_config('tk', 'sdpo_a0.05')]))")
    logs, config = json.loads(run(["-c", code], tmp_path, env).stdout.strip().splitlines()[-1])
    steps = [r for r in logs if "train/reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and all("train/js" in r for r in steps)
    stages = [r for r in logs if "stage/acc/math" in r]
    done = progress(tmp_path / "tk")["sdpo_a0.05"]["stages"]
    assert [r["step"] for r in stages] == [2, 4]
    assert [round(r["stage/acc/science"], 4) for r in stages] == [round(s["acc"]["science"], 4) for s in done]
    assert config["alpha"] == 0.05 and config["method"] == "sdpo"


def test_without_the_package_one_error_line_names_what_to_install(tmp_path):
    """The package made unfindable in the command's own interpreter: one error line, exit 2, nothing written."""
    for kind in ("tensorboard", "trackio"):
        code = ("import sys, importlib.util; real = importlib.util.find_spec; "
                "importlib.util.find_spec = lambda name, *a: None if name == %r else real(name, *a); "
                "sys.argv = ['continual.py', '--report-to', %r]; sys.path.insert(0, %r); import continual; continual.main()"
                % (kind, kind, ROOT))
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and f"--report-to {kind} needs the {kind} package" in lines[-1], out.stderr[-2000:]
        assert "pip install -r requirements-trackers.txt" in lines[-1] and "Traceback" not in out.stderr
        assert not (tmp_path / "runs").exists()


def test_an_unwritable_trackio_store_is_one_error_line_before_any_work(tmp_path):
    """Round five: trackio loses every metric silently when its store cannot be written (exit 0); the
    store is probed before any work instead: one error line naming it, exit 2, nothing written."""
    pytest.importorskip("trackio")
    (tmp_path / "afile").write_text("")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), "--report-to", "trackio", *TINY],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRACKIO_DIR": str(tmp_path / "afile" / "store")})
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and "--report-to trackio: its store" in last and "cannot be written" in last, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs").exists()
