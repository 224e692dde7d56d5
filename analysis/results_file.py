"""analysis/results_file.py — a continual.py results.json as the analysis commands read it: a regular file of valid
JSON (infra/commands.read_json) whose accuracy matrices have the shape its stages and benchmarks say and hold finite
numbers in [0, 1]. Anything else is one ValueError naming the file, never a misread (an accuracy of −500% or NaN
would otherwise flow into a claim, a table or a figure)."""
import math

from infra.commands import read_json


def read_results(path):
    """The checked results.json at `path` (one seed's, or a summary over seeds: each cell's mean is checked)."""
    return check_results(read_json(path), path)


def check_results(results, path):
    """`results` when it is a continual.py results file as written, else ValueError naming `path`."""
    def bad(what):
        raise ValueError(f"{path}: {what} (not a continual.py results.json as written)")
    if not isinstance(results, dict):
        bad("not a JSON object")
    stages, benches, runs = results.get("stages"), results.get("benchmarks"), results.get("runs")
    for key, names in (("stages", stages), ("benchmarks", benches)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            bad(f"'{key}' is not a list of names")
    if not isinstance(runs, dict) or not runs:
        bad("'runs' is not an object of runs")
    for name, run in runs.items():
        acc = run.get("acc") if isinstance(run, dict) else None
        if not isinstance(acc, list) or len(acc) != len(stages) + 1 or \
                any(not isinstance(row, list) or len(row) != len(benches) for row in acc):
            bad(f"run {name}: 'acc' is not a {len(stages) + 1} × {len(benches)} matrix (the base, then each stage)")
        for row in acc:
            for cell in row:
                value = cell.get("mean") if isinstance(cell, dict) else cell
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or not 0 <= value <= 1:
                    bad(f"run {name}: an accuracy {value!r}, not a number in [0, 1]")
    return results
