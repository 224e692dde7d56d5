"""Appendix B (B1–B4) on the enumerable toy: closed forms against enumeration and optimisers."""
import math
import random

import pytest
import torch

import razor

S = razor.success_set()


def base(seed=0):
    k0 = razor.random_kernels(seed)
    return k0, razor.sequence_dist(k0)


def random_feasible(P0, a, rng):
    """A random Q with Q(S) = a: random positive weights inside and outside S, scaled to a and 1 − a."""
    w = {y: rng.random() + 1e-3 for y in P0}
    w_in, w_out = sum(w[y] for y in P0 if y in S), sum(w[y] for y in P0 if y not in S)
    return {y: (a * w[y] / w_in if y in S else (1 - a) * w[y] / w_out) for y in P0}


def test_sequence_dist_sums_to_one_and_kernels_round_trip():
    k0, P0 = base(3)
    assert abs(sum(P0.values()) - 1) < 1e-12
    back = razor.kernels_of(P0)
    assert max(abs(x - y) for h in k0 for x, y in zip(k0[h], back[h])) < 1e-12


@pytest.mark.parametrize("a", [0.05, 0.5, 0.9, 1.0])
def test_razor_policy_hits_target_success(a):
    _, P0 = base(0)
    Q = razor.razor_policy(P0, S, a)
    assert abs(razor.mass(Q, S) - a) < 1e-12
    assert abs(sum(Q.values()) - 1) < 1e-12


def test_razor_policy_beats_random_feasible_policies():
    _, P0 = base(1)
    a = 0.8
    best = razor.kl(razor.razor_policy(P0, S, a), P0)
    rng = random.Random(0)
    for _ in range(500):
        Q = random_feasible(P0, a, rng)
        assert abs(razor.mass(Q, S) - a) < 1e-12
        assert razor.kl(Q, P0) > best
    # a feasible perturbation of Q* itself is also worse (the minimum is strict)
    Q = razor.razor_policy(P0, S, a)
    ys = sorted(y for y in Q if y in S)
    Q[ys[0]] += 1e-3
    Q[ys[1]] -= 1e-3
    assert razor.kl(Q, P0) > best


