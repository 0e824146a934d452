"""Spread points in [0, 1]: the smallest gap between neighbours, the larger the better."""
import random


# EVOLVE-BLOCK-START
def spread_points(n):
    rng = random.Random(0)
    return sorted(rng.random() for _ in range(n))
# EVOLVE-BLOCK-END


def run_experiment(n=5, **kwargs):
    return spread_points(n)
