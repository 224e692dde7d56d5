"""razor.py — Appendix B as executable math: the matched-success Razor policy, its token kernel,
the SDPO teacher projection, and the excess KL that makes a mismatched teacher forget more.

    python razor.py                 # a worked example with the numbers (a second or two)
    python razor.py --a 0.8 --strength 3 --seed 1

The toy is small enough to enumerate every sequence: one prompt, a vocabulary of three tokens
{a, b, #}, responses of exactly three tokens (27 of them). The base policy P_0 is given by explicit
token kernels π_0(v | h), one distribution over the next token for each of the 13 prefixes h.
A response succeeds when its last token is "a" (the "answer"); the first two tokens are its
"reasoning", where "#" plays a formatting artifact that success does not care about.

    (B1) Razor policy   Q*(y) = P_0(y)·a/z on S, P_0(y)·(1−a)/(1−z) off S   (z = P_0(S))
    (B2) its kernel     π*(v|h) = π_0(v|h)·w(hv)/w(h),  w(h) = a·s(h)/z + (1−a)(1−s(h))/(1−z)
    (B3) SDPO's population minimiser is the teacher kernel B(·|h) = T(·|h)
    (B4) KL(B‖P_0) = KL(B‖Q*) + KL(Q*‖P_0) for every B with B(S) = a; the excess KL(B‖Q*) is
         Σ_t E_{h~B} KL(B(·|h) ‖ π*(·|h)) ≥ 0, zero only when B's kernel is the Razor kernel.

The teacher is the base model "conditioned on a demonstration": shown the successful response
"##a", it copies the demonstration's tokens, T(v|h) ∝ π_0(v|h)·exp(λ·[v = demo_t]). It raises
success — and also the artifact "#" that success never asked for. That extra is the excess KL.

Distributions are plain Python dicts (sequence tuple -> probability; prefix tuple -> list of next-token
probabilities) so every sum is an explicit loop. torch is used only for the gradient descent of (B3).
"""
import argparse
import itertools
import math
import random

import torch

from sdpo import generalized_jsd

VOCAB = ("a", "b", "#")
LENGTH = 3
DEMO = (2, 2, 0)   # the demonstration "##a": successful, with the artifact in its reasoning


# ---------------------------------------------------------------- sequences, prefixes, kernels
def all_prefixes(V=len(VOCAB), L=LENGTH):
    """Every history h of length 0 .. L-1 (where a next token is chosen), shortest first."""
    return [h for t in range(L) for h in itertools.product(range(V), repeat=t)]


def all_sequences(V=len(VOCAB), L=LENGTH):
    """Every complete response y of length L."""
    return list(itertools.product(range(V), repeat=L))


def random_kernels(seed=0, V=len(VOCAB), L=LENGTH, concentration=1.0):
    """Explicit token kernels π_0(·|h) for every prefix: Dirichlet(concentration) draws, seeded."""
    rng = random.Random(seed)
    kernels = {}
    for h in all_prefixes(V, L):
        g = [rng.gammavariate(concentration, 1.0) + 1e-3 for _ in range(V)]  # + 1e-3: full support
        kernels[h] = [x / sum(g) for x in g]
    return kernels


def sequence_dist(kernels, L=LENGTH):
    """P(y) = Π_t π(y_t | y_<t), enumerated over every sequence."""
    V = len(kernels[()])
    dist = {}
    for y in all_sequences(V, L):
        p = 1.0
        for t in range(L):
            p *= kernels[y[:t]][y[t]]
        dist[y] = p
    return dist


def prefix_prob(dist, h):
    """P(h) = Σ_{y extends h} P(y): the probability a sampler reaches history h."""
    return sum(p for y, p in dist.items() if y[:len(h)] == h)


def kernels_of(dist, V=len(VOCAB), L=LENGTH):
    """The token kernel of a sequence distribution: π(v|h) = P(hv)/P(h) (uniform where P(h) = 0)."""
    kernels = {}
    for h in all_prefixes(V, L):
        ph = prefix_prob(dist, h)
        kernels[h] = [prefix_prob(dist, h + (v,)) / ph if ph > 0 else 1.0 / V for v in range(V)]
    return kernels


def success_set(L=LENGTH):
    """S: responses whose last token is the answer "a"."""
    return {y for y in all_sequences(len(VOCAB), L) if y[-1] == 0}


def mass(dist, S):
    """P(S) = Σ_{y∈S} P(y)."""
    return sum(p for y, p in dist.items() if y in S)


def kl(P, Q):
    """(A1) KL(P‖Q) = Σ_y P(y) log(P(y)/Q(y)), over sequences (0·log 0 = 0)."""
    return sum(p * math.log(p / Q[y]) for y, p in P.items() if p > 0)


def kl_vec(p, q):
    """KL between two next-token distributions (lists)."""
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)


