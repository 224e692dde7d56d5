"""The committed results as one archive per family (experiment/archive.py, issues 61 and 64): the archive holds
exactly the per-run files it replaces, reads back as the same tree, refuses a file that is not what was saved, and
the claims read from it are the claims read from the directories."""
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiment import archive, claims

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")


@pytest.fixture(scope="module")
def reference():
    return archive.materialized(os.path.join(RESULTS, "reference"))


def small_family(reference, dst, seeds=(10, 11)):
    """A family folder with a few committed runs as directories, and the distances beside them."""
    for s in seeds:
        for exp in ("continual", "math"):
            shutil.copytree(os.path.join(reference, f"{exp}-s{s}"), dst / f"{exp}-s{s}")
    shutil.copyfile(os.path.join(reference, "distances.json"), dst / "distances.json")
    return dst


def test_an_archive_holds_exactly_the_files_it_replaces_and_reads_back_as_them(reference, tmp_path):
    family = small_family(reference, tmp_path / "fam")
    files = archive.files_of(str(family))
    assert "continual-s10/results.json" in files and "distances.json" not in files   # the family's own top file stays
    assert not any("checkpoints" in p or p.endswith(".png") for p in files)
    path, n = archive.pack(str(family))
    assert n == len(files) and archive.read(path) == files
    df = __import__("pandas").read_parquet(path)                  # one line with pandas: path, sha256, text
    assert list(df.columns) == ["path", "sha256", "text"] and len(df) == n
    archive.unpack(path, str(tmp_path / "back"))
    assert archive.files_of(str(tmp_path / "back")) == files


def test_the_claims_read_from_an_archive_are_the_claims_read_from_the_directories(reference, tmp_path):
    family = small_family(reference, tmp_path / "fam")
    from_dirs = claims.read_reference(str(family))
    archive.pack(str(family))
    for d in archive.run_dirs(str(family)):
        shutil.rmtree(d)
    assert claims.read_reference(str(family)) == from_dirs
    assert claims.measure_declared(list(claims.read_reference(str(family)).values())) == \
        claims.measure_declared(list(from_dirs.values()))


def test_a_run_added_loose_beside_the_archive_is_read_with_it(reference, tmp_path):
    family = small_family(reference, tmp_path / "fam", seeds=(10,))
    archive.pack(str(family))
    for d in archive.run_dirs(str(family)):
        shutil.rmtree(d)
    shutil.copytree(os.path.join(reference, "continual-s11"), family / "continual-s11")   # a new run, not yet packed
    view = archive.materialized(str(family))
    assert os.path.isfile(os.path.join(view, "continual-s10", "results.json"))
    assert os.path.isfile(os.path.join(view, "continual-s11", "results.json"))
    assert archive.archived(str(family), "continual-s10/results.json") and \
        archive.archived(str(family), "continual-s11/results.json") and \
        not archive.archived(str(family), "continual-s12/results.json")
    archive.pack(str(family))   # the pack folds the loose run in
    assert "continual-s11/results.json" in archive.read(str(family / archive.ARCHIVE))


def test_a_file_that_is_not_what_was_saved_is_refused_by_name(reference, tmp_path):
    family = small_family(reference, tmp_path / "fam", seeds=(10,))
    path, _ = archive.pack(str(family))
    table = pq.read_table(path).to_pydict()
    k = table["path"].index("continual-s10/results.json")
    table["text"][k] = table["text"][k].replace('"seed": 10', '"seed": 12')
    pq.write_table(pa.table(table), path)
    with pytest.raises(ValueError, match="continual-s10/results.json is not what was saved"):
        archive.read(path)
    open(path, "r+b").truncate(100)
    with pytest.raises(ValueError, match="cannot be read"):
        archive.read(path)


def test_every_committed_archive_reads_as_saved_and_results_holds_few_files():
    import subprocess
    for family in ("reference", "equal_rate", "collapse", "coding_ablation", "continual", "cot"):
        assert archive.read(os.path.join(RESULTS, family, archive.ARCHIVE)), family
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if tracked:   # (a checkout with git)
        assert len(tracked) <= 60, len(tracked)
        assert json.load(open(os.path.join(RESULTS, "base", "tiny.json")))
