"""analysis/mediation.py: the two-way bootstrap and the declared tests on hand-made arms whose answer is known, the
per-prompt records read back from files, and tools/mediation.py's experiments as declared."""
import json
import os

import numpy as np
import pytest

import evaluate
from analysis import mediation
from tools import mediation as runner   # noqa: F401  (tests may import tools/)

# (rate, SCIENCE gain, MATH drop) per arm: SDPO_0 forgets 3 points more than GRPO at every gain it shares with it;
# the failed-only arm lies on GRPO's curve (projection), and its KL_old is GRPO's too
CURVES = {"GRPO": [(1, 30, 1), (2, 36, 2), (4, 42, 3), (8, 48, 4)],
          "SDPO_0": [(1, 30, 4), (2, 36, 5), (4, 42, 6), (8, 44, 7)],
          "SDPO_0 failed-only": [(1, 30, 1), (2, 36, 2), (4, 42, 3), (8, 44, 3.3)]}


def family(seeds=8, noise=0.5, n_math=64, n_sci=40, seed=0):
    """A family dict as read_runs returns it: θ_1 at 50% on every prompt; each run's per-prompt accuracies set so
    that its gain and drop are the curve's, with per-seed noise and per-prompt spread that averages out."""
    rng = np.random.default_rng(seed)
    t1 = {"math": np.full(n_math, 0.5), "science": np.full(n_sci, 0.3), "sha": {"math": ["m"] * n_math,
                                                                              "science": ["s"] * n_sci}, "kl": {}}
    spread = lambda n: np.resize([-0.05, 0.05], n)   # noqa: E731  (prompts differ; the mean is untouched)
    runs = []
    for role, curve in CURVES.items():
        for lr, gain, drop in curve:
            for s in range(seeds):
                g, d = gain + rng.normal(0, noise), drop + rng.normal(0, noise)
                kl_old = 0.1 * drop if role != "SDPO_0" else 0.1 * (drop - 3)   # SDPO_0: GRPO's KL at its gain
                m = {"science": 0.3 + g / 100 + spread(n_sci), "math": 0.5 - d / 100 + spread(n_math),
                     "sha": t1["sha"], "kl": {"old": np.full(n_math, kl_old), "new": np.full(n_sci, 0.2),
                                              "zero": np.full(n_sci, 0.4)}}
                runs.append({"seed": s, "role": role, "lr": lr * 1e-5, "name": f"{role}-{lr}-{s}", "m": m})
    return {"theta1": {s: t1 for s in range(seeds)}, "runs": runs, "code": "abc", "seconds": 0}


def test_the_declared_family_reads_the_known_answer():
    rows = {r["id"]: r for r in mediation.family(family(), draws=300)}
    assert rows["M1"]["d"] == pytest.approx(3, abs=0.6) and rows["M1"]["corrected"] == "> 0"
    assert rows["M1"]["g"] == pytest.approx(37, abs=1)            # the midpoint of [30, 44]
    assert rows["M2"]["corrected"] == "not separable"             # SDPO_0 carries GRPO's KL_old at the same gain…
    assert rows["M3"]["corrected"] == "not separable" and rows["M3"]["d"] == pytest.approx(0)
    assert rows["M4"]["corrected"] == "> 0" and rows["M4"]["d"] > 2   # …and forgets more: above GRPO's law
    assert rows["M5"]["corrected"] == "< 0" and rows["M5"]["d"] == pytest.approx(-3, abs=0.6)
    assert rows["M6"]["corrected"] == "not separable"
    assert "Projection" in mediation.reading(list(rows.values()))


