"""The confirmatory reference's claims and the defences': every metric against a hand
computation on hand-made results.json files, Holm's correction on worked examples, and the p-value that
the interval inverts."""
import json
import math
import os
import random
import re

import pytest

from infra.stats import mean_interval
from analysis import claims, footing, mediation, significance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

B8 = ["math", "science", "tooluse", "coding", "math_hard", "science_boxed", "tool_unseen", "logic"]
SDPO = {"alpha": 0.05, "cot": False, "refresh_every": 0, "gamma": 1.0, "mask_ratio": 0.0, "feedback": "release",
        "teacher_init": "restart", "teacher_mix": 1.0}
GRPO = {"mini_batches": 4, "epochs": 1, "clip_ratio_c": 3.0}


def run(method, settings, acc, **extra):
    return {"method": method, "settings": settings, "acc": acc, **extra}


def sdpo(**s):
    return {**SDPO, **s}


def central_mass(t, df, steps=20000):
    """P(|T| < t) = 2 ∫_0^t of Student's t density, by the trapezoid rule (a reference independent of
    claims.py; no tail to truncate)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = t / steps
    return 2 * sum((f(i * h) + f((i + 1) * h)) * h / 2 for i in range(steps))


@pytest.mark.parametrize("t,df", [(2.0, 5), (0.3, 2), (4.303, 2), (1.0, 19), (3.5, 9), (-2.2, 4)])
def test_the_two_sided_p_against_the_density(t, df):
    assert significance.t_two_sided_p(t, df) == pytest.approx(1 - central_mass(abs(t), df), abs=1e-6)
    if df == 2:   # the closed form: P(|T| ≥ t) = 1 − t / √(2 + t²)
        assert significance.t_two_sided_p(t, df) == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), abs=1e-12)


def test_p_below_5_percent_exactly_when_the_interval_leaves_0():
    rng = random.Random(0)
    for _ in range(300):
        d = [rng.gauss(rng.uniform(-1, 1), 1) for _ in range(rng.randint(2, 8))]
        _, lo, hi = mean_interval(d)
        if min(abs(lo), abs(hi)) < 1e-3:
            continue   # (on the boundary the two round differently)
        assert (significance.p_value(d) < 0.05) == (lo > 0 or hi < 0)


def test_holm_on_worked_examples():
    # sorted: 0.005 ≤ 0.05/4, 0.01 ≤ 0.05/3, then 0.03 > 0.05/2: stop (0.04 is not rejected either)
    assert significance.holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    # 0.01 ≤ 0.05/5; 0.02 > 0.05/4: only the first, though each is below 0.05 on its own
    assert significance.holm([0.01, 0.02, 0.03, 0.04, 0.05]) == [True, False, False, False, False]
    # a None (a claim not comparable or not testable) or a NaN counts as p = 1: never rejected, and it stays in m
    assert significance.holm([1e-4, None, 1e-3]) == [True, False, True]
    # 0.02 ≤ 0.05/2 with two rows, but the family holds three: 0.02 > 0.05/3 once the None counts in m
    assert significance.holm([0.02, 0.021]) == [True, True]
    assert significance.holm([0.02, 0.021, None]) == [False, False, False]
    assert significance.holm([0.001, float("nan")]) == [True, False]
    assert significance.holm([float("nan")] * 3) == [False] * 3
    assert significance.holm([]) == []


def continual_results(shift):
    """A hand-made continual results.json (4 stages, 8 benchmarks) for one seed."""
    base = [0.5] * 8
    g = [base, [0.8] + [0.5] * 7, [0.6, 0.9] + [0.5] * 6, [0.6, 0.8, 0.7] + [0.5] * 5,
         [0.6, 0.8, 0.7, 0.9, 0.55, 0.5, 0.6, 0.45]]
    s0 = [base, [0.85 + shift] + [0.5] * 7, [0.5, 0.95] + [0.5] * 6, [0.4, 0.7, 0.6] + [0.5] * 5,
          [0.3, 0.6, 0.5, 0.4, 0.4, 0.4, 0.4, 0.4]]
    drift = lambda angle, iou: [{"params_vs_base": {"all": {"angle_max": angle, "iou_mean": iou, "nss_mean": 0.0}},
                                 "responses_vs_base": {"mean": 0.9}, "kl_to_base_mean": 1.0}]
    js = [[0.02] * 40, [0.04] * 40, [0.05] * 40, [0.01] * 5 + [0.002] * 5 + [0.0] * 30]
    runs = {"grpo": run("grpo", GRPO, g, degenerate=[0, 0, 0, 0.02], drift=drift(10.0, 0.995),
                        avg_forget_earlier=0.1, avg_forget_ood=0.05),
            "sdpo_a0": run("sdpo", sdpo(alpha=0.0), s0, degenerate=[0, 0, 0.01, 0.05], drift=drift(20.0 + shift, 0.9),
                           avg_forget_earlier=0.3 + shift, avg_forget_ood=0.2),
            "sdpo_a0.05": run("sdpo", sdpo(), s0, degenerate=[0, 0.3, 0.1, 0.2], drift=drift(25.0, 0.85),
                              avg_forget_earlier=0.5, avg_forget_ood=0.4, js_steps=js)}
    return {"stages": ["math", "science", "tooluse", "coding"], "benchmarks": B8, "runs": runs}


def single_results(source, own, others, steps=None):
    """A hand-made one-stage results.json: {role settings name: (own accuracy after, mean of the others)}."""
    runs = {}
    for name, (method, s) in {"grpo": ("grpo", GRPO), "sdpo_a0": ("sdpo", sdpo(alpha=0.0)),
                              "sdpo_a0.01": ("sdpo", sdpo(alpha=0.01)), "sdpo_a0.05": ("sdpo", sdpo()),
                              "sdpo_r10_g0.5": ("sdpo", sdpo(alpha=0.0, refresh_every=10, gamma=0.5))}.items():
        after = [others[name]] * 8
        after[B8.index(source)] = own[name]
        runs[name] = run(method, s, [[0.5] * 8, after], js_steps=[steps[name]] if steps else None,
                         entropy_steps=[steps[name]] if steps else None)
    return {"stages": [source], "benchmarks": B8, "runs": runs}


def ramp(a, b):
    """40 steps: 0.1 over steps 1–10, a over 11–20, a over 21–30, b over 31–40."""
    return [0.1] * 10 + [a] * 20 + [b] * 10


def bundle(shift=0.0):
    math_ = single_results("math", {"grpo": 0.7, "sdpo_a0": 0.6, "sdpo_a0.01": 0.8, "sdpo_a0.05": 0.55,
                                    "sdpo_r10_g0.5": 0.65},
                           {"grpo": 0.55, "sdpo_a0": 0.45, "sdpo_a0.01": 0.5, "sdpo_a0.05": 0.4, "sdpo_r10_g0.5": 0.5},
                           steps={"grpo": ramp(0, 0), "sdpo_a0": ramp(0.2, 0.1), "sdpo_a0.01": ramp(0.2, 0.2),
                                  "sdpo_a0.05": ramp(0.2, 0.5 + shift), "sdpo_r10_g0.5": ramp(0.2, 0.2)})
    tool = single_results("tooluse", {"grpo": 0.7, "sdpo_a0": 0.75, "sdpo_a0.01": 0.6, "sdpo_a0.05": 0.5,
                                      "sdpo_r10_g0.5": 0.6},
                          {"grpo": 0.5, "sdpo_a0": 0.5, "sdpo_a0.01": 0.5, "sdpo_a0.05": 0.5, "sdpo_r10_g0.5": 0.45})
    cot = {"stages": ["math"], "benchmarks": ["math"], "runs": {
        "sdpo_a0": run("sdpo", sdpo(alpha=0.0), [[0.5], [0.7]], drift=[{"params_vs_base": {"all": {"angle_max": 30.0}}}]),
        "sdpo_a0_cot": run("sdpo", sdpo(alpha=0.0, cot=True), [[0.5], [0.6 + shift]],
                           drift=[{"params_vs_base": {"all": {"angle_max": 40.0}}}]),
        "sdpo_a0.05": run("sdpo", sdpo(), [[0.5], [0.65]], drift=[{"params_vs_base": {"all": {"angle_max": 35.0}}}])}}
    d = json.load(open(os.path.join(os.path.dirname(__file__), "..", "results", "reference", "distances.json")))
    return {"continual": continual_results(shift), "math": math_, "tooluse": tool, "cot-math": cot, "distances": d}


def by_id(rows):
    return {r["id"]: r for r in rows}


def test_every_declared_metric_by_hand():
    r = by_id(claims.measure_declared([bundle(0.0), bundle(0.0)]))
    # H1: own domain right after stages 1, 2: SDPO_0 (0.85, 0.95) − GRPO (0.8, 0.9) = (+0.05, +0.05)
    assert r["H1"]["effect"] == pytest.approx(0.05)
    assert r["H2"]["effect"] == pytest.approx(0.5 - 0.1) and r["H3"]["effect"] == pytest.approx(0.3 - 0.1)
    assert r["H4"]["effect"] == pytest.approx(0.4 - 0.05)
    # the same F in accuracy points: SDPO_5%'s earlier domains (MATH, SCIENCE, TOOLUSE) lose 0.2, 0, 0 -> 0.2/3;
    # GRPO's lose 0, 0, 0 (it ends above the base on each)
    assert r["H2"]["points"][0] == pytest.approx(0.2 / 3)
    # H5a: GRPO's final Δ over 8: (.1 + .3 + .2 + .4 + .05 + 0 + .1 − .05) / 8; H5b: its smallest, −0.05
    assert r["H5a"]["effect"] == pytest.approx(1.1 / 8) and r["H5b"]["effect"] == pytest.approx(-0.05)
    assert r["H6a"]["effect"] == pytest.approx(40 - 35) and r["H6b"]["effect"] == pytest.approx(25 - 20)
    assert r["H6c"]["effect"] == pytest.approx(20 - 10) and r["H7"]["effect"] == pytest.approx(0.995 - 0.99)
    assert r["H8a"]["effect"] == pytest.approx(0.2 - 0.02)
    # H8b: SDPO_5%'s largest degenerate share of stages 2–4 is after stage 2 (0.3): JS of stage 2's steps 6–10
    # (0.04) over stage 1's mean (0.02) = 2.0, less 0.1
    assert r["H8b"]["effect"] == pytest.approx(2.0 - 0.1)
    # L1: [MATH(1%) − MATH(0)] − [TOOLUSE(1%) − TOOLUSE(0)] = (0.8 − 0.6) − (0.6 − 0.75)
    assert r["L1"]["effect"] == pytest.approx(0.2 + 0.15)
    # L2: MATH(5%) − the lowest of the others; only 0 and 1% were "run" here: α 0.5%, 2% missing -> not run
    assert r["L2"]["verdict"] == "not run"
    # L3a: late rise (steps 31–40 − 11–20): 5%: 0.5 − 0.2; 0: 0.1 − 0.2
    assert r["L3a"]["effect"] == pytest.approx(0.3 - (-0.1)) and r["L3b"]["effect"] == pytest.approx(0.4)
    # L4: mean over 8 after MATH: StableSDPO (0.65 + 7·0.5)/8 − SDPO_5% (0.55 + 7·0.4)/8
    assert r["L4"]["effect"] == pytest.approx((0.65 + 3.5) / 8 - (0.55 + 2.8) / 8)
    assert r["L5"]["effect"] == pytest.approx((0.6 + 7 * 0.45) / 8 - (0.5 + 3.5) / 8)
    assert r["D1"]["effect"] == pytest.approx(0.6 - 0.7) and r["D2"]["verdict"] == "not run"
    # X1: others' Δ: MATH GRPO +0.05 vs SDPO_0 −0.05; TOOLUSE 0 vs 0 -> (0.1 + 0) / 2
    assert r["X1"]["effect"] == pytest.approx(0.05)
    # X2: every other benchmark moved alike here: no contrast
    assert r["X2"]["effect"] == pytest.approx(0.0, abs=1e-12)


def test_the_distance_contrast_by_hand():
    """Near = the 2 nearest to the source, far = the 2 farthest, intermediate = the rest."""
    dist = {"math": {"a": 0.1, "b": 0.2, "c": 0.5, "d": 0.6, "e": 0.7, "f": 0.9, "g": 0.95, "math": 0.0}}
    names = ["math", "a", "b", "c", "d", "e", "f", "g"]
    after = [0.9, 0.5, 0.5, 0.2, 0.3, 0.1, 0.6, 0.4]     # Δ vs 0.5: near 0, 0; mid −0.3, −0.2, −0.4; far +0.1, −0.1
    res = {"stages": ["math"], "benchmarks": names,
           "runs": {"s": run("sdpo", sdpo(alpha=0.0), [[0.5] * 8, after])}}
    assert claims.distance_contrast(res, "SDPO_0", dist) == pytest.approx(-0.3 - (0.0 + 0.0) / 2)


def test_verdicts_raw_and_corrected_and_not_run():
    rows = by_id(claims.measure_declared([bundle(0.0), bundle(0.02), bundle(-0.01)]))
    assert rows["H3"]["n"] == 3 and rows["H3"]["verdict"] in ("shown", "not separable")
    one = by_id(claims.measure_declared([bundle(0.0)]))
    assert one["H1"]["verdict"] == "not separable (one seed)" and one["H1"]["corrected"] == "not separable (one seed)"
    text = claims.declared_table(claims.measure_declared([bundle(0.0), bundle(0.05)]))
    assert text.count("\n") == 1 + len(claims.DECLARED) and "Holm" in text


def defence_results(f_earlier):
    return {"stages": ["math", "science", "tooluse", "coding"], "benchmarks": B8,
            "runs": {"x": run("sdpo", sdpo(), [[0.5] * 8] * 5, avg_forget_earlier=f_earlier, avg_gain_trained=0.2,
                              degenerate=[0, 0, 0, 0.1], drift=[None])}}


def test_the_defences_claims_by_hand():
    """d = defence − SDPO_5% on the same seed; a defence that lowers F by 0.1 on every seed is shown."""
    seeds = [{"def-control": defence_results(0.5 + e), "def-replay": defence_results(0.4 + e)} for e in (0, .1, .2)]
    rows = by_id(claims.measure_declared(seeds, claims.EXPLORATORY))
    assert rows["E-replay"]["effect"] == pytest.approx(-0.1) and rows["E-replay"]["verdict"] == "shown"
    assert rows["E-trust"]["verdict"] == "not run"
    assert "+0.0 [+0.0, +0.0]" in claims.defence_table(seeds)   # the same G: no cost
    assert [c[0] for c in claims.EXPLORATORY] == ["E-replay", "E-anchor", "E-basekl", "E-live", "E-base", "E-trust"]


@pytest.mark.parametrize("argv,message", [(["--seeds", "1,x"], "--seeds"), (["--seeds", "12", "--only", "bogus"], "--only"),
                                          (["--seeds", "12", "--jobs", "0"], "--jobs")])
def test_the_reference_runner_s_bad_input_is_one_line(argv, message, capsys):
    from tools import reference
    with pytest.raises(SystemExit) as e:
        reference.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1] and " error: " in err[-1]


def test_the_reference_skips_a_finished_experiment(tmp_path, monkeypatch):
    """A seed's experiment with its results.json is finished: the runner starts nothing for it."""
    from tools import reference
    from infra import children
    for exp in claims.EXPERIMENTS:
        os.makedirs(tmp_path / f"{exp}-s12")
        (tmp_path / f"{exp}-s12" / "results.json").write_text("{}")
    started = []
    monkeypatch.setattr(children.subprocess, "run", lambda *a, **k: started.append(a))
    reference.run_seed(12, root=str(tmp_path))
    assert started == []


