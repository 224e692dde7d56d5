"""Round six: a run's record says who made each stage. The first invocation's settings stay in
config.json and each later one is appended (code version, threads, time) with one warning when they differ; each
stage records its checkpoint's digest, which a resume checks; a run rerun from its own config.json is quiet, and
--config never takes runs_dir or name from the file."""
import json
import os
import shutil

import pytest
import torch

import continual

TINY = ["--method", "grpo", "--stages", "math,science", "--benchmarks", "math", "--steps", "1",
        "--prompts-per-step", "2", "--group-size", "2", "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "8",
        "--curve-every", "0", "--no-drift", "--mini-batches", "2"]


def test_a_rerun_with_other_threads_keeps_the_first_record_and_says_so(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        continual.main(TINY + ["--runs-dir", runs, "--name", "r", "--threads", "1"])
        config = json.load(open(f"{runs}/r/config.json"))
        progress = json.load(open(f"{runs}/r/progress.json"))
        assert config["threads"] == 1 and "invocations" not in config
        stage = progress["grpo_mb2"]["stages"][0]
        assert stage["made_by"]["threads"] == 1 and len(stage["checksums"]) == 64   # a sha256, not True
        capsys.readouterr()
        continual.main(TINY + ["--runs-dir", runs, "--name", "r", "--threads", "2"])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert "with 1 torch threads; this invocation is code" in err and "with 2" in err
    again = json.load(open(f"{runs}/r/config.json"))
    assert again["threads"] == 1 and [i["threads"] for i in again["invocations"]] == [2]


def test_a_stage_checkpoint_copied_from_another_run_is_refused_on_resume(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    continual.main(TINY + ["--runs-dir", runs, "--name", "a", "--threads", "1"])
    continual.main(TINY + ["--runs-dir", runs, "--name", "b", "--threads", "1", "--keep-optimizer"])   # (other files)
    ckpt = "checkpoints/grpo_mb2/stage1-math"
    shutil.rmtree(f"{runs}/a/{ckpt}")
    shutil.copytree(f"{runs}/b/{ckpt}", f"{runs}/a/{ckpt}")   # whole, its own checksums intact: only the digest tells
    with pytest.raises(SystemExit) as e:
        continual.main(TINY + ["--runs-dir", runs, "--name", "a", "--threads", "1"])
    assert e.value.code not in (0, None)
    assert "is not the checkpoint stage 1 saved" in capsys.readouterr().err


def test_a_rerun_from_its_own_config_is_quiet_and_stays_where_it_is_told(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    continual.main(TINY + ["--runs-dir", runs, "--name", "c", "--threads", "1"])
    config = json.load(open(f"{runs}/c/config.json"))
    config["runs_dir"] = "/elsewhere/a/machine/s/folder"   # (what a committed config of another machine records)
    json.dump(config, open(tmp_path / "theirs.json", "w"))
    capsys.readouterr()
    continual.main(["--config", str(tmp_path / "theirs.json"), "--runs-dir", runs, "--name", "c2"])
    err = capsys.readouterr().err
    assert "warning: --" not in err, err   # (it printed one per flag of the method not run)
    assert os.path.isfile(f"{runs}/c2/results.json") and not os.path.exists("/elsewhere")
    assert json.load(open(f"{runs}/c2/results.json"))["runs"]["grpo_mb2"]["acc"] == \
        json.load(open(f"{runs}/c/results.json"))["runs"]["grpo_mb2"]["acc"]