def test_razor_policy_matches_numerical_optimiser():
    """Minimise KL(Q‖P0) over Q = a·softmax(u) on S, (1−a)·softmax(v) off S with L-BFGS."""
    _, P0 = base(2)
    a = 0.7
    ys_in = sorted(y for y in P0 if y in S)
    ys_out = sorted(y for y in P0 if y not in S)
    p_in = torch.tensor([P0[y] for y in ys_in], dtype=torch.float64)
    p_out = torch.tensor([P0[y] for y in ys_out], dtype=torch.float64)
    u = torch.zeros(len(ys_in), dtype=torch.float64, requires_grad=True)
    v = torch.zeros(len(ys_out), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([u, v], lr=1, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def objective():
        q_in, q_out = a * torch.softmax(u, 0), (1 - a) * torch.softmax(v, 0)
        return (q_in * (q_in / p_in).log()).sum() + (q_out * (q_out / p_out).log()).sum()

    def closure():
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    Q = razor.razor_policy(P0, S, a)
    assert objective().item() >= razor.kl(Q, P0) - 1e-12
    assert abs(objective().item() - razor.kl(Q, P0)) < 1e-8
    q_in = (a * torch.softmax(u, 0)).tolist()
    assert max(abs(q - Q[y]) for q, y in zip(q_in, ys_in)) < 1e-5


def test_razor_needs_base_success_strictly_between_0_and_1():
    _, P0 = base(0)
    with pytest.raises(ValueError, match="strictly between"):
        razor.razor_policy(P0, set(), 0.5)


@pytest.mark.parametrize("a", [0.2, 0.9, 1.0])
def test_razor_kernel_reproduces_razor_policy(a):
    k0, P0 = base(4)
    Q = razor.razor_policy(P0, S, a)
    ks = razor.razor_kernel(k0, S, a)
    for h, p in ks.items():
        if razor.prefix_prob(Q, h) > 0:
            assert abs(sum(p) - 1) < 1e-12, h
    # brute force: multiply the kernel along every sequence
    for y, q in Q.items():
        prod = 1.0
        for t in range(razor.LENGTH):
            prod *= ks[y[:t]][y[t]]
        assert abs(prod - q) < 1e-14


def test_razor_kernel_a_to_one_limit():
    k0, P0 = base(5)
    ks = razor.razor_kernel(k0, S, 1.0)
    near = razor.razor_kernel(k0, S, 1 - 1e-9)
    for h in k0:
        s_h = razor.prefix_success(P0, S, h)
        for v in range(len(razor.VOCAB)):
            # (B2) a → 1:  π*(v|h) = π0(v|h) s(hv)/s(h)
            want = k0[h][v] * razor.prefix_success(P0, S, h + (v,)) / s_h
            assert abs(ks[h][v] - want) < 1e-12
            assert abs(near[h][v] - want) < 1e-7


def test_prefix_success_by_explicit_sum():
    k0, P0 = base(6)
    h = (2,)
    reach = sum(p for y, p in P0.items() if y[0] == 2)
    hit = sum(p for y, p in P0.items() if y[0] == 2 and y[-1] == 0)
    assert abs(razor.prefix_success(P0, S, h) - hit / reach) < 1e-14
    # success = last token is "a", so after two tokens s(h) is the kernel's probability of "a"
    assert abs(razor.prefix_success(P0, S, (1, 2)) - k0[(1, 2)][0]) < 1e-14


@pytest.mark.parametrize("beta", [0.5, 0.0, 1.0])
def test_sdpo_population_minimiser_is_the_teacher_kernel(beta):
    k0, _ = base(7)
    kt = razor.teacher_kernel(k0, strength=1.5)
    kb = razor.sdpo_population_minimiser(kt, beta=beta, steps=2500)
    assert max(abs(x - y) for h in kt for x, y in zip(kb[h], kt[h])) < 1e-4


def test_teacher_copies_the_demonstration():
    k0, _ = base(0)
    kt = razor.teacher_kernel(k0, razor.DEMO, strength=2.0)
    for h in k0:
        d = razor.DEMO[len(h)]
        assert kt[h][d] > k0[h][d]
        assert abs(sum(kt[h]) - 1) < 1e-12
    same = razor.teacher_kernel(k0, razor.DEMO, strength=0.0)   # λ = 0: no demonstration effect
    assert max(abs(x - y) for h in k0 for x, y in zip(same[h], k0[h])) < 1e-15


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pythagorean_identity_and_excess(seed):
    k0, P0 = base(seed)
    for kb in (razor.teacher_kernel(k0, strength=2.0), razor.random_kernels(seed + 100)):
        kl_b0, kl_bq, kl_q0 = razor.pythagoras(kb, k0, S)
        # (B4) KL(B‖P0) = KL(B‖Q*) + KL(Q*‖P0), Q* at a = B(S)
        assert abs(kl_b0 - (kl_bq + kl_q0)) < 1e-9
        # the excess as a chain-rule sum of per-token KLs
        a = razor.mass(razor.sequence_dist(kb), S)
        assert abs(razor.excess_kl(kb, razor.razor_kernel(k0, S, a)) - kl_bq) < 1e-9
        assert kl_bq > 1e-3   # kernels differ -> strictly positive


def test_excess_is_zero_for_the_razor_kernel():
    k0, P0 = base(8)
    ks = razor.razor_kernel(k0, S, 0.6)
    kl_b0, kl_bq, kl_q0 = razor.pythagoras(ks, k0, S)
    assert abs(kl_bq) < 1e-12
    assert abs(razor.excess_kl(ks, ks)) == 0
    assert abs(kl_b0 - kl_q0) < 1e-12


def test_kl_brute_force():
    P = {(0,): 0.25, (1,): 0.75}
    Q = {(0,): 0.5, (1,): 0.5}
    assert abs(razor.kl(P, Q) - (0.25 * math.log(0.5) + 0.75 * math.log(1.5))) < 1e-15


def test_cli_worked_example(capsys):
    razor.main([])
    out = capsys.readouterr().out
    for tag in ("(B1)", "(B2)", "(B3)", "(B4)"):
        assert tag in out
    assert "identity error" in out
