"""Evidence over seeds: the t-interval against brute force, the verdicts, every claim's metric by hand,
the same test prompts for every seed, and a multi-seed run that resumes seed by seed."""
import json
import math
import os
import random
import shutil

import pytest

from experiment import metrics
from analysis import archive, claims
from infra import stats
import continual
import evaluate
from world import tasks
from infra.flags import seed_list
from tools import report as tools_report


# ---- the 95% interval ------------------------------------------------------------------------
def t_cdf(t, df, steps=20000):
    """Student-t CDF by numerical integration of its density (brute force, no tables)."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    h = t / steps
    total = sum(c * (1 + ((i + 0.5) * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps)) * h
    return 0.5 + total


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30, 31, 199])
def test_t_quantiles_against_the_density(df):
    assert t_cdf(stats.t_quantile(df), df) == pytest.approx(0.975, abs=2e-4)


def test_t_quantile_is_exact_beyond_thirty_seeds():
    # n = 32 and n = 200 seeds: the exact t is wider than the normal 1.96 that a 30-row table fell back on
    assert stats.t_quantile(31) == pytest.approx(2.0395, abs=1e-4) and stats.t_quantile(199) == pytest.approx(1.9720, abs=1e-4)
    _, low, high = stats.mean_interval([float(i % 5) for i in range(32)])
    s = stats.spread([float(i % 5) for i in range(32)])
    assert (high - low) / 2 == pytest.approx(2.0395 * s / math.sqrt(32), rel=1e-4)


def test_mean_interval_by_hand_and_by_simulation():
    mean, low, high = stats.mean_interval([1.0, 2.0, 6.0])
    s = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)
    assert mean == 3.0 and high - mean == pytest.approx(4.303 * s / math.sqrt(3), rel=1e-4) and mean - low == pytest.approx(high - mean)
    assert stats.mean_interval([0.4]) == (0.4, None, None)
    assert stats.mean_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    # coverage: the interval of 3 normal draws holds the true mean about 95% of the time
    rng = random.Random(0)
    hits = sum(lo <= 1.0 <= hi for lo, hi in (stats.mean_interval([rng.gauss(1.0, 2.0) for _ in range(3)])[1:]
                                              for _ in range(4000)))
    assert 0.94 < hits / 4000 < 0.96


def test_verdicts():
    assert claims.verdict(0.1, 0.5, +1) == "shown"
    assert claims.verdict(-0.5, -0.1, +1) == "opposite"
    assert claims.verdict(-0.5, -0.1, -1) == "shown"
    assert claims.verdict(-0.1, 0.5, +1) == "not separable"
    assert claims.verdict(0.0, 0.5, +1) == "not separable"   # touching 0 is not separated from it
    assert claims.verdict(None, None, +1) == "not separable (one seed)"


def test_seed_list():
    assert seed_list("0,1,2") == [0, 1, 2] and seed_list("7") == [7]
    for bad in ("1e20", "0,0", "-1", "", "a", str(2 ** 31)):
        with pytest.raises(Exception):
            seed_list(bad)


# ---- the claims' metrics, on a results dict written by hand --------------------------------------
def fake_run(method, settings, acc, degenerate, nss, iou, reward):
    drift = {"params_vs_base": {"all": {"nss_mean": nss, "angle_max": 10 * nss, "iou_mean": iou}},
             "responses_vs_base": {"mean": 1 - nss}, "kl_to_base_mean": nss}
    rows = evaluate.summarize(acc, ["a", "b", "c"], ["a", "b", "c", "o"])
    return {"method": method, "settings": settings, "acc": acc, **rows, "degenerate": degenerate,
            "drift": [None, None, drift], "mean_reward": reward}


SDPO_DEFAULTS = {"alpha": 0.05, "cot": False, "refresh_every": 0, "gamma": 1.0, "mask_ratio": 0.0, "feedback": "release",
                 "skip_empty_steps": False, "teacher_init": "restart", "teacher_mix": 1.0}


def fake_results(shift):
    base = [0.5, 0.4, 0.2, 0.3]
    grpo = fake_run("grpo", {"mini_batches": 4, "epochs": 1, "clip_ratio_c": 3.0},
                    [base, [0.6, 0.4, 0.2, 0.3], [0.6, 0.5, 0.2, 0.3], [0.5, 0.5, 0.4, 0.3]], [0, 0, 0], 0.01, 0.99,
                    [0.3, 0.4, 0.5])
    sdpo = fake_run("sdpo", dict(SDPO_DEFAULTS), [base, [0.7 + shift, 0.4, 0.2, 0.3], [0.4, 0.6, 0.2, 0.3],
                                                  [0.25, 0.3, 0.5, 0.15]], [0, 0, 0.3], 0.05, 0.9, [0.4, 0.5, 0.6])
    return {"stages": ["a", "b", "c"], "benchmarks": ["a", "b", "c", "o"], "runs": {"grpo": grpo, "sdpo_a0.05": sdpo}}


def test_roles_by_settings():
    assert metrics.role_of(fake_results(0)["runs"]["grpo"]) == "GRPO"
    s = dict(SDPO_DEFAULTS)
    assert metrics.role_of({"method": "sdpo", "settings": s}) == "SDPO_5%"
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "alpha": 0.0}}) == "SDPO_0"
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "cot": True}}) == "SDPO-CoT_5%"
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "refresh_every": 10, "gamma": 1.0}}) == "S-SDPO_0"
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "refresh_every": 10, "gamma": 0.5}}) == "StableSDPO"
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "alpha": 0.01}}) is None
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "mask_ratio": 0.3}}) is None
    # the release's per-domain feedback is SDPO; none (the reference before 2026-12-02) too; on everywhere is not
    assert [metrics.role_of({"method": "sdpo", "settings": {**s, "feedback": f}}) for f in ("release", "off", False)] \
        == ["SDPO_5%"] * 3
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "feedback": "on"}}) is None
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "skip_empty_steps": True}}) is None
    # a setting the configuration leaves inert does not change its name: α under a refresh schedule, γ without one
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "refresh_every": 10, "gamma": 0.5, "alpha": 0.3}}) \
        == "StableSDPO" and metrics.role_of({"method": "sdpo", "settings": {**s, "gamma": 0.5}}) == "SDPO_5%"
    # the paper gives no refresh period: ours is S_SDPO_REFRESH, and another K is not the paper's configuration
    assert metrics.role_of({"method": "sdpo", "settings": {**s, "refresh_every": 5, "gamma": 0.5}}) is None


def test_the_paper_s_configurations_are_one_table():
    """experiment/metrics.PAPER names each of the paper's configurations once: continual.py's --method takes it by
    its --method name, and role_of gives the configuration that command runs back that name (what the run writes
    in results.json is what the analysis recognises); --method sdpo with the same α is the same configuration."""
    names = {cli: name for name, (cli, _, _) in metrics.PAPER.items()}
    _, args, _, _, configs, _ = continual.parse_args(["--method", ",".join(names)])
    assert [metrics.role_of({"method": m, "settings": s}) for m, s, _ in configs] == list(names.values())
    assert [name for *_, name in configs] == ["grpo", "sdpo_a0", "sdpo_a0.05", "sdpo_a0_cot", "sdpo_a0.05_cot",
                                              "sdpo_r10_g1", "sdpo_r10_g0.5"]
    _, _, _, _, plain, _ = continual.parse_args(["--method", "sdpo", "--alpha", "0,0.05"])
    assert [c[1] for c in plain] == [c[1] for c in configs[1:3]]
    assert not hasattr(continual, "PRESETS")   # (it was a second table, beside metrics.role_of's rules)


def test_claim_metrics_by_hand():
    res = fake_results(0.0)
    rows = {(c["metric"], c["a"]): c for c in claims.measure_claims([res, fake_results(0.1), fake_results(0.05)])}
    # gain: SDPO G = mean(+40%, +50%, +150%) in seed 0; GRPO G = mean(+20%, +25%, +100%)
    g = rows[("gain", "SDPO_5%")]
    assert g["b_mean"] == pytest.approx((0.2 + 0.25 + 1.0) / 3)
    assert g["per_seed"][0] == pytest.approx((0.4 + 0.5 + 1.5) / 3 - (0.2 + 0.25 + 1.0) / 3)
    assert g["per_seed"][1] == pytest.approx(g["per_seed"][0] + 0.2 / 3)   # stage-1 gain +0.1/0.5 = +20%
    # forgetting on the earlier domains of the final model: SDPO a 0.25 (F 50%), b 0.3 (F 25%); GRPO 0 and 0
    f = rows[("forget_earlier", "SDPO_5%")]
    assert f["effect"] == pytest.approx(0.375) and f["low"] == f["high"] == pytest.approx(0.375)
    assert f["verdict"] == "shown"
    assert rows[("forget_ood", "SDPO_5%")]["effect"] == pytest.approx(0.5)   # o: 0.15 vs 0.3 base
    assert rows[("reward", "SDPO_5%")]["effect"] == pytest.approx(0.1)
    assert rows[("nss", "SDPO_5%")]["effect"] == pytest.approx(0.04) and rows[("nss", "SDPO_5%")]["verdict"] == "shown"
    iou = rows[("iou", "SDPO_5%")]
    assert iou["effect"] == pytest.approx(-0.09) and iou["verdict"] == "shown"   # lower overlap is the paper's side
    assert rows[("collapse3", "SDPO_5%")]["effect"] == pytest.approx(0.3)
    assert rows[("avg_acc", "SDPO_5%")]["verdict"] == "not run"     # no SDPO_0 in these results
    assert rows[("cot_math", "SDPO-CoT_5%")]["verdict"] == "not run"
    # the average accuracy on the domains trained so far, by hand for GRPO: (0.6 + 0.55 + 0.4667) / 3
    assert metrics.average_accuracy(res["runs"]["grpo"], res["stages"], res["benchmarks"]) == \
        pytest.approx((0.6 + (0.6 + 0.5) / 2 + (0.5 + 0.5 + 0.4) / 3) / 3)


def test_claims_table_lists_every_claim():
    text = claims.claims_table(claims.measure_claims([fake_results(0.0), fake_results(0.1)]), 2)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "claim (paper)" not in line]
    assert len(rows) == len(claims.CLAIMS) and "**shown**" in text and "not run" in text
    tested = sum(c["verdict"] != "not run" for c in claims.measure_claims([fake_results(0.0), fake_results(0.1)]))
    assert f"With {tested} claims tested at once" in text


def test_points_peak_forgetting_and_backward_transfer_by_hand():
    """The measures reported beside the paper's relative G and F, on fake_results' SDPO run (stages a, b, c):
    a 0.5 → 0.7 after its stage → 0.4 → 0.25 at the end; b 0.4 → 0.6 after its stage → 0.3; o 0.3 → 0.15."""
    res = fake_results(0.0)
    sdpo, st, b = res["runs"]["sdpo_a0.05"], res["stages"], res["benchmarks"]
    assert metrics.gain_points(sdpo, st, b) == pytest.approx((0.2 + 0.2 + 0.3) / 3)
    assert metrics.METRICS["forget_earlier_points"][0](sdpo, st, b) == pytest.approx((0.25 + 0.1) / 2)
    assert metrics.METRICS["forget_ood_points"][0](sdpo, st, b) == pytest.approx(0.15)
    assert metrics.forgetting_from_peak(sdpo, st, b) == pytest.approx(((0.7 - 0.25) + (0.6 - 0.3)) / 2)
    assert metrics.backward_transfer(sdpo, st, b) == pytest.approx(((0.25 - 0.7) + (0.3 - 0.6)) / 2)
    # GRPO's b ends above its base and its peak: F in points 0, forgetting from the peak still counts a
    grpo = res["runs"]["grpo"]
    assert metrics.METRICS["forget_earlier_points"][0](grpo, st, b) == 0.0
    assert metrics.forgetting_from_peak(grpo, st, b) == pytest.approx(((0.6 - 0.5) + (0.5 - 0.5)) / 2)
    rows = {(c["metric"], c["a"]): c for c in claims.measure_claims([res, fake_results(0.1), fake_results(0.05)])}
    pts = rows[("forget_earlier", "SDPO_5%")]["points"]
    assert pts["effect"] == pytest.approx(0.175) and pts["per_seed"] == pytest.approx([0.175] * 3)
    assert "points" not in rows[("nss", "SDPO_5%")]       # only G and F have an absolute companion


def test_expected_shown_by_chance():
    mean, at_least_one = claims.expected_by_chance(13)
    assert mean == pytest.approx(13 * 0.025) and at_least_one == pytest.approx(1 - 0.975 ** 13)
    g = __import__("random").Random(0)   # by simulation: 13 independent null claims, one-sided 2.5% each
    hits = [sum(g.random() < 0.025 for _ in range(13)) for _ in range(20000)]
    assert sum(hits) / len(hits) == pytest.approx(mean, abs=0.02)
    assert sum(h > 0 for h in hits) / len(hits) == pytest.approx(at_least_one, abs=0.015)


# ---- a multi-seed run: same test prompts for every seed, resumable per seed ----------------------
TINY = ["--method", "grpo", "--stages", "math,science", "--benchmarks", "train", "--steps", "1",
        "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "3", "--eval-k", "2", "--max-new-tokens", "24",
        "--curve-every", "0", "--no-drift"]


def test_seeds_for_half_width_against_the_interval_itself():
    """The power rule: the first n whose interval, for differences spread like the measured ones, is at
    most the target; brute force by building n values with that spread and asking mean_interval."""
    for diffs, target in [([0.01, 0.05, -0.02], 0.05), ([0.1, -0.1, 0.2, 0.0], 0.05), ([0.3, -0.2], 0.02),
                          ([0.02, 0.021], 0.05)]:
        n = claims.seeds_for_half_width(diffs, target)
        m = sum(diffs) / len(diffs)
        s = (sum((d - m) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5

        def half_width(k):   # k values with sample sd exactly s: ±a around 0 (and a 0 when k is odd)
            a = s * ((k - 1) / (2 * (k // 2))) ** 0.5
            vals = [a] * (k // 2) + [-a] * (k // 2) + [0.0] * (k % 2)
            _, lo, hi = stats.mean_interval(vals)
            return (hi - lo) / 2
        if n == 201:
            assert half_width(200) > target
        else:
            assert half_width(n) <= target + 1e-12 and (n == 2 or half_width(n - 1) > target)
    assert claims.seeds_for_half_width([0.1], 0.05) is None and claims.seeds_for_half_width(None, 0.05) is None
    assert claims.seeds_for_half_width([0.0, 0.0], 0.05) == 2          # no spread: two seeds suffice


def test_seeds_share_test_prompts_and_resume_one_by_one(tmp_path, capsys):
    runs = str(tmp_path / "runs")
    one = continual.main(TINY + ["--seed", "0", "--runs-dir", runs])   # a student's single seed first
    summary = continual.main(TINY + ["--seed", "0,1", "--runs-dir", runs])
    d0, d1 = summary["seed_dirs"]
    assert json.load(open(f"{d0}/results.json"))["runs"] == one["runs"]   # seed 0 was reused, not rerun
    r0, r1 = json.load(open(f"{d0}/results.json")), json.load(open(f"{d1}/results.json"))
    # the same test prompts and evaluation sampling: the base's samples are identical across seeds
    b0, b1 = json.load(open(f"{d0}/responses/base.json")), json.load(open(f"{d1}/responses/base.json"))
    assert b0 == b1 and r0["base"]["acc"] == r1["base"]["acc"]
    # while the training prompts differ
    assert tasks.train_records("math", seed=0)[:8] != tasks.train_records("math", seed=1)[:8]
    assert r0["seed"] == 0 and r1["seed"] == 1 and r0["eval"]["seed"] == r1["eval"]["seed"] == 0
    # seed 1 stopped after its first stage (as a kill would leave it): the rerun redoes only that seed's rest
    progress = json.load(open(f"{d1}/progress.json"))
    progress["grpo"]["stages"] = progress["grpo"]["stages"][:1]
    json.dump(progress, open(f"{d1}/progress.json", "w"))
    shutil.rmtree(f"{d1}/checkpoints/grpo/stage2-science")
    capsys.readouterr()
    again = continual.main(TINY + ["--seed", "0,1", "--runs-dir", runs])
    out = capsys.readouterr().out
    assert "grpo: resuming after stage 1 (math)" in out and out.count("resuming") == 1
    assert again["runs"]["grpo"]["acc"] == summary["runs"]["grpo"]["acc"]
    assert json.load(open(f"{d1}/results.json"))["runs"]["grpo"]["acc"] == r1["runs"]["grpo"]["acc"]
    # the run writes no verdict of its own; its report (tools/report.py) names the command that gives them
    summary_dir = f"{runs}/grpo-s0-1-{d0.rsplit('-', 1)[1]}"
    assert f"python tools/report.py {summary_dir}" in out and not os.path.exists(f"{summary_dir}/report.md")
    tools_report.main([summary_dir])
    text = open(f"{summary_dir}/report.md").read()
    assert f"`python analysis/claims.py {summary_dir}`" in text and "## The paper's claims" not in text
    assert "claims" not in json.load(open(f"{d0}/results.json")) and "claims" not in again
    capsys.readouterr()
    assert len(claims.main([summary_dir])) == 2 and "| SDPO forgets more" in capsys.readouterr().out


def test_claims_py_reads_the_committed_reference(capsys):
    """`python analysis/claims.py RUN_DIR`: the claims table of finished runs (a summary directory or seed directories)."""
    root = archive.materialized(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results",
                                             "continual"))   # (committed: from its archive)
    results = claims.main([root])
    out = capsys.readouterr().out
    assert len(results) == 3 and "| SDPO forgets more: F of the final model on the earlier domains" in out
    assert claims.main([os.path.join(root, f"seed{i}") for i in range(3)]) == results
