"""Round six: every analysis command reads a results.json through one checked reader
(analysis/results_file.py over infra/commands.read_json) and answers a damaged one in one `error:` line naming the
file, exit 2, never a traceback or a misread: NaN, −500%, a string, a list, broken JSON, a FIFO."""
import json
import math
import os

import pytest

from analysis import claims
from analysis.results_file import check_results, read_results
from infra import commands
from tools import compare, figures, report

GOOD = {"seed": 0, "stages": ["math"], "benchmarks": ["math", "logic"],
        "runs": {"grpo": {"method": "grpo", "settings": {}, "acc": [[0.5, 0.25], [0.75, 0.0]]}}}
DAMAGES = {"nan": lambda r: r["runs"]["grpo"]["acc"][1].__setitem__(0, math.nan),
           "minus 500%": lambda r: r["runs"]["grpo"]["acc"][1].__setitem__(0, -5.0),
           "a string cell": lambda r: r["runs"]["grpo"]["acc"][1].__setitem__(0, "0.5"),
           "a boolean cell": lambda r: r["runs"]["grpo"]["acc"][1].__setitem__(0, True),
           "a row short": lambda r: r["runs"]["grpo"]["acc"][1].pop(),
           "runs a string": lambda r: r.__setitem__("runs", "x"),
           "stages missing": lambda r: r.pop("stages")}


def damaged(kind):
    results = json.loads(json.dumps(GOOD))
    DAMAGES[kind](results)
    return results


def test_the_reader_takes_a_good_file_and_names_the_file_of_each_damage(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(GOOD))
    assert read_results(str(path)) == GOOD
    summary = {**GOOD, "runs": {"grpo": {"acc": [[{"mean": 0.5}, {"mean": 0.2}], [{"mean": 0.7}, {"mean": 0.0}]]}}}
    assert check_results(summary, "s") == summary   # a summary over seeds: each cell's mean
    for kind in DAMAGES:
        with pytest.raises(ValueError, match=f"^{path}: "):
            check_results(damaged(kind), str(path))


def test_read_json_refuses_what_is_not_a_regular_file_of_bounded_size(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):   # (open() on it would wait forever)
        commands.read_json(str(fifo))
    with pytest.raises(ValueError, match="not a regular file"):
        commands.read_json(str(tmp_path))
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    with pytest.raises(ValueError, match="more than 1,000"):
        commands.read_json(str(big), max_bytes=1000)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="not valid JSON"):
        commands.read_json(str(deep))
    with pytest.raises(FileNotFoundError):
        commands.read_json(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("kind", [*DAMAGES, "broken JSON", "a FIFO"])
@pytest.mark.parametrize("command", ["claims", "figures", "report", "compare"])
def test_every_analysis_command_answers_a_damaged_results_json_in_one_line(kind, command, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    if kind == "a FIFO":
        os.mkfifo(run / "results.json")
    else:
        (run / "results.json").write_text("{" if kind == "broken JSON" else json.dumps(damaged(kind)))
    argv = {"claims": [str(run)], "figures": [str(run), "--out", str(tmp_path / "out")], "report": [str(run)],
            "compare": [str(run)]}[command]
    main = {"claims": claims.main, "figures": figures.main, "report": report.main, "compare": compare.main}[command]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and "error: " in err[-1] and "Traceback" not in "\n".join(err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]   # nothing written


def test_run_command_turns_an_unforeseen_failure_into_one_line(capsys):
    def main(argv):
        raise OSError(28, "No space left on device", "/tmp/x/report.md")
    with pytest.raises(SystemExit) as e:
        commands.run_command(main)
    assert e.value.code == "error: /tmp/x/report.md: No space left on device"

    def typo(argv):
        return {}["runs"]
    with pytest.raises(SystemExit) as e:
        commands.run_command(typo)
    assert e.value.code == "error: KeyError: 'runs'"


def test_a_reader_that_leaves_ends_a_command_quietly():
    """`python tools/X.py | head -1`: the pipe closes while the command still prints; it ends with 141, as SIGPIPE ends
    a Unix tool, and says nothing (it said "error: Broken pipe", exit 1)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("from infra.commands import run_command\n"
            "run_command(lambda argv: [print('row', i) for i in range(10 ** 6)])")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": root})
    assert p.stdout.readline() == b"row 0\n"
    p.stdout.close()   # the reader leaves
    assert p.wait(timeout=60) == 141 and p.stderr.read() == b""
