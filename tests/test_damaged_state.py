"""Damaged run state: every case either stops with exit 1 and one message that names the file
and says what to do, or recovers safely and ends with the same results as the undamaged run. Nothing
is deleted silently (what is set aside is kept beside it)."""
import json
import os
import shutil

import pytest
import torch

import continual

ARGV = ["--method", "sdpo", "--stages", "math,science", "--benchmarks", "train", "--steps", "1",
        "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "3", "--eval-k", "2", "--max-new-tokens", "24",
        "--curve-every", "0", "--name", "run"]
RUN = "sdpo_a0.05"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished run (two stages, drift measured), and its results."""
    runs = tmp_path_factory.mktemp("runs")
    results = continual.main(ARGV + ["--runs-dir", str(runs)])
    return runs / "run", results


def copy_of(finished, tmp_path):
    src, _ = finished
    dst = tmp_path / "run"
    shutil.copytree(src, dst)
    progress = json.loads((dst / "progress.json").read_text().replace(str(src), str(dst)))
    (dst / "progress.json").write_text(json.dumps(progress))
    return dst


def as_if_stage_2_was_lost(run):
    """The state a kill during stage 2 leaves: progress lists stage 1 only, stage 2's checkpoint is gone."""
    progress = json.loads((run / "progress.json").read_text())
    progress[RUN]["stages"] = progress[RUN]["stages"][:1]
    (run / "progress.json").write_text(json.dumps(progress))
    shutil.rmtree(run / "checkpoints" / RUN / "stage2-science")


def with_partial(run):
    """A Ctrl-C's saved mid-stage state for stage 2 (after step 0: the stage restarts either way)."""
    as_if_stage_2_was_lost(run)
    part = run / "partial"
    shutil.copytree(run / "checkpoints" / RUN / "stage1-math", part)
    torch.save({"run": RUN, "stage": 1, "step": 0, "rows": [], "curve": []}, part / "partial.pt")
    model = torch.nn.Linear(1, 1)
    torch.save(torch.optim.AdamW(model.parameters()).state_dict(), part / "optimizer.pt")
    torch.save({}, part / "teacher.pt")


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def damaged_rerun(finished, tmp_path, damage, capsys):
    """A copy of the finished run, damaged, then the same command again: (exit code, results, output)."""
    run = copy_of(finished, tmp_path)
    damage(run)
    return (run, *rerun(run, capsys))


def rerun(run, capsys):
    capsys.readouterr()
    try:
        results = continual.main(ARGV + ["--runs-dir", str(run.parent)])
        code = 0
    except SystemExit as e:
        results, code = None, e.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, results, out


STOPS = {   # damage -> the file the message must name
    "progress.json truncated": (lambda r: truncate(r / "progress.json"), "progress.json"),
    "progress.json garbage": (lambda r: (r / "progress.json").write_text("\x00garbage"), "progress.json"),
    "stage checkpoint weights truncated": (lambda r: (as_if_stage_2_was_lost(r), truncate(
        r / "checkpoints" / RUN / "stage1-math" / "model.safetensors")), "stage1-math"),
    "stage checkpoint config.json garbage": (lambda r: (as_if_stage_2_was_lost(r), (
        r / "checkpoints" / RUN / "stage1-math" / "config.json").write_text("{{{")), "stage1-math"),
    "responses/base.json garbage": (lambda r: (as_if_stage_2_was_lost(r), (r / "responses" / "base.json").write_text(
        "[1, 2")), "base.json"),
    # these ended in tracebacks, or advised --overwrite (which deletes the completed stages)
    "run config.json garbage": (lambda r: (r / "config.json").write_text("{{{"), "config.json"),
    "run config.json deleted": (lambda r: os.remove(r / "config.json"), "config.json"),
    "progress.json replaced by a directory": (lambda r: (os.remove(r / "progress.json"), os.mkdir(r / "progress.json")),
                                              "progress.json"),
    "results.json replaced by a directory": (lambda r: (os.remove(r / "results.json"), os.mkdir(r / "results.json")),
                                             "results.json"),
    "log.jsonl replaced by a directory": (lambda r: (as_if_stage_2_was_lost(r), os.remove(r / "log.jsonl"),
                                                     os.mkdir(r / "log.jsonl")), "log.jsonl"),
    "log.jsonl a symlink loop": (lambda r: (as_if_stage_2_was_lost(r), os.remove(r / "log.jsonl"),
                                            os.symlink("log.jsonl", r / "log.jsonl")), "log.jsonl"),
    # a finished run's rerun checks its files against the checksums recorded when they were saved
    "finished: a stage's weights truncated": (lambda r: truncate(r / "checkpoints" / RUN / "stage1-math" /
                                                                "model.safetensors"), "stage1-math/model.safetensors"),
    "finished: the last stage's weights truncated": (lambda r: truncate(r / "checkpoints" / RUN / "stage2-science" /
                                                                       "model.safetensors"), "stage2-science"),
    "finished: a stage's config.json garbage": (lambda r: (r / "checkpoints" / RUN / "stage1-math" / "config.json")
                                                .write_text("{{{"), "stage1-math/config.json"),
    "finished: a stage's tokenizer.json deleted": (lambda r: os.remove(r / "checkpoints" / RUN / "stage2-science" /
                                                                       "tokenizer.json"), "tokenizer.json"),
    "finished: a stage's saved responses garbage": (lambda r: (r / "responses" / f"{RUN}-stage1.json").write_text("[1"),
                                                    f"{RUN}-stage1.json"),
    "progress.json a symlink loop": (lambda r: (os.remove(r / "progress.json"),
                                                os.symlink("progress.json", r / "progress.json")), "progress.json"),
    "progress.json empty": (lambda r: (r / "progress.json").write_text("{}"), "progress.json"),
}


