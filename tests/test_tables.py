"""Results as tables: every row equals the results.json it comes from, the committed family table equals
its run directories, and it loads in one line with pandas and with datasets."""
import json
import math
import os

import pandas as pd
import pytest

from analysis import archive
from experiment import tables
from tools import tables as family_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = archive.materialized(os.path.join(ROOT, "results", "reference"))   # (committed: from its archive)


def same(a, b):
    return (a is None and (b is None or (isinstance(b, float) and math.isnan(b)))) or a == pytest.approx(b)


def test_every_row_is_its_results_json():
    res = json.load(open(os.path.join(REF, "continual-s10", "results.json")))
    rows = tables.rows_of(res, "continual")
    assert len(rows) == 3 * 5 * 8   # 3 configurations × (base + 4 stages) × 8 benchmarks
    for r in rows:
        run, i = res["runs"][r["run"]], res["benchmarks"].index(r["benchmark"])
        assert r["acc"] == run["acc"][r["stage"]][i]
        assert r["delta"] == pytest.approx(run["acc"][r["stage"]][i] - run["acc"][0][i])
        if r["stage"]:
            assert r["rel"] == pytest.approx(run["per_stage"][r["stage"] - 1][r["benchmark"]]["rel"])
            assert r["degenerate"] == run["degenerate"][r["stage"] - 1]
            assert r["iou"] == run["drift"][r["stage"] - 1]["params_vs_base"]["all"]["iou_mean"]
            assert r["trained"] == res["stages"][r["stage"] - 1]
        else:
            assert r["trained"] == "" and r["degenerate"] is None and r["nss"] is None
    assert {r["role"] for r in rows} == {"GRPO", "SDPO_0", "SDPO_5%"}


def test_the_committed_table_equals_its_run_directories():
    df = pd.read_parquet(os.path.join(ROOT, "results", "tables", "reference.parquet"))
    rows = family_tables.family_rows(REF)
    assert len(df) == len(rows)
    for col in tables.COLUMNS:
        for a, b in zip((r[col] for r in rows), df[col].tolist()):
            assert same(a, b) or (a == "" and b == ""), col
    csv = pd.read_csv(os.path.join(ROOT, "results", "tables", "reference.csv"))
    assert len(csv) == len(df) and csv["acc"].tolist() == pytest.approx(df["acc"].tolist())


def test_it_loads_with_datasets_in_one_line(tmp_path):
    from datasets import load_dataset
    ds = load_dataset("parquet", data_files=os.path.join(ROOT, "results", "tables", "reference.parquet"),
                      cache_dir=str(tmp_path))["train"]
    assert ds.num_rows == 8200 and set(tables.COLUMNS) <= set(ds.column_names)


def test_a_run_writes_its_table(tmp_path):
    res = json.load(open(os.path.join(REF, "math-s10", "results.json")))
    parquet, csv = tables.write_tables(tables.rows_of(res, "math"), str(tmp_path / "results"))
    df = pd.read_parquet(parquet)
    assert len(df) == len(res["runs"]) * 2 * 8 and os.path.isfile(csv)
    assert df[(df.run == "grpo") & (df.stage == 1) & (df.benchmark == "math")]["acc"].item() == \
        res["runs"]["grpo"]["acc"][1][0]
