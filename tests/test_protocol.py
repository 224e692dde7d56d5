"""The release's protocol (docs/PROTOCOL.md), each rule against a hand-computed or brute-force case:
GRPO's four steps per batch and dual clip, the release's aggregation, a step without signal, the
stage-boundary teacher (T3), token masking (S7), environment feedback (S8), a lone </think> (S6),
and the named continual configurations."""
import copy
import dataclasses
import types

import pytest
import torch

import continual
from beyond import variants
from infra import flags
from experiment import configurations, rundir
from world import tasks
from world import graders
import grpo
from infra import checkpoints, distributed, speedups
import rollout
import sdpo
import train
from rollout import fill_reprompt, strip_think
from conftest import config_for, gjsd_loss, interrupted_copy, results_as_if_full
from equations.test_grpo import args_for, fake_batch


# ---- (G3) dual clip --------------------------------------------------------------------------
def brute_dual_clip(rho, A, eps_low=0.2, eps_high=0.28, c=3.0):
    """verl's vanilla policy loss, written out for one token."""
    l1 = -A * rho
    l2 = -A * min(max(rho, 1 - eps_low), 1 + eps_high)
    clip1 = max(l1, l2)
    if A < 0 and c > 0:
        return min(-A * c, clip1)
    return clip1


@pytest.mark.parametrize("c", [0.0, 3.0])
def test_dual_clip_matches_the_release_formula(c):
    rhos = [0.1, 0.79, 0.8, 1.0, 1.2, 1.28, 1.5, 2.9, 3.0, 5.0, 40.0]
    for A in (-1.5, -0.5, 0.0, 0.25, 2.0):
        logp = torch.log(torch.tensor([rhos], dtype=torch.float64))
        loss, _ = grpo.clipped_surrogate(logp, torch.zeros_like(logp), torch.tensor([A], dtype=torch.float64),
                                         clip_c=c)
        want = [brute_dual_clip(r, A, c=c) for r in rhos]
        assert loss[0].tolist() == pytest.approx(want, abs=1e-12), (A, c)


def test_dual_clip_worked_example():
    # A = −1, ρ = 5: the PPO clip alone gives ℓ = −min(−5, −1.28) = 5; the dual clip caps it at 3
    logp = torch.log(torch.tensor([[5.0]]))
    loss, clipped = grpo.clipped_surrogate(logp, torch.zeros_like(logp), torch.tensor([-1.0]), clip_c=3.0)
    assert loss.item() == pytest.approx(3.0) and clipped.item()
    loss, _ = grpo.clipped_surrogate(logp, torch.zeros_like(logp), torch.tensor([-1.0]), clip_c=0.0)
    assert loss.item() == pytest.approx(5.0)


# ---- GRPO: four optimizer steps per batch, contiguous whole groups ------------------------------
def test_contiguous_mini_batches_are_whole_groups():
    parts = list(grpo.mini_batch_split(64, 8, mini_batches=4, epochs=1, order="contiguous"))
    assert parts == [list(range(16 * k, 16 * (k + 1))) for k in range(4)]
    # two sample blocks (as two ranks would): each block is split the same way
    two = list(grpo.mini_batch_split(64, 8, mini_batches=2, epochs=2, order="contiguous", blocks=2))
    assert len(two) == 4 and two[0] == two[2]
    assert two[0] == list(range(0, 16)) + list(range(32, 48))


def release_balanced_order(seq_lengths):
    """verl's `_balance_batch` on one rank, written out: workload 24576·L + L², sorted with ties by
    position, then `partition[::2] + partition[1::2][::-1]`."""
    workload = [24576 * n + n * n for n in seq_lengths]
    part = sorted(range(len(seq_lengths)), key=lambda x: (workload[x], x))
    return part[::2] + part[1::2][::-1]


