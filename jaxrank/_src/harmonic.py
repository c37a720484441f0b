r"""Sums over the positions of a tie, continued to real counts (for He et al. 2018's relaxations).

**What is continued.** A tie of `c_d` items ranked after `C_{d-1}` better ones occupies the
positions `t = C_{d-1} + 1, ..., C_d` (`C_d = C_{d-1} + c_d`). Tie-aware AP and DCG (He et al.
2018, Prop. 1, eq. 6-7) need two sums over those positions, `\sum 1/t` and `\sum 1/\log_2(1 + t)`.
They are differences of two functions of the counts, which this module continues to real counts:

* the harmonic numbers `\mathcal{H}(x) = \psi(x + 1) + \gamma`, with `\mathcal{H}(n) =
  \sum_{t=1}^{n} 1/t` at integers, so that `\sum_{t=C_{d-1}+1}^{C_d} 1/t = \mathcal{H}(C_d) -
  \mathcal{H}(C_{d-1})`;
* the discount sums `\mathcal{D}(x) = \sum_{t \geq 1} [1/\log_2(1 + t) - 1/\log_2(1 + t + x)]`,
  continued the same way, `\mathcal{D}(n) = \sum_{t=1}^{n} 1/\log_2(1 + t)` at integers.

**Why.** On the soft histograms of the relaxations AP_r and DCG_r (`jaxrank._src.tie_aware`) the
counts `c_d`, `C_{d-1}` are real numbers, so the sums are needed between real bounds. He et al.'s
Prop. 2 replaces them by integrals, `\ln(C_d / C_{d-1})` (eq. 27) and `\ln 2
\int_{C_{d-1}+1}^{C_d+1} dt / \ln t` (eq. 30), which are infinite in the first non-empty bin and
unbounded near it (the failures are listed in `jaxrank._src.tie_aware`, *Deviation from the
printed eq. 11 and 12*). The continued sums are smooth, increasing, 0 at 0 (so the first
non-empty bin, where `C_{d-1} = 0`, gets `\mathcal{H}(C_d)`, resp. `\mathcal{D}(C_d)`, the sum
from position 1 it stands for) and exact at integer counts. The paper's `\ln` and `\mathrm{li}`
are their leading terms (the difference is App. C's error, eq. 37), and the logarithmic integral
is the main term of the evaluation of `\mathcal{D}` below, to which Euler-Maclaurin corrections
are added.

**Evaluation.** The estimators use slopes `(F(x + w) - F(x)) / w` (mean values over a tie), which
are computed as such: every part is a sum of positive terms or a stable ratio, never a difference
of two nearly equal values of `F`, so a slope keeps full relative precision however small the
width `w` (a soft bin may hold almost no mass), and `w = 0` gives the derivative.

* `harmonic_slope`: the shift `\mathcal{H}(x) = \mathcal{H}(x + K) - \sum_{j=1}^{K} 1/(x + j)`
  with `K = 10`, then the asymptotic series of `\psi(y + 1/2)` at `y = x + K + 1/2 \geq 10.5`,
  whose first omitted term is below `2 \cdot 10^{-14}` there.
* `mean_discount`: the shift `\mathcal{D}(x) = \mathcal{D}(x + K) - \sum_{t=1}^{K} d(x + t)` with
  `K = 24` and `d(t) = 1/\log_2(1 + t)`, then for the shifted tail the midpoint Euler-Maclaurin
  formula with three corrections, integrated by 20-point Gauss-Legendre in `u = \ln(1 + t)`; the
  continuation is exact at integers to about `10^{-14}`.

Both work in the dtype of their inputs (float32 keeps about `2 \cdot 10^{-6}` relative precision).

**Cost.** Elementwise, with trailing axes of size 10 (`harmonic_slope`) and 24 + 20
(`mean_discount`): O(10) and O(44) memory per value and a small graph, no loop.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

# Harmonic numbers: H(x) = H(x + K) - sum_{j<=K} 1/(x + j), and for y = x + K + 1/2 >= 10.5 the
# asymptotic series psi(y + 1/2) = ln y + sum_k c_k y^(-2k) (c_k = -B_2k(1/2) / 2k), whose next
# term is below 2e-14 there.
_HARMONIC_SHIFT = 10
_PSI_HALF_COEFFS = (1 / 24, -7 / 960, 31 / 8064, -127 / 30720, 2555 / 337920)

# Discount sums: D(x) = D(x + K) - sum_{t<=K} d(x + t), and for the shifted tail the midpoint
# Euler-Maclaurin formula sum_{t=a+1}^{b} d(t) = int_{a+1/2}^{b+1/2} (d + sum_k beta_k d^(2k)),
# beta_k = B_2k(1/2) / (2k)!, integrated by Gauss-Legendre in u = ln(1 + t). With K = 24 and three
# corrections the continuation is exact at integers to about 1e-14.
_DISCOUNT_SHIFT = 24
_MIDPOINT_COEFFS = ((2, -1 / 24), (4, 7 / 5760), (6, -31 / 967680))
_GAUSS_NODES, _GAUSS_WEIGHTS = np.polynomial.legendre.leggauss(20)
_LN2 = math.log(2.0)


def _discount_derivative_polynomials(order: int) -> list[list[int]]:
  """Coefficients of `P_k` with `d^(k)(t) = ln 2 (-1)^k (1 + t)^(-k) P_k(1 / ln(1 + t))`.

  With `w = 1 / ln(1 + t)`, `dw/dt = -w^2 / (1 + t)`, so `P_0 = w` and `P_{k+1} = k P_k + w^2 P_k'`.
  """
  polys = [[0, 1]]
  for k in range(order):
    p = polys[-1]
    new = [k * c for c in p] + [0]
    for i in range(1, len(p)):
      new[i + 1] += i * p[i]
    polys.append(new)
  return polys


_DISCOUNT_POLYS = _discount_derivative_polynomials(6)


def _log1p_ratio(r: jax.Array) -> jax.Array:
  """`log1p(r) / r`, 1 at `r = 0`, accurate (and with finite gradients) near 0."""
  small = jnp.abs(r) < 1e-4
  safe = jnp.where(small, jnp.ones_like(r), r)
  series = 1 - r / 2 + r * r / 3 - r * r * r / 4
  return jnp.where(small, series, jnp.log1p(safe) / safe)


def _expm1_ratio(u: jax.Array) -> jax.Array:
  """`u / expm1(u)`, 1 at `u = 0`, for `u >= 0`."""
  small = u < 1e-4
  safe = jnp.where(small, jnp.ones_like(u), u)
  return jnp.where(small, 1 - u / 2 + u * u / 12, safe / jnp.expm1(safe))


def harmonic_slope(x: jax.Array, w: jax.Array) -> jax.Array:
  r"""`(H(x + w) - H(x)) / w` of the continued harmonic numbers, `H'(x)` at `w = 0`.

  For `x >= 0`, `x + w >= 0` (`w` may be negative). Stable for small `w` and O(10) memory per
  value (module docstring).

  Args:
    x: `[...]` floating start counts.
    w: `[...]` widths, same shape and dtype as `x`.

  Returns:
    `[...]` slopes in the dtype of `x`.

  >>> import jax.numpy as jnp
  >>> round(float(harmonic_slope(jnp.array(2.0), jnp.array(2.0))), 6)  # (1/3 + 1/4) / 2
  0.291667
  """
  j = jnp.arange(1, _HARMONIC_SHIFT + 1, dtype=x.dtype)
  total = jnp.sum(1 / ((x[..., None] + j) * (x[..., None] + w[..., None] + j)), axis=-1)
  y = x + (_HARMONIC_SHIFT + 0.5)
  z = y + w
  total = total + _log1p_ratio(w / y) / y
  # Divided differences of y^(-m): (z^-m - y^-m) / (z - y) = -S_m with
  # S_m = sum_{i=1}^{m} y^-i z^-(m+1-i), S_1 = 1/(y z), S_{m+1} = (S_m + y^-(m+1)) / z.
  inv_y, inv_z = 1 / y, 1 / z
  y_pow = inv_y
  s = inv_y * inv_z
  for m in range(1, 2 * len(_PSI_HALF_COEFFS) + 1):
    if m % 2 == 0:
      total = total - _PSI_HALF_COEFFS[m // 2 - 1] * s
    y_pow = y_pow * inv_y
    s = (s + y_pow) * inv_z
  return total


def _discount_slope(a: jax.Array, w: jax.Array) -> jax.Array:
  """`(d(a + w) - d(a)) / w` for the discount `d(t) = 1 / log2(1 + t)`, `a >= 1`, `w >= 0`."""
  return -_LN2 * _log1p_ratio(w / (1 + a)) / ((1 + a) * jnp.log1p(a) * jnp.log1p(a + w))


def _horner(coeffs, w):
  value = jnp.zeros_like(w)
  for c in reversed(coeffs):
    value = value * w + c
  return value


def _midpoint_integrand(u: jax.Array) -> jax.Array:
  """`d + sum_k beta_k d^(2k)` at `t = e^u - 1`: `ln 2 [1/u + sum_k beta_k e^(-2k u) P_2k(1/u)]`."""
  w = 1 / u
  total = w
  decay = jnp.exp(-2 * u)
  factor = jnp.ones_like(u)
  for order, beta in _MIDPOINT_COEFFS:
    factor = factor * decay
    total = total + beta * factor * _horner(_DISCOUNT_POLYS[order], w)
  return _LN2 * total


def mean_discount(x: jax.Array, w: jax.Array) -> jax.Array:
  r"""`(D(x + w) - D(x)) / w` of the continued discount sums, `D'(x)` at `w = 0`.

  The mean discount of the continuous positions `(x, x + w]`; for integers `x`, `w >= 1` it is
  `(1/w) \sum_{t=x+1}^{x+w} 1/\log_2(1 + t)`. For `x, w >= 0`. Stable for small `w` and O(44)
  memory per value (module docstring).

  Args:
    x: `[...]` floating start counts.
    w: `[...]` widths, same shape and dtype as `x`.

  Returns:
    `[...]` mean discounts in the dtype of `x`.

  >>> import jax.numpy as jnp
  >>> round(float(mean_discount(jnp.array(0.0), jnp.array(3.0))), 5)  # (1 + 1/log2 3 + 1/2) / 3
  0.71031
  """
  t = jnp.arange(1, _DISCOUNT_SHIFT + 1, dtype=x.dtype)
  total = -jnp.sum(_discount_slope(x[..., None] + t, w[..., None]), axis=-1)
  a = x + (_DISCOUNT_SHIFT + 0.5)
  u_a = jnp.log1p(a)
  du = jnp.log1p(w / (1 + a))
  # (1/w) int_a^{a+w} f(t) dt = (du / expm1(du)) * mean over u in [u_a, u_a + du] of
  # f(t(u)) e^(u - u_a), since dt = e^u du and w = e^(u_a) expm1(du).
  nodes = jnp.asarray((_GAUSS_NODES + 1) / 2, x.dtype)
  weights = jnp.asarray(_GAUSS_WEIGHTS / 2, x.dtype)
  offset = du[..., None] * nodes
  integrand = _midpoint_integrand(u_a[..., None] + offset) * jnp.exp(offset)
  return total + _expm1_ratio(du) * jnp.sum(weights * integrand, axis=-1)
