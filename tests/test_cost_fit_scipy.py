"""The cost-model fit's NNLS (``llmsched_env.costs.linear._nnls``, Lawson–Hanson in numpy) against
``scipy.optimize.nnls`` on random and degenerate problems.

scipy is in the ``dev`` extra, so CI runs these; without it the module skips. Each problem is checked three
ways: the residual norm equals scipy's; the fitted values ``a @ x`` equal scipy's (the projection of ``b`` on
the cone ``{a x : x >= 0}`` is unique even where ``x`` is not); and ``x`` satisfies the optimality (KKT)
conditions on its own, so a wrong reference cannot pass a wrong answer. Where the minimiser is unique (``a``
of full column rank) the coefficients themselves must equal scipy's.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_env.costs.linear import LinearCostModel, _nnls

optimize = pytest.importorskip("scipy.optimize")

RTOL = 1e-10  # relative to the problem's scale; both solvers agree to ~1e-14 on every case here


def _check(a: np.ndarray, b: np.ndarray, unique: bool) -> np.ndarray:
    """Solve with both solvers, assert agreement and optimality; return our ``x``."""
    x = _nnls(a, b)
    ref, ref_rnorm = optimize.nnls(a, b)
    assert x.shape == (a.shape[1],) and np.isfinite(x).all() and (x >= 0).all()
    scale = max(1.0, float(np.abs(b).max(initial=0.0)), float(np.abs(a).max(initial=0.0)))
    rnorm = float(np.linalg.norm(a @ x - b))
    assert rnorm == pytest.approx(float(np.linalg.norm(a @ ref - b)), rel=RTOL, abs=RTOL * scale)
    assert rnorm == pytest.approx(ref_rnorm, rel=RTOL, abs=RTOL * scale)
    np.testing.assert_allclose(a @ x, a @ ref, rtol=0, atol=RTOL * scale * max(1.0, float(np.abs(ref).max())))
    if unique:
        np.testing.assert_allclose(x, ref, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(ref).max())))
    # KKT: the gradient of -||a x - b||^2 / 2, w = a.T (b - a x), is <= 0 everywhere and 0 where x > 0.
    w = a.T @ (b - a @ x)
    kkt_tol = 1e-9 * scale**2 * max(a.shape) * max(1.0, float(np.abs(x).max(initial=0.0)))
    assert w.max(initial=0.0) <= kkt_tol
    assert np.abs(w[x > 0]).max(initial=0.0) <= kkt_tol
    return x


def _full_rank(a: np.ndarray) -> bool:
    return a.shape[0] >= a.shape[1] and np.linalg.matrix_rank(a) == a.shape[1]


@pytest.mark.parametrize("seed", range(40))
def test_random_tall_problems(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    m = int(rng.integers(n, 60))
    a = rng.standard_normal((m, n))
    b = rng.standard_normal(m)  # unconstrained least squares has negative coefficients: constraints bind
    _check(a, b, unique=_full_rank(a))


@pytest.mark.parametrize("seed", range(20))
def test_fit_like_problems(seed: int) -> None:
    """The fit's own shape: integer step features, relative weights 1/seconds, unit-norm columns."""
    rng = np.random.default_rng(100 + seed)
    m = int(rng.integers(6, 200))
    x = np.column_stack([rng.integers(0, 4096, m), rng.integers(0, 64, m), rng.integers(0, 10**5, m)])
    x = np.column_stack([x, rng.integers(0, 10**6, m) * (x[:, 0] > 0)]).astype(float)
    y = np.column_stack([np.ones(m), x]) @ [5e-3, 3e-5, 4e-5, 2e-8, 1e-10] * (1 + 0.2 * rng.standard_normal(m))
    y = np.abs(y) + 1e-4
    a = np.column_stack([np.ones(m), x]) / y[:, None]
    a /= np.linalg.norm(a, axis=0)
    _check(a, np.ones(m), unique=_full_rank(a))