# ---------------------------------------------------------------- (B1) the Razor policy
def razor_policy(P0, S, a):
    """(B1) Q*(y) = P_0(y)·a/z for y ∈ S, P_0(y)·(1−a)/(1−z) otherwise, z = P_0(S).

    The unique minimiser of KL(Q‖P_0) subject to Q(S) = a: it keeps P_0's shape inside S and
    outside S, and only moves mass between the two.
    """
    z = mass(P0, S)
    if not 0 < z < 1:
        raise ValueError(f"the base success z = {z} must be strictly between 0 and 1")
    # (B1) reweight by a/z on S, by (1−a)/(1−z) off S
    return {y: p * (a / z if y in S else (1 - a) / (1 - z)) for y, p in P0.items()}


# ---------------------------------------------------------------- (B2) its token kernel
def prefix_success(P0, S, h):
    """(B2) s(h) = Pr_{P_0}(y ∈ S | prefix h) = P_0(S ∩ ext(h)) / P_0(ext(h))."""
    num = sum(p for y, p in P0.items() if y[:len(h)] == h and y in S)
    return num / prefix_prob(P0, h)


def razor_kernel(kernels0, S, a, L=LENGTH):
    """(B2) π*(v|h) = π_0(v|h)·w(hv)/w(h),  w(h) = a·s(h)/z + (1−a)(1−s(h))/(1−z).

    At a = 1 the second term vanishes: π*(v|h) = π_0(v|h)·s(hv)/s(h), the base kernel steered
    toward success and nothing else.
    """
    P0 = sequence_dist(kernels0, L)
    z = mass(P0, S)

    def w(h):
        s = prefix_success(P0, S, h)
        # (B2) w(h) = a s(h)/z + (1−a)(1−s(h))/(1−z)
        return a * s / z + (1 - a) * (1 - s) / (1 - z)

    V = len(kernels0[()])
    kernels = {}
    for h in all_prefixes(V, L):
        wh = w(h)
        if wh == 0:   # h is unreachable under Q*: any kernel will do; keep the base one
            kernels[h] = list(kernels0[h])
            continue
        # (B2) π*(v|h) = π_0(v|h) w(hv) / w(h)
        kernels[h] = [kernels0[h][v] * w(h + (v,)) / wh for v in range(V)]
    return kernels


# ---------------------------------------------------------------- the teacher and (B3)
def teacher_kernel(kernels0, demo=DEMO, strength=2.0):
    """A teacher that has seen the demonstration `demo`: T(v|h) ∝ π_0(v|h)·exp(λ·[v = demo_t]).

    The in-context demonstration makes every token of it more likely at its position — the
    answer, and also the artifact. (A deterministic teacher context, as (B3) assumes.)
    """
    kernels = {}
    for h, p in kernels0.items():
        g = [pv * math.exp(strength if v == demo[len(h)] else 0.0) for v, pv in enumerate(p)]
        kernels[h] = [x / sum(g) for x in g]
    return kernels


