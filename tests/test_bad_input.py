"""Bad command lines: each ends with exit code 2, one clear `error:` line, no traceback, and nothing
written, before any work starts (docs/RELIABILITY.md: the command lines that used to end in tracebacks,
and the values that used to be accepted silently)."""
import json
import os

import pytest
import torch

from tools import bench
from analysis import claims
import continual
import evaluate
import razor
from tools import tiny

NO_CUDA = not torch.cuda.is_available()

from classroom import tokens
from tools import collapse, drift, figures, gpu_check, report

COMMITTED_RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "reference",
                             "continual-s10")   # (inside its family's archive)

BAD = [   # (script, argv); FILE is a plain file in the working directory
    # round five: tracebacks, unbounded flags and negative seeds
    (tokens, ["--model", ""]), (tokens, ["--teacher", ""]), (tokens, ["--out", ""]), (tokens, ["--seed", "-1"]),
    (bench, ["--out", ""]), (bench, ["--memory-tokens", "100000000000000"]),
    (tiny, ["--seed", "-1", "--out", "m"]), (tiny, ["--steps", "10000000000", "--out", "m"]),
    (continual, ["--warmup-steps", "1000000000"]),
    (collapse, ["--summary", "--out", "results/colapse"]),
    (collapse, ["--summary", "--figures", "FILE"]),   # a typo: it printed an empty table, exit 0
    (gpu_check, ["reference", "gc", "--device", "bogus"]), (gpu_check, ["reference", "gc", "--model", "nope"]),
    (continual, ["--model", "not-a-model-id"]),
    (continual, ["--model", "./no/such/dir"]),
    (continual, ["--runs-dir", "FILE"]),
    (continual, ["--runs-dir", "FILE/runs"]),
    (continual, ["--eval-n", "100000"]),
    (continual, ["--eval-n", "4000", "--benchmarks", "tooluse", "--stages", "tooluse"]),   # fewer test prompts
    (continual, ["--prompts-per-step", "1000000000"]),
    (continual, ["--steps", "1000000000000"]),
    (continual, ["--seed", "1e20"]),
    (continual, ["--seed", "0,0"]),
    (continual, ["--device", "bogus"]),
    (continual, ["--device", "cuda:99"]),
    (continual, ["--weight-decay", "nan"]),
    (continual, ["--embed-model", "/nonexistent"]),
    (continual, ["--temperature", "1e-30"]),
    (continual, ["--temperature", "inf"]),
    (continual, ["--max-new-tokens", "100000"]),
    (continual, ["--lr", "inf"]),
    (continual, ["--lr", "1e9"]),
    (continual, ["--max-grad-norm", "nan"]),
    (continual, ["--method", "grpo", "--runs-dir", "FILE"]),
    (continual, ["--method", "grpo", "--runs-dir", "FILE/x"]),
    (continual, ["--method", "grpo", "--model", "not-a-model-id"]),
    (continual, ["--method", "grpo", "--eval-n", "100000"]),
    (evaluate, ["--model", "not-a-model-id"]),
    (evaluate, ["--n", "100000"]),
    (razor, ["--strength", "nan"]),
    (razor, ["--strength", "1e308"]),
    (bench, ["--out", "FILE/bench.json"]),
    (bench, ["--task", "/nonexistent.jsonl"]),
    (bench, ["--model", "/nonexistent"]),
    (drift, ["GARBAGE_RUN"]),
    # the second sweep: accepted before, or a traceback
    (continual, ["--name", "../../ESCAPED"]),
    (continual, ["--name", "a/b"]),
    (continual, ["--name", ".."]),
    (continual, ["--seed", "0,,1"]),
    (continual, ["--enable-thinking", "--disable-thinking"]),
    (continual, ["--runs-dir", "/proc/x"]),
    (evaluate, ["--out", "FILE/x.json"]),
    (evaluate, ["--enable-thinking", "--disable-thinking"]),
    (tiny, ["--steps", "0", "--out", "m"]),        # (it used to start the full 1,800-step rebuild)
    (tiny, ["--lr", "inf", "--out", "m"]),
    (tiny, ["--lr", "nan", "--out", "m"]),
    (tiny, ["--lr", "0", "--out", "m"]),
    (tiny, ["--out", "FILE/m"]),
    # the third sweep: accepted before, or a traceback, or a rebuild over the committed model
    (tiny, ["--out", ""]),
    (tiny, ["--steps", "2"]),                      # the committed world/tiny_model/, without --overwrite-committed
    (bench, ["--eval", "--eval-n", "0"]),
    (bench, ["--memory", "--memory-tokens", "-1"]),
    (bench, ["--threads", "-1"]),
    (bench, ["--micro-batch", "-2"]),
    (evaluate, ["--seed", "-1"]),
    (continual, ["--kl-coef", "inf"]),
    (continual, ["--name", "x\ny"]),
    (continual, ["--stages", "math,,science"]),
    (continual, ["--method", "grpo,"]),
    (continual, ["--runs-dir", ""]),
    (continual, ["--feedback", "sometimes"]),
    (continual, ["--stage-optimizer", "later"]),
    (claims, []),
    (claims, ["/nonexistent"]),
    (claims, ["GARBAGE_RUN"]),
    # the run's report as a command: no run, a damaged one, a committed one without --out; round six's
    # output names checked after joining: a --prefix that leaves --out
    (report, ["/nonexistent/run"]), (report, ["GARBAGE_RUN"]), (report, ["FILE"]), (report, [COMMITTED_RUN]),
    (report, [COMMITTED_RUN, "--out", "FILE"]),
    (figures, [COMMITTED_RUN, "--out", "figs", "--prefix", "../x"]), (figures, ["/nonexistent/run"]),
]
if NO_CUDA:
    BAD.append((continual, ["--device", "cuda"]))


