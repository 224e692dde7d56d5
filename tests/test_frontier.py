"""analysis/frontier.py: the matched-gain rule and the KL law on hand-made frontiers whose answer is known."""
import os
import random

import pytest

from analysis import frontier


def points(gain, y, fkl=None, stage=2):
    """One run's points with `gain` and forgetting `y` at `stage` (the other stages empty)."""
    p = {key: [None] * 4 for key in ("gain", "peak", "F", "ood", "fkl")}
    p["gain"][stage - 1], p["peak"][stage - 1], p["fkl"][stage - 1] = gain, y, fkl
    return p


def cells_from(curves, seeds=10, noise=1.0, seed=0):
    """{(role, lr): {seed: points}}: each method's (lr, mean gain, mean forgetting) with Gaussian noise per seed."""
    rng = random.Random(seed)
    return {(role, lr): {s: points(g + rng.gauss(0, noise), y + rng.gauss(0, noise)) for s in range(seeds)}
            for role, curve in curves.items() for lr, g, y in curve}


GRPO = [(1e-5, 10, 1), (2e-5, 20, 2), (4e-5, 30, 3), (8e-5, 15, 20)]      # the last rate learns less: dominated


def test_the_frontier_stops_at_the_largest_gain_and_interpolates_linearly():
    means = frontier.cell_means(cells_from({"GRPO": GRPO}, noise=0.0), "GRPO", "peak", 2)
    front = frontier.frontier(means)
    assert front == [(10, 1), (20, 2), (30, 3)]
    assert frontier.interpolate(front, 25) == pytest.approx(2.5) and frontier.interpolate(front, 35) is None
    assert frontier.common_gain(front, [(20, 5), (40, 9)]) == pytest.approx(25)   # overlap [20, 30]
    assert frontier.common_gain(front, [(31, 5), (40, 9)]) is None


def test_sdpo_forgetting_more_at_matched_gain_is_shown():
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 6), (2e-5, 22, 8), (4e-5, 28, 10)]})
    r = frontier.matched_difference(cells, "SDPO_0", "GRPO", "peak", 2, draws=400)
    assert r["g"] == pytest.approx(20, abs=2) and r["verdict"] == "shown" and r["low"] > 3 and r["p"] < 0.01


def test_the_same_curve_is_not_separable():
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 1.2), (2e-5, 22, 2.2), (4e-5, 28, 2.8)]}, noise=2.0)
    r = frontier.matched_difference(cells, "SDPO_0", "GRPO", "peak", 2, draws=400)
    assert r["verdict"] == "not separable" and r["low"] < 0 < r["high"]


def test_gains_that_do_not_overlap_are_not_comparable():
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 40, 6), (2e-5, 50, 8)]}, noise=0.5)
    r = frontier.matched_difference(cells, "SDPO_0", "GRPO", "peak", 2, draws=100)
    assert r["verdict"] == "not comparable" and r["d"] is None


def test_the_family_takes_holm_over_every_row():
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 6), (2e-5, 22, 8), (4e-5, 28, 10)],
                        "SDPO_5%": [(1e-5, 40, 6), (2e-5, 50, 8)]})
    rows = frontier.family(cells, draws=100)
    assert len(rows) == 2 * (3 + 3 + 4)   # pairs × (peak, F at stages 2–4; OOD at 1–4)
    peak2 = {r["pair"][0]: r for r in rows if r["measure"] == "peak" and r["stage"] == 2}
    assert peak2["SDPO_0"]["corrected"] == "shown" and peak2["SDPO_5%"]["corrected"] == "not comparable"
    assert all(r["corrected"] == "not comparable" for r in rows if r["measure"] != "peak" or r["stage"] != 2)


def test_the_kl_law_finds_the_line_and_sdpos_offset_from_grpos():
    rng = random.Random(1)
    cells = {("GRPO", 1e-4): {s: points(10, 2 + 3 * x, fkl=x) for s, x in enumerate([0.1 * i for i in range(10)])},
             ("SDPO_0", 1e-4): {s: points(10, 2 + 3 * x, fkl=x) for s, x in enumerate([0.5 + 0.1 * i for i in range(10)])},
             ("SDPO_5%", 1e-4): {s: points(10, 6 + 3 * x + rng.gauss(0, 0.1), fkl=x)
                                 for s, x in enumerate([0.5 + 0.1 * i for i in range(10)])}}
    law = frontier.kl_law(cells, "peak", 2, draws=300)
    assert law["b"] > 0 and law["n"] == 30
    assert law["offsets"]["SDPO_0"]["verdict"] == "on GRPO's line" and abs(law["offsets"]["SDPO_0"]["d"]) < 1e-9
    assert law["offsets"]["SDPO_5%"]["verdict"] == "above GRPO's line"
    assert law["offsets"]["SDPO_5%"]["d"] == pytest.approx(4, abs=0.1)
    # every run on one line: R² = 1
    line = {("GRPO", 1e-4): {s: points(10, 1 + 2 * s, fkl=float(s)) for s in range(5)}}
    assert frontier.kl_law(line, "peak", 2)["r2"] == pytest.approx(1.0)


