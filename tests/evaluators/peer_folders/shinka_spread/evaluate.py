"""ShinkaEvolve evaluator of the spread example (run_shinka_eval over run_experiment)."""
import argparse

from shinka.core import run_shinka_eval


def validate(points):
    if len(points) != 5 or any(not 0.0 <= p <= 1.0 for p in points):
        return False, "need 5 numbers in [0, 1]"
    return True, None


def aggregate(results):
    points = sorted(float(p) for p in results[0])
    gap = min(b - a for a, b in zip(points, points[1:], strict=False))
    return {"combined_score": gap / 0.25, "public": {"min_gap": gap}, "text_feedback": f"smallest gap {gap:.4f}"}


def main(program_path, results_dir):
    metrics, correct, error = run_shinka_eval(
        program_path=program_path, results_dir=results_dir, experiment_fn_name="run_experiment", num_runs=1,
        get_experiment_kwargs=lambda i: {"n": 5}, validate_fn=validate, aggregate_metrics_fn=aggregate)
    if not correct:
        print("failed:", error)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--program_path", default="initial.py")
    parser.add_argument("--results_dir", default="results")
    args = parser.parse_args()
    main(args.program_path, args.results_dir)
