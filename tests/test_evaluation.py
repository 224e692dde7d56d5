"""The evaluation's machinery, apart from its equations (tests/equations/test_metrics.py): the static generation
cache, every benchmark sampled together, the base evaluated once for several seeds — each against the path it
replaced — and the world's criteria on the committed base."""
import copy
import functools
import importlib.util
import json
import os

import pytest
import torch

import continual
import drift
import evaluate
import rollout
from world import tasks
from infra import models, padding, speedups


def prompts_of(tok, names, n):
    return [rollout.encode_chat(tok, rollout.chat_messages(r)) for b in names for r in tasks.builtin_split(b, "test", n)]


def test_the_static_cache_generates_what_the_dynamic_cache_generates(tiny):
    """rollout.sample (a StaticCache, written once per prompt group by the shared prefill) against plain
    `generate` with transformers' default DynamicCache and no shared prefill: the same greedy tokens."""
    model, tok = tiny
    prompts = prompts_of(tok, ["math", "tooluse", "coding"], 3)             # lengths differ: left padding
    ours = rollout.sample(model, tok, prompts, 2, 32, temperature=0)
    ids, mask = padding.left_pad([p for p in prompts for _ in range(2)], tok.pad_token_id, "cpu")
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=sorted(rollout.eos_ids_of(model, tok)))
    plain = [rollout.cut_at_eos(row, rollout.eos_ids_of(model, tok)) for row in out[:, ids.shape[1]:].tolist()]
    assert ours == plain
    cache = speedups.generation_cache(model, ids, mask, 32, group_size=2)
    assert cache.get_seq_length() == ids.shape[1] - 1       # every prompt token but the last, already written


def test_sampling_in_chunks_gives_the_same_greedy_tokens(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, ["math", "logic"], 4)
    whole = rollout.sample(model, tok, prompts, 2, 24, temperature=0, batch_size=512)
    assert rollout.sample(model, tok, prompts, 2, 24, temperature=0, batch_size=4) == whole


def test_one_evaluation_of_every_benchmark_equals_one_call_per_benchmark_when_greedy(tiny, monkeypatch):
    """The old path sampled each benchmark in its own call, reseeding before each; the new one samples all
    of them together under one seed. Greedy, the two must agree exactly; sampling, they draw different
    random numbers (the same distribution: docs/HISTORY.md, "Seeds are cheap")."""
    model, tok = tiny
    names = ["math", "science", "tooluse", "logic"]
    greedy = functools.partial(evaluate.acc_at_k, temperature=0.0)
    old = {b: greedy(model, tok, evaluate.benchmark_records(b, 6), 2, 32)[0] for b in names}
    monkeypatch.setattr(evaluate, "acc_at_k", greedy)
    passes, resp = {}, {}
    new = evaluate.evaluate(model, tok, names, 6, 2, 32, progress=False, passes=passes, responses=resp,
                            sample_batch=4)
    assert new == old
    for b in names:    # each benchmark's own responses, in its own prompt order
        one = greedy(model, tok, evaluate.benchmark_records(b, 6), 2, 32)
        assert resp[b]["texts"] == one[2]
        assert passes[b] == evaluate.pass_at_k(one[3], 2)


def test_chance_levels_are_the_formats_guessing_rates():
    assert tasks.chance_level("science") == tasks.chance_level("science_boxed") == 0.25
    assert tasks.chance_level("logic") == pytest.approx(1 / 3)
    assert tasks.chance_level("math") == 0.0 and tasks.chance_level("some_file.jsonl") is None
    assert set(tasks.CHANCE) == set(tasks.GENERATORS)


def test_first_samples_keeps_the_first_m_of_each_prompt():
    texts = [f"p{p}s{s}" for p in range(3) for s in range(4)]
    assert drift.first_samples(texts, 4, 1) == ["p0s0", "p1s0", "p2s0"]
    assert drift.first_samples(texts, 4, 2) == ["p0s0", "p0s1", "p1s0", "p1s1", "p2s0", "p2s1"]
    assert drift.first_samples(texts, 4, 0) == texts


def test_kl_of_every_benchmark_together_equals_each_alone_when_the_samples_are_the_same(tiny, monkeypatch):
    """kl_to_base_per_benchmark samples all benchmarks at once: given the same responses, each benchmark's
    figure is what kl_to_base computes on it alone."""
    model, tok = tiny
    recs = {b: tasks.builtin_split(b, "test", 3) for b in ("math", "logic")}
    greedy = functools.partial(rollout.sample, temperature=0.0)
    monkeypatch.setattr(drift, "sample", lambda m, t, p, g, n, temperature, top_p, batch_size, with_logprobs:
                        greedy(m, t, p, g, n, with_logprobs=with_logprobs))
    moved, g = copy.deepcopy(model), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    together = drift.kl_to_base_per_benchmark(moved, model, tok, recs, 1, 16, 0, 128)
    for b, r in recs.items():
        alone = drift.kl_to_base(moved, model, tok, r, 1, 16, 0)
        assert together[b]["n"] == alone["n"] == 3
        assert together[b]["kl"] == pytest.approx(alone["kl"], abs=1e-5)


SEEDS = ["--method", "grpo", "--stages", "math", "--benchmarks", "math,logic", "--steps", "1",
         "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "3", "--eval-k", "2", "--max-new-tokens", "16",
         "--curve-every", "0", "--no-drift"]


