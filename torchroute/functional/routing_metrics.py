"""The field's routing metrics: RouterBench's AIQ and RouteLLM's PGR, APGR and CPT.

RouterBench (Hu et al., 2024, "RouterBench: A Benchmark for Multi-LLM Routing System")
scores a router by the area under the non-decreasing convex hull of its (cost, quality)
operating points: the average improvement in quality (AIQ). RouteLLM (Ong et al., 2024,
"RouteLLM: Learning to Route LLMs with Preference Data") scores a router between a weak and
a strong model by the performance gap recovered (PGR) as a function of the share of calls
sent to the strong model: its area (APGR) and the call-performance threshold CPT(x%).

Every function takes the ``n`` operating points of one router (one per value of its
willingness-to-pay parameter) as 1-d arrays and returns floats; the points need no order.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def _points(x: ArrayLike, y: ArrayLike, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """``[n]`` finite points sorted by ``x``; of points with equal ``x`` the highest ``y``."""
    xs = np.asarray(x, dtype=np.float64).reshape(-1)
    ys = np.asarray(y, dtype=np.float64).reshape(-1)
    if xs.shape != ys.shape or xs.size == 0:
        raise ValueError(
            f"{names[0]} and {names[1]} must be two non-empty [n] arrays, got "
            f"{xs.size} and {ys.size} values"
        )
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        raise ValueError(f"{names[0]} and {names[1]} must be finite")
    order = np.lexsort((-ys, xs))  # by x, then the highest y first
    xs, ys = xs[order], ys[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    return xs[first], ys[first]


def nondecreasing_hull(cost: ArrayLike, quality: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """RouterBench's non-decreasing convex hull of a router's operating points.

    Dominated points (another point costs no more and scores higher) are removed, the
    upper concave envelope of the rest is kept, and the curve ends at the cheapest point
    of highest quality (beyond it the quality stays constant). Between vertices the
    frontier is the linear interpolation (randomising between two operating points).

    Args:
        cost: ``[n]`` average cost per query of each operating point.
        quality: ``[n]`` average quality (accuracy) of each operating point.

    Returns:
        ``(cost [m], quality [m])``, ``m <= n``: the hull's vertices, both increasing.

    Example:
        >>> nondecreasing_hull([0.0, 1.0, 2.0, 3.0], [0.2, 0.3, 0.8, 0.5])
        (array([0., 2.]), array([0.2, 0.8]))
    """
    xs, ys = _points(cost, quality, ("cost", "quality"))
    last = int(np.argmax(ys))  # the cheapest point of highest quality
    hull: list[int] = []
    for i in range(last + 1):
        # Drop the last vertex while it lies on or below the chord to the new point.
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (xs[b] - xs[a]) * (ys[i] - ys[a]) - (ys[b] - ys[a]) * (xs[i] - xs[a])
            if cross < 0:
                break
            hull.pop()
        hull.append(i)
    return xs[hull], ys[hull]


def aiq(cost: ArrayLike, quality: ArrayLike, c_min: float, c_max: float) -> float:
    """Average improvement in quality (RouterBench, Hu et al. 2024, section 3).

    ``AIQ = 1 / (c_max - c_min) * integral_{c_min}^{c_max} R(c) dc`` with ``R`` the
    router's :func:`nondecreasing_hull`: linear between vertices, constant at the highest
    quality beyond the last vertex, and 0 below the router's cheapest point (it cannot
    operate there; RouterBench integrates each hull from its first point). Pass the same
    range to every router of a comparison.

    Args:
        cost: ``[n]`` average cost per query of each operating point.
        quality: ``[n]`` average quality of each operating point.
        c_min: start of the cost range.
        c_max: end of the cost range (``>= c_min``); when equal, ``R(c_min)``.

    Returns:
        the AIQ, in units of quality.

    Example:
        >>> round(aiq([1.0, 3.0], [0.4, 0.8], c_min=1.0, c_max=5.0), 6)  # (1.2 + 1.6) / 4
        0.7
    """
    if not (np.isfinite(c_min) and np.isfinite(c_max)) or c_max < c_min:
        raise ValueError(f"c_min <= c_max must be finite, got c_min={c_min}, c_max={c_max}")
    xs, ys = nondecreasing_hull(cost, quality)
    if c_max == c_min:
        return float(np.interp(c_min, xs, ys)) if c_min >= xs[0] else 0.0
    start = max(c_min, xs[0])
    if start >= c_max:
        return 0.0
    nodes = np.r_[start, xs[(xs > start) & (xs < c_max)], c_max]
    area = np.trapezoid(np.interp(nodes, xs, ys), nodes)
    return float(area / (c_max - c_min))


def pgr(quality: ArrayLike, q_weak: float, q_strong: float) -> np.ndarray:
    """Performance gap recovered (RouteLLM, Ong et al. 2024, eq. 6).

    ``PGR = (q - q_weak) / (q_strong - q_weak)``: 0 at the weak model's quality, 1 at the
    strong model's; NaN where ``q_strong == q_weak`` (there is no gap).

    Args:
        quality: ``[n]`` router qualities.
        q_weak: quality of always calling the weak model.
        q_strong: quality of always calling the strong model.

    Returns:
        ``[n]`` PGR values.
    """
    q = np.asarray(quality, dtype=np.float64)
    gap = q_strong - q_weak
    if gap == 0:
        return np.full_like(q, np.nan)
    return (q - q_weak) / gap


def apgr(share: ArrayLike, gap_recovered: ArrayLike) -> float:
    """Average performance gap recovered (RouteLLM, Ong et al. 2024, eq. 7).

    The area under PGR against the share of calls to the strong model over ``[0, 1]``.
    The curve is piecewise linear through the router's points and, like every RouteLLM
    threshold sweep, runs from the all-weak router ``(0, 0)`` to the all-strong router
    ``(1, 1)`` (a router can always mix its operating points with those two); at equal
    shares the highest PGR counts. A random weak/strong mix scores 0.5. NaN when any PGR
    is NaN.

    Args:
        share: ``[n]`` fraction of calls to the strong model, in ``[0, 1]``.
        gap_recovered: ``[n]`` PGR at each point (:func:`pgr`).

    Returns:
        the APGR.

    Example:
        >>> apgr([0.5], [0.75])  # (0.5 * 0.75 + 0.5 * 1.75) / 2
        0.625
    """
    if np.isnan(np.asarray(gap_recovered, dtype=np.float64)).any():
        return float("nan")
    s, p = _share_points(share, gap_recovered)
    s, p = _points(np.r_[0.0, s, 1.0], np.r_[0.0, p, 1.0], ("share", "gap_recovered"))
    return float(np.trapezoid(p, s))


def cpt(share: ArrayLike, gap_recovered: ArrayLike, target: float) -> float:
    """Call-performance threshold CPT(x%) (RouteLLM, Ong et al. 2024, section 5).

    The least share of calls to the strong model at which the router reaches
    ``PGR >= target``, walking its points by increasing share and interpolating linearly
    between neighbouring points (mixing two operating points). Only the router's own
    points count (not the all-strong end of :func:`apgr`): NaN when none of them reaches
    ``target`` or a PGR is NaN.

    Args:
        share: ``[n]`` fraction of calls to the strong model, in ``[0, 1]``.
        gap_recovered: ``[n]`` PGR at each point (:func:`pgr`).
        target: the PGR to reach (0.5 for CPT(50%)).

    Returns:
        the threshold share, or NaN.

    Example:
        >>> cpt([0.2, 0.6], [0.3, 0.9], target=0.5)  # a third of the way from 0.2 to 0.6
        0.3333333333333333
    """
    if np.isnan(np.asarray(gap_recovered, dtype=np.float64)).any():
        return float("nan")
    s, p = _share_points(share, gap_recovered)
    hit = np.flatnonzero(p >= target)
    if hit.size == 0:
        return float("nan")
    i = int(hit[0])
    if i == 0:
        return float(s[0])
    # p[i - 1] < target <= p[i]: the crossing on the segment (i - 1, i).
    return float(s[i - 1] + (target - p[i - 1]) * (s[i] - s[i - 1]) / (p[i] - p[i - 1]))


def _share_points(share: ArrayLike, gap_recovered: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s, p = _points(share, gap_recovered, ("share", "gap_recovered"))
    if s[0] < 0 or s[-1] > 1:
        raise ValueError(f"share must lie in [0, 1], got values in [{s[0]}, {s[-1]}]")
    return s, p
