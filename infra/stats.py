"""infra/stats.py — the statistics every report uses: the mean over seeds with its 95% t-interval, the two-sided
t-test's p-value of a paired difference, and Holm's correction over a family of claims.

Student's t comes from scipy.stats (exact for every number of seeds). An earlier version used a 30-row table and
1.96 beyond it, which made every interval over 32 seeds 3.9% too narrow (docs/HISTORY.md)."""
from scipy.stats import t as student_t


# ----------------------------------------------------------------------------------------------
# Error bars over seeds
# ----------------------------------------------------------------------------------------------
def t_quantile(df, level=0.975):
    """Student's t quantile t_{level, df}, exact (scipy.stats.t.ppf): t_{0.975, 2} = 4.303, t_{0.975, 31} = 2.040."""
    return float(student_t.ppf(level, df))


def mean_interval(values):
    """(mean, low, high): the mean of per-seed values with its 95% Student-t interval,
    mean ± t_{0.975, n−1} · s / √n (s: the sample standard deviation). One value has no interval:
    low = high = None. With 3 seeds t = 4.30, so an effect must be large next to its spread to count."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    half = t_quantile(n - 1) * spread(values) / n ** 0.5
    return mean, mean - half, mean + half


def t_two_sided_p(t, df):
    """P(|T| ≥ |t|) for Student's t with df degrees of freedom (scipy.stats.t's survival function, both tails)."""
    return float(2 * student_t.sf(abs(t), df))


def spread(values):
    """The sample standard deviation s of per-seed values (n − 1 in the denominator)."""
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


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
    """Holm's step-down correction: [rejected?] in the order given. Sort the m p-values ascending; reject the
    i-th smallest (i = 1…m) while p_(i) ≤ level / (m − i + 1), and stop at the first that is not."""
    order = sorted((i for i, p in enumerate(p_values) if p is not None), key=lambda i: p_values[i])
    rejected, m = [False] * len(p_values), len(order)
    for rank, i in enumerate(order):
        if p_values[i] > level / (m - rank):
            break
        rejected[i] = True
    return rejected