def test_the_law_within_grpos_range_is_not_pulled_by_runs_beyond_it():
    # GRPO on forgetting = 2 · KL for KL in [0, 5]; SDPO_0 3 points above that line inside the range, and five runs
    # at KL 50 whose forgetting has saturated at 10: the line extrapolated there puts them 90 below it
    rng = random.Random(2)
    grpo = {s: points(10, 2 * x + rng.gauss(0, 0.1), fkl=x) for s, x in enumerate([0.5 * i for i in range(11)])}
    inside = [points(10, 3 + 2 * x + rng.gauss(0, 0.1), fkl=x) for x in (0.5, 1.5, 2.5, 3.5, 4.5) * 2]
    beyond = [points(10, 10.0, fkl=50.0) for _ in range(5)]
    cells = {("GRPO", 1e-4): grpo, ("SDPO_0", 1e-4): dict(enumerate(inside + beyond))}
    law = frontier.kl_law(cells, "peak", 2, draws=300)
    assert law["offsets"]["SDPO_0"]["verdict"] == "below GRPO's line"            # the declared reading, extrapolated
    within = law["within"]["SDPO_0"]
    assert within["verdict"] == "above GRPO's line" and within["d"] == pytest.approx(3, abs=0.2)
    assert within["beyond"] == 5 and within["n"] == 10
    assert law["grpo_line"][1] == pytest.approx(2, abs=0.05) and law["grpo_line"][2] > 0.99
    assert "SDPO_5%" not in law["within"]
    table = frontier.law_table(cells)
    assert "+3.0 [" in table and "(5 of 15 beyond)" in table


def test_run_points_by_hand():
    res = {"benchmarks": ["math", "science", "math_hard"], "stages": ["math", "science"]}
    run = {"acc": [[0.5, 0.4, 0.6], [0.9, 0.4, 0.5], [0.7, 0.8, 0.4]],
           "drift": [{"forward_kl_new": {"kl": 0.3}}, {"forward_kl_new": {"kl": 0.7}}]}
    p = frontier.run_points(res, run)
    assert p["gain"] == pytest.approx([40, 40])
    assert p["peak"][0] is None and p["peak"][1] == pytest.approx(20)      # math: peak 90 → 70
    assert p["F"][1] == pytest.approx(0.0)                                 # math 70 is above its base 50
    assert p["ood"] == pytest.approx([10, 20]) and p["fkl"] == [0.3, 0.7]


def test_a_frontier_cell_with_one_seed_gives_no_verdict():
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 6), (2e-5, 22, 8), (4e-5, 28, 10)]})
    cells[("GRPO", 2e-5)] = {0: cells[("GRPO", 2e-5)][0]}   # one seed on GRPO's frontier
    r = frontier.matched_difference(cells, "SDPO_0", "GRPO", "peak", 2, draws=50)
    assert r["verdict"] == "too few seeds" and r["low"] is None and r["d"] is not None
    assert frontier.with_holm([r])[0]["corrected"] == "too few seeds"


def test_the_kl_law_figure_draws_every_run_and_grpos_line(tmp_path):
    pytest.importorskip("matplotlib")
    from analysis.figures import plot_kl_law
    cells = {("GRPO", 1e-4): {s: points(10, 1 + 2 * s, fkl=float(s)) for s in range(5)},
             ("SDPO_0", 1e-4): {s: points(10, 5 + 2 * s, fkl=float(s)) for s in range(5)}}
    path = plot_kl_law(cells, str(tmp_path / "kl_law.png"))
    assert path and (tmp_path / "kl_law.png").read_bytes()[:4] == b"\x89PNG"
    assert not os.path.exists(path + ".tmp.png")   # written atomically
    assert plot_kl_law({}, str(tmp_path / "none.png")) is None and not (tmp_path / "none.png").exists()


