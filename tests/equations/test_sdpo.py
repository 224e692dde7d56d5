"""SDPO equations (S1–S6) and teacher schedules (T1–T3) against brute force and their properties."""
import copy

import numpy as np
import pytest
import torch

from infra import flags
from infra.distributed import NonFiniteError
import sdpo
from conftest import gjsd_loss, random_logp
from infra.speedups import chunked_logsumexp
from rollout import chat_messages, encode_chat, fill_reprompt, response_logits
from infra.speedups import token_entropy
from world import graders


def brute_kl(p, q):
    return sum(p[v] * np.log(p[v] / q[v]) for v in range(len(p)) if p[v] > 0)


def brute_gjsd(s, t, beta):
    s, t = np.exp(s.astype(np.float64)), np.exp(t.astype(np.float64))
    if beta == 0:
        return brute_kl(t, s)
    if beta == 1:
        return brute_kl(s, t)
    m = beta * t + (1 - beta) * s
    return beta * brute_kl(t, m) + (1 - beta) * brute_kl(s, m)


def topk_with_tail(student_logp, teacher_logp, k):
    """The brute-force reference of (S4), on full log-probabilities: keep the student's top-k ids, gather both distributions there, add one tail bucket.

    [..., V] -> [..., k+1]: entries k are log p on the top-k ids, the last is log(1 − Σ_k p).
    Both results are distributions (sum to 1). With k = V the tail is empty and GJSD is unchanged.
    """
    ids = student_logp.topk(k, dim=-1).indices                      # [..., k] the student's top-k
    s_k = student_logp.gather(-1, ids)                              # [..., k]
    t_k = teacher_logp.gather(-1, ids)                              # [..., k]
    # (S4) tail bucket log(1 − Σ_k p)
    s_tail = sdpo.log1m_exp(torch.logsumexp(s_k, -1, keepdim=True))      # [..., 1]
    t_tail = sdpo.log1m_exp(torch.logsumexp(t_k, -1, keepdim=True))      # [..., 1]
    return torch.cat([s_k, s_tail], -1), torch.cat([t_k, t_tail], -1)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_gjsd_matches_numpy(beta):
    S, T = random_logp(6, 11, seed=1, sharp=2), random_logp(6, 11, seed=2, sharp=2)
    got = sdpo.generalized_jsd(S, T, beta)
    want = [brute_gjsd(S[i].numpy(), T[i].numpy(), beta) for i in range(6)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    assert (got >= 0).all()


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_gjsd_zero_for_identical(beta):
    S = random_logp(4, 9, seed=3, sharp=3)
    assert torch.equal(sdpo.generalized_jsd(S, S.clone(), beta), torch.zeros(4))


def test_half_is_symmetric_js():
    S, T = random_logp(5, 7, seed=4), random_logp(5, 7, seed=5)
    m = 0.5 * (S.exp() + T.exp())
    js = 0.5 * (S.exp() * (S - m.log())).sum(-1) + 0.5 * (T.exp() * (T - m.log())).sum(-1)
    np.testing.assert_allclose(sdpo.generalized_jsd(S, T, 0.5).numpy(), js.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sdpo.generalized_jsd(S, T, 0.5).numpy(), sdpo.generalized_jsd(T, S, 0.5).numpy(),
                               rtol=1e-5, atol=1e-7)


def test_endpoints_equal_plain_kls():
    S, T = random_logp(5, 7, seed=6), random_logp(5, 7, seed=7)
    fwd = (T.exp() * (T - S)).sum(-1)
    rev = (S.exp() * (S - T)).sum(-1)
    np.testing.assert_allclose(sdpo.generalized_jsd(S, T, 0.0).numpy(), fwd.numpy(), rtol=1e-6)
    np.testing.assert_allclose(sdpo.generalized_jsd(S, T, 1.0).numpy(), rev.numpy(), rtol=1e-6)
    # near the endpoints the general formula approaches the KLs scaled by β (resp. 1−β), never explodes
    assert torch.isfinite(sdpo.generalized_jsd(S, T, 1e-6)).all()


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_near_one_hot_finite_value_and_gradient(beta):
    logits = torch.full((3, 50), -60.0)
    logits[:, 0] = 60.0
    logits.requires_grad_(True)
    S = torch.log_softmax(logits, -1)
    T = torch.log_softmax(torch.randn(3, 50) * 20, -1)
    v = sdpo.generalized_jsd(S, T, beta).sum()
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(logits.grad).all()


def test_topk_tail_sums_to_one_and_full_k_is_exact():
    """(S4) sdpo.topk_logprobs itself (log-probabilities are logits too): both sides distributions, the teacher
    gathered on the student's top-k, and k = V leaves the GJSD unchanged."""
    S, T = random_logp(4, 30, seed=8, sharp=2), random_logp(4, 30, seed=9, sharp=2)
    s_k, t_k = sdpo.topk_logprobs(S, T, 5)
    assert s_k.shape == (4, 6)
    np.testing.assert_allclose(s_k.exp().sum(-1).numpy(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(t_k.exp().sum(-1).numpy(), 1.0, rtol=1e-5)
    ids = S.topk(5, -1).indices  # the student's top-k, not the teacher's
    torch.testing.assert_close(t_k[:, :5], T.gather(-1, ids), atol=1e-5, rtol=1e-5)   # (logsumexp of log-probs: 0 ± rounding)
    full = sdpo.generalized_jsd(S, T, 0.5)
    s_v, t_v = sdpo.topk_logprobs(S, T, 30)
    np.testing.assert_allclose(sdpo.generalized_jsd(s_v, t_v, 0.5).numpy(), full.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5, 1024])
def test_chunked_logsumexp_equals_torch_in_value_and_gradient(rows):
    """speedups.chunked_logsumexp against torch.logsumexp in float64, any chunk size, bf16 input too."""
    x = torch.randn(3, 4, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a = x.float().requires_grad_()
    (chunked_logsumexp(a, rows) * w.float()).sum().backward()
    b = x.clone().requires_grad_()
    (torch.logsumexp(b, -1) * w).sum().backward()
    np.testing.assert_allclose(chunked_logsumexp(x.float(), rows).detach().numpy(), torch.logsumexp(x, -1).numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-6)
    h = x.bfloat16().requires_grad_()
    out = chunked_logsumexp(h, rows)
    assert out.dtype == torch.float32                               # fp32 whatever the logits' dtype
    np.testing.assert_allclose(out.detach().numpy(), torch.logsumexp(h.detach().double(), -1).numpy(), rtol=1e-6)
    out.sum().backward()
    assert h.grad.dtype == torch.bfloat16                           # the gradient in the logits' dtype


def test_token_entropy_by_chunks_equals_one_call():
    logits = torch.randn(3, 7, 40, generator=torch.Generator().manual_seed(2))
    logp = torch.log_softmax(logits, -1)
    assert torch.equal(token_entropy(logits, rows=4), -(logp.exp() * logp).sum(-1))


def test_topk_from_logits_equals_topk_of_full_log_softmax():
    """(S4) topk_logprobs (no full log-softmax) = topk_with_tail(log_softmax(S), log_softmax(T)), values and
    the student's gradient; the teacher gets none."""
    g = torch.Generator().manual_seed(3)
    s_logits, t_logits = (3 * torch.randn(2, 5, 60, generator=g)).requires_grad_(), 3 * torch.randn(2, 5, 60, generator=g)
    s2 = s_logits.detach().clone().requires_grad_()
    s_k, t_k = sdpo.topk_logprobs(s_logits, t_logits, 7)
    want_s, want_t = topk_with_tail(torch.log_softmax(s2, -1), torch.log_softmax(t_logits, -1), 7)
    np.testing.assert_allclose(s_k.detach().numpy(), want_s.detach().numpy(), rtol=1e-4, atol=2e-6)   # (the tail,
    np.testing.assert_allclose(t_k.numpy(), want_t.numpy(), rtol=1e-4, atol=2e-6)   # log(1 − Σp), amplifies rounding)
    assert not t_k.requires_grad
    sdpo.generalized_jsd(s_k, t_k, 0.5).sum().backward()
    sdpo.generalized_jsd(want_s, want_t, 0.5).sum().backward()
    np.testing.assert_allclose(s_logits.grad.numpy(), s2.grad.numpy(), atol=1e-5)


def test_topk_default_is_the_release_100_for_real_models_and_full_for_tiny():
    assert flags.default_topk("tiny") is None and flags.default_topk("tiny_think") is None
    assert flags.default_topk("Qwen/Qwen3-4B-Instruct-2507") == 100 == flags.RELEASE_TOPK


def test_sdpo_loss_is_token_mean_over_distilled_tokens():
    S, T = random_logp(3, 4, 6, seed=10), random_logp(3, 4, 6, seed=11)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    loss, per = gjsd_loss(S, T, mask, 0.5)
    brute = [brute_gjsd(S[i, t].numpy(), T[i, t].numpy(), 0.5) for i in range(3) for t in range(4) if mask[i, t]]
    assert loss.item() == pytest.approx(sum(brute) / len(brute), rel=1e-4)


def test_identity_gives_exactly_zero_loss_and_gradient(tiny):
    """Teacher weights = student weights and teacher prompt = student prompt -> loss 0 and gradient 0."""
    model, tok = tiny
    student = copy.deepcopy(model)
    teacher = sdpo.init_teacher(student)
    prompts = [encode_chat(tok, chat_messages({"prompt": p})) for p in ["What is 2+3?", "Tools: a(b)"]]
    responses = [tok("\\boxed{5}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                 tok("Action: a", add_special_tokens=False)["input_ids"]]
    t_logp = torch.log_softmax(sdpo.teacher_logits(teacher, prompts, responses, tok.pad_token_id), -1)
    logits, mask, _ = response_logits(student, prompts, responses, tok.pad_token_id)
    loss, _ = gjsd_loss(torch.log_softmax(logits, -1), t_logp, mask, 0.5)
    loss.backward()
    assert loss.item() == 0.0
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in student.parameters())
    assert all(p.grad is None for p in teacher.parameters())  # no gradient reaches the teacher


def test_nonidentity_gives_gradient_only_to_student(tiny):
    model, tok = tiny
    student = copy.deepcopy(model)
    teacher = sdpo.init_teacher(student)
    prompt = [encode_chat(tok, chat_messages({"prompt": "What is 2+3?"}))]
    t_prompt = [encode_chat(tok, chat_messages({"prompt": fill_reprompt("What is 2+3?", "\\boxed{5}")}))]
    resp = [tok("\\boxed{6}", add_special_tokens=False)["input_ids"]]
    t_logp = torch.log_softmax(sdpo.teacher_logits(teacher, t_prompt, resp, tok.pad_token_id), -1)
    logits, mask, _ = response_logits(student, prompt, resp, tok.pad_token_id)
    loss, _ = gjsd_loss(torch.log_softmax(logits, -1), t_logp, mask, 0.5)
    loss.backward()
    assert loss.item() > 0
    assert any(p.grad.abs().max() > 0 for p in student.parameters())
    assert all(p.grad is None and not p.requires_grad for p in teacher.parameters())


# ---- (S1) the reprompt builder ----
def recs(n, prompt="Q {x}?", system=None):
    return [{"prompt": prompt, "system": system, "kind": "math", "answer": "1"}] * n


def test_reprompt_self_excluded_first_success_and_no_success():
    texts = ["a", "b", "c", "d", "e", "f"]
    rewards = torch.tensor([0., 1, 1, 1, 0, 0])
    users, m, demo = sdpo.build_teacher_prompts(recs(6), texts, rewards, 3)
    # group 2 has one success (response 3): it has no *other* success, its failed siblings learn from it
    assert demo == [1, 2, 1, None, 3, 3]
    assert m.tolist() == [1, 1, 1, 0, 1, 1]
    assert users[0] == "Q {x}?\nCorrect solution:\n\nb\n\nCorrectly solve the original question."
    assert users[3] is None


def test_reprompt_braces_survive_and_system_kept():
    demo = "f = {'a': {1}}\n\\boxed{\\frac{1}{2}}"
    users, _, _ = sdpo.build_teacher_prompts(recs(2, "Solve {y}", "sys {z}"), ["x", demo],
                                             torch.tensor([0., 1.]), 2)
    assert users[0] == "Solve {y}\nCorrect solution:\n\n" + demo + "\n\nCorrectly solve the original question."
    msgs = chat_messages({"prompt": "Solve {y}", "system": "sys {z}"}, users[0])
    assert msgs[0] == {"role": "system", "content": "sys {z}"} and msgs[1]["content"] == users[0]


def test_think_stripping_on_and_off():
    demo = "<think>long\nreasoning</think>\nAnswer \\boxed{3}"
    rewards = torch.tensor([0., 1.])
    plain, _, _ = sdpo.build_teacher_prompts(recs(2), ["x", demo], rewards, 2, cot=False)
    cot, _, _ = sdpo.build_teacher_prompts(recs(2), ["x", demo], rewards, 2, cot=True)
    assert "<think>" not in plain[0] and "Answer \\boxed{3}" in plain[0]
    assert demo in cot[0]


# ---- (T1)–(T3) teacher schedules ----
def tiny_pair(seed=0):
    torch.manual_seed(seed)
    student = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    teacher = sdpo.init_teacher(student)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(torch.randn_like(p))
    return student, teacher


def flat(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_ema_endpoints_and_formula():
    s, t = tiny_pair()
    before = flat(t).clone()
    sdpo.ema_update(t, s, 0.0)
    assert torch.equal(flat(t), before)                    # α = 0: bit-identical
    sdpo.ema_update(t, s, 0.05)
    np.testing.assert_allclose(flat(t).numpy(), (0.95 * before + 0.05 * flat(s)).numpy(), rtol=1e-6, atol=1e-7)
    sdpo.ema_update(t, s, 1.0)
    assert torch.equal(flat(t), flat(s))                   # α = 1: a copy


def test_refresh_and_freeze_changes_teacher_only_at_refresh_steps():
    s, t = tiny_pair(1)
    changed = []
    for step in range(1, 10):
        with torch.no_grad():
            for p in s.parameters():
                p.add_(0.1)
        before = flat(t).clone()
        refreshed = sdpo.teacher_after_step(t, s, step, alpha=0.05, refresh_every=3, gamma=0.5)
        changed.append(not torch.equal(before, flat(t)))
        assert refreshed == changed[-1]               # what the log marks is what moved the teacher
    assert changed == [False, False, True] * 3
    assert sdpo.teacher_after_step(t, s, 1, alpha=0.05) is False   # T1 moves every step: no refresh point


def test_teacher_init_is_a_separate_copy():
    s, t = tiny_pair(2)
    t2 = sdpo.init_teacher(s)
    assert torch.equal(flat(t2), flat(s))
    with torch.no_grad():
        next(s.parameters()).add_(1.0)
    assert not torch.equal(flat(t2), flat(s))              # the student's step does not move the teacher


def test_ema_refuses_nonfinite_student():
    s, t = tiny_pair(3)
    with torch.no_grad():
        next(s.parameters())[0, 0] = float("nan")
    before = flat(t).clone()
    with pytest.raises(NonFiniteError):
        sdpo.ema_update(t, s, 0.05)
    assert torch.equal(flat(t), before)


def test_the_thinking_variant_thinks_and_cot_keeps_its_trace():
    """(S6) on the built-in world: world/tiny_model_think writes a <think> trace first, so SDPO-CoT's teacher sees
    the demonstration's trace and plain SDPO's does not (on world/tiny_model the two were the same)."""
    from world import tasks
    from infra.models import load_model
    from rollout import collect
    model, tok = load_model("tiny_think", "cpu")
    recs = tasks.builtin_split("math", "test", 4, 0)
    torch.manual_seed(0)
    batch = collect(model, tok, recs, 4, 96, 1.0, 1.0)
    thinking = [t for t in batch["texts"] if t.startswith("<think>") and "</think>" in t]
    assert len(thinking) >= 12, batch["texts"]
    texts = ["<think>add 3 4</think>\n3+4=7\n\\boxed{7}"] * 2
    rewards = torch.tensor([1.0, 1.0])
    plain, _, _ = sdpo.build_teacher_prompts(recs[:1] * 2, texts, rewards, 2, cot=False)
    cot, _, _ = sdpo.build_teacher_prompts(recs[:1] * 2, texts, rewards, 2, cot=True)
    assert "<think>add 3 4</think>" in cot[0] and "<think>" not in plain[0] and "3+4=7" in plain[0]
    coding = tasks.builtin_split("coding", "test", 1, 0)[0]   # (the built-in world's bare-lambda format)
    assert graders.grade(coding, "<think>+1</think>\n" + coding["answer"]) == 1.0
