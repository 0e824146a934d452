"""OpenEvolve evaluator of the spread example: imports the program, calls run_spread(), scores the gaps."""
import importlib.util


def evaluate(program_path):
    try:
        spec = importlib.util.spec_from_file_location("program", program_path)
        program = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(program)
        points = program.run_spread()
        if len(points) != 5 or any(not 0.0 <= p <= 1.0 for p in points):
            return {"combined_score": 0.0, "error": "need 5 numbers in [0, 1]"}
        points = sorted(float(p) for p in points)
        gap = min(b - a for a, b in zip(points, points[1:], strict=False))
        return {"combined_score": gap / 0.25, "min_gap": gap}
    except Exception as e:
        return {"combined_score": 0.0, "error": str(e)}


def evaluate_stage1(program_path):
    return evaluate(program_path)
