"""analysis/significance.py — the tests behind a declared family of claims: the two-sided p of the paired t-test
(the test of infra/stats.py's interval) and Holm's correction over the family. Student's t from scipy.stats, exact
for every number of seeds."""
from scipy.stats import t as student_t

from infra.stats import spread


def t_two_sided_p(t, df):
    """P(|T| ≥ |t|) for Student's t with df degrees of freedom (scipy.stats.t's survival function, both tails)."""
    return float(2 * student_t.sf(abs(t), df))


def p_value(diffs):
    """Two-sided p of the one-sample t-test that the mean per-seed difference is 0 (the interval's test)."""
    n = len(diffs)
    if n < 2:
        return None
    mean, s = sum(diffs) / n, spread(diffs)
    if s == 0:
        return 0.0 if mean != 0 else 1.0
    return t_two_sided_p(mean / (s / n ** 0.5), n - 1)


def holm(p_values, level=0.05):
    """Holm's step-down correction over the whole family as declared: [rejected?] in the order given. A row with
    no p (None: not comparable, not testable) or a NaN p counts as p = 1: it is never rejected, and it still counts
    in m, the family's size. Sort the m p-values ascending; reject the i-th smallest (i = 1…m) while
    p_(i) ≤ level / (m − i + 1), and stop at the first that is not."""
    ps = [1.0 if p is None or p != p else p for p in p_values]   # None, NaN → 1 (NaN ≠ NaN)
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected, m = [False] * len(ps), len(ps)
    for rank, i in enumerate(order):
        if ps[i] > level / (m - rank):
            break
        rejected[i] = True
    return rejected
