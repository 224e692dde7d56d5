"""Equal footing: the view at one shared rate, the new claims against hand computations on hand-made
results.json files, and every adequacy test on an input where it must pass and one where it must fail."""
import json
import math
import os

import pytest
import torch

from analysis import claims, footing
from analysis.figures import plot_footing
from tools import adequacy

B8 = ["math", "science", "tooluse", "coding", "math_hard", "science_boxed", "tool_unseen", "logic"]
SDPO = {"alpha": 0.05, "cot": False, "refresh_every": 0, "gamma": 1.0, "mask_ratio": 0.0, "feedback": "release",
        "teacher_init": "restart", "teacher_mix": 1.0}
GRPO = {"mini_batches": 4, "epochs": 1, "clip_ratio_c": 3.0}


def drift(nss, iou, cos, p5, kl):
    return [{"params_vs_base": {"all": {"nss_mean": nss, "iou_mean": iou, "angle_max": 10.0}},
             "responses_vs_base": {"mean": cos, "p5": p5}, "kl_to_base_mean": kl}]


def run(method, lr, acc, forget, dr, alpha=0.05, degenerate=(0, 0, 0, 0)):
    settings = {**(GRPO if method == "grpo" else {**SDPO, "alpha": alpha}), "lr": lr}
    return {"method": method, "settings": settings, "acc": acc, "avg_forget_earlier": forget[0],
            "avg_forget_ood": forget[1], "drift": dr, "degenerate": list(degenerate)}


def table(final):
    """acc[stage][benchmark]: the base at 0.5 everywhere, `final` after the last of 4 stages."""
    return [[0.5] * 8, [0.6] + [0.5] * 7, [0.5, 0.7] + [0.5] * 6, [0.5] * 8, final]


def results(runs):
    return {"stages": ["math", "science", "tooluse", "coding"], "benchmarks": B8, "runs": runs,
            "base": {"degenerate": {b: 0.0 for b in B8}}}


@pytest.fixture
def bundle():
    ref = results({"grpo": run("grpo", 1e-4, table([0.6] * 8), (0.10, 0.05), drift(0.01, 0.95, 0.97, 0.90, 2.0)),
                   "sdpo_a0": run("sdpo", 4e-4, table([0.4] * 8), (0.30, 0.20), drift(0.02, 0.90, 0.90, 0.60, 9.0), 0.0),
                   "sdpo_a0.05": run("sdpo", 4e-4, table([0.3] * 8), (0.50, 0.40), drift(0.03, 0.85, 0.80, 0.40, 20.0))})
    lo = results({"sdpo_a0": run("sdpo", 1e-4, table([0.55] * 8), (0.15, 0.07), drift(0.012, 0.94, 0.95, 0.85, 3.0), 0.0),
                  "sdpo_a0.05": run("sdpo", 1e-4, table([0.45] * 8), (0.25, 0.12), drift(0.015, 0.93, 0.93, 0.80, 4.0))})
    hi = results({"grpo": run("grpo", 4e-4, table([0.55, 0.6, 0.65, 0.3, 0.7, 0.6, 0.5, 0.45]), (0.2, 0.1),
                              drift(0.025, 0.9, 0.9, 0.7, 8.0))})
    return {"continual": ref, "lr1e-4-continual": lo, "lr4e-4-continual": hi}


def test_the_view_at_a_shared_rate_pairs_the_reference_with_the_arm(bundle):
    lo, hi = footing.at_rate(bundle, 1e-4)["continual"], footing.at_rate(bundle, 4e-4)["continual"]
    assert claims.find(lo, "GRPO")["settings"]["lr"] == 1e-4 and claims.find(lo, "SDPO_5%")["avg_forget_earlier"] == 0.25
    assert claims.find(hi, "GRPO")["avg_forget_earlier"] == 0.2 and claims.find(hi, "SDPO_5%")["settings"]["lr"] == 4e-4
    assert footing.at_rate(bundle, None) is bundle
    d = footing.claim_defs()
    # H2 (SDPO_5% − GRPO, F earlier): per-method 0.50 − 0.10; at 1e-4 0.25 − 0.10; at 4e-4 0.50 − 0.20
    assert d["H2"][7](bundle) == pytest.approx(0.40)
    assert d["H2"][7](footing.at_rate(bundle, 1e-4)) == pytest.approx(0.15)
    assert d["H2"][7](footing.at_rate(bundle, 4e-4)) == pytest.approx(0.30)
    # H4b (SDPO_0 − GRPO, F OOD) at 1e-4: 0.07 − 0.05
    assert d["H4b"][7](footing.at_rate(bundle, 1e-4)) == pytest.approx(0.02)


