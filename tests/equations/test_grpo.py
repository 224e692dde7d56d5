"""GRPO equations (G1–G5) against brute force, and the gradient properties of the update."""
import copy
import types

import numpy as np
import pytest
import torch

import grpo
from conftest import config_for
import train
from rollout import response_logits, token_logprobs


def brute_advantages(rewards, G, scale_std):
    out = []
    for g in range(len(rewards) // G):
        grp = rewards[g * G:(g + 1) * G]
        mean = sum(grp) / G
        std = (sum((r - mean) ** 2 for r in grp) / (G - 1)) ** 0.5
        for r in grp:
            out.append((r - mean) / (std + 1e-4) if scale_std else r - mean)
    return out


@pytest.mark.parametrize("scale_std", [False, True])
def test_group_advantages_match_loops(scale_std):
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, size=40).astype(float).tolist()
    rewards[:8] = [1.0] * 8      # an all-success group
    rewards[8:16] = [0.0] * 8    # an all-failure group
    got = grpo.group_advantages(torch.tensor(rewards), 8, scale_std)
    np.testing.assert_allclose(got.numpy(), brute_advantages(rewards, 8, scale_std), rtol=1e-5, atol=1e-6)
    assert torch.equal(got[:16], torch.zeros(16))  # zero-variance groups: exactly 0, never NaN
    assert torch.isfinite(got).all()


def test_group_advantages_worked_example():
    got = grpo.group_advantages(torch.tensor([1., 0, 0, 1, 1, 1, 1, 1]), 4)
    assert got.tolist() == [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]


def brute_surrogate(r, A, lo, hi):
    return -min(r * A, min(max(r, 1 - lo), 1 + hi) * A)


@pytest.mark.parametrize("ratio,adv", [(1.1, 1.0), (1.5, 1.0), (0.9, -1.0), (0.5, -1.0),   # inside / outside
                                       (0.5, 1.0), (1.5, -1.0), (1.0, 0.7)])
def test_clipped_surrogate_four_regions(ratio, adv):
    logp = torch.tensor([[np.log(ratio)]], dtype=torch.float32, requires_grad=True)
    old = torch.zeros(1, 1)
    loss, clipped = grpo.clipped_surrogate(logp, old, torch.tensor([adv]), 0.2, 0.28)
    assert loss.item() == pytest.approx(brute_surrogate(ratio, adv, 0.2, 0.28), rel=1e-5)
    loss.sum().backward()
    outside = (adv > 0 and ratio > 1.28) or (adv < 0 and ratio < 0.8)
    assert bool(clipped.item()) == outside
    # where the clip binds the token gets no gradient; elsewhere d(−ρA)/dlogp = −ρA
    expected_grad = 0.0 if outside else -ratio * adv
    assert logp.grad.item() == pytest.approx(expected_grad, rel=1e-5, abs=1e-7)


def test_clipped_surrogate_random_against_loops():
    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(5, 7, generator=g) * 0.3, torch.randn(5, 7, generator=g) * 0.3
    A = torch.randn(5, generator=g)
    loss, _ = grpo.clipped_surrogate(logp, old, A, 0.2, 0.28)
    for i in range(5):
        for t in range(7):
            r = float(np.exp((logp[i, t] - old[i, t]).item()))
            assert loss[i, t].item() == pytest.approx(brute_surrogate(r, float(A[i]), 0.2, 0.28), rel=1e-4, abs=1e-6)


def test_k3_nonnegative_zero_when_equal_and_matches_formula():
    g = torch.Generator().manual_seed(2)
    logp, ref = torch.randn(4, 9, generator=g), torch.randn(4, 9, generator=g)
    k3 = grpo.k3_kl(logp, ref)
    assert (k3 >= 0).all()
    brute = np.exp(ref.numpy() - logp.numpy()) - (ref.numpy() - logp.numpy()) - 1
    np.testing.assert_allclose(k3.numpy(), brute, rtol=1e-5, atol=1e-6)
    assert torch.equal(grpo.k3_kl(logp, logp), torch.zeros_like(logp))