def test_the_interval_holds_the_prompts_too():
    """Prompts that disagree (half lose 10 points, half gain 4) widen the interval beyond the seeds' alone."""
    fam = family(noise=0.3)
    for r in fam["runs"]:
        if r["role"] == "SDPO_0":
            r["m"]["math"] = r["m"]["math"] + np.resize([-0.07, 0.07], r["m"]["math"].size) * np.r_[
                np.zeros(32), np.ones(r["m"]["math"].size - 32)]
    even = family(noise=0.3)
    wide = {r["id"]: r for r in mediation.family(fam, draws=300)}["M1"]
    narrow = {r["id"]: r for r in mediation.family(even, draws=300)}["M1"]
    assert wide["d"] == pytest.approx(narrow["d"], abs=1e-9)
    assert (wide["high"] - wide["low"]) > 1.5 * (narrow["high"] - narrow["low"])


def test_along_the_range_reads_each_gain_and_its_midpoint_is_the_declared_one():
    """SDPO_0's excess is 3 points at every gain: d(g) ≈ 3 at each of the five gains from 30 to 44 (GRPO's and SDPO_0's
    common range), and the middle one is M1's own point estimate; a gap that grows with gain shows as one."""
    fam = family()
    m1 = {r["id"]: r for r in mediation.family(fam, draws=100)}["M1"]
    ranges = {tid: rows for tid, _, _, rows in mediation.along_range(fam, draws=100)}
    assert "M4" not in ranges and [r["g"] for r in ranges["M1"]] == pytest.approx([30, 33.5, 37, 40.5, 44], abs=1)
    assert all(r["d"] == pytest.approx(3, abs=0.8) for r in ranges["M1"])
    # inside the range every draw's frontiers reach the gain; at its very ends about half do, so no interval there
    assert all(r["low"] < r["d"] < r["high"] for r in ranges["M1"][1:-1])
    assert ranges["M1"][0]["low"] is None and ranges["M1"][0]["kept"] < 0.95
    assert ranges["M1"][2]["d"] == pytest.approx(m1["d"], abs=1e-9)
    for r in fam["runs"]:   # SDPO_0 forgets 0.5 more per point of gain above 30
        if r["role"] == "SDPO_0":
            gain = 100 * (r["m"]["science"].mean() - 0.3)
            r["m"]["math"] = r["m"]["math"] - 0.005 * max(0.0, gain - 30)
    grown = {tid: rows for tid, _, _, rows in mediation.along_range(fam, draws=100)}["M1"]
    assert grown[-1]["d"] - grown[0]["d"] > 5
    assert "## Along the common range" in mediation.summary_text(fam, draws=50)[0]


def test_one_seed_or_a_nan_is_never_a_verdict():
    rows = mediation.family(family(seeds=1), draws=50)
    assert {r["corrected"] for r in rows} <= {"too few seeds", "not comparable"}
    fam = family()
    for r in fam["runs"]:   # a NaN in the cells the midpoint reads
        if r["role"] == "SDPO_0" and r["seed"] == 0:
            r["m"]["math"] = np.full(64, np.nan)
    assert {r["id"]: r for r in mediation.family(fam, draws=50)}["M1"]["corrected"] == "not comparable"


