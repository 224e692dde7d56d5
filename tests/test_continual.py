"""continual.py: the Δ/δ/G/F formulas by hand, a smoke run that writes every artefact, and resume."""
import dataclasses
import json
import os
import subprocess
import sys
import types

import pytest

import continual
import evaluate
import grpo
from infra import flags, plots
from infra.knobs import knob, must
from experiment import configurations, metrics, report, rundir
from conftest import interrupted_copy, results_as_if_full

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


SMOKE = ["--method", "grpo,sdpo", "--stages", "math,tooluse", "--benchmarks", "math,tooluse,logic",
         "--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
         "--max-new-tokens", "40", "--curve-every", "1", "--curve-n", "2", "--curve-k", "2", "--seed", "3"]


def run_cli(args, cwd, **kw):
    return subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, **kw)


def test_smoke_run_writes_every_artefact_and_resumes_identically(tmp_path):
    full = run_cli(SMOKE + ["--name", "full"], tmp_path)
    assert full.returncode == 0, full.stderr[-2000:]
    run = tmp_path / "runs" / "full"
    for f in ["results.json", "results.csv", "log.jsonl", "config.json", "progress.json"]:
        assert (run / f).is_file(), f
    assert not (run / "report.md").exists() and "## grpo: accuracy after each stage" in full.stdout   # printed
    assert f"python tools/report.py {os.path.join('runs', 'full')}" in full.stdout   # the command that draws the rest
    for r in ["grpo", "sdpo_a0.05"]:
        for s in ["stage1-math", "stage2-tooluse"]:
            assert (run / "checkpoints" / r / s / "model.safetensors").is_file()
    results = json.loads((run / "results.json").read_text())
    assert set(results["runs"]) == {"grpo", "sdpo_a0.05"}
    assert len(results["runs"]["grpo"]["acc"]) == 3               # base + 2 stages
    drawn = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report.py"), "runs/full"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    report = (run / "report.md").read_text()
    assert "## grpo: accuracy after each stage" in report and "Gain and forgetting" in report
    for png in ("accuracy.png", "gain.png", "drift.png", "curves.png"):   # the figures, linked from the report
        assert (run / png).is_file() and f"]({png})" in report, png
    logs = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines()]
    assert len(logs) == 2 * 2 * 2                                 # runs × stages × steps
    assert {"reward", "loss", "entropy"} <= set(logs[0])
    # drift (A4–A8) after every stage, in results.json and report.md; responses kept for tools/drift.py
    moved = []
    for r in ["grpo", "sdpo_a0.05"]:
        d = results["runs"][r]["drift"]
        assert len(d) == 2 and all(x["params_vs_base"]["all"]["nss_mean"] >= 0 for x in d)
        moved += [x["params_vs_base"]["all"]["nss_mean"] > 0 for x in d]
        assert d[0]["params_vs_prev"] == d[0]["params_vs_base"]        # stage 1's previous model is the base
        assert set(d[1]["kl_to_base"]) == {"math", "tooluse", "logic"}
        assert (run / "responses" / f"{r}-stage2.json").is_file()
    assert any(moved)   # (a 2-step stage may see no reward signal at all and leave the weights unchanged)
    assert "## sdpo_a0.05: drift after each stage (A4–A8)" in report
    # (C3) every evaluation's per-prompt records: each benchmark's Acc@k is the mean of its prompts' mean scores
    for tag, r, row in [("base", "grpo", 0)] + [(f"{r}-stage{k}", r, k) for r in ["grpo", "sdpo_a0.05"] for k in (1, 2)]:
        recs = [json.loads(line) for line in (run / "prompts" / f"{tag}.jsonl").read_text().splitlines()]
        for b, acc in zip(results["benchmarks"], results["runs"][r]["acc"][row]):
            mine = [x for x in recs if x["benchmark"] == b]
            assert [x["prompt"] for x in mine] == list(range(len(mine))) and all(len(x["scores"]) == 2 for x in mine)
            assert sum(sum(x["scores"]) / 2 for x in mine) / len(mine) == pytest.approx(acc, abs=1e-12), (tag, b)
    # tools/drift.py recomputes the same figures from the checkpoints and the saved responses
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "drift.py"), "runs/full"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    recomputed = json.loads((run / "drift.json").read_text())
    assert recomputed == {r: results["runs"][r]["drift"] for r in ["grpo", "sdpo_a0.05"]}
    # ... from any working directory (progress.json's checkpoint paths are relative to where the run started)
    (run / "drift.json").unlink()
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "drift.py"), "full"], cwd=tmp_path / "runs",
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((run / "drift.json").read_text()) == recomputed

    # an interruption after the first completed stage of the second run: drop later progress and rerun
    part = interrupted_copy(run, "sdpo_a0.05", keep=1)
    resumed = run_cli(SMOKE + ["--name", "part"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming after stage 1" in resumed.stdout
    # where the command stands: a line after each stage, the stages done of all and the time left
    assert "overall: 1 of 4 stages done (1 seed(s) × 2 configuration(s) × 2 stages)" in full.stdout
    assert "about" in full.stdout.split("overall: 3 of 4")[1].splitlines()[0]
    assert "left" not in full.stdout.split("overall: 4 of 4")[1].splitlines()[0]
    assert [l.split(" stages done")[0] for l in resumed.stdout.splitlines() if l.startswith("overall:")] == \
        ["overall: 4 of 4"]   # the resumed run counts the 3 stages it found done
    assert results_as_if_full(part) == results


def test_refuses_a_directory_holding_a_different_run(tmp_path):
    os.makedirs(tmp_path / "runs" / "x")
    (tmp_path / "runs" / "x" / "config.json").write_text(json.dumps({"other": 1}))
    out = run_cli(["--name", "x", "--steps", "1"], tmp_path)
    # (a config.json continual.py did not write is never taken for one of its runs, nor replaced)
    assert out.returncode == 2 and "did not write" in out.stderr
    assert json.loads((tmp_path / "runs" / "x" / "config.json").read_text()) == {"other": 1}


def test_plots_with_one_seed_and_with_bands(tmp_path):
    from infra import plots
    cm = evaluate.change_metrics

    def results(shift):
        acc = {"grpo": [[0.2, 0.5], [0.4 + shift, 0.4]], "sdpo": [[0.2, 0.5], [0.6, 0.3 + shift]]}
        return {"benchmarks": ["a", "o"], "stages": ["a"],
                "runs": {n: {"acc": rows, "per_stage": [{b: cm(rows[1][i], rows[0][i]) for i, b in enumerate("ao")}]}
                         for n, rows in acc.items()}}
    seeds = [results(0.0), results(0.1), results(-0.05)]
    for fn, name in ((plots.plot_accuracy, "acc.png"), (plots.plot_gain_forgetting, "gain.png")):
        for many in (None, seeds):
            path = fn(seeds[0], str(tmp_path / name), many)
            assert path and os.path.getsize(path) > 1000 and open(path, "rb").read(4) == b"\x89PNG"
    rows = [{"run": "sdpo", "stage": s, "step": k, "reward": 0.1 * k, "js": 0.01, "entropy": 1.0,
             "teacher_entropy": 0.9} for s in (1, 2) for k in (1, 2, 3)]
    assert plots.plot_curves(rows, str(tmp_path / "curves.png"), ["a", "b"])
    assert plots.plot_curves([], str(tmp_path / "none.png")) is None
    grpo_rows = [{k: v for k, v in r.items() if k not in ("js", "teacher_entropy")} for r in rows]
    assert plots.plot_curves(grpo_rows, str(tmp_path / "grpo.png"), ["a", "b"], {"sdpo": "GRPO"})
    one = {**seeds[0], "benchmarks": ["a"]}   # one benchmark: one panel, no blank ones
    assert plots.plot_accuracy(one, str(tmp_path / "one.png"), None, {"grpo": "GRPO", "sdpo": "SDPO_5%"})


def test_paired_differences_are_each_seeds_step_by_step_difference(tmp_path):
    """differences.png's numbers against a brute-force loop, and its edge cases."""
    from infra import plots
    rows_of = lambda seed: [{"run": run, "stage": stage, "step": k, "js": 0.1 * seed + 0.01 * k + (0.5 if run == "b" else 0),  # noqa: E731
                             "reward": 1.0, **({"teacher_refresh": True} if run == "b" and k == 2 else {})}
                            for run in ("a", "b") for stage in (1, 2) for k in (1, 2, 3)]
    seeds = [rows_of(s) for s in range(3)]
    x, diffs = plots.paired_differences(seeds, "b", "a", "js", 3)
    assert x == [1, 2, 3, 4, 5, 6]
    assert diffs == [[pytest.approx(0.5)] * 6] * 3            # b − a, step by step, in every seed
    assert plots.running_mean([0.0, 3.0, 6.0, 9.0], 3) == [1.5, 3.0, 6.0, 7.5]
    seeds[1] = [r for r in seeds[1] if not (r["run"] == "b" and r["stage"] == 2 and r["step"] == 3)]  # cut short
    assert plots.paired_differences(seeds, "b", "a", "js", 3) is None
    seeds[1] = rows_of(1)
    assert plots.paired_differences(seeds, "b", "a", "teacher_entropy", 3) is None   # a curve neither has
    path = plots.plot_differences(seeds, str(tmp_path / "d.png"), ["x", "y"], {"a": "SDPO_0", "b": "SDPO_5%"})
    assert path and open(path, "rb").read(4) == b"\x89PNG"
    assert plots.plot_differences(seeds[:1], str(tmp_path / "one.png")) is None     # one seed: no band
    only_a = [[r for r in rows if r["run"] == "a"] for rows in seeds]
    assert plots.plot_differences(only_a, str(tmp_path / "alone.png")) is None      # one run: nothing to pair


def test_config_json_records_each_runs_own_settings():
    """A sweep's config.json says which α each run had, not only the list (a trap once)."""
    ap, args, stages, benchmarks, configs, _ = continual.parse_args(["--method", "sdpo,grpo", "--alpha", "0,0.05"])
    fp = rundir.fingerprint_of(args, stages, benchmarks, configs)
    assert fp["alpha"] == [0.0, 0.05]
    assert fp["runs"]["sdpo_a0"]["alpha"] == 0.0 and fp["runs"]["sdpo_a0.05"]["alpha"] == 0.05
    assert fp["runs"]["grpo"]["method"] == "grpo" and fp["runs"]["grpo"]["mini_batches"] == 4
    # an older run directory's config.json (no "runs") is still this command's run
    assert rundir.same_run({k: v for k, v in fp.items() if k != "runs"}, fp)
    assert not rundir.same_run({**fp, "steps": 41}, fp)
    # the code that made the run is recorded (a commit, +changes when the tree differs from it), and a rerun by
    # other code still resumes the run; --config skips it like the other derived fields
    assert fp["code"] == "unknown" or len(fp["code"].split("+")[0]) == 40
    assert rundir.same_run({**fp, "code": "0" * 40}, fp) and "code" in flags.CONFIG_IGNORED


def test_each_method_trains_at_its_own_learning_rate_unless_lr_is_given():
    """flags.LR (docs/WORLD.md's rule) per method when --lr is absent; --lr sets every method's rate;
    the stage's optimizer is built with the configuration's rate, not the flag's None."""
    _, args, _, _, configs, _ = continual.parse_args(["--method", "grpo,sdpo_0"])
    assert args.lr is None and [s["lr"] for _, s, _ in configs] == [flags.LR["grpo"], flags.LR["sdpo"]]
    assert flags.LR["grpo"] != flags.LR["sdpo"]   # (else this test could not tell them apart)
    fp = rundir.fingerprint_of(args, *continual.parse_args(["--method", "grpo,sdpo_0"])[2:4], configs)
    assert fp["runs"]["sdpo_a0"]["lr"] == flags.LR["sdpo"]
    _, args, _, _, configs, _ = continual.parse_args(["--method", "grpo,sdpo_0", "--lr", "3e-4"])
    assert [s["lr"] for _, s, _ in configs] == [3e-4, 3e-4]


def test_a_method_beside_grpo_and_sdpo_is_its_file_its_row_and_its_rate(tmp_path, monkeypatch):
    """A new method touches its own file, its rows of experiment/configurations.METHODS and CONFIGS (the class of the
    knobs it is handed) and its rate in flags.LR, nothing else: here GRPO's functions under another name (with GRPO's
    knobs' defaults, none of them naming it, so no settings) run a one-step stage, are named by their run_name, and
    take their own rate; a GRPO knob typed beside it changes nothing and says so."""
    same = types.SimpleNamespace(**{f: getattr(grpo, f) for f in ("frozen_model", "prepare_batch",
                                                                   "micro_batch_loss", "step_stats", "frozen_state")},
                                 SETTINGS=(), run_name=lambda settings: "pg")
    monkeypatch.setitem(configurations.METHODS, "pg", same)
    monkeypatch.setitem(configurations.CONFIGS, "pg", grpo.GRPOConfig)
    monkeypatch.setitem(flags.LR, "pg", 2e-4)
    _, args, _, _, configs, _ = continual.parse_args(["--method", "pg,grpo"])
    assert [(m, s["lr"], name) for m, s, name in configs][0] == ("pg", 2e-4, "pg") and configs[1][0] == "grpo"
    argv = ["--method", "pg", "--stages", "math", "--benchmarks", "math", "--steps", "1", "--prompts-per-step", "2",
            "--group-size", "2", "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "8", "--curve-every", "0",
            "--no-drift", "--threads", "1", "--runs-dir", str(tmp_path), "--name", "pg"]
    continual.main(argv)
    results = json.loads((tmp_path / "pg" / "results.json").read_text())
    assert list(results["runs"]) == ["pg"] and results["runs"]["pg"]["method"] == "pg"
    assert results["runs"]["pg"]["settings"] == {"lr": 2e-4} and metrics.role_of(results["runs"]["pg"]) is None
    with pytest.raises(SystemExit) as e:   # an unknown name still says which it knows, the new one among them
        continual.parse_args(["--method", "pgg"])
    assert e.value.code == 2


def test_a_sweep_is_a_mark_on_a_knob_not_a_name(monkeypatch, capsys):
    """SDPO's α sweep (--alpha 0,0.05: one configuration per value) is what any knob marked sweep=True takes
    (infra/knobs.knob), where infra/flags.py special-cased the name alpha in five places: a new method's knob so
    marked takes a comma list, one configuration per value, each value checked by its dataclass."""
    @dataclasses.dataclass(frozen=True)
    class PGConfig:
        mix: float = knob(0.1, "a new method's mix, a sweep", sweep=True)

        def __post_init__(self):
            must(0 < self.mix < 1, "--mix must be in (0, 1)")
    pg = types.SimpleNamespace(PGConfig=PGConfig, SETTINGS=("mix",), run_name=lambda s: f"pg_m{s['mix']:g}")
    monkeypatch.setitem(configurations.METHODS, "pg", pg)
    monkeypatch.setitem(configurations.CONFIGS, "pg", PGConfig)
    monkeypatch.setitem(flags.LR, "pg", 2e-4)
    _, args, _, _, configs, _ = continual.parse_args(["--method", "pg,sdpo", "--mix", "0.2,0.4", "--alpha", "0,0.05"])
    assert [name for *_, name in configs] == ["pg_m0.2", "pg_m0.4", "sdpo_a0", "sdpo_a0.05"]
    assert [s["mix"] for _, s, _ in configs[:2]] == [0.2, 0.4] and (args.mix, args.alpha) == ([0.2, 0.4], [0.0, 0.05])
    assert [configurations.config_of(m, s, flags.per_seed(args)[0]).mix for m, s, _ in configs[:2]] == [0.2, 0.4]
    for bad, said in ((["--mix", "0.2,1.5"], "--mix must be in (0, 1)"), (["--mix", "0.2,x"], "--mix takes a float")):
        with pytest.raises(SystemExit) as e:
            continual.parse_args(["--method", "pg", *bad])
        assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_runs_own_config_json_reruns_that_run_in_its_directory(tmp_path):
    """`--config` of a run's config.json, in the folder it ran in, gives back the same directory (it once
    trained everything again into a new hashed directory) and the same threads; the folder is the command's, never
    the file's (round six: a committed config sent runs into another machine's absolute path)."""
    ap, args, stages, benchmarks, configs, defaults = continual.parse_args(
        ["--method", "grpo,sdpo", "--seed", "3", "--steps", "2", "--runs-dir", str(tmp_path / "runs")])
    run_dir = rundir.seed_dirs(args, flags.per_seed(args), configs, defaults, configurations.naming_knobs())[0]
    record = {**rundir.fingerprint_of(flags.per_seed(args)[0], stages, benchmarks, configs),
              "name": os.path.basename(run_dir), "runs_dir": os.path.dirname(run_dir), "threads": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(record))
    ap2, args2, stages2, benchmarks2, configs2, defaults2 = continual.parse_args(
        ["--config", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert rundir.seed_dirs(args2, flags.per_seed(args2), configs2, defaults2, configurations.naming_knobs()) == [run_dir]
    record["runs_dir"] = "/another/machine/runs"
    path.write_text(json.dumps(record))
    ap3, args3, _, _, configs3, defaults3 = continual.parse_args(["--config", str(path)])
    assert rundir.seed_dirs(args3, flags.per_seed(args3), configs3, defaults3, configurations.naming_knobs()) == [
        os.path.join("runs", os.path.basename(run_dir))]
    assert args2.threads == 1 and args2.steps == 2 and stages2 == stages
    # a rerun's own record is the same run, whatever threads or directory it records
    assert rundir.same_run(record, rundir.fingerprint_of(flags.per_seed(args2)[0], stages2, benchmarks2, configs2))


def test_a_different_run_is_named_by_the_settings_that_differ(tmp_path):
    """"runs/X holds a different run" did not say which setting differs."""
    ap, args, stages, benchmarks, configs, _ = continual.parse_args(["--method", "grpo", "--steps", "3", "--name", "x",
                                                                     "--runs-dir", str(tmp_path / "runs")])
    run_dir = tmp_path / "runs" / "x"
    run_dir.mkdir(parents=True)
    old = {**rundir.fingerprint_of(flags.per_seed(args)[0], stages, benchmarks, configs), "steps": 5}
    (run_dir / "config.json").write_text(json.dumps(old))
    out = run_cli(["--method", "grpo", "--steps", "3", "--name", "x"], tmp_path)
    assert out.returncode == 2 and "--steps 5 there, 3 here" in out.stderr, out.stderr


def test_an_interval_wider_than_the_scale_is_not_printed():
    """Two seeds gave "68.0 ± 143.9" points; the cell now shows its mean alone, marked †, and the
    report says in one line that so few seeds cannot bound it."""
    assert report.pm({"mean": 0.184, "high": 0.205}) == "18.4 ± 2.1"
    assert report.pm({"mean": 0.68, "high": 0.68 + 1.439}) == "68.0 †"
    assert not report.wide({"mean": 0.5, "high": 1.4}) and report.wide({"mean": 0.5, "high": 1.6})


def test_the_curves_leave_out_an_empty_feedback_panel_and_keep_a_zero_reward(tmp_path):
    """The share distilled by feedback, 0 at every step with feedback off, gets no panel; a reward that is
    0 at every step is still drawn; a one-step run whose every value is 0 still draws its figure."""
    rows = [{"run": "sdpo_a0", "stage": 1, "step": s, "reward": 0.0, "js": 0.0, "feedback_frac": 0.0,
             "demo_frac": 0.0} for s in (1, 2)]
    keys = [k for k, _ in plots.curve_panels(rows)]
    assert "feedback_frac" not in keys and {"reward", "js", "demo_frac"} <= set(keys)
    assert "feedback_frac" in [k for k, _ in plots.curve_panels([{**r, "feedback_frac": 0.2} for r in rows])]
    assert os.path.isfile(plots.plot_curves(rows, str(tmp_path / "curves.png"), ["math"]))
