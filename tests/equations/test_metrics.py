"""The evaluation's equations against brute force: (C3) Acc@k, (A2) Δ and δ, (A3) G and F with their averages,
and pass@k beside them. The machinery that makes evaluation cheap is tested in tests/test_evaluation.py."""
import itertools

import pytest
import torch

import evaluate
import rollout
from world import graders, tasks


# ---- (C3) Acc@k: the mean over prompts of the mean correctness of k samples ----
def test_acc_at_k_is_the_mean_over_prompts_of_each_prompts_k_samples(tiny):
    """Sampled from the tiny model: every response graded alone, then averaged by hand, prompt by prompt (the
    k samples of prompt i are responses i·k … i·k + k − 1), gives acc_at_k's per-prompt and overall Acc@k."""
    model, tok = tiny
    records = tasks.builtin_split("math", "test", 5, 0) + tasks.builtin_split("logic", "test", 3, 0)
    for k in (1, 3):
        torch.manual_seed(0)
        acc, per_prompt, responses, scores, hit = rollout.acc_at_k(model, tok, records, k, 24)
        assert len(responses) == len(scores) == len(hit) == len(records) * k
        brute = [sum(graders.grade(r, responses[i * k + j]) for j in range(k)) / k for i, r in enumerate(records)]
        assert per_prompt == pytest.approx(brute)
        assert acc == pytest.approx(sum(brute) / len(brute))


def test_acc_at_k_weighs_every_prompt_alike(monkeypatch):
    """With the sampler and grader replaced by a table of scores, Acc@k equals the double mean for every pattern
    of 0/1 scores over 2 prompts × 3 samples (a prompt with more correct samples does not count more), and a
    single prompt, all wrong and all right are the edge cases."""
    k, records = 3, [{"prompt": "a", "kind": "math", "answer": "1"}, {"prompt": "b", "kind": "math", "answer": "2"}]
    monkeypatch.setattr(rollout, "encode_chat", lambda tok, messages: [1])
    monkeypatch.setattr(rollout, "sample", lambda *a, **kw: [[7]] * (len(a[2]) * k))
    monkeypatch.setattr(rollout, "decode", lambda tok, ids: ["y"] * len(ids))
    for pattern in itertools.product((0.0, 1.0), repeat=2 * k):
        monkeypatch.setattr(rollout.graders, "grade_many", lambda recs, resp, p=pattern: list(p))
        acc, per_prompt, *_ = rollout.acc_at_k(None, None, records, k)
        brute = [sum(pattern[:k]) / k, sum(pattern[k:]) / k]
        assert per_prompt == pytest.approx(brute) and acc == pytest.approx(sum(brute) / 2)
    monkeypatch.setattr(rollout.graders, "grade_many", lambda recs, resp: [1.0, 0.0, 0.0])
    assert rollout.acc_at_k(None, None, records[:1], k)[0] == pytest.approx(1 / 3)


# ---- (A2) Δ = Acc(θ, b) − Acc(θ_0, b), δ = Δ / Acc(θ_0, b); (A3) G = max(δ, 0), F = max(−δ, 0) ----
def test_change_metrics_by_hand():
    m = evaluate.change_metrics(0.30, 0.40)
    assert m["delta"] == pytest.approx(-0.10) and m["rel"] == pytest.approx(-0.25)
    assert m["gain"] == 0.0 and m["forget"] == pytest.approx(0.25)
    m = evaluate.change_metrics(0.60, 0.40)
    assert m["rel"] == pytest.approx(0.5) and m["gain"] == pytest.approx(0.5) and m["forget"] == 0.0
    # base accuracy 0: δ undefined unless nothing changed
    assert evaluate.change_metrics(0.25, 0.0) == {"delta": 0.25, "rel": None, "gain": None, "forget": None}
    assert evaluate.change_metrics(0.0, 0.0) == {"delta": 0.0, "rel": 0.0, "gain": 0.0, "forget": 0.0}


def test_change_metrics_against_the_definitions_on_a_grid():
    """Every pair of accuracies on a grid of eighths (the base above 0): Δ, δ, G and F as SPEC A2–A3 define them;
    G and F are never both positive and G − F = δ."""
    grid = [i / 8 for i in range(9)]
    for acc, base in itertools.product(grid, grid[1:]):
        m = evaluate.change_metrics(acc, base)
        delta = acc - base
        rel = delta / base
        assert m["delta"] == pytest.approx(delta) and m["rel"] == pytest.approx(rel)
        assert m["gain"] == pytest.approx(max(rel, 0.0)) and m["forget"] == pytest.approx(max(-rel, 0.0))
        assert m["gain"] * m["forget"] == 0 and m["gain"] - m["forget"] == pytest.approx(rel)


def test_summary_averages_by_hand():
    stages, benches = ["a", "b"], ["a", "b", "o"]
    rows = [[0.5, 0.4, 0.2],    # base
            [0.75, 0.4, 0.1],   # after a: gain on a = +50%
            [0.25, 0.6, 0.3]]   # after b: gain on b = +50%; final: a −50% (F 0.5), o +50% (F 0)
    s = evaluate.summarize(rows, stages, benches)
    assert s["avg_gain_trained"] == pytest.approx(0.5)
    assert s["avg_forget_earlier"] == pytest.approx(0.5)
    assert s["avg_forget_ood"] == pytest.approx(0.0)
    assert s["per_stage"][0]["o"]["forget"] == pytest.approx(0.5)


# ---- pass@k beside Acc@k (not the paper's; reported, never a verdict) ----
def test_pass_at_k_by_brute_force():
    g = torch.Generator().manual_seed(0)
    for k in (1, 3, 8):
        scores = (torch.rand(5 * k, generator=g) < 0.3).float().tolist()
        brute = sum(any(scores[p * k + j] == 1.0 for j in range(k)) for p in range(5)) / 5
        assert evaluate.pass_at_k(scores, k) == brute
    assert evaluate.pass_at_k([1.0, 0.0, 0.0, 1.0], 1) == 0.5               # k = 1: pass@1 = Acc@1
    assert evaluate.pass_at_k([0.0] * 8, 4) == 0.0 and evaluate.pass_at_k([1.0] * 8, 4) == 1.0
    assert evaluate.pass_at_k([], 4) == 0.0