def test_a_view_without_the_other_cell_reads_as_missing(bundle):
    only_ref = {"continual": bundle["continual"]}
    assert footing.claim_defs()["H2"][7](footing.at_rate(only_ref, 1e-4)) is None   # no SDPO at 1e-4
    assert footing.at_rate({}, 1e-4)["continual"] is None


def test_the_restored_drift_claims_against_hand_computation(bundle):
    d = footing.claim_defs()
    # SDPO_5% − GRPO of each measure of the final model (hand: the numbers in the fixture)
    for cid, expected in [("P1", 0.03 - 0.01), ("P2", 0.85 - 0.95), ("P3", 0.80 - 0.97), ("P4", 0.40 - 0.90),
                          ("P5", 20.0 - 2.0)]:
        assert d[cid][7](bundle) == pytest.approx(expected), cid
    at_hi = footing.at_rate(bundle, 4e-4)
    assert d["P5"][7](at_hi) == pytest.approx(20.0 - 8.0)
    assert [d[c][6] for c in ("P1", "P2", "P3", "P4", "P5")] == [+1, -1, -1, -1, +1]


def test_c5c_is_the_smallest_category_mean(bundle):
    at_hi = footing.at_rate(bundle, 4e-4)
    # GRPO at 4e-4, final − base 0.5: math .05, science .10, tooluse .15, coding −.20, math_hard .20,
    # science_boxed .10, tool_unseen 0, logic −.05. Categories: MATH (.05+.20)/2, SCIENCE .10, TOOLUSE .075,
    # CODING −.20, LOGIC −.05 -> −0.20; H5b's smallest single Δ is the same −0.20 here, H5a's mean 0.04375
    assert footing.claim_defs()["H5c"][7](at_hi) == pytest.approx(-0.20)
    assert footing.claim_defs()["H5a"][7](at_hi) == pytest.approx(0.04375)
    res = results({"grpo": run("grpo", 1e-4, table([0.6, 0.4, 0.5, 0.6, 0.45, 0.6, 0.6, 0.6]), (0, 0), None)})
    # math .1, math_hard −.05 -> .025; science −.1, science_boxed .1 -> 0; tooluse 0, tool_unseen .1 -> .05; coding .1;
    # logic .1: the category minimum is 0 although the single smallest Δ is −0.1
    assert footing.smallest_category_delta(res, "GRPO") == pytest.approx(0.0)
    assert claims.final_delta(res, "GRPO", "min") == pytest.approx(-0.1)


def test_the_family_is_the_declared_35_tests_with_holm(bundle):
    fam = footing.family()
    assert len(fam) == 35 and len(set(fam)) == 35
    assert ("1e-4", "H5a") not in fam and ("4e-4", "X2") not in fam and ("4e-4", "H5a") in fam
    bundles = {10: bundle, 11: bundle, 12: {**bundle, "lr1e-4-continual": None}}
    rows = {(r["footing"], r["id"]): r for r in footing.measure_family(bundles)}
    assert rows[("1e-4", "H2")]["n"] == 2 and rows[("4e-4", "H2")]["n"] == 3
    # identical per-seed differences: spread 0, p = 0, so Holm rejects, on the paper's side
    assert rows[("4e-4", "H2")]["p"] == 0.0 and rows[("4e-4", "H2")]["corrected"] == "shown"
    assert rows[("1e-4", "X1")]["verdict"] == "not run"


def test_seeds_of_a_row_are_the_declared_ones():
    assert footing.seeds_of("H2", "1e-4") == set(range(10, 42))
    assert footing.seeds_of("H2", "per-method") == set(range(10, 30))
    assert footing.seeds_of("X1", "4e-4") == set(range(10, 30))


BASE = {"acc": {"math": 0.53, "science": 0.52, "tooluse": 0.51, "coding": 0.23, "math_hard": 0.64,
                "science_boxed": 0.79, "tool_unseen": 0.61, "logic": 0.61},
        "chance": {"math": 0.0, "science": 0.25, "tooluse": 0.25, "coding": 0.0, "math_hard": 0.0,
                   "science_boxed": 0.25, "tool_unseen": 0.25, "logic": 1 / 3},
        "teacher_check": {d: {"with_demo": 0.9, "without_demo": 0.55} for d in ("math", "science", "tooluse", "coding")}}


