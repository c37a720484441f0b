"""The statistics of the comparison: means with 95% intervals, and Welch's test between two rows.

Each row of a table is one setting trained over seeds `0 .. n - 1`; its metric's mean comes with
the 95% t-interval `mean +- t_{0.975, n-1} s / sqrt(n)` (`s` the sample standard deviation).

Two rows are compared with Welch's t-test (unequal variances, Welch-Satterthwaite degrees of
freedom), two-sided at 0.05, rather than a test paired by seed: the seeds give two losses the same
initial head and the same batches, but after a few steps their networks share nothing a seed could
pair, and Welch's test assumes less. The difference of two rows is significant exactly when its
95% Welch interval (`difference_interval`) excludes 0; the tables mark those pairs, and a claim is
read from the same intervals (`reading`): it holds when every claimed difference's interval lies
above 0, does not hold when one lies below 0, and is inconclusive otherwise.

Student's t distribution is SciPy's (`scipy.stats.t`, installed with JAX and declared in the
`train` extra); the tests compare the intervals and the test with SciPy's own
(`scipy.stats.t.interval`, `scipy.stats.ttest_ind(equal_var=False)`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
ALPHA = 0.05


def _t_quantile(df: float) -> float:
  """The two-sided `CONFIDENCE` quantile `t_{(1 + CONFIDENCE) / 2, df}` of Student's t."""
  return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def interval(values: Sequence[float]) -> tuple[float, float, float]:
  """`(mean, low, high)`: the mean and its 95% t-interval (NaN bounds for fewer than 2 values)."""
  x = np.asarray(values, np.float64)
  mean = float(np.mean(x)) if len(x) else math.nan
  if len(x) < 2:
    return mean, math.nan, math.nan
  half = _t_quantile(len(x) - 1) * float(np.std(x, ddof=1)) / math.sqrt(len(x))
  return mean, mean - half, mean + half


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
  """`(mean(a) - mean(b), its standard error, Welch-Satterthwaite degrees of freedom)`."""
  x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
  va, vb = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
  se = math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1)) if se > 0 else math.inf
  return float(np.mean(x) - np.mean(y)), se, float(df)


def welch_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
  """`(t, p)` of Welch's two-sided t-test of equal means (at least 2 values each).

  Two samples without any spread give `t = +-inf, p = 0` when their means differ and `t = 0,
  p = 1` when they are equal.
  """
  difference, se, df = _welch(a, b)
  if se == 0:
    return (math.copysign(math.inf, difference), 0.0) if difference else (0.0, 1.0)
  t = difference / se
  return t, float(2.0 * scipy_stats.t.cdf(-abs(t), df))


def difference_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
  """`(mean(a) - mean(b), low, high)`: the difference and its 95% Welch interval."""
  difference, se, df = _welch(a, b)
  if se == 0:
    return difference, difference, difference
  half = _t_quantile(df) * se
  return difference, difference - half, difference + half


def significantly_better(a: Sequence[float], b: Sequence[float]) -> bool:
  """Whether `a`'s mean is above `b`'s by Welch's test at `ALPHA` (two-sided)."""
  t, p = welch_test(a, b)
  return t > 0 and p < ALPHA


def reading(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> str:
  """Whether a claim holds, from its `(claimed better, claimed worse)` pairs of samples.

  Returns:
    `"holds"` when every pair's difference interval lies above 0, `"does not hold"` when one lies
    below 0, `"inconclusive"` otherwise (and for no pairs).
  """
  signs = [_sign(*difference_interval(better, worse)) for better, worse in pairs]
  if signs and all(s > 0 for s in signs):
    return "holds"
  if any(s < 0 for s in signs):
    return "does not hold"
  return "inconclusive"


def _sign(difference: float, low: float, high: float) -> int:
  del difference
  return 1 if low > 0 else -1 if high < 0 else 0
