"""--config FILE: a run's own config.json reruns it byte for byte, a YAML file works the same, a typed
flag overrides the file, and a bad file is one error line."""
import json
import os
import subprocess
import sys

import pytest

import continual

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--method", "sdpo", "--stages", "math", "--benchmarks", "math", "--steps", "2", "--prompts-per-step", "2",
         "--group-size", "4", "--eval-n", "4", "--eval-k", "2", "--max-new-tokens", "40", "--curve-every", "0",
         "--seed", "5", "--no-drift", "--threads", "1"]


def cli(args, cwd):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), *args], cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def test_a_runs_config_json_reruns_it_byte_for_byte(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    cli(SMALL + ["--name", "X"], tmp_path / "a")
    cli(["--config", str(tmp_path / "a" / "runs" / "X" / "config.json"), "--name", "X", "--threads", "1"], tmp_path / "b")
    for name in ("results.json", "config.json"):
        assert (tmp_path / "a" / "runs" / "X" / name).read_bytes() == (tmp_path / "b" / "runs" / "X" / name).read_bytes()


def parsed(argv):
    return continual.parse_args(argv)[1]


def test_a_yaml_config_and_a_typed_flag_that_overrides_it(tmp_path):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("method: [grpo, sdpo_5]\nlr: 0.0001\nstages: [math, science]\nno_drift: true\nfeedback: 'off'\n")
    args = parsed(["--config", str(cfg)])
    assert args.method == ["grpo", "sdpo_5"] and args.lr == 1e-4 and args.no_drift and args.feedback == "off"
    assert args.stages == "math,science"
    args = parsed(["--config", str(cfg), "--lr", "4e-4", "--stages", "coding"])   # typed after: the flags win
    assert args.lr == 4e-4 and args.stages == "coding" and args.method == ["grpo", "sdpo_5"]
    (tmp_path / "empty.json").write_text("{}")   # an empty file changes nothing
    assert vars(parsed(["--config", str(tmp_path / "empty.json")])) == vars(parsed([]))


def test_switches_from_a_config(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"enable_thinking": False, "keep_optimizer": False, "no_drift": True}))
    args = parsed(["--config", str(cfg)])
    assert args.enable_thinking is False and args.keep_optimizer is False and args.no_drift is True


@pytest.mark.parametrize("content,says", [
    (None, "No such file"),
    ("[1, 2]", "expected a mapping"),
    ("{bad", "Expecting"),
    ('{"learning_rate": 0.1}', "'learning_rate' is not a setting"),
])
def test_a_bad_config_is_one_error_line(tmp_path, capsys, content, says):
    cfg = tmp_path / "c.json"
    if content is not None:
        cfg.write_text(content)
    with pytest.raises(SystemExit) as e:
        parsed(["--config", str(cfg)])
    assert e.value.code == 2 and says in capsys.readouterr().err