@pytest.mark.parametrize("case", list(STOPS))
def test_damage_that_stops_with_a_message(case, finished, tmp_path, capsys):
    damage, names = STOPS[case]
    _, code, _, out = damaged_rerun(finished, tmp_path, damage, capsys)
    assert code == 1, out.err
    lines = out.err.strip().splitlines()
    assert lines[-1].startswith("error: ") and names in lines[-1] and ("rerun" in lines[-1] or "restore" in lines[-1])
    assert "--overwrite" not in lines[-1] or "--overwrite would delete" in lines[-1]   # no advice loses finished work


RECOVERS = {   # damage -> a phrase the warning must hold
    "log.jsonl cut by a kill": (lambda r: (as_if_stage_2_was_lost(r), truncate(r / "log.jsonl", 0.97)),
                                "log.jsonl.damaged"),
    "log.jsonl with a garbage line": (lambda r: (as_if_stage_2_was_lost(r), (r / "log.jsonl").write_text(
        "garbage\n" + (r / "log.jsonl").read_text())), "log.jsonl.damaged"),
    "partial/partial.pt damaged": (lambda r: (with_partial(r), truncate(r / "partial" / "partial.pt")), "partial.damaged"),
    "partial/optimizer.pt damaged": (lambda r: (with_partial(r), truncate(r / "partial" / "optimizer.pt")),
                                     "partial.damaged"),
    "partial/teacher.pt damaged": (lambda r: (with_partial(r), (r / "partial" / "teacher.pt").write_text("x")),
                                   "partial.damaged"),
    "partial/model.safetensors damaged": (lambda r: (with_partial(r), truncate(r / "partial" / "model.safetensors")),
                                          "partial.damaged"),
    "partial/config.json garbage": (lambda r: (with_partial(r), (r / "partial" / "config.json").write_text("[")),
                                    "partial.damaged"),
    "a stage checkpoint deleted (what the message says to do)": (
        lambda r: shutil.rmtree(r / "checkpoints" / RUN / "stage1-math"), "trained again"),
    "responses/base.json deleted (what the message says to do)": (
        lambda r: os.remove(r / "responses" / "base.json"), "evaluating it again"),
    "progress.json deleted (once a silent retrain)": (lambda r: os.remove(r / "progress.json"), "trained again"),
    "finished: log.jsonl cut by a kill": (lambda r: truncate(r / "log.jsonl", 0.97), "log.jsonl.damaged"),
}


@pytest.mark.parametrize("case", list(RECOVERS))
def test_damage_that_recovers_to_the_same_results(case, finished, tmp_path, capsys):
    damage, phrase = RECOVERS[case]
    run, code, results, out = damaged_rerun(finished, tmp_path, damage, capsys)
    assert code == 0, out.err
    assert phrase in out.err + out.out
    _, reference = finished
    assert results["runs"][RUN]["acc"] == reference["runs"][RUN]["acc"]
    assert results["base"]["acc"] == reference["base"]["acc"]
    if "damaged" in phrase:
        assert os.path.exists(run / phrase)   # what was set aside is kept


def test_a_failed_save_leaves_no_temporary_file(finished, tmp_path, capsys):
    """A results.json replaced by a directory: the message names results.json, and no
    results.json.tmp is left behind."""
    run = copy_of(finished, tmp_path)
    os.remove(run / "results.json")
    os.mkdir(run / "results.json")
    code, _, out = rerun(run, capsys)
    assert code == 1 and "results.json:" in out.err and ".tmp" not in out.err
    assert not list(run.glob("*.tmp"))


def test_a_checkpoint_saved_with_checksums_is_refused_once_they_are_gone(tmp_path, capsys):
    """Round five: a checkpoint whose checksums.json was deleted passed the rerun check even truncated. A stage saved
    by this version records that it has checksums, so their absence is damage; an older stage's (no record) is not."""
    from experiment import rundir
    ckpt = tmp_path / "checkpoints" / "grpo" / "stage1-math"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"trunc")
    with pytest.raises(SystemExit):
        rundir.check_saved_stages(str(tmp_path), "grpo", [{"checkpoint": str(ckpt), "checksums": True}], 1)
    assert "checksums.json is missing" in capsys.readouterr().err
    rundir.check_saved_stages(str(tmp_path), "grpo", [{"checkpoint": str(ckpt)}], 1)   # an older run: nothing to check
