def solve(n):
    """n points in [0, 1], 0.1 apart."""
    return [0.1 * i for i in range(n)]