def test_balanced_mini_batches_are_length_bands():
    """(release) --mini-batch-order balanced: 64 responses of mixed lengths (ties included), 4 mini-batches =
    contiguous quarters of the release's order; each one a band of lengths drawn from several groups."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 40, (64,), generator=g).tolist()
    parts = list(grpo.mini_batch_split(64, 8, mini_batches=4, epochs=1, order="balanced", seq_lengths=lengths))
    want = release_balanced_order(lengths)
    assert parts == [want[16 * k:16 * (k + 1)] for k in range(4)]
    assert sorted(i for p in parts for i in p) == list(range(64))
    band = [sorted(lengths[i] for i in p) for p in parts]
    assert band[0][-1] <= band[1][0] and band[3][-1] <= band[2][0]     # short, longer | longest, shorter
    assert all(len({i // 8 for i in p}) >= 4 for p in parts)             # many groups in each, not 2 whole ones
    assert rollout.balanced_order([5, 9, 3, 7, 4, 8]) == [2, 0, 5, 1, 3, 4]   # the docstring's example


def test_the_demonstration_is_the_first_success_in_the_balanced_order():
    """(S1, release) the release picks the first success of the group in its balanced order: here the
    shorter of two successful siblings, where sampling order would give the longer one."""
    recs = [{"prompt": "Q?", "kind": "math", "answer": "5"}] * 4
    texts = ["wrong", "a long correct answer \\boxed{5}", "\\boxed{5}", "wrong"]
    rewards = torch.tensor([0., 1, 1, 0])
    lengths = [10 + len(t) for t in texts]                             # prompt 10 tokens + the response
    position = [0] * 4
    for place, i in enumerate(rollout.balanced_order(lengths)):
        position[i] = place
    users, _, demo = sdpo.build_teacher_prompts(recs, texts, rewards, 4, position=position)
    assert demo[0] == 2 and demo[3] == 2                                  # the short success, first in the order
    _, _, plain = sdpo.build_teacher_prompts(recs, texts, rewards, 4)
    assert plain[0] == 1                                                  # sampling order: the first sampled
    assert demo[2] == 1 and demo[1] == 2                                  # never itself


def test_warmup_is_the_releases_linear_schedule_per_batch():
    """verl's constant schedule with warmup, stepped once per batch: batch b (0-based) has lr·min(1, b/W)."""
    assert [train.warmup_lr(1e-5, b, 10) for b in (0, 1, 5, 10, 30)] == pytest.approx([0.0, 1e-6, 5e-6, 1e-5, 1e-5])
    assert train.warmup_lr(1e-4, 0, 0) == 1e-4


def test_real_models_get_the_release_optimizer_settings_and_tiny_its_own(capsys):
    assert flags.model_defaults("tiny") == {"weight_decay": 0.0}
    assert flags.model_defaults("Qwen/Qwen3-4B-Instruct-2507") == {"weight_decay": 0.01}
    _, args, _, _, configs, defaults = continual.parse_args(["--method", "sdpo"])
    assert args.weight_decay == 0.0 and args.warmup_steps is None and args.mini_batch_order == "balanced"
    assert args.feedback == "release" and args.stage_optimizer == "fresh" and not args.skip_empty_steps
    assert rundir.run_dir_name(args, configs, defaults, configurations.naming_knobs()) == "sdpo_a0.05-s0"   # no hash


def test_grpo_takes_mini_batches_steps_and_the_ratio_moves(tiny):
    model, tok = tiny
    m = copy.deepcopy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    stats = train.update(m, opt, grpo, grpo.GRPOConfig(mini_batches=2), None, fake_batch(tok), args_for(mini_batches=2, loss_agg="seq-mean-token-mean"), tok, 1)
    assert next(iter(opt.state.values()))["step"].item() == 2      # two optimizer steps on one batch
    assert stats["clip_frac"] >= 0.0
    # the log keeps each optimizer step's clip fraction: the first is on-policy (ρ = 1), it never clips
    assert len(stats["clip_frac_by_step"]) == 2 and stats["clip_frac_by_step"][0] == 0.0
    assert stats["clip_frac"] == pytest.approx(sum(stats["clip_frac_by_step"]) / 2)
    # the second mini-batch is scored off-policy: its ratio is no longer exactly 1
    m2 = copy.deepcopy(model)
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    old = grpo.old_policy_logprobs(m2, fake_batch(tok), 0, tok.pad_token_id)
    train.update(m2, opt2, grpo, grpo.GRPOConfig(mini_batches=2), None, fake_batch(tok), args_for(mini_batches=2), tok, 1)
    new = grpo.old_policy_logprobs(m2, fake_batch(tok), 0, tok.pad_token_id)
    assert max((a - b).abs().max().item() for a, b in zip(old, new)) > 1e-4