def test_the_single_version_report_is_interim_until_every_declared_cell_has_every_seed():
    from analysis import claims

    def run(exp, seed, role, lr):
        p = points(10 + seed, 1.0, fkl=0.1 * seed)
        p["gain"] = [10.0 + seed] * 4   # (every stage's gain, as a run has)
        return (seed, role, lr, exp, {**p, "code": claims.FRONTIER_CODE})
    cells = [(e, role, float(f.split("--lr ")[1])) for e, f in claims.FRONTIER.items()
             for role in (("GRPO",) if "grpo" in e else ("SDPO_0", "SDPO_5%"))]
    every = [run(e, s, role, lr) for e, role, lr in cells for s in claims.FRONTIER_SEEDS]
    assert len({(r, lr) for _, r, lr, _, _ in every}) == 16
    text, _ = frontier.summary_text(every, draws=10)
    assert "Interim" not in text.split("# History")[0]
    short = [r for r in every if not (r[3] == "fr-grpo-1.25e-5" and r[0] > 12)]
    assert "**Interim**: 16 of the 16 cells are in, and some have 3 of the 10 seeds" in frontier.summary_text(short, draws=10)[0]
    none = [r for r in every if r[3] != "fr-grpo-1.25e-5"]
    assert "**Interim**: 15 of the 16 cells are in" in frontier.summary_text(none, draws=10)[0]


def test_the_difference_is_read_across_the_whole_common_range():
    # SDPO_0 = GRPO + 5 where the gains overlap ([12, 28] ∩ [10, 30]): d = 5 at every gain read, its ends included
    cells = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 6.2), (2e-5, 22, 7.2), (4e-5, 28, 7.8)]}, noise=0.0)
    rows = frontier.along_range(cells, "SDPO_0", "GRPO", "peak", 2, n=5, draws=50)
    assert [round(r["g"], 6) for r in rows] == [12, 16, 20, 24, 28]
    assert all(r["d"] == pytest.approx(5) and r["low"] == pytest.approx(5) and r["kept"] == 1 for r in rows)
    # the midpoint is the declared rule's g, and d there is matched_difference's
    mid = frontier.matched_difference(cells, "SDPO_0", "GRPO", "peak", 2, draws=50)
    assert rows[2]["g"] == pytest.approx(mid["g"]) and rows[2]["d"] == pytest.approx(mid["d"])
    # a gap that widens with the gain: d rises from one end to the other
    wide = cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 10, 1), (2e-5, 20, 6), (4e-5, 30, 13)]}, noise=0.0)
    ds = [r["d"] for r in frontier.along_range(wide, "SDPO_0", "GRPO", "peak", 2, n=3, draws=20)]
    assert ds == pytest.approx([0, 4, 10])
    # with noise, the ends keep fewer draws inside both frontiers and give no interval below 95%
    noisy = frontier.along_range(cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 12, 6), (2e-5, 22, 8), (4e-5, 28, 10)]}),
                                 "SDPO_0", "GRPO", "peak", 2, draws=200)
    assert noisy[0]["kept"] < 0.95 and noisy[0]["low"] is None and noisy[2]["low"] is not None
    # no overlap: nothing to read
    assert frontier.along_range(cells_from({"GRPO": GRPO, "SDPO_0": [(1e-5, 40, 6), (2e-5, 50, 8)]}, noise=0.5),
                                "SDPO_0", "GRPO", "peak", 2, draws=20) == []


def test_the_single_version_reading_takes_one_commit_and_keeps_the_history_apart():
    from analysis import claims
    one = points(30, 3, fkl=1.0)
    runs = [(10, "GRPO", 1.25e-5, "fr-grpo-1.25e-5", {**one, "code": claims.FRONTIER_CODE}),
            (10, "GRPO", 1e-4, "kl-grpo-1e-4", {**one, "code": claims.FRONTIER_CODE}),
            (10, "GRPO", 1e-4, "continual", {**one, "code": "0" * 40})]
    cells = frontier.single_version_cells(runs)
    assert set(cells) == {("GRPO", 1.25e-5), ("GRPO", 1e-4)}            # the committed cell is not read
    assert set(frontier.frontier_cells(runs)) == {("GRPO", 1e-4)}       # the history reads neither new cell
    with pytest.raises(ValueError, match="1 are of another: kl-grpo-1e-4-s11"):
        frontier.single_version_cells(runs + [(11, "GRPO", 1e-4, "kl-grpo-1e-4", {**one, "code": "abc"})])
