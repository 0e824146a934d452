"""Spread points in [0, 1]: the smallest gap between neighbours, the larger the better."""
import random


# EVOLVE-BLOCK-START
def spread_points(n):
    """Returns n numbers in [0, 1]."""
    rng = random.Random(0)
    return sorted(rng.random() for _ in range(n))
# EVOLVE-BLOCK-END


def run_spread():
    return spread_points(5)