# ---- (S5) the release's aggregation ------------------------------------------------------------
def test_seq_mean_token_mean_with_0_1_and_all_responses_signalled():
    g = torch.Generator().manual_seed(0)
    S = torch.log_softmax(torch.randn(4, 5, 7, generator=g), -1)
    T = torch.log_softmax(torch.randn(4, 5, 7, generator=g), -1)
    lengths = [5, 3, 4, 2]
    resp = torch.zeros(4, 5)
    for i, n in enumerate(lengths):
        resp[i, :n] = 1
    per_token = sdpo.generalized_jsd(S, T, 0.5)                             # [4, 5]

    def brute(signalled):   # mean over all 4 responses of each response's token-mean, 0 without signal
        total = 0.0
        for i in signalled:
            total += sum(per_token[i, t].item() for t in range(lengths[i])) / lengths[i]
        return total / 4
    for signalled in ([], [2], [0, 1, 2, 3]):
        m = torch.zeros(4, 1)
        m[signalled] = 1
        loss, _ = gjsd_loss(S, T, resp * m, mode="seq-mean-token-mean")
        assert loss.item() == pytest.approx(brute(signalled), abs=1e-6)
    # the worked example of the docstring: one response with signal among four
    loss, _ = gjsd_loss(S, T, resp * torch.tensor([[0.], [0], [1], [0]]), mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(per_token[2, :4].mean().item() / 4, abs=1e-6)


def test_a_step_without_signal_still_moves_adam(tiny):
    """All rewards 0: no teacher signal, zero gradient, but AdamW steps (as in the release)."""
    model, tok = tiny
    m = copy.deepcopy(model)
    teacher = sdpo.stage_teacher(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
    args = types.SimpleNamespace(cot=False, feedback=False, mask_ratio=0.0, micro_batch=0, beta=0.5, topk=None,
                                 mini_batch_order="balanced", sample_blocks=0,
                                 max_grad_norm=1.0, loss_agg="seq-mean-token-mean")
    batch = fake_batch(tok)
    train.update(m, opt, sdpo, config_for(sdpo.SDPOConfig, args), teacher, batch, args, tok, 1)           # a step with signal: Adam has momentum
    before = torch.cat([p.detach().flatten() for p in m.parameters()]).clone()
    batch["rewards"] = torch.zeros(8)
    stats = train.update(m, opt, sdpo, config_for(sdpo.SDPOConfig, args), teacher, batch, args, tok, 2)
    after = torch.cat([p.detach().flatten() for p in m.parameters()])
    assert stats["skipped"] == 1 and stats["loss"] == 0.0
    assert next(iter(opt.state.values()))["step"].item() == 2
    assert (after - before).abs().max().item() > 0                    # the momentum still moves the weights


# ---- (T3) the teacher at a stage boundary -------------------------------------------------------
def test_stage_teacher_rule_at_a_0_1_and_half(tiny):
    model, _ = tiny
    student = copy.deepcopy(model)
    old_teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in old_teacher.parameters():
            p.add_(torch.randn_like(p))
    flat = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])   # noqa: E731
    s, t = flat(student), flat(old_teacher)
    assert torch.equal(flat(sdpo.stage_teacher(student)), s)                       # restart
    assert torch.equal(flat(sdpo.stage_teacher(student, old_teacher, 0.0)), s)     # a = 0: the student
    assert torch.allclose(flat(sdpo.stage_teacher(student, old_teacher, 1.0)), t, atol=0)   # a = 1: carried
    half = flat(sdpo.stage_teacher(student, old_teacher, 0.5))
    assert torch.allclose(half, 0.5 * s + 0.5 * t, atol=1e-6)                       # a = 0.5: the mix
    assert all(not p.requires_grad for p in sdpo.stage_teacher(student, old_teacher, 0.5).parameters())


# ---- (S7) token masking -------------------------------------------------------------------------
def test_token_masking_rate_over_many_draws():
    torch.manual_seed(0)
    for r in (0.1, 0.5, 0.9):
        keep = sdpo.token_keep_masks([1000] * 200, r)
        rate = torch.cat(keep).float().mean().item()
        assert abs(rate - (1 - r)) < 0.005, (r, rate)       # 200k draws: 3.5 standard errors ≈ 0.004
    assert all(k.all() for k in sdpo.token_keep_masks([5, 3], 0.0))
    torch.manual_seed(7)
    a = sdpo.token_keep_masks([9, 4], 0.3)
    torch.manual_seed(7)
    b = sdpo.token_keep_masks([9, 4], 0.3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))   # the same step seed draws the same mask


