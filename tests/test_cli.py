"""Bad command-line values end in a one-line error and exit code 2, before any work (nothing written)."""
import os
import subprocess
import sys

import pytest

from scripts_at_once import run_scripts

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
    ("continual.py", ["--clip-ratio-c", "0.5"], "--clip-ratio-c must be 0 or > 1"),
    ("continual.py", ["--mask-ratio", "1"], "--mask-ratio must be in [0, 1)"),
    ("continual.py", ["--teacher-mix", "2"], "--teacher-mix must be in [0, 1]"),
    ("continual.py", ["--loss-agg", "sum"], "invalid choice"),
    ("continual.py", ["--stages", "math,poetry"], "unknown task 'poetry'"),
    ("continual.py", ["--benchmarks", "mmlu"], "unknown task 'mmlu'"),
    ("continual.py", ["--model", "./no/such/dir"], "no such model directory"),
    ("grpo.py", ["--task", "coding"], "error: a one-domain GRPO run is a one-stage continual run: python continual.py "
                                      "--method grpo --stages TASK"),
    ("continual.py", ["--stages", "math,sciense"], "--stages: unknown task 'sciense' (did you mean science?)"),
    ("sdpo.py", ["--alpha", "0"], "python continual.py --method sdpo --stages TASK"),
    ("beyond/variants.py", ["--teacher", "live"], "python continual.py --method sdpo --stages TASK --teacher live"),
    ("evaluate.py", ["--k", "0"], "--k must be in [1, 1024]"),
    ("continual.py", ["--stages", "hf:bfcl"], "python tools/prepare_data.py hf:bfcl --out data/"),
    ("continual.py", ["--benchmarks", "hf:nope"], "a hub dataset is written as a record file first"),
    ("tools/prepare_data.py", ["hf:nope"], "unknown hub task"),
    ("tools/prepare_data.py", ["hf:bfcl"], "read from its downloaded file"),
    ("continual.py", ["--prompts-per-step", "6", "--sample-blocks", "4"], "must be divisible by the 4 sample blocks"),
    ("continual.py", ["--max-prompt-len", "-1"], "--max-prompt-len must be >= 0"),
    ("continual.py", ["--rank-frac", "0"], "--rank-frac must be in (0, 1]"),
    ("tools/drift.py", ["no_such_run"], "is not a continual.py run directory"),
    ("drift.py", ["runs/x"], "python tools/drift.py RUN_DIR"),
    ("tools/bench.py", ["--group-size", "1"], "--group-size must be >= 2"),
    ("razor.py", ["--a", "0"], "--a must be in (0, 1]"),
    # round five's, mended in round six
    ("tests/documented.py", ["--run"], "--run is the test's worker"),
    ("tools/coding_ablation.py", ["--worker", "3/2"], "--worker is i/n"),
    ("evaluate.py", ["--out", ""], "--out: give a file path"),
    ("classroom/lab.py", ["9", "--out", ""], "--out: give a folder"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory):
    """Every case of CASES run once, each in a folder of its own, in one process (tests/scripts_at_once.py):
    {case index: (exit code, stderr, its folder)}."""
    folders = [tmp_path_factory.mktemp(f"case{i}") for i in range(len(CASES))]
    results = run_scripts([(script, args, folder) for (script, args, _), folder in zip(CASES, folders)])
    return {i: (code, err, folder) for i, ((code, _, err), folder) in enumerate(zip(results, folders))}


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{s}-{m[:40]}" for s, _, m in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bad_input_runs, case):
    script, args, message = CASES[case]
    code, stderr, folder = bad_input_runs[case]
    assert code == 2, stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) <= 3, stderr   # a short usage line and the error, no flag list
    assert os.listdir(folder) == []


def test_bad_input_exits_2_from_a_process_of_its_own(tmp_path):
    """The same check on a real process, for two cases: the exit code the shell sees is the one above."""
    for script, args, message in (CASES[0], CASES[-1]):
        out = subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
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
        out = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), "--stages", str(path)], cwd=work,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert os.listdir(work) == []