def test_the_reference_s_workers_share_experiments_not_seeds(tmp_path):
    """--jobs workers draw (experiment, seed) pairs: a finished pair is left out, and the order is seed by seed in
    the family's order, so three seeds on two workers never leave one worker idle while experiments remain."""
    from tools import reference
    os.makedirs(tmp_path / "def-replay-s100")
    (tmp_path / "def-replay-s100" / "results.json").write_text("{}")
    units = reference.work_units([100, 101], "defences", root=str(tmp_path))
    assert len(units) == 2 * len(claims.DEFENCES) - 1 and ("def-replay", 100) not in units
    assert units[0] == ("def-control", 100) and units[-1] == ("def-trust", 101)
    assert reference.work_units([100], "defences", only=["def-live"], root=str(tmp_path)) == [("def-live", 100)]


def test_the_reference_s_time_table_reads_each_finished_directory(tmp_path):
    from tools import reference
    assert reference.seconds_table(str(tmp_path)) == ""
    for name, secs in [("math-s10", 889), ("continual-s10", 2171), ("math-s11", 869), ("def-live-s100", 5)]:
        os.makedirs(tmp_path / name)
        (tmp_path / name / "seconds.txt").write_text(f"{secs}\n")
    os.makedirs(tmp_path / "tooluse-s11")   # unfinished: no seconds.txt
    table = reference.seconds_table(str(tmp_path)).splitlines()
    assert table[0] == "| experiment | seed 10 | seed 11 |"
    assert "| `math` | 889 s | 869 s |" in table and "| `continual` | 2171 s | — |" in table
    assert table[-1] == "| all | 3060 s (51 min) | 869 s (14 min) |"
    assert "seed 100" in reference.seconds_table(str(tmp_path), "defences")