# ---- (S8) environment feedback ------------------------------------------------------------------
def test_feedback_prompt_text():
    """(S8) byte for byte the yaml that runs (`actor.yaml`'s `|-` blocks: no trailing newline in the feedback
    section, so 2 newlines before the closing line, not the dataclass default's 4)."""
    assert fill_reprompt("Q?", feedback="Your final answer 3 is incorrect.").encode() == (
        b"Q?\nThe following is feedback from your unsuccessful earlier attempt:\n\n"
        b"Your final answer 3 is incorrect.\n\nCorrectly solve the original question.")
    # a demonstration alone is exactly S1's text (what the tiny model was pretrained on)
    assert fill_reprompt("Q?", "\\boxed{5}") == "Q?\nCorrect solution:\n\n\\boxed{5}\n\nCorrectly solve the original question."


def test_feedback_only_where_no_sibling_succeeded():
    recs = [{"prompt": "What is 2+3?", "kind": "math", "answer": "5"}] * 4
    texts = ["\\boxed{4}", "\\boxed{5}", "\\boxed{6}", "no box"]
    rewards = torch.tensor([0., 1, 0, 0])
    users, m, _ = sdpo.build_teacher_prompts(recs[:2] + recs[2:], texts, rewards, 2, feedback=True)
    # the release's MATH grader says nothing about a wrong answer in the right format (users[2]),
    # and names the format when there is no \\boxed{} (users[3])
    assert m.tolist() == [1, 0, 0, 1]
    assert "Correct solution" in users[0] and users[1] is None and users[2] is None
    assert users[3] == fill_reprompt("What is 2+3?", feedback=graders.MATH_FORMAT_FEEDBACK)
    off, m_off, _ = sdpo.build_teacher_prompts(recs, texts, rewards, 2, feedback=False)
    assert m_off.tolist() == [1, 0, 0, 0] and off[2] is None


def test_built_in_graders_give_the_release_feedback():
    """MATH names a missing \\boxed{}; SCIENCE (MCQ) says nothing, as the release's; TOOLUSE names what it
    expected; CODING shows a failing test. A success gets no feedback."""
    recs = {name: tasks.builtin_split(name, "test", 1)[0] for name in tasks.TRAIN_DOMAINS}
    assert graders.feedback(recs["math"], "a wrong answer") == graders.MATH_FORMAT_FEEDBACK
    assert graders.feedback(recs["science"], "a wrong answer") is None
    tool = graders.feedback(recs["tooluse"], "Action: nope")
    assert tool.startswith("Actions mismatch: predicted ['nope'], expected [") and "Action inputs mismatch" in tool
    assert graders.feedback(recs["coding"], "lambda x: 0 * x + 99").startswith("Test Case 3: Wrong Answer\n\nInput\n[0]")
    assert graders.feedback(recs["coding"], "x + 3") == graders.INCORRECT_FORMAT["lambda"]
    for name, rec in recs.items():
        assert graders.feedback(rec, rec["solution"]) is None, name
    assert graders.feedback({"kind": "tooluse", "answer": "not json"}, "x") is None


def test_feedback_notes_from_grading_and_the_release_table_per_kind():
    """(S8) the notes rollout.collect recorded are the ones distilled (no second grading); under
    'release' feedback is on for MATH and CODING and off for SciKnowEval (mcq) and ToolAlpaca."""
    recs = tasks.with_release_rules([{"prompt": "Q", "kind": "code", "answer": ""}] * 2
                                    + [{"prompt": "Q", "kind": "mcq", "answer": "A"}] * 2)
    texts, rewards, notes = ["x", "y", "B", "C"], torch.zeros(4), ["note 0", "", "note 2", "note 3"]
    users, m, demo = sdpo.build_teacher_prompts(recs, texts, rewards, 2, feedback="release", notes=notes)
    assert m.tolist() == [1, 0, 0, 0] and users[0] == fill_reprompt("Q", feedback="note 0") and demo == [None] * 4
    _, m_on, _ = sdpo.build_teacher_prompts(recs, texts, rewards, 2, feedback="on", notes=notes)
    _, m_off, _ = sdpo.build_teacher_prompts(recs, texts, rewards, 2, feedback="off", notes=notes)
    assert m_on.tolist() == [1, 0, 1, 1] and m_off.tolist() == [0, 0, 0, 0]
    assert [sdpo.feedback_on("release", r) for r in tasks.with_release_rules(
        [{"kind": k} for k in ("code", "math", "mcq", "tooluse", "gpqa")])] == [True, True, False, False, True]
    # the built-in world's CODING and MATH records: the one deviation (docs/PROTOCOL.md), and --feedback on
    # overrides it; the world's other domains follow the release's table
    for domain in ("coding", "math"):
        for r in tasks.builtin_split(domain, "train", 3):
            assert not sdpo.feedback_on("release", r) and sdpo.feedback_on("on", r) and not sdpo.feedback_on("off", r)
    assert not any(sdpo.feedback_on("release", r) for d in ("science", "tooluse") for r in tasks.builtin_split(d, "train", 3))