@pytest.mark.parametrize("script,argv", BAD, ids=[f"{s.__name__} {' '.join(a)}" for s, a in BAD])
def test_bad_command_line(script, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "FILE").write_text("a file, not a directory\n")
    garbage = tmp_path / "GARBAGE_RUN"
    garbage.mkdir()
    (garbage / "config.json").write_text("{not json")
    (garbage / "progress.json").write_text(json.dumps({"base": {}}))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as e:
        script.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert err.strip().splitlines()[-1].split(": ", 1)[1].startswith("error: "), err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before   # nothing written
    assert (garbage / "config.json").read_text() == "{not json"


def test_a_fifo_as_config_is_refused(tmp_path, capsys):
    """Round six: a FIFO as a --config settings file waited forever; now one error line."""
    os.mkfifo(tmp_path / "FIFO")
    with pytest.raises(SystemExit) as e:
        continual.main(["--config", str(tmp_path / "FIFO")])
    assert e.value.code == 2 and "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("argv,line", [
    (["--teacher", "base", "--refresh-every", "5"], "--refresh-every is StableSDPO's schedule"),
    (["--teacher", "live", "--refresh-every", "5"], "--teacher live is never refreshed"),
    (["--teacher-mix", "0.5"], "--teacher-mix mixes the carried teacher (T3), and --teacher-init is not carry"),
    (["--warmup-steps", "40"], "--warmup-steps 40 lasts past the stage's 40 steps"),
])
def test_round_four_s_no_effect_warnings_are_back(argv, line, capsys):
    """Round four's warnings for a knob that changes nothing here, lost in the restructuring."""
    continual.parse_args(["--method", "sdpo", *argv])
    assert line in capsys.readouterr().err.split("warning: ", 1)[1]
    continual.parse_args(["--method", "sdpo", "--teacher-init", "carry", "--teacher-mix", "0.5", "--warmup-steps", "39"])
    assert "warning" not in capsys.readouterr().err


def test_a_flag_of_the_method_not_run_is_named(capsys):
    """continual.py: a flag only the other method reads changes nothing, and a warning says so."""
    continual.parse_args(["--method", "grpo", "--refresh-every", "5"])
    assert "warning: --refresh-every is read only by SDPO" in capsys.readouterr().err
    continual.parse_args(["--method", "sdpo_5", "--mini-batches", "2"])
    assert "warning: --mini-batches is read only by GRPO" in capsys.readouterr().err
    continual.parse_args(["--method", "grpo,sdpo", "--mini-batches", "2", "--refresh-every", "5"])
    assert "warning" not in capsys.readouterr().err
    # typed at its default value it still changes nothing, and says so; untyped, a default says nothing
    continual.parse_args(["--method", "grpo", "--alpha", "0.05", "--beta=0.5"])
    err = capsys.readouterr().err
    assert "warning: --alpha is read only by SDPO" in err and "warning: --beta is read only by SDPO" in err
    continual.parse_args(["--method", "grpo"])
    assert "warning" not in capsys.readouterr().err


def test_tiny_py_saves_nothing_when_its_weights_blow_up(tmp_path, capsys):
    """A finite but far too large --lr: the weights turn non-finite; exit 1 with the reason, nothing written
    (it used to save an all-NaN model with exit 0)."""
    with pytest.raises(SystemExit) as e:
        tiny.main(["--steps", "3", "--lr", "1e30", "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "not finite" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_a_step_that_overflows_stops_cleanly(tmp_path, monkeypatch, capsys):
    """A learning rate that wrecks the weights (validation allows up to 1) ends with exit 1 and a reason;
    the stages completed before are kept."""
    calls = {"n": 0}
    real_step = torch.optim.AdamW.step

    def poisoned(self, *a, **k):   # the second optimizer step writes an inf, as an overflow would
        out = real_step(self, *a, **k)
        calls["n"] += 1
        if calls["n"] == 2:
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("inf")
        return out
    monkeypatch.setattr(torch.optim.AdamW, "step", poisoned)
    argv = ["--method", "sdpo", "--stages", "math,science", "--benchmarks", "train", "--steps", "1",
            "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "16",
            "--curve-every", "0", "--no-drift", "--runs-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as e:
        continual.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 1 and "non-finite" in err and "Traceback" not in err
    run = next(tmp_path.iterdir())
    progress = json.load(open(run / "progress.json"))
    assert len(progress["sdpo_a0.05"]["stages"]) == 1 and os.path.isdir(progress["sdpo_a0.05"]["stages"][0]["checkpoint"])