@pytest.mark.parametrize("seed", range(10))
def test_collinear_columns(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    m, n = 30, 5
    a = rng.standard_normal((m, n))
    a[:, 3] = 2.5 * a[:, 1]  # same direction: the split between the two is not unique
    a[:, 4] = -a[:, 0]  # opposite direction: at most one of the pair can be positive at the optimum
    x = _check(a, rng.standard_normal(m), unique=False)
    assert x[0] == 0 or x[4] == 0
    near = a.copy()
    near[:, 2] = a[:, 1] * (1 + 1e-9 * rng.standard_normal(m))  # numerically collinear
    _check(near, rng.standard_normal(m), unique=False)


@pytest.mark.parametrize("seed", range(10))
def test_zero_columns(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    a = rng.standard_normal((25, 6))
    zero = rng.choice(6, size=2, replace=False)
    a[:, zero] = 0.0
    x = _check(a, rng.standard_normal(25), unique=False)
    assert (x[zero] == 0).all()
    kept = np.setdiff1d(np.arange(6), zero)
    _check(a[:, kept], rng.standard_normal(25), unique=True)


@pytest.mark.parametrize("seed", range(10))
def test_all_negative_targets(seed: int) -> None:
    """Non-negative columns and negative targets: x = 0 is the answer and the residual is ||b||."""
    rng = np.random.default_rng(400 + seed)
    a = rng.random((20, 5))
    b = -rng.random(20) - 0.01
    x = _check(a, b, unique=True)
    assert (x == 0).all()
    assert float(np.linalg.norm(a @ x - b)) == pytest.approx(float(np.linalg.norm(b)))


@pytest.mark.parametrize("seed", range(20))
def test_more_columns_than_rows(seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    m = int(rng.integers(1, 8))
    n = int(rng.integers(m + 1, 20))
    a = rng.standard_normal((m, n))
    x = _check(a, rng.standard_normal(m), unique=False)
    assert int((x > 0).sum()) <= m  # an active-set solution is basic: at most m positive coefficients


def test_exact_and_trivial_problems() -> None:
    rng = np.random.default_rng(600)
    a = rng.random((12, 4))
    truth = np.array([0.5, 2.0, 0.0, 1.25])
    x = _check(a, a @ truth, unique=True)
    np.testing.assert_allclose(x, truth, rtol=1e-10, atol=1e-12)
    assert (_check(a, np.zeros(12), unique=True) == 0).all()
    _check(a[:, :1], rng.standard_normal(12), unique=True)  # one column
    _check(rng.standard_normal((4, 4)), rng.standard_normal(4), unique=True)  # square


def test_hand_solved_problem() -> None:
    """b = a @ (-1, 3) exactly; with x >= 0 the first coefficient is 0 and the second is a2.b / a2.a2 = 15/6."""
    a = np.array([[1.0, 1.0], [1.0, 2.0], [0.0, 1.0]])
    b = np.array([2.0, 5.0, 3.0])
    np.testing.assert_allclose(np.linalg.lstsq(a, b, rcond=None)[0], [-1.0, 3.0])
    x = _check(a, b, unique=True)
    np.testing.assert_allclose(x, [0.0, 2.5], atol=1e-14)
    assert float(np.linalg.norm(a @ x - b)) == pytest.approx(np.sqrt(0.5), rel=1e-14)


def test_the_fit_on_degenerate_samples_matches_scipy() -> None:
    """``LinearCostModel.fit`` with no prefill steps (two zero columns) and decodes collinear with KV tokens."""
    rng = np.random.default_rng(7)
    d = rng.integers(1, 64, 80)
    seconds = 2e-3 + 3e-5 * d * (1 + 0.05 * rng.standard_normal(80))
    samples = [(0, int(k), int(100 * k), 0.0, float(s)) for k, s in zip(d, seconds, strict=True)]
    model = LinearCostModel.fit(samples)
    arr = np.asarray(samples, dtype=float)
    a = np.column_stack([np.ones(80), arr[:, :4]]) / arr[:, 4:5]
    used = np.linalg.norm(a, axis=0) > 0
    assert used.tolist() == [True, False, True, True, False]
    norms = np.linalg.norm(a[:, used], axis=0)
    ref, ref_rnorm = optimize.nnls(a[:, used] / norms, np.ones(80))
    coef = np.asarray(model.coef_s[:5])
    assert (coef[~used] == 0).all()
    fitted, expected = a @ coef, (a[:, used] / norms) @ ref
    np.testing.assert_allclose(fitted, expected, rtol=1e-10)
    assert float(np.linalg.norm(fitted - 1.0)) == pytest.approx(ref_rnorm, rel=1e-10)