def test_the_step_logs_who_was_distilled_by_what(tiny):
    """demo_frac: responses with a successful sibling; feedback_frac: the others distilled by a note."""
    model, tok = tiny
    m = copy.deepcopy(model)
    batch = fake_batch(tok)                       # rewards [1, 0, 1, 0 | 1, 1, 0, 0]
    batch["feedback"] = ["", "wrong", "", "wrong", "", "", "", "wrong"]
    args = types.SimpleNamespace(cot=False, feedback="on", mask_ratio=0.0, micro_batch=0, beta=0.5, topk=None,
                                 mini_batch_order="contiguous", sample_blocks=0, max_grad_norm=1.0,
                                 loss_agg="seq-mean-token-mean")
    stats = train.update(m, torch.optim.AdamW(m.parameters()), sdpo, config_for(sdpo.SDPOConfig, args), sdpo.stage_teacher(m), batch, args, tok, 1)
    # group 1: all four have a success beside them; group 2: 0 and 1 have each other, 2 and 3 have both;
    # so every response has a demonstration and no note is needed
    assert stats["demo_frac"] == 1.0 and stats["feedback_frac"] == 0.0
    batch["rewards"] = torch.tensor([1., 0, 0, 0, 0, 0, 0, 0])
    stats = train.update(m, torch.optim.AdamW(m.parameters()), sdpo, config_for(sdpo.SDPOConfig, args), sdpo.stage_teacher(m), batch, args, tok, 2)
    # responses 1–3 have response 0's success; 0 has none and no note; group 2: only 7 has a note
    assert stats["demo_frac"] == 3 / 8 and stats["feedback_frac"] == 1 / 8


def loop_run(tiny, monkeypatch, tmp_path, rewards, steps=3, **kw):
    """train.run_steps on a fixed hand-made batch (no sampling): (model, optimizer, log rows, snapshots)."""
    model, tok = tiny
    m = copy.deepcopy(model)
    batch = fake_batch(tok)
    batch["rewards"], batch["feedback"] = rewards, [""] * 8
    monkeypatch.setattr(train, "sample_and_grade", lambda *a: copy.deepcopy(batch))
    args = types.SimpleNamespace(cot=False, feedback="off", mask_ratio=0.0, micro_batch=0, beta=0.5, topk=None,
                                 mini_batch_order="balanced", sample_blocks=0, max_grad_norm=1.0,
                                 loss_agg="seq-mean-token-mean", alpha=0.05, refresh_every=0, gamma=1.0, steps=steps,
                                 prompts_per_step=2, seed=0, lr=1e-3, warmup_steps=None, skip_empty_steps=False)
    vars(args).update(kw)
    opt = torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=0.0)
    seen = []
    cfg = config_for(sdpo.SDPOConfig, args)
    train.run_steps(m, tok, batch["records"][:2], args, sdpo, cfg, sdpo.frozen_model(m, cfg), opt,
                    on_step=lambda step, row: seen.append((row, [p.detach().clone() for p in m.parameters()])))
    return m, opt, seen