def with_acc(**acc):
    return {**BASE, "acc": {**BASE["acc"], **acc}}


def test_the_base_tests_pass_and_fail():
    assert footing.something_to_lose(BASE, footing.EARLIER)[0]
    assert not footing.something_to_lose(with_acc(science=0.30), footing.EARLIER)[0]   # chance 25 + 10 = 35
    assert not footing.something_to_lose(with_acc(math_hard=0.15), footing.OOD)[0]
    assert footing.room_to_specialise(BASE)[0]
    assert not footing.room_to_specialise(with_acc(math=0.85))[0]
    weak_teacher = {**BASE, "teacher_check": {**BASE["teacher_check"], "science": {"with_demo": 0.6, "without_demo": 0.55}}}
    assert not footing.room_to_specialise(weak_teacher)[0]
    assert footing.room_to_improve(BASE)[0] and not footing.room_to_improve(with_acc(logic=0.95))[0]
    assert footing.room_for_the_sweep(BASE)[0] and not footing.room_for_the_sweep(with_acc(tooluse=0.85))[0]
    assert footing.ood_to_generalise_to(BASE)[0]
    assert not footing.ood_to_generalise_to(with_acc(math_hard=0.95, science_boxed=0.95, tool_unseen=0.1, logic=0.1))[0]


def test_the_traces_test_needs_short_and_reliable_tooluse_traces():
    t = lambda length, rel: {"length_mean": length, "reliability": rel}
    assert footing.traces_premise({"tooluse": t(4, 0.9), "math": t(40, 0.5), "science": t(30, 0.6)})[0]
    assert not footing.traces_premise({"tooluse": t(13, 0.9), "math": t(11, 0.5), "science": t(12, 0.6)})[0]   # long
    assert not footing.traces_premise({"tooluse": t(4, 0.65), "math": t(40, 0.5), "science": t(30, 0.6)})[0]  # noisy


def test_the_null_test_reads_the_draws():
    passes = {"10": {"own_iou": 0.9, "null_iou": [0.995, 0.996]}, "11": {"own_iou": 0.91, "null_iou": [0.994, 0.999]}}
    fails = {"10": {"own_iou": 0.9, "null_iou": [0.90, 0.91]}}
    assert footing.null_premise(passes)[0] and not footing.null_premise(fails)[0]


def test_the_collapse_tests():
    def seed(worst, base_deg=0.0):
        res = results({"sdpo_a0.05": run("sdpo", 4e-4, table([0.3] * 8), (0, 0), None, degenerate=(0, 0, 0.1, worst))})
        res["base"]["degenerate"]["coding"] = base_deg
        return {"continual": res}
    assert footing.collapse_present({1: seed(0.9), 2: seed(0.6), 3: seed(0.1)})[0]   # 2 of 3 seeds ≥ 50%
    assert not footing.collapse_present({1: seed(0.27), 2: seed(0.6), 3: seed(0.1)})[0]
    assert footing.detector_quiet({1: seed(0.9)})[0] and not footing.detector_quiet({1: seed(0.9, base_deg=0.06)})[0]


def write_log(path, rows):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_the_late_distillation_test_reads_the_log(tmp_path):
    res = results({"sdpo_a0": run("sdpo", 4e-4, table([0.5] * 8), (0, 0), None, 0.0),
                   "sdpo_a0.05": run("sdpo", 4e-4, table([0.5] * 8), (0, 0), None)})
    every = [{"run": n, "step": s, "distilled_token_frac": 0.5} for n in ("sdpo_a0", "sdpo_a0.05") for s in range(1, 41)]
    write_log(tmp_path / "a", every)
    holes = [{**r, "distilled_token_frac": 0.0 if r["run"] == "sdpo_a0.05" and r["step"] > 36 else 0.5} for r in every]
    write_log(tmp_path / "b", holes)   # 26 of 30 late steps distil: 87% < 90%
    assert footing.distils_late({1: {"math": res, "dirs": {"math": str(tmp_path / "a")}}})[0]
    assert not footing.distils_late({1: {"math": res, "dirs": {"math": str(tmp_path / "b")}}})[0]


