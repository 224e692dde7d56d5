"""infra/stats.py — the statistics every report uses: the mean over seeds with its 95% t-interval, the two-sided
t-test's p-value of a paired difference, and Holm's correction over a family of claims."""
import math


# ----------------------------------------------------------------------------------------------
# Error bars over seeds
# ----------------------------------------------------------------------------------------------
# Student's t quantile t_{0.975, df} for df = 1 … 30 (beyond 30 the normal 1.96 is within 4%).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_interval(values):
    """(mean, low, high): the mean of per-seed values with its 95% Student-t interval,
    mean ± t_{0.975, n−1} · s / √n (s: the sample standard deviation). One value has no interval:
    low = high = None. With 3 seeds t = 4.30, so an effect must be large next to its spread to count."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    s = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * s / n ** 0.5
    return mean, mean - half, mean + half


def t_two_sided_p(t, df):
    """P(|T| ≥ |t|) for Student's t with df degrees of freedom: the regularised incomplete beta
    I_{df/(df+t²)}(df/2, 1/2), by its continued fraction (Lentz's method)."""
    x, a, b = df / (df + t * t), df / 2, 0.5
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x))
    if x > (a + 1) / (a + b + 2):   # the fraction converges fast on this side only: I_x(a, b) = 1 − I_{1−x}(b, a)
        return 1.0 - front * beta_fraction(1 - x, b, a) / b
    return front * beta_fraction(x, a, b) / a


def beta_fraction(x, a, b, tiny=1e-300):
    """The continued fraction of the incomplete beta function (Numerical Recipes' betacf), modified Lentz."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


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