def test_with_warmup_the_first_batch_leaves_the_weights_unchanged(tiny, monkeypatch, tmp_path):
    """The release's warmup from 0: batch 0's rate is 0, so θ does not move, though the gradient is not 0;
    batch 1 moves at lr/W. The rate in force is logged."""
    start = [p.detach().clone() for p in tiny[0].parameters()]
    _, _, seen = loop_run(tiny, monkeypatch, tmp_path, torch.tensor([1., 0, 1, 0, 1, 1, 0, 0]), steps=2, warmup_steps=10)
    (row1, after1), (row2, after2) = seen
    assert row1["lr"] == 0.0 and row1["grad_norm"] > 0 and row1["update_rel"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(start, after1))
    assert row2["lr"] == pytest.approx(1e-4) and row2["update_rel"] > 0
    assert row2["update_max"] == pytest.approx(1e-4, rel=0.05)   # a fresh Adam's step: about the rate itself


def test_the_release_warmup_per_data_kind():
    """10 batches for SciKnowEval (mcq) and ToolAlpaca, none for CODING and MATH; --warmup-steps wins."""
    rules = tasks.with_release_rules
    assert [train.stage_warmup(None, rules([{"kind": k}])) for k in ("mcq", "tooluse", "code", "math")] == [10, 10, 0, 0]
    assert train.stage_warmup(3, rules([{"kind": "mcq"}])) == 3 and train.stage_warmup(None, []) == 0
    # every record the world gives carries them: a built-in split's, a file's
    assert [r["release_warmup"] for d in ("math", "science", "tooluse", "coding")
            for r in tasks.builtin_split(d, "train", 1)] == [0, 10, 10, 0]


def test_the_stage_table_is_what_runs():
    """docs/PROTOCOL.md's per-domain table (feedback, warmup, optimizer at a stage start) is what the
    defaults do: each row against sdpo.feedback_on, train.stage_warmup and the flags' default."""
    import os
    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "PROTOCOL.md")).read()
    section = text.split("## Each stage as the release's script for its domain")[1].split("\n## ")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| domain") and not line.startswith("|---")]
    assert [r[0] for r in rows] == ["MATH", "SCIENCE", "TOOLUSE", "CODING"]
    _, args, _, _, _, _ = continual.parse_args([])
    for domain, kind, _, feedback, warmup, optimizer in rows:
        release = tasks.with_release_rules([{"kind": kind}])[0]   # a record of the release's data of that kind
        assert sdpo.feedback_on(args.feedback, release) == feedback.startswith("on"), domain
        world = tasks.builtin_split(domain.lower(), "train", 1)[0]   # the built-in world's: "(built-in world: off…)"
        assert sdpo.feedback_on(args.feedback, world) == (feedback == "on"), domain
        assert train.stage_warmup(args.warmup_steps, [release]) == int(warmup), domain
        assert args.stage_optimizer == optimizer, domain
        assert tasks.builtin_split(domain.lower(), "train", 1)[0]["kind"] == kind, domain   # the built-in world's


def test_skip_empty_steps_leaves_weights_and_optimizer_unchanged(tiny, monkeypatch, tmp_path):
    """(d) a batch without signal: no optimizer step, so θ, AdamW's moments and its step count stay; the
    release's default steps anyway and the momentum moves θ."""
    with_signal, none = torch.tensor([1., 0, 1, 0, 1, 1, 0, 0]), torch.zeros(8)
    m, opt, seen = loop_run(tiny, monkeypatch, tmp_path, with_signal, steps=1)
    state = copy.deepcopy(opt.state_dict())
    monkeypatch.setattr(train, "sample_and_grade", lambda *a: {**fake_batch(tiny[1]), "rewards": none,
                                                               "feedback": [""] * 8})
    before = [p.detach().clone() for p in m.parameters()]
    args = types.SimpleNamespace(cot=False, feedback="off", mask_ratio=0.0, micro_batch=0, beta=0.5, topk=None,
                                 mini_batch_order="balanced", sample_blocks=0, max_grad_norm=1.0,
                                 loss_agg="seq-mean-token-mean", alpha=0.0, refresh_every=0, gamma=1.0, steps=2,
                                 prompts_per_step=2, seed=0, lr=1e-3, warmup_steps=0, skip_empty_steps=True,
                                 teacher="ema", anchor=0.0, base_kl=0.0)
    method = variants.method()                      # (skipping a step is beyond the paper: beyond/variants.py)
    cfg = config_for(variants.BeyondConfig, args)
    teacher = method.frozen_model(m, cfg)
    rows = []
    train.run_steps(m, tiny[1], fake_batch(tiny[1])["records"][:2], args, method, cfg, teacher, opt, start_step=1,
                    on_step=lambda step, row: rows.append(row))
    assert rows[0]["skipped"] == 1 and rows[0]["update_rel"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    after = opt.state_dict()
    for k, v in state["state"].items():
        assert all(torch.equal(v[n], after["state"][k][n]) for n in v), k   # moments and step count unchanged
    cfg = dataclasses.replace(cfg, skip_empty_steps=False)                 # the release: AdamW steps anyway
    train.run_steps(m, tiny[1], fake_batch(tiny[1])["records"][:2], args, method, cfg, teacher, opt, start_step=1,
                    on_step=lambda step, row: rows.append(row))
    assert rows[1]["skipped"] == 1 and rows[1]["update_rel"] > 0


def test_update_size_against_brute_force():
    """‖Δθ‖/‖θ‖ over every parameter, θ before the step, and max |Δθ|."""
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    before = distributed.weights_snapshot(net)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.linspace(-1, 1, p.numel()).reshape(p.shape) * 1e-2)
    flat_old = torch.cat([b.flatten() for b in before])
    flat_new = torch.cat([p.detach().flatten() for p in net.parameters()])
    size = distributed.update_size(net, before)
    assert size["update_rel"] == pytest.approx(((flat_new - flat_old).norm() / flat_old.norm()).item(), rel=1e-6)
    assert size["update_max"] == pytest.approx((flat_new - flat_old).abs().max().item(), rel=1e-6)
    assert distributed.update_size(net, distributed.weights_snapshot(net)) == {"update_rel": 0.0, "update_max": 0.0}