def test_unreachable_hub_dataset_is_one_line(tmp_path):
    """No network (offline mode): preparing a hub dataset stops in one line naming it, and writes no record file."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "prepare_data.py"), "hf:math500"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf")))
    assert out.returncode == 1 and "math-ai/math500" in out.stderr, out.stderr[-800:]
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "data").exists()       # nothing written


def test_a_knob_is_one_field_in_its_file():
    """Every knob is one field of its file's …Config or …Rules dataclass (infra/knobs.py): the flag
    (made by transformers.HfArgumentParser), its default and its --help text, as data, never read out of a comment; its
    values checked in the dataclass's __post_init__ (one error line). A student's new field becomes a flag, checked,
    with no edit anywhere else."""
    import dataclasses
    from typing import Literal
    import grpo
    import sdpo
    from beyond import variants
    from infra import commands, flags
    from infra.knobs import knob, must
    from transformers import HfArgumentParser
    for module in (grpo, sdpo, variants):
        rows = flags.knob_rows(module, "beyond" if module is variants else "paper")
        fields = [f for name, table in vars(module).items() if name.endswith(("Config", "Rules"))
                  and dataclasses.is_dataclass(table) for f in dataclasses.fields(table)
                  if module is not variants or f.name in variants.BEYOND]   # (BeyondConfig's own, over SDPO's)
        assert [k["name"] for k in rows] == [f.name for f in fields]
        args = commands.one_configuration(rows)
        for k, f in zip(rows, fields):
            assert getattr(args, k["name"]) == k["default"] == f.default, k["name"]
            assert k["help"] == f.metadata["help"] and set(f.metadata) <= {"help", "rule", "sweep"}, k["name"]
            assert (k["group"] == "protocol") == bool(f.metadata.get("rule")), k["name"]   # a rule: --help-all's
    assert isinstance(flags.parser("", "", []), HfArgumentParser)
    # a reworded comment or help text changes nothing: no knob is read out of text
    assert "inspect" not in open(flags.__file__).read() and "getsource" not in open(flags.__file__).read()
    assert [k["name"] for k in flags.knob_rows(sdpo) if k["group"] == "paper"] == ["alpha", "beta", "refresh_every",
                                                                                    "gamma"]

    @dataclasses.dataclass(frozen=True)
    class StudentConfig:   # what a student adds: a field, and its check
        new_knob: float = knob(0.5, "a knob a student adds (S3)")
        style: Literal["a", "b"] = knob("a", "a choice")
        flag: bool = knob(False, "a switch")

        def __post_init__(self):
            must(0 < self.new_knob < 1, "--new-knob must be in (0, 1)")
    student = type("student", (), {"StudentConfig": StudentConfig})
    knobs = [*flags.knob_rows(sdpo), *flags.knob_rows(student)]
    ap = flags.parser("", "", knobs)
    args = commands.one_configuration(knobs, ["--new-knob", "0.25", "--style", "b", "--flag"])
    assert (args.new_knob, args.style, args.flag) == (0.25, "b", True)
    flags.check_knobs(ap, args, knobs)   # (passes)
    for bad in (["--new-knob", "1"], ["--new-knob", "nan"]):
        with pytest.raises(SystemExit):
            flags.check_knobs(ap, commands.one_configuration(knobs, bad), knobs)
    with pytest.raises(SystemExit):
        commands.one_configuration(knobs, ["--style", "c"])   # not among the Literal's choices
    assert "--new-knob" in ap.format_help() and "a knob a student adds (S3)" in ap.format_help()
    # spelled once in --help, and HfArgumentParser's underscore spelling still parses
    assert "--new_knob" not in ap.format_help() and ap.parse_args(["--new_knob", "0.5"]).new_knob == 0.5
    assert sdpo.SETTINGS == ("alpha", "refresh_every", "gamma", "cot", "mask_ratio", "feedback")
    assert grpo.SETTINGS == ("mini_batches", "epochs", "clip_ratio_c")


def test_the_same_knob_in_two_methods_is_one_flag_or_one_line(capsys):
    """A student's method may declare a knob another method has: declared alike (type and default), `--beta` is one
    flag and every method's dataclass takes it; declared differently, or under a name continual.py makes by hand,
    the command stops with one line naming both, exit 2 (it was a traceback from argparse)."""
    import dataclasses
    import sdpo
    from infra import commands, flags
    from infra.knobs import knob

    def student(default, name="beta"):
        table = dataclasses.make_dataclass("StudentConfig", [(name, float, knob(default, "the student's β"))],
                                           frozen=True)
        table.__module__ = "student"
        return type("student", (), {"StudentConfig": table})
    alike = [*flags.knob_rows(sdpo), *flags.knob_rows(student(0.5))]
    ap = flags.parser("", "", alike)
    assert ap.format_help().count("--beta") == 1
    args = commands.one_configuration(alike, ["--beta", "0.25"])
    flags.check_knobs(ap, args, alike)   # both dataclasses built from the one value
    assert args.beta == 0.25
    for rows, said in (([*flags.knob_rows(sdpo), *flags.knob_rows(student(0.1))],
                        "--beta is a knob of sdpo.SDPOConfig (default 0.5) and a knob of student.StudentConfig (default 0.1)"),
                       ([*flags.knob_rows(student(0.1, "steps"))], "--steps is a knob of infra.flags.Experiment"),
                       ([*flags.knob_rows(student(0.1, "seed"))], "--seed is a flag continual.py makes itself and a knob of "
                                                                  "student.StudentConfig")):
        with pytest.raises(SystemExit) as stop:
            flags.parser("", "", rows)
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]
        assert stop.value.code == 2 and "error: " in last and said in last and "Traceback" not in err, err

def test_help_shows_the_paper_s_knobs_and_help_all_every_flag():
    """`--help` lists the paper's knobs only; `--help-all` every flag, the protocol's and beyond's too."""
    import continual
    for argv, shown, hidden in ((["--help"], ["--alpha", "--beta", "--steps", "--help-all"], ["--mask-ratio", "--teacher",
                                                                                              "--eval-n", "--anchor"]),
                                (["--help-all"], ["--alpha", "--mask-ratio", "--teacher", "--trust-rate", "--eval-n",
                                                  "--anchor", "--teacher-init"], [])):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), *argv], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert all(f in out.stdout for f in shown), [f for f in shown if f not in out.stdout]
        assert not any(f + " " in out.stdout for f in hidden), [f for f in hidden if f + " " in out.stdout]
    assert len(continual.parse_args([])[1].method) == 1