def test_the_replay_follow_up_s_verdict_follows_its_declared_rule():
    """Replay's effect on F earlier under the EMA and the base teacher, per seed, and the declared verdict: the
    self-teacher's when the difference is separable below 0 and replay under the base teacher is not separable
    above 0; replay's own when that is separable above 0; else not decided."""
    def bundle(control, replay, base, base_replay):
        run = lambda f: {"runs": {"x": {"avg_forget_earlier": f}}, "stages": [], "benchmarks": []}
        return {"def-control": run(control), "def-replay": run(replay), "def-base": run(base),
                "def-base-replay": run(base_replay)}
    self_teacher = [bundle(0.3, 0.8, 0.1, 0.1), bundle(0.3, 0.9, 0.2, 0.15), bundle(0.4, 0.9, 0.0, 0.05)]
    rows, decided = claims.follow_up_rows(self_teacher)
    assert [r[1] for r in rows[:2]] == [pytest.approx([0.5, 0.6, 0.5]), pytest.approx([0.0, -0.05, 0.05])]
    assert rows[2][1] == pytest.approx([-0.5, -0.65, -0.45]) and decided == "the self-teacher's"
    own = [bundle(0.3, 0.8, 0.1, 0.6), bundle(0.3, 0.9, 0.2, 0.75), bundle(0.4, 0.9, 0.0, 0.5)]
    assert claims.follow_up_rows(own)[1] == "replay's own"
    undecided = [bundle(0.3, 0.8, 0.1, 0.6), bundle(0.3, 0.9, 0.2, 0.1), bundle(0.4, 0.9, 0.0, 0.5)]
    assert claims.follow_up_rows(undecided)[1] == "not decided"
    assert claims.follow_up_rows(self_teacher[:1])[1] == "not decided"   # one seed decides nothing
    assert "**the self-teacher's**" in claims.follow_up_table(self_teacher)
    assert claims.defence_flags("def-base-replay") == "--method sdpo_5 --teacher base --replay 0.2"