def test_masked_tokens_contribute_nothing():
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(3, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
    poisoned = loss.clone()
    poisoned[mask == 0] = 1e6
    for mode in ("token-mean", "seq-mean-token-mean"):
        assert grpo.aggregate(loss, mask, mode).item() == pytest.approx(grpo.aggregate(poisoned, mask, mode).item())


def test_aggregation_modes_against_loops():
    g = torch.Generator().manual_seed(4)
    loss = torch.randn(4, 5, generator=g)
    lens = [5, 2, 3, 1]
    mask = torch.tensor([[1 if t < n else 0 for t in range(5)] for n in lens])
    token_mean = sum(loss[i, t].item() for i in range(4) for t in range(lens[i])) / sum(lens)
    seq_mean = sum(sum(loss[i, t].item() for t in range(lens[i])) / lens[i] for i in range(4)) / 4
    assert grpo.aggregate(loss, mask, "token-mean").item() == pytest.approx(token_mean, rel=1e-5)
    assert grpo.aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(seq_mean, rel=1e-5)
    with pytest.raises(ValueError):
        grpo.aggregate(loss, mask, "sum")


def fake_batch(tok, G=4, N=2):
    """A hand-made batch of rollouts (no sampling): varied lengths, mixed rewards."""
    prompts = [tok("What is 2+3?", add_special_tokens=False)["input_ids"],
               tok("Tools: a(b)", add_special_tokens=False)["input_ids"]]
    texts = ["\\boxed{5}", "5", "2+3=5 \\boxed{5}", "x", "Action: a", "Action: a\nAction Input: {}", "no", "a"]
    resp = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    return {"prompt_ids": [p for p in prompts for _ in range(G)], "response_ids": resp, "texts": texts,
            "records": [{"prompt": "p", "kind": "math", "answer": "5"}] * (G * N),
            "rewards": torch.tensor([1., 0, 1, 0, 1, 1, 0, 0]), "group_size": G}


def args_for(**kw):
    base = dict(adv_std=False, epochs=1, mini_batches=1, micro_batch=0, kl_coef=0.0, epsilon=0.2, mini_batch_order="balanced",
                epsilon_high=0.28, loss_agg="token-mean", max_grad_norm=1e9, seed=0, clip_ratio_c=3.0, sample_blocks=0)
    base.update(kw)
    return types.SimpleNamespace(**base)


def grads_after_update(model, tok, batch, **kw):
    """Run train.update (GRPO) with a no-op optimizer and return the accumulated gradient."""
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    train.update(m, opt, grpo, config_for(grpo.GRPOConfig, args_for(**kw)), None, batch, args_for(**kw), tok, 1)
    return torch.cat([p.grad.flatten() for p in m.parameters()])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_give_the_full_batch_gradient(tiny, mode):
    model, tok = tiny
    batch = fake_batch(tok)
    full = grads_after_update(model, tok, batch, loss_agg=mode)
    for size in (1, 3):
        micro = grads_after_update(model, tok, batch, loss_agg=mode, micro_batch=size)
        # equal up to float32 summation order (a wrong normalisation would be off by O(1) relative)
        assert (micro - full).abs().max().item() <= 1e-4 * full.abs().max().item()
    assert full.abs().max().item() > 0


def test_one_update_gradient_is_reinforce(tiny):
    """ρ = 1 on-policy: the GRPO gradient equals −∇ Σ_i A_i Σ_t log π(y_it) / #tokens."""
    model, tok = tiny
    batch = fake_batch(tok)
    got = grads_after_update(model, tok, batch)
    m = copy.deepcopy(model)
    A = grpo.group_advantages(batch["rewards"], 4)
    n_tok = sum(len(r) for r in batch["response_ids"])
    total = 0
    for i in range(8):  # one sequence at a time, plain REINFORCE with the group baseline
        logits, mask, tgt = response_logits(m, [batch["prompt_ids"][i]], [batch["response_ids"][i]], tok.pad_token_id)
        total = total - A[i] * (token_logprobs(logits, tgt) * mask).sum() / n_tok
    total.backward()
    ref = torch.cat([p.grad.flatten() for p in m.parameters()])
    assert (got - ref).abs().max().item() < 1e-6
    assert ref.abs().max().item() > 1e-4