def test_the_distance_test():
    spread = {"math": {"math_hard": 0.03, "science_boxed": 0.2, "science": 0.29, "tooluse": 0.63, "tool_unseen": 0.66,
                       "coding": 0.8, "logic": 0.8}}
    spread["tooluse"] = {b: v for b, v in zip(["tool_unseen", "logic", "science_boxed", "math", "math_hard", "science",
                                               "coding"], [0.02, 0.1, 0.5, 0.6, 0.65, 0.8, 0.9])}
    assert footing.distances_separate(spread)[0]
    flat = {src: {b: 0.5 for b in d} for src, d in spread.items()}
    assert not footing.distances_separate(flat)[0]


def test_the_measurable_test(bundle):
    assert footing.measurable({1: bundle}, "P1")[0]
    broken = json.loads(json.dumps(bundle))
    broken["continual"]["runs"]["grpo"]["drift"][-1]["params_vs_base"]["all"]["nss_mean"] = math.nan
    assert not footing.measurable({1: broken}, "P1")[0]


def test_collapse_js_averages_only_steps_that_distil(tmp_path):
    res = results({"sdpo_a0.05": run("sdpo", 4e-4, table([0.3] * 8), (0, 0), None, degenerate=(0, 0.5, 0.1, 0.2))})
    rows = [{"run": "sdpo_a0.05", "stage": 1, "step": s, "js": 0.01, "distilled_token_frac": 0.9} for s in range(1, 5)]
    rows += [{"run": "sdpo_a0.05", "stage": 2, "step": s, "js": 0.04 if s <= 1 else 0.0,
              "distilled_token_frac": 0.2 if s <= 1 else 0.0} for s in range(1, 5)]
    write_log(tmp_path, rows)
    (seed, stage, js, before, steps, toks), = footing.collapse_js({7: {"continual": res, "dirs": {"continual": str(tmp_path)}}})
    # the collapse stage is 2 (its degenerate share 0.5 is the largest); one step of four distils, at JS 0.04
    assert (seed, stage) == (7, 2) and js == pytest.approx(0.04) and before == pytest.approx(0.01)
    assert steps == pytest.approx(0.25) and toks == pytest.approx(0.05)


def test_read_bundles_merges_the_reference_and_the_arm(tmp_path, bundle):
    ref, arm = tmp_path / "ref", tmp_path / "arm"
    for root, exp, seed in [(ref, "continual", 10), (arm, "lr1e-4-continual", 10), (arm, "continual", 30),
                            (arm, "lr4e-4-continual", 30), (arm, "unrelated", 10)]:
        os.makedirs(root / f"{exp}-s{seed}")
        json.dump({**bundle.get(exp, bundle["continual"]), "seed": seed},
                  open(root / f"{exp}-s{seed}" / "results.json", "w"))
    json.dump({"math": {}}, open(ref / "distances.json", "w"))
    found = footing.read_bundles(str(ref), str(arm))
    assert sorted(found) == [10, 30]
    assert set(found[10]) == {"continual", "lr1e-4-continual", "dirs", "distances"}
    assert set(found[30]) == {"continual", "lr4e-4-continual", "dirs", "distances"}


def test_the_figure_rows_take_each_rate_and_the_rows_read_once(tmp_path):
    """footing_figure_rows: a claim's per-method, 1e-4 and 4e-4 cells; a row read once (H5a at 1e-4: GRPO alone at
    its own rate) stands in its own column; a claim the world cannot test is drawn as such; the figure is written."""
    def row(cid, effect, footing_="per-method"):
        return {"id": cid, "footing": footing_, "unit": "points", "scale": 100, "sign": +1, "effect": effect,
                "low": effect - 0.01, "high": effect + 0.01, "verdict": "shown", "corrected": "shown"}
    rows = {"reference": {"H2": row("H2", 0.4), "H5a": row("H5a", 0.16)},
            "family": {("1e-4", "H2"): row("H2", 0.0, "1e-4"), ("4e-4", "H2"): row("H2", -0.05, "4e-4"),
                       ("4e-4", "H5a"): row("H5a", -0.24, "4e-4"), ("per-method", "P2"): row("P2", -0.05)},
            "adequacy": {"P2": (False, "the null IoU is 0.95")},
            "footing": {("4e-4", "H2"): (False, "GRPO does not learn stage 1")}}
    out = {c["id"]: c for c in footing.footing_figure_rows(rows)}
    assert list(out) == ["H2", "H5a", "P2"]
    assert [out["H2"]["rows"][k]["effect"] for k in ("per-method", "1e-4", "4e-4")] == [0.4, 0.0, -0.05]
    assert out["H5a"]["rows"]["1e-4"]["effect"] == 0.16 and out["H5a"]["rows"]["4e-4"]["effect"] == -0.24
    # a footing where a method does not learn is drawn as not testable there, and only there
    assert [out["H2"]["rows"][k]["footing_ok"] for k in ("per-method", "1e-4", "4e-4")] == [True, True, False]
    assert out["P2"]["testable"] is False and out["P2"]["rows"]["1e-4"] is None and out["H2"]["testable"]
    path = plot_footing(list(out.values()), str(tmp_path / "f.png"))
    assert path is None or os.path.getsize(path) > 1000   # (None only without matplotlib)