def test_the_defences_levels_are_each_run_s_own_mean_over_its_seeds():
    """defence_levels on the committed runs of the family: the control's F earlier is the mean of its seeds'
    avg_forget_earlier (results.json), and an experiment with no run has no row."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "reference")
    bundles = [x for x in claims.read_reference(root).values() if "def-control" in x]
    if not bundles:
        pytest.skip("the defences' runs are not in this checkout")
    f = [next(iter(x["def-control"]["runs"].values()))["avg_forget_earlier"] for x in bundles]
    row = next(line for line in claims.defence_levels(bundles).splitlines() if line.startswith("| `def-control` |"))
    assert row.split(" | ")[2].startswith(f"{100 * sum(f) / len(f):.1f} [")
    assert "def-base-replay" not in claims.defence_levels([{k: v for k, v in x.items() if k != "def-base-replay"}
                                                           for x in bundles])


def github_anchor(heading):
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def test_the_readme_and_the_handout_print_one_table_of_what_held(monkeypatch):
    """The verdicts are read from one place (claims.HEADLINE): the README and docs/HANDOUT.md print its
    table as it is, each row's link lands on a heading of docs/RESULTS.md, and each verdict is one of five words."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    handout = open(os.path.join(ROOT, "docs", "HANDOUT.md")).read()
    assert claims.headline_table() in readme and claims.headline_table("RESULTS.md") in handout
    headings = {github_anchor(line.lstrip("#")) for line in open(os.path.join(ROOT, "docs", "RESULTS.md"))
                if line.startswith("#")}
    for claim, verdict, number, anchor in claims.HEADLINE:
        assert anchor in headings, (claim, anchor)
        assert verdict in (claims.HELD, claims.OPPOSITE, claims.NOT_REPRODUCED, claims.DEPENDS, claims.NOT_TESTABLE)
    # the check can fail: a verdict changed in the one place is no longer what the README prints
    monkeypatch.setattr(claims, "HEADLINE", [(c, claims.OPPOSITE if v == claims.HELD else v, n, a)
                                             for c, v, n, a in claims.HEADLINE])
    assert claims.headline_table() not in readme


def test_a_claim_s_id_never_reads_as_an_equation_s_tag():
    """The paper's continual claims are H1–H8b, §3.1's rate claims L1–L5, the single-domain transfer X1–X2: they
    were C…, A…, S…, G…, which are also the tags of EQUATIONS.md's continual, evaluation, SDPO and GRPO equations
    (C3 was both Acc@k and "SDPO_0 forgets more"). No claim id begins with a letter an equation's tag begins with."""
    tags = set(re.findall(r"^\| ([A-Z])\d+[a-z]? \|", open(os.path.join(ROOT, "EQUATIONS.md"), encoding="utf-8").read(),
                          re.M))
    ids = [c[0] for c in [*claims.DECLARED, *footing.NEW_CLAIMS, *mediation.TESTS, *claims.EXPLORATORY]]
    assert tags >= {"A", "B", "C", "G", "S", "T"} and len(ids) >= 40
    assert not [i for i in ids if i[0] in tags], [i for i in ids if i[0] in tags]
    assert len(set(ids)) == len(ids)