def test_carried_optimizer_continues_its_moments_and_step_count(tmp_path):
    """--stage-optimizer carry: stage k's AdamW starts from stage k−1's saved state; fresh: from nothing."""
    from infra.models import load_model
    model, tok = load_model("tiny", "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    checkpoints.save_checkpoint(model, tok, str(tmp_path / "stage1"), opt=opt)
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
    checkpoints.load_optimizer(str(tmp_path / "stage1"), model, fresh)
    first = next(iter(fresh.state.values()))
    assert first["step"].item() == 1 and first["exp_avg"].abs().sum() > 0


# ---- (S6) thinking traces ----------------------------------------------------------------------
def test_lone_closing_think_tag_is_stripped_too():
    """(S6) the release's two substitutions: the cut is at the *first* lone </think>, and nothing else is
    stripped (a demonstration keeps its own leading and trailing whitespace)."""
    assert strip_think("a</think>b</think>c") == "b</think>c"             # first, not last
    assert strip_think("  \\boxed{2} \n") == "  \\boxed{2} \n"          # no .strip()
    assert strip_think("x</think>  \n y ") == "y "                          # the whitespace after the tag goes
    assert strip_think("I add 3 and 4</think>\n\\boxed{7}") == "\\boxed{7}"
    assert strip_think("<think>a</think>mid <think>b</think>end") == "mid end"
    assert strip_think("pre-filled</think><think>x</think>\\boxed{1}") == "\\boxed{1}"
    assert strip_think("no trace \\boxed{2}") == "no trace \\boxed{2}"


# ---- the named configurations -------------------------------------------------------------------
def test_table_d6_configurations_have_distinct_names():
    _, args, _, _, configs, _ = continual.parse_args(
        ["--method", "grpo,sdpo_0,sdpo_5,sdpo_cot_5,s_sdpo_0", "--mask-ratio", "0"])
    names = [c[2] for c in configs]
    assert names == ["grpo", "sdpo_a0", "sdpo_a0.05", "sdpo_a0.05_cot", "sdpo_r10_g1"]
    assert configs[4][1]["refresh_every"] == 10 and configs[4][1]["gamma"] == 1.0
    _, args, _, _, configs, _ = continual.parse_args(["--method", "grpo,sdpo", "--mini-batches", "1", "--alpha",
                                                      "0.05", "--mask-ratio", "0.3", "--feedback", "on",
                                                      "--teacher-init", "carry", "--teacher-mix", "0.5"])
    assert [c[2] for c in configs] == ["grpo_mb1", "sdpo_a0.05_mask0.3_fb_carry0.5"]


def test_run_directories_differ_when_any_setting_differs():
    def dir_of(argv):
        _, args, _, _, configs, defaults = continual.parse_args(argv)
        return rundir.run_dir_name(args, configs, defaults, configurations.naming_knobs())
    assert dir_of([]) == "sdpo_a0.05-s0"
    assert dir_of(["--method", "grpo,sdpo"]) == "grpo+sdpo_a0.05-s0"
    assert dir_of(["--lr", "3e-4"]) != dir_of([]) and dir_of(["--lr", "3e-4"]).startswith("sdpo_a0.05-s0-")
    assert dir_of(["--lr", "3e-4"]) != dir_of(["--steps", "10"])
    assert dir_of(["--refresh-every", "5", "--gamma", "0.5"]) == "sdpo_r5_g0.5-s0"
    assert dir_of(["--cot"]) == "sdpo_a0.05_cot-s0"


def test_the_same_configuration_twice_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        continual.parse_args(["--method", "sdpo,sdpo_5"])
    assert e.value.code == 2 and "the same configuration twice" in capsys.readouterr().err


def test_carried_teacher_is_saved_and_a_resume_reloads_it(tmp_path):
    """--teacher-init carry: each stage checkpoint keeps its final teacher, and a run resumed after stage 1
    (a new process) takes the carried teacher from disk and ends with the same results."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = ["--method", "sdpo", "--teacher-init", "carry", "--teacher-mix", "0.5", "--stages", "math,coding",
            "--benchmarks", "math,coding", "--steps", "3", "--prompts-per-step", "4", "--group-size", "4",
            "--eval-n", "4", "--eval-k", "2", "--max-new-tokens", "40", "--curve-every", "0", "--no-drift",
            "--seed", "2"]

    def cli(name):
        out = subprocess.run([sys.executable, os.path.join(root, "continual.py"), *argv, "--name", name],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out
    cli("full")
    run = tmp_path / "runs" / "full"
    results = json.loads((run / "results.json").read_text())
    assert list(results["runs"]) == ["sdpo_a0.05_carry0.5"]
    ckpt = run / "checkpoints" / "sdpo_a0.05_carry0.5" / "stage1-math"
    assert (ckpt / "teacher.pt").is_file()
    part = interrupted_copy(run, "sdpo_a0.05_carry0.5", keep=1)
    assert "resuming after stage 1" in cli("part").stdout
    logs = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert any(r["stage"] == 2 and r["skipped"] == 0 for r in logs)   # stage 2 distilled: its teacher mattered
    assert results_as_if_full(part) == results
    # and the weights after stage 2 are bit-identical: the resumed stage saw the same teacher
    from safetensors.torch import load_file
    w = [load_file(str(d / "checkpoints" / "sdpo_a0.05_carry0.5" / "stage2-coding" / "model.safetensors"))
         for d in (run, part)]
    assert all(torch.equal(w[0][k], w[1][k]) for k in w[0])
    base = load_file(os.path.join(root, "world/tiny_model", "model.safetensors"))
    assert any(not torch.equal(w[0][k], base[k]) for k in base)     # training moved the weights


# ---- the shared prefix inside whole updates: the same gradients as the packed forward ----------
@pytest.mark.parametrize("method", ["grpo", "sdpo"])
def test_whole_update_with_shared_prefix_equals_packed(tiny, method, monkeypatch):
    model, tok = tiny
    batch = fake_batch(tok)

    def grads(share):
        monkeypatch.setattr(speedups, "ON", share)   # the one switch (the shared prefix on or off)
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        torch.manual_seed(0)
        if method == "grpo":   # two mini-batches: the π_old scoring, the ratio and the clip all run
            train.update(m, opt, grpo, grpo.GRPOConfig(mini_batches=2), None, batch, args_for(mini_batches=2, loss_agg="seq-mean-token-mean"), tok, 1)
        else:
            args = types.SimpleNamespace(cot=False, feedback=False, mask_ratio=0.3, micro_batch=3, beta=0.5,
                                         topk=None, max_grad_norm=1e9, loss_agg="seq-mean-token-mean",
                                         mini_batch_order="balanced", sample_blocks=0)
            train.update(m, opt, sdpo, config_for(sdpo.SDPOConfig, args), sdpo.stage_teacher(model), batch, args, tok, 1)
        return torch.cat([p.grad.flatten() for p in m.parameters()])
    packed, shared = grads(False), grads(True)
    assert packed.abs().max().item() > 0
    assert (packed - shared).abs().max().item() <= 1e-4 * packed.abs().max().item()
