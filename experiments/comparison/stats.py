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

Pure Python and numpy: Student's t distribution from the regularised incomplete beta function
(`betainc`, by its continued fraction), so that the experiments need no SciPy; the tests compare
every function with SciPy's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
ALPHA = 0.05


def betainc(a: float, b: float, x: float) -> float:
  """The regularised incomplete beta function `I_x(a, b)`, for `a, b > 0` and `0 <= x <= 1`.

  The continued fraction of `I_x(a, b)` (evaluated by the modified Lentz method), applied at `x`
  when `x < (a + 1) / (a + b + 2)` and through `I_x(a, b) = 1 - I_{1-x}(b, a)` otherwise, where it
  converges fast.
  """
  if x <= 0.0:
    return 0.0
  if x >= 1.0:
    return 1.0
  log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
               + a * math.log(x) + b * math.log1p(-x))
  if x < (a + 1.0) / (a + b + 2.0):
    return math.exp(log_front) * _beta_fraction(a, b, x) / a
  return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
  """The continued fraction of the incomplete beta function, by the modified Lentz method."""
  tiny = 1e-300
  c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
  d = 1.0 / (d if abs(d) > tiny else tiny)
  value = d
  for m in range(1, 500):
    for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                      -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
      d = 1.0 + numerator * d
      d = 1.0 / (d if abs(d) > tiny else tiny)
      c = 1.0 + numerator / c
      c = c if abs(c) > tiny else tiny
      value *= c * d
    if abs(c * d - 1.0) < 1e-15:
      break
  return value


def t_cdf(t: float, df: float) -> float:
  """Student's t distribution's cumulative probability `P(T <= t)` with `df > 0` degrees."""
  # P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2) = 1 - I_{t^2 / (df + t^2)}(1 / 2, df / 2): the
  # argument that is not close to 1 keeps the precision.
  if t * t < df:
    tail = 0.5 * (1.0 - betainc(0.5, df / 2.0, t * t / (df + t * t)))
  else:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
  return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
  """The `t` with `t_cdf(t, df) = p`, `0 < p < 1`, by bisection to double precision."""
  low, high = -1.0, 1.0
  while t_cdf(low, df) > p:
    low *= 2.0
  while t_cdf(high, df) < p:
    high *= 2.0
  for _ in range(200):
    middle = 0.5 * (low + high)
    if middle in (low, high):
      break
    low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
  return 0.5 * (low + high)


def interval(values: Sequence[float]) -> tuple[float, float, float]:
  """`(mean, low, high)`: the mean and its 95% t-interval (NaN bounds for fewer than 2 values)."""
  x = np.asarray(values, np.float64)
  mean = float(np.mean(x)) if len(x) else math.nan
  if len(x) < 2:
    return mean, math.nan, math.nan
  half = t_quantile(0.5 + CONFIDENCE / 2, len(x) - 1) * float(np.std(x, ddof=1)) / math.sqrt(len(x))
  return mean, mean - half, mean + half


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
  """`(mean(a) - mean(b), its standard error, Welch-Satterthwaite degrees of freedom)`."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
  se = math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else math.inf
  return float(np.mean(a) - np.mean(b)), se, df


def welch_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
  """`(t, p)` of Welch's two-sided t-test of equal means (at least 2 values each).

  Two samples without any spread give `t = +-inf, p = 0` when their means differ and `t = 0,
  p = 1` when they are equal.
  """
  difference, se, df = _welch(a, b)
  if se == 0:
    return (math.copysign(math.inf, difference), 0.0) if difference else (0.0, 1.0)
  t = difference / se
  return t, 2.0 * t_cdf(-abs(t), df)


def difference_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
  """`(mean(a) - mean(b), low, high)`: the difference and its 95% Welch interval."""
  difference, se, df = _welch(a, b)
  if se == 0:
    return difference, difference, difference
  half = t_quantile(0.5 + CONFIDENCE / 2, df) * se
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