# ----------------------------------------------------------------------------------------------
# The world's measurements (tools/adequacy.py)
# ----------------------------------------------------------------------------------------------
MATH = {"kind": "math", "prompt": "Ada packs 3 boxes of 10 pens. How many pens in all?"}
MCQ = {"kind": "mcq", "prompt": "Convert 2 km to m.\n(A) 20 m\n(B) 120 m\n(C) 200 m\n(D) 2000 m"}
TOOL = {"kind": "tooluse", "prompt": "Tools: weather(city), timer(minutes)\nQuestion: Is it raining in Oslo?"}


@pytest.mark.parametrize("record,text,expected", [
    (MATH, "<think>mul 3 10</think>\n3*10=30\n\\boxed{30}", True),
    (MATH, "<think>mul 3 10</think>\n3*10=300\n\\boxed{300}", False),
    (MATH, "<think>div 30 10</think>\n\\boxed{3}", True),
    (MATH, "<think>mul 3 10</think>\nno box", None),
    (MATH, "3*10=30\n\\boxed{30}", None),                                    # no trace
    (MCQ, "<think>1 km = 1000 m</think>\n2 km = 2000 m (D)\n<answer>D</answer>", True),
    (MCQ, "<think>1 km = 1000 m</think>\n2 km = 200 m (C)\n<answer>C</answer>", False),
    (MCQ, "<think>1 km = 100 m</think>\n<answer>C</answer>", True),            # the trace's wrong factor, followed
    (TOOL, "<think>weather(city)</think>\nAction: weather\nAction Input: {\"city\": \"Oslo\"}", True),
    (TOOL, "<think>weather(city)</think>\nAction: timer\nAction Input: {}", False),
    (TOOL, "<think>weather city</think>\nAction: weather", None),
])
def test_trace_matches_on_hand_written_responses(record, text, expected):
    assert adequacy.trace_matches(record, text) is expected


def test_trace_stats_counts(tiny):
    _, tok = tiny
    recs = [MATH, MATH, TOOL]
    texts = ["<think>mul 3 10</think>\n\\boxed{30}", "<think>mul 3 10</think>\n\\boxed{3}", "no trace"]
    s = adequacy.trace_stats(tok, recs, texts)
    assert s["traced"] == pytest.approx(2 / 3) and s["parsed"] == 1.0 and s["reliability"] == 0.5
    assert s["length_mean"] == len(tok("mul 3 10", add_special_tokens=False)["input_ids"])


def test_the_null_update_has_the_trained_models_norm_per_matrix():
    g = torch.Generator().manual_seed(0)
    base = {"a.weight": torch.randn(6, 4, generator=g), "b.weight": torch.randn(5, 5, generator=g),
            "bias": torch.randn(5, generator=g)}
    trained = {k: v + 0.1 * torch.randn(v.shape, generator=g) for k, v in base.items()}
    null = adequacy.null_update(base, trained, torch.Generator().manual_seed(1))
    assert set(null) == {"a.weight", "b.weight"}   # the 2-D matrices only
    for k in null:
        assert torch.linalg.matrix_norm(null[k] - base[k]).item() == pytest.approx(
            torch.linalg.matrix_norm(trained[k] - base[k]).item(), rel=1e-5)
        assert not torch.allclose(null[k], trained[k])


