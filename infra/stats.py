"""infra/stats.py — the statistics every run's report over seeds uses: the mean over seeds with its 95% t-interval
(the paired t-test's p and Holm's correction over a family of claims are the harness's: analysis/significance.py).

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


def spread(values):
    """The sample standard deviation s of per-seed values (n − 1 in the denominator)."""
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
