"""tools/compare.py: a finished run against the distribution of the headline over seeds; the cells outside the
seeds' range are found (and only those), settings that differ are named, bad input is one line."""
import json

import pytest

from tools import compare

STAGES = ["math", "science"]
BENCHES = ["math", "science", "logic"]


def fake_run(root, seed, shift=0.0, steps=40):
    """A results.json and config.json of the headline's run, its accuracies moved by `shift` after the base."""
    d = root / f"sdpo_a0.05-s{seed}"
    d.mkdir(parents=True)
    acc = [[0.5, 0.4, 0.3]] + [[0.6 + shift, 0.5 + shift, 0.3 - shift] for _ in STAGES]
    run = {"acc": acc, "avg_gain_trained": 0.1 + shift, "avg_forget_earlier": 0.05, "avg_forget_ood": 0.0,
           "degenerate": [0.0, 0.01 + shift]}
    (d / "results.json").write_text(json.dumps({"stages": STAGES, "benchmarks": BENCHES, "runs": {"sdpo_a0.05": run}}))
    (d / "config.json").write_text(json.dumps({"seed": seed, "steps": steps, "threads": 1, "name": None, "lr": 4e-4}))
    return d


@pytest.fixture
def family(tmp_path):
    fam = tmp_path / "family"
    for s, shift in enumerate([-0.02, 0.0, 0.01, 0.03]):
        fake_run(fam, s, shift)
    return fam


def test_a_run_inside_the_range_has_no_cell_outside(family, tmp_path, capsys):
    mine = fake_run(tmp_path / "runs", 7, 0.015)
    assert compare.main([str(mine), "--family", str(family)]) == []
    out = capsys.readouterr().out
    assert "13 of 13 cells inside" in out and "not like for like" not in out
    assert out.strip().splitlines()[-1].startswith("verdict: looks like the reference (0 of 13 cells outside")


def test_the_cells_outside_are_found_and_only_those(family, tmp_path, capsys):
    mine = fake_run(tmp_path / "runs", 7, 0.05, steps=10)
    json_path = mine / "results.json"
    res = json.loads(json_path.read_text())
    res["runs"]["sdpo_a0.05"]["acc"][0][2] = 0.9          # a base cell: never chance
    json_path.write_text(json.dumps(res))
    out = compare.main([str(mine), "--family", str(family)])
    names = {c for c, *_ in out}
    # stage cells moved by +0.05 above the seeds' +0.03: math and science up, logic down; G and degenerate too
    assert ("1: math", "math") in names and ("2: science", "logic") in names and ("base", "logic") in names
    assert ("base", "math") not in names and ("A3", "F earlier %") not in names
    text = capsys.readouterr().out
    assert "not like for like: --steps 10 (theirs 40)" in text and "the base is outside on logic" in text
    assert text.strip().splitlines()[-1] == "verdict: not like for like: --steps 10"


def test_the_last_line_says_the_verdict():
    cells = [(("1: math", b), 0.9, 0.5, 0.4, 0.6) for b in "abcdefgh"]
    # 44 cells, 10 seeds: a like-for-like run has 2/11 of its cells outside by chance, at most 14 at the 99th percentile
    assert compare.verdict([], [], cells[:3], 44, 10).startswith("verdict: looks like the reference (3 of 44")
    many = cells * 2
    assert compare.verdict([], [], many, 44, 10).startswith("verdict: outside the range on 16 cells (chance gives at "
                                                            "most 14): 1: math a, 1: math b")
    assert compare.verdict([], ["logic"], cells, 44, 10).startswith("verdict: not the reference's base (logic)")
    assert compare.verdict([("threads", 2, 1)], [], [], 44, 10) == "verdict: not like for like: --threads 2"


def test_the_table_is_median_and_range(family, capsys):
    dist = compare.main(["--table", "--family", str(family)])
    text = capsys.readouterr().out
    assert len(dist[("1: math", "math")]) == 4
    assert "| 1: math | **60.5 (58.0–63.0)** |" in text and "over seeds 0–3 (4 seeds)" in text
    assert "| base | 50.0 | 40.0 | 30.0 |" in text   # the same for every seed: one number


def test_bad_input_is_one_line(family, tmp_path, capsys):
    for argv, said in [([str(tmp_path / "nothing"), "--family", str(family)], "results.json is not there"),
                       ([], "give a finished run directory"),
                       ([str(tmp_path), "--family", str(tmp_path / "none")], "no seed of the headline")]:
        with pytest.raises(SystemExit) as e:
            compare.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and said in err and "Traceback" not in err, err


def test_the_report_is_written_only_when_asked(family, capsys):
    assert not (family / "report.md").exists()
    compare.main(["--table", "--family", str(family)])
    assert not (family / "report.md").exists()
    compare.main(["--report", "--family", str(family)])
    text = (family / "report.md").read_text()
    assert text.startswith("# The headline over seeds") and "| 1: math | **60.5 (58.0–63.0)** |" in text