def test_the_base_is_evaluated_once_for_several_seeds(tmp_path, monkeypatch):
    calls = []
    real = evaluate.evaluate

    def counted(model, *a, **kw):
        calls.append(model)
        return real(model, *a, **kw)
    monkeypatch.setattr(evaluate, "evaluate", counted)
    continual.main(SEEDS + ["--seed", "0,1", "--runs-dir", str(tmp_path), "--name", "two"])
    assert len(calls) == 3                      # the base once, then each seed's one stage
    alone = continual.main(SEEDS + ["--seed", "1", "--runs-dir", str(tmp_path), "--name", "one"])
    two = json.loads((tmp_path / "two-s1" / "results.json").read_text())
    # the summary of a named seed list sits beside the seeds' directories, never in a run named "two"
    assert (tmp_path / "two-s0-1" / "results.json").is_file() and not (tmp_path / "two").exists()
    assert two["base"] == alone["base"]
    assert (tmp_path / "two-s1" / "responses" / "base.json").read_text() == \
        (tmp_path / "one" / "responses" / "base.json").read_text()


def test_a_saved_checkpoint_reloads_with_the_attention_it_was_trained_with(tiny, tmp_path):
    """Plain attention for character-sized models, decided from the config: a stage checkpoint reloaded to
    resume or for drift.py computes as the model that was saved (SDPA rounds differently)."""
    model, tok = tiny
    assert model.config._attn_implementation == "eager"
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    again, _ = models.load_model(str(tmp_path / "ckpt"), "cpu")
    assert again.config._attn_implementation == "eager"
    big = type(model.config)(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8)
    assert models.attention_of(big) == {}


# ---- the world's criteria: W1 and W3, judged on the committed base's saved evaluation ----
BASE_EVAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "base",
                         "tiny.json")


def test_validation_split_is_held_out_of_training_and_test():
    """The validation split (tools/world.py's lr rule scores on it) holds prompts that neither RL training nor the test
    split has."""
    valid = {r["prompt"] for r in evaluate.benchmark_records("tooluse", 32, 0, split="valid")}
    test = {r["prompt"] for r in evaluate.benchmark_records("tooluse", 32, 0)}
    trained = {r["prompt"] for r in tasks.train_records("tooluse", n=2000)}
    assert len(valid) == 32 and not valid & test and not valid & trained
    assert {tasks.split_of(p) for p in valid} == {"valid"}


def test_world_criteria_by_hand():
    acc = {"math": 0.30, "science": 0.26, "logic": 0.40}
    passes = {"math": 0.55, "science": 0.90}
    rows = {(c, b): ok for c, b, ok, _ in evaluate.world_criteria(acc, passes, ["math", "science"])}
    assert rows[("W1", "math")]                      # 30 in [15, 60], 30 >= 0 + 15, 55 >= 30 + 20
    assert not rows[("W1", "science")]               # 26 < chance 25 + 15
    assert rows[("W3", "math")] and not rows[("W3", "science")] and not rows[("W3", "logic")]   # 40 < 33 + 10
    assert not evaluate.world_criteria({"math": 0.30}, {"math": 0.49}, ["math"])[0][2]   # pass only +19
    assert not evaluate.world_criteria({"math": 0.61}, {"math": 0.95}, ["math"])[0][2]   # above 60: no room


def test_the_committed_evaluation_is_of_the_committed_base():
    saved = json.load(open(BASE_EVAL))
    assert saved["weights_sha1"] == evaluate.weights_sha1("tiny"), \
        "world/tiny_model/ changed: rerun python evaluate.py --model tiny --n 64 --no-teacher-check --out results/base/tiny.json"
    assert set(saved["acc"]) == set(tasks.GENERATORS) and saved["k"] == 8


def test_the_committed_base_meets_w1_and_w3():
    """The world's W1 and W3 (docs/WORLD.md) on the committed base's saved evaluation (design 4)."""
    saved = json.load(open(BASE_EVAL))
    failed = [(c, b, why) for c, b, ok, why in evaluate.world_criteria(saved["acc"], saved["pass"],
                                                                       list(tasks.TRAIN_DOMAINS)) if not ok]
    assert not failed, failed


def test_bench_eval_times_every_part(tmp_path, capsys):
    """`python tools/bench.py --eval`, made small: every part of a stage's evaluation and drift is timed."""
    from tools import bench
    res = bench.main(["--eval", "--repeat", "1", "--eval-n", "2", "--eval-max-new-tokens", "8",
                      "--out", str(tmp_path / "b.json")])
    assert len(res["eval"]["generate"]) == 6 and all(v["s"] > 0 for v in res["eval"]["generate"].values())
    assert {"evaluation", "drift: weights (A4–A6)"} <= set(res["eval"]["stage_s"])
    assert "| one stage, after training | s |" in capsys.readouterr().out
    assert json.loads((tmp_path / "b.json").read_text())["eval"]["config"]["prompts"] == 16


WORLD_SCRIPT = importlib.util.spec_from_file_location(
    "world", os.path.join(os.path.dirname(BASE_EVAL), "..", "..", "tools", "world.py"))


def test_tool_error_kinds_by_hand():
    """tools/world.py errors: each sample is right, a wrong tool (or none named), or the right tool with a
    wrong input; and the accuracy per right tool."""
    world = importlib.util.module_from_spec(WORLD_SCRIPT)
    WORLD_SCRIPT.loader.exec_module(world)
    recs = [{"answer": json.dumps([{"Action": "timer", "Action_Input": "{}"}])},
            {"answer": json.dumps([{"Action": "play", "Action_Input": "{}"}])}]
    responses = ["Action: timer\nAction Input: {\"minutes\": 3}", "Action: timer\nAction Input: {\"minutes\": 4}",
                 "Action: weather\nAction Input: {}", "no action at all"]
    kinds, per_tool = world.tool_error_kinds(recs, responses, [1.0, 0.0, 0.0, 0.0], k=2)
    assert kinds == {"right": 1, "right tool, wrong input": 1, "wrong tool": 2}
    assert per_tool == {"play": 0.0, "timer": 0.5}