def test_alpha_is_only_t1_s_rate_and_t6_has_its_own():
    """α is the EMA teacher's rate (T1) alone; the trust-region teacher's λ (T6) is --trust-rate, which
    names a run only away from its default (the committed defences ran λ = α = 0.05: their names stand)."""
    import continual
    _, _, _, _, configs, _ = continual.parse_args(["--method", "sdpo_5", "--teacher", "trust_region"])
    (_, settings, name), = configs
    assert name == "sdpo_a0.05_tr" and settings["trust_rate"] == 0.05
    _, _, _, _, configs, _ = continual.parse_args(["--method", "sdpo_5", "--teacher", "trust_region", "--trust-rate",
                                                   "0.1"])
    assert configs[0][2] == "sdpo_a0.05_tr0.1"
    _, _, _, _, configs, _ = continual.parse_args(["--method", "sdpo_5"])
    assert "trust_rate" not in configs[0][1]   # read only by T6: not a setting of the others


def test_a_yaml_config_with_aliases_is_refused_at_once(tmp_path):
    """Round five: 532 bytes of nested YAML aliases once cost 2 GB and ended in MemoryError."""
    import time
    import continual
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [" + ",".join(["x"] * 9) + "]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)))
    t0 = time.time()
    with pytest.raises(SystemExit) as e:
        continual.parse_args(["--config", str(bomb)])
    assert e.value.code == 2 and time.time() - t0 < 5
    plain = tmp_path / "ok.yaml"
    plain.write_text("lr: 0.0002\nstages: [math]\n")
    assert continual.parse_args(["--config", str(plain)])[1].lr == 0.0002


def test_a_stage_given_twice_is_said_once(capsys):
    import continual
    continual.parse_args(["--stages", "math,science,math"])
    err = capsys.readouterr().err
    assert err.count("--stages names math more than once") == 1
    continual.parse_args(["--stages", "math,science"])
    assert "more than once" not in capsys.readouterr().err