def sdpo_population_minimiser(teacher_kernels, beta=0.5, steps=3000, lr=0.05, seed=0, L=LENGTH):
    """(B3) Minimise the population SDPO loss over student kernels B by gradient descent:

        J(B) = Σ_h d_B(h) · GJSD_β(B(·|h), T(·|h)),   d_B(h) = Pr_B(reach h), held fixed (on-policy
        samples carry no gradient, as in sdpo.py).

    Every term is ≥ 0 and vanishes at B(·|h) = T(·|h), so the minimiser is the teacher kernel.
    Uses the same generalized_jsd that sdpo.py trains with. Returns the learned kernels.
    """
    torch.manual_seed(seed)
    prefixes = list(teacher_kernels)
    V = len(teacher_kernels[()])
    index = {h: i for i, h in enumerate(prefixes)}
    teacher_logp = torch.tensor([teacher_kernels[h] for h in prefixes], dtype=torch.float64).log()  # [H, V]
    logits = torch.randn(len(prefixes), V, dtype=torch.float64, requires_grad=True)                 # [H, V]
    opt = torch.optim.Adam([logits], lr=lr)
    for _ in range(steps):
        logp = torch.log_softmax(logits, -1)                                                         # [H, V]
        # d_B(h) = Π_t B(h_t | h_<t): the student's own visitation probability, no gradient
        with torch.no_grad():
            probs = logp.exp()
            reach = torch.tensor([math.prod(probs[index[h[:t]], h[t]].item() for t in range(len(h)))
                                  for h in prefixes], dtype=torch.float64)                          # [H]
        # (B3) J(B) = Σ_h d_B(h) GJSD_β(B(·|h), T(·|h))
        loss = (reach * generalized_jsd(logp, teacher_logp, beta)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = torch.softmax(logits, -1)
    return {h: final[index[h]].tolist() for h in prefixes}


# ---------------------------------------------------------------- (B4) excess KL
def excess_kl(kernels_b, kernels_star, L=LENGTH):
    """(B4) KL(B‖Q*) = Σ_t E_{h~B, |h|=t} KL(B(·|h) ‖ π*(·|h)): the chain rule, term by term."""
    B = sequence_dist(kernels_b, L)
    total = 0.0
    for h in kernels_b:
        # (B4) one term: Pr_B(h) · KL(B(·|h) ‖ π*(·|h))
        total += prefix_prob(B, h) * kl_vec(kernels_b[h], kernels_star[h])
    return total


def pythagoras(kernels_b, kernels0, S, L=LENGTH):
    """(B4) For B with B(S) = a: returns (KL(B‖P_0), KL(B‖Q*), KL(Q*‖P_0)) with Q* at a = B(S)."""
    B, P0 = sequence_dist(kernels_b, L), sequence_dist(kernels0, L)
    Q = razor_policy(P0, S, mass(B, S))
    return kl(B, P0), kl(B, Q), kl(Q, P0)


# ---------------------------------------------------------------- the worked example
def show(y):
    return "".join(VOCAB[v] for v in y)


def fmt(p):
    return "[" + ", ".join(f"{x:.3f}" for x in p) + "]"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 usage="python razor.py [--a A] [--beta B] [--strength S] ... (--help lists all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the base kernels")
    ap.add_argument("--a", type=float, default=0.9, help="target success level of the Razor policy (B1)")
    ap.add_argument("--strength", type=float, default=2.0, help="λ: how strongly the teacher copies the demonstration")
    ap.add_argument("--beta", type=float, default=0.5, help="GJSD mix of the SDPO loss (B3)")
    args = ap.parse_args(argv)
    if not 0 < args.a <= 1:
        ap.error("--a must be in (0, 1]")
    if not 0 <= args.beta <= 1:
        ap.error("--beta must be in [0, 1]")
    if not 0 <= args.strength <= 50:   # (also refuses nan; exp(λ) overflows long before 1e308)
        ap.error("--strength must be in [0, 50]")

    S = success_set()
    k0 = random_kernels(args.seed)
    P0 = sequence_dist(k0)
    z = mass(P0, S)
    print(f"Toy: one prompt, vocabulary {{{', '.join(VOCAB)}}}, responses of {LENGTH} tokens "
          f"({len(P0)} of them); success S = ends in 'a' ({len(S)} responses).\n")

    Q = razor_policy(P0, S, args.a)
    print(f"(B1) base success z = P0(S) = {z:.3f}.  Razor policy at a = {args.a}: Q*(S) = {mass(Q, S):.3f}, "
          f"KL(Q*||P0) = {kl(Q, P0):.4f} nats")
    ks = razor_kernel(k0, S, args.a)
    err = max(abs(p - Q[y]) for y, p in sequence_dist(ks).items())
    print(f"(B2) Razor kernel, multiplied along each response, gives Q* back: max |err| = {err:.1e}")

    kt = teacher_kernel(k0, DEMO, args.strength)
    T = sequence_dist(kt)
    print(f"\nTeacher: the base model shown the demonstration '{show(DEMO)}' (copy strength λ = {args.strength}); "
          f"T(S) = {mass(T, S):.3f}")
    kb = sdpo_population_minimiser(kt, beta=args.beta)
    gap = max(abs(x - y) for h in kt for x, y in zip(kb[h], kt[h]))
    verdict = "SDPO learns the teacher kernel" if gap < 1e-3 else \
        "not converged to the teacher kernel within the step budget (B3 says it would with more steps)"
    print(f"(B3) gradient descent on the population SDPO loss (GJSD β = {args.beta}): "
          f"max |B(.|h) - T(.|h)| = {gap:.1e}  -> {verdict}")

    a_t = mass(T, S)
    kl_b0, kl_bq, kl_q0 = pythagoras(kt, k0, S)
    ks_t = razor_kernel(k0, S, a_t)
    print(f"\n(B4) matched success a = T(S) = {a_t:.3f} (the teacher's own success, not --a: the identity compares "
          f"policies with the same success level):")
    print(f"     KL(T||P0) = {kl_b0:.4f}  =  KL(T||Q*) {kl_bq:.4f}  +  KL(Q*||P0) {kl_q0:.4f}   "
          f"(identity error {abs(kl_b0 - kl_bq - kl_q0):.1e})")
    print(f"     excess as a sum of per-token KLs along the teacher's histories: {excess_kl(kt, ks_t):.4f}")
    if kl_q0 > 0:
        print(f"     -> the teacher reaches the Razor policy's success but moves {kl_b0 / kl_q0:.2f}x as far from "
              f"the base;\n        under a forgetting law F = w(KL(.||P0)) (w increasing, w(0) = 0) it forgets more.")
    else:
        print("     -> the teacher's success equals the base's (λ = 0: the teacher is the base), so Q* = P0; "
              "any KL(T||P0) > 0 here is pure excess")

    print("\nFirst-token kernels (p(a), p(b), p(#)):")
    print(f"     base   pi0(.|<>) = {fmt(k0[()])}")
    print(f"     Razor  pi*(.|<>) = {fmt(ks_t[()])}   (steers only toward success)")
    print(f"     teacher T(.|<>)  = {fmt(kt[()])}   (also toward the artifact '#')")
    print("\nMost likely responses under the teacher:")
    print("     y      P0      Q*      T      in S")
    Qt = razor_policy(P0, S, a_t)
    for y in sorted(T, key=T.get, reverse=True)[:6]:
        print(f"     {show(y)}  {P0[y]:.3f}   {Qt[y]:.3f}   {T[y]:.3f}   {'yes' if y in S else 'no'}")


if __name__ == "__main__":
    main()
