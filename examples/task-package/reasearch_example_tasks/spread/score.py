"""Scores what solve() returned. Runs on the trusted side, over the returned data only."""

import math


def score(returned, params):
    n = params["n"]
    if not isinstance(returned, list) or len(returned) != n:
        raise ValueError(f"solve() must return a list of {n} numbers")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in returned):
        raise ValueError("every point must be a finite number")
    if min(returned) < 0 or max(returned) > 1:
        raise ValueError("every point must lie in [0, 1]")
    points = sorted(float(x) for x in returned)
    gaps = [b - a for a, b in zip(points, points[1:], strict=False)]
    worst = min(gaps)
    return {"score": worst, "instances": gaps,
            "feedback": f"smallest gap {worst:.6g} between points {gaps.index(worst)} and {gaps.index(worst) + 1}"}