def test_the_method_table_is_written_out_and_its_third_row_says_when_it_is_taken(capsys):
    """experiment/configurations.METHODS names all three methods, beyond/variants.py's row written there (the paper's
    floor never imports beyond/), where it was added to train.METHODS at import; a configuration whose knobs take the third row
    says so in one line, and the paper's configurations say nothing."""
    import ast
    import continual
    import train
    from beyond import variants
    from experiment import configurations
    tree = ast.parse(open(os.path.join(ROOT, "experiment", "configurations.py")).read())
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "METHODS")
    assert [k.value for k in table.keys] == ["grpo", "sdpo", "sdpo_beyond"]
    assert configurations.METHODS["sdpo_beyond"] is variants.method and not hasattr(train, "METHODS")
    assert "import train" not in open(os.path.join(ROOT, "beyond", "variants.py")).read()
    continual.parse_args(["--method", "grpo,sdpo_0,sdpo_5", "--stages", "math"])
    assert "beyond the paper" not in capsys.readouterr().out
    *_, configs, _ = continual.parse_args(["--method", "sdpo_0,grpo", "--teacher", "base", "--distill", "failed",
                                           "--stages", "math"])
    out = capsys.readouterr().out
    assert out.splitlines() == ["sdpo_a0_base_failedonly: SDPO beyond the paper, as its knobs ask: "
                                "configurations.METHODS['sdpo_beyond'] (beyond/)"]
    (sdpo_cfg, grpo_cfg) = configs
    assert type(configurations.method_of(*sdpo_cfg[:2], None)).__name__ == "SimpleNamespace"
    assert configurations.method_of(*grpo_cfg[:2], None) is configurations.METHODS["grpo"]


def test_each_method_is_handed_its_own_config(tmp_path, monkeypatch):
    """A method reads one instance of its own config class (experiment/configurations.CONFIGS), where it read one
    namespace of every flag: GRPO a grpo.GRPOConfig with --kl-coef, SDPO an sdpo.SDPOConfig with its configuration's α
    (sdpo_0's 0, each α of a sweep), a beyond knob SDPO's BeyondConfig; and in a run, each method's functions are
    handed that instance, the run's settings beside it."""
    import continual
    import grpo
    import sdpo
    from beyond import variants
    from experiment import configurations
    from infra import flags
    _, args, _, _, configs, _ = continual.parse_args(["--method", "grpo,sdpo_0,sdpo", "--alpha", "0.01,0.1",
                                                      "--kl-coef", "0.5", "--beta", "0.25", "--stages", "math"])
    cfgs = [configurations.config_of(method, settings, flags.per_seed(args)[0]) for method, settings, _ in configs]
    assert [type(c) for c in cfgs] == [grpo.GRPOConfig] + [sdpo.SDPOConfig] * 3
    assert cfgs[0].kl_coef == 0.5 and [c.alpha for c in cfgs[1:]] == [0.0, 0.01, 0.1]
    assert all(c.beta == 0.25 for c in cfgs[1:]) and args.alpha == [0.01, 0.1]   # (the command's, untouched)
    _, args, _, _, configs, _ = continual.parse_args(["--method", "sdpo_5", "--teacher", "base", "--stages", "math"])
    cfg = configurations.config_of(*configs[0][:2], flags.per_seed(args)[0])
    assert type(cfg) is variants.BeyondConfig and (cfg.teacher, cfg.alpha) == ("base", 0.05)
    seen = []
    for module in (grpo, sdpo):   # what a run hands each method's prepare_batch
        real = module.prepare_batch
        monkeypatch.setattr(module, "prepare_batch", lambda m, f, b, cfg, args, *rest, real=real:
                            seen.append((type(cfg), cfg.__dict__.get("kl_coef", cfg.__dict__.get("alpha")),
                                         args.lr)) or real(m, f, b, cfg, args, *rest))
    continual.main(["--method", "grpo,sdpo_0", "--kl-coef", "0.5", "--mini-batches", "2", "--lr", "1e-4", "--stages",
                    "math", "--benchmarks", "math", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
                    "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "8", "--curve-every", "0", "--no-drift",
                    "--threads", "1", "--runs-dir", str(tmp_path)])
    assert seen == [(grpo.GRPOConfig, 0.5, 1e-4), (sdpo.SDPOConfig, 0.0, 1e-4)]