def test_runs_are_read_back_from_their_files(tmp_path):
    def write(name, math_acc, sci_acc, kl=None):
        d = tmp_path / name
        (d / "prompts").mkdir(parents=True)
        json.dump({"code": "c0ffee"}, open(d / "config.json", "w"))
        (d / "seconds.txt").write_text("7\n")
        acc = {}
        for bench, vals, seeds in (("math", math_acc, (0, 1)), ("science", sci_acc, (0,))):
            for s in seeds:
                rows = [{"prompt": i, "sha1": f"{bench}{i}", "scores": [v, v]} for i, v in enumerate(vals)]
                evaluate.save_prompt_records(str(d), f"measure-{bench}-s{s}", {bench: rows}, s)
                acc[f"{bench}-s{s}"] = sum(vals) / len(vals)
        json.dump({"acc": acc, "kl": kl or {}}, open(d / "measures.json", "w"))
    write("med-theta1-s3", [1.0] * 40, [0.0] * 10)
    write("med-sdpo0-failed-lr2.5e-05-s3", [0.5] * 40, [1.0] * 10,
          {k: {"terms": [0.1, 0.3] * n, "samples": 2} for k, n in (("old", 40), ("new", 10), ("zero", 10))})
    fam = mediation.read_runs(str(tmp_path))
    (run,) = fam["runs"]
    assert (run["role"], run["lr"], run["seed"]) == ("SDPO_0 failed-only", 2.5e-5, 3) and fam["seconds"] == 14
    v = mediation.measures(mediation.stacked(fam), mediation.identity_prompts(mediation.stacked(fam)))
    assert v["gain"][0] == pytest.approx(100) and v["drop"][0] == pytest.approx(50)
    assert v["kl_old"][0] == pytest.approx(0.2) and fam["code"] == "c0ffee"
    write("med-grpo-lr1e-04-s3", [1.5] * 40, [0.0] * 10)   # an accuracy above 1: refused, naming the file
    with pytest.raises(ValueError, match="med-grpo-lr1e-04-s3.*outside"):
        mediation.read_runs(str(tmp_path))


def test_the_runner_declares_every_arm_from_theta1():
    exps = runner.experiments(12)
    assert list(exps)[0] == "med-theta1-s12" and len(exps) == 13
    assert exps["med-sdpo0-failed-lr2.5e-05-s12"].startswith("--method sdpo_0 --distill failed --lr 2.5e-05")
    assert all("--weight-decay 0 --topk 0" in f for n, f in exps.items() if n != "med-theta1-s12")


def test_the_figure_draws_every_arm_and_grpo_s_law(tmp_path):
    """plot_mediation on the hand-made family: a PNG with three panels, one line per arm in the two frontier panels
    (their points at the arms' mean gains) and GRPO's law through GRPO's runs; no runs, no figure."""
    pytest.importorskip("matplotlib")
    from analysis import figures
    import matplotlib.pyplot as plt
    drawn = []
    real_save = figures.save
    figures.save = lambda fig, path, layout=True: drawn.append(fig) or real_save(fig, path, layout)
    try:
        path = str(tmp_path / "mediation.png")
        figures.plot_mediation(family(), path)
    finally:
        figures.save = real_save
    assert os.path.getsize(path) > 10_000 and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    left, middle, right = drawn[0].axes[:3]
    assert sorted(line.get_label() for line in left.get_lines() if not line.get_label().startswith("_")) == \
        sorted(mediation.ROLES)
    grpo = [line for line in left.get_lines() if line.get_label() == "GRPO"][0]
    assert list(np.round(grpo.get_xdata())) == [30, 36, 42, 48]   # each rate's mean gain over its 8 seeds
    assert [line.get_label() for line in right.get_lines()] == ["GRPO's law: a + b·log(1 + KL_old)"]
    plt.close("all")
    assert figures.plot_mediation({"theta1": {}, "runs": [], "code": None, "seconds": 0}, path + "2") is None


def test_the_summary_alone_reads_the_committed_family_and_a_missing_folder_is_one_error(tmp_path, monkeypatch,
                                                                                        capsys):
    """`--summary` without --root reads results/mediation wherever it is run from (LAB.md's exercise 15 runs in a
    folder of its own); a --root that does not exist is an error: line and exit 2, not "no finished arm yet"."""
    seen = []
    monkeypatch.setattr(runner.mediation, "read_runs", lambda root: seen.append(root) or {"runs": [], "theta1": {}})
    monkeypatch.chdir(tmp_path)
    runner.main(["--summary"])
    assert seen == [os.path.join(runner.safety.REPO, "results", "mediation")]
    assert "no finished arm yet" in capsys.readouterr().out
    for argv in (["--summary", "--root", str(tmp_path / "nowhere")], ["--seeds", "10"]):
        with pytest.raises(SystemExit) as e:
            runner.main(argv)
        assert e.value.code == 2
    assert "no such folder" in capsys.readouterr().err