# ----------------------------------------------------------------------------------------------
# The per-footing adequacy rule: both methods learn the stages a claim reads, F not at its floor
# ----------------------------------------------------------------------------------------------
def learner(method, lr, gains, f_earlier, alpha=0.05):
    """A 4-stage run whose own domain rises by `gains[k]` over stage k (each domain starts at 0.5)."""
    acc = [[0.5] * 8]
    for k, g in enumerate(gains):
        row = list(acc[-1])
        row[k] = 0.5 + g
        acc.append(row)
    return run(method, lr, acc, (f_earlier, 0.1), drift(0.01, 0.9, 0.9, 0.8, 2.0), alpha)


def seeds_bundle(grpo_gains, sdpo_gains, f=(0.1, 0.2), n=10):
    """{seed: bundle} whose GRPO (1e-4) and SDPO_5% (4e-4) learn each stage as the per-seed gains say."""
    return {10 + s: {"continual": results({"grpo": learner("grpo", 1e-4, grpo_gains(s), f[0]),
                                           "sdpo_a0.05": learner("sdpo", 4e-4, sdpo_gains(s), f[1])}), "dirs": {}}
            for s in range(n)}


def test_the_footing_rule_passes_when_both_learn_every_stage_the_claim_reads():
    b = seeds_bundle(lambda s: [0.2, 0.2, 0.1, 0.3], lambda s: [0.1, 0.2, 0.1, -0.2])   # SDPO fails stage 4 only
    assert footing.footing_adequacy(b, "H2", "per-method") == (True, "")   # H2 reads stages 1–3
    assert footing.footing_adequacy(b, "H8a", "per-method") == (True, "")


def test_the_footing_rule_fails_a_method_that_learns_a_stage_on_fewer_than_80_percent_of_seeds():
    # SDPO_5%'s stage 3 gain is ≤ 0 on 3 seeds of 10 (70% learn): H2 reads it, H1 (stages 1–2) does not
    b = seeds_bundle(lambda s: [0.2, 0.2, 0.1, 0.3], lambda s: [0.1, 0.2, -0.1 if s < 3 else 0.1, 0.1])
    ok, why = footing.footing_adequacy(b, "H2", "per-method")
    assert not ok and "SDPO_5% stage 3 on 7/10 seeds" in why
    # exactly 80% learning passes
    b = seeds_bundle(lambda s: [0.2, 0.2, 0.1, 0.3], lambda s: [0.1, 0.2, 0.0 if s < 2 else 0.1, 0.1])
    assert footing.footing_adequacy(b, "H2", "per-method")[0]


def test_the_footing_rule_fails_an_f_claim_whose_metric_is_0_on_every_run():
    b = seeds_bundle(lambda s: [0.2, 0.2, 0.1, 0.3], lambda s: [0.1, 0.2, 0.1, 0.1], f=(0.0, 0.0))
    ok, why = footing.footing_adequacy(b, "H2", "per-method")
    assert not ok and "F = 0 on all 20 runs" in why
    # one run off the floor is enough for the metric to carry information
    b[10]["continual"]["runs"]["grpo"]["avg_forget_earlier"] = 0.05
    assert footing.footing_adequacy(b, "H2", "per-method")[0]


def test_adequacy_refuses_bad_input_before_any_measurement(tmp_path, capsys):
    """Round five: a folder that is no model, an --out that is a file, and a seed whose checkpoint folder
    holds no model are each one error line, exit 2, before the measurement (nothing lost, no traceback)."""
    (tmp_path / "notmodel").mkdir()
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "runs" / "continual-s0" / "checkpoints" / "grpo" / "stage1").mkdir(parents=True)
    for argv, said in [(["math-feedback", "--models", str(tmp_path / "notmodel")], "is not a model directory"),
                       (["math-feedback", "--out", str(tmp_path / "afile")], "is a file"),
                       (["null-iou", "--runs", str(tmp_path / "runs"), "--seeds", "0"], "no GRPO checkpoints")]:
        with pytest.raises(SystemExit) as e:
            adequacy.main(argv + ([] if "--out" in argv else ["--out", str(tmp_path / "out")]))
        err = capsys.readouterr().err
        assert e.value.code == 2 and said in err and "Traceback" not in err, err
    assert (tmp_path / "afile").read_text() == "mine" and not (tmp_path / "out").exists()
