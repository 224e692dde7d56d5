"""The committed results as one archive per family (analysis/archive.py): the archive holds
exactly the per-run files it replaces, reads back as the same tree, refuses a file that is not what was saved, and
the claims read from it are the claims read from the directories."""
import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import archive, claims

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


def test_a_damaged_loose_run_is_named_by_the_family_not_by_the_cache(reference, tmp_path):
    """Round five: a loose run's damaged results.json was reported under its cached copy's path in /tmp;
    the message names the family's own folder (and an archived file, the archive and its path inside)."""
    family = small_family(reference, tmp_path / "fam", seeds=(10,))
    archive.pack(str(family))
    for d in archive.run_dirs(str(family)):
        shutil.rmtree(d)
    shutil.copytree(os.path.join(reference, "continual-s11"), family / "continual-s11")
    (family / "continual-s11" / "results.json").write_text("{ damaged")
    (family / "continual-s11" / "results.json.sha256").unlink(missing_ok=True)
    view = archive.materialized(str(family))
    with pytest.raises(ValueError) as e:
        claims.checked_results(os.path.join(view, "continual-s11", "results.json"), "continual", 11,
                               claims.experiment_flags("continual"))
    assert str(e.value).startswith(f"{family / 'continual-s11' / 'results.json'}: not valid JSON"), str(e.value)
    assert archive.cache_dir() not in str(e.value)
    assert archive.shown(os.path.join(view, "continual-s10", "results.json")) == \
        f"{family / archive.ARCHIVE}: continual-s10/results.json"
    assert archive.shown(str(family / "x")) == str(family / "x")   # a path outside the cache: as it is


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
    for family in ("reference", "equal_rate", "frontier", "collapse", "coding_ablation", "continual", "cot"):
        assert archive.read(os.path.join(RESULTS, family, archive.ARCHIVE)), family
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if tracked:   # (a checkout with git)
        assert len(tracked) <= 60, len(tracked)
        assert json.load(open(os.path.join(RESULTS, "base", "tiny.json")))


def test_remove_packed_removes_only_what_the_archive_holds_and_only_from_runs(tmp_path):
    """Round five: --remove-packed once deleted a run's checkpoints, its figures and a folder holding no run."""
    fam = tmp_path / "fam"
    run = fam / "continual-s1"
    (run / "checkpoints" / "grpo").mkdir(parents=True)
    (run / "config.json").write_text('{"program": "continual.py"}')
    (run / "results.json").write_text("{}")
    (run / "checkpoints" / "grpo" / "model.safetensors").write_bytes(b"\0weights")
    (run / "curves.png").write_bytes(b"\x89PNG")
    photos = fam / "photos"
    photos.mkdir()
    (photos / "notes.txt").write_text("mine")
    done = fam / "math-s2"
    done.mkdir()
    (done / "config.json").write_text('{"program": "continual.py"}')
    path, n = archive.pack(str(fam))
    left = archive.remove_packed(str(fam), archive.read(path))
    assert (run / "checkpoints" / "grpo" / "model.safetensors").read_bytes() == b"\0weights"
    assert (run / "curves.png").exists() and not (run / "results.json").exists() and not (run / "config.json").exists()
    assert (photos / "notes.txt").read_text() == "mine"          # no run: untouched, though the archive holds it
    assert not done.exists()                                     # a run wholly in the archive: gone
    assert sorted(os.path.basename(d) for d in left) == ["continual-s1", "photos"]


def test_unpack_never_replaces_a_file_and_writes_nothing_then(tmp_path):
    fam = tmp_path / "fam"
    (fam / "continual-s10").mkdir(parents=True)
    (fam / "continual-s10" / "results.json").write_text('{"from": "archive"}')
    (fam / "continual-s10" / "report.md").write_text("archive")
    path, _ = archive.pack(str(fam))
    out = tmp_path / "out"
    (out / "continual-s10").mkdir(parents=True)
    (out / "continual-s10" / "results.json").write_text("the user's own")
    with pytest.raises(ValueError, match="exists already"):
        archive.unpack(path, str(out))
    assert (out / "continual-s10" / "results.json").read_text() == "the user's own"
    assert not (out / "continual-s10" / "report.md").exists()


def test_unpack_of_a_path_both_file_and_folder_names_the_archive(tmp_path):
    """Round five's, mended in round six: it ended in "File exists" without naming the archive."""
    files = {"continual-s10/results.json": "{}", "continual-s10/results.json/x": "{}"}
    path = str(tmp_path / "runs.parquet")
    pq.write_table(pa.table({"path": list(files), "sha256": [archive.sha256(t) for t in files.values()],
                             "text": list(files.values())}), path)
    with pytest.raises(ValueError, match=f"{path}: continual-s10/results.json is both a file and a folder"):
        archive.unpack(path, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["no sha256 column", "null text", "not UTF-8"])
def test_a_damaged_family_is_one_error_line_not_a_traceback(tmp_path, case):
    import subprocess
    import sys
    fam = tmp_path / "fam"
    (fam / "run-s1").mkdir(parents=True)
    (fam / "run-s1" / "config.json").write_text("{}")
    if case == "not UTF-8":
        (fam / "run-s1" / "log.jsonl").write_bytes(b"\xff\xfe")
        argv = ["--pack", str(fam)]
    else:
        cols = {"path": ["run-s1/a.json"], "text": [None if case == "null text" else "x"]}
        if case == "null text":
            cols["sha256"] = ["0" * 64]
        pq.write_table(pa.table(cols), str(fam / "runs.parquet"))
        argv = ["--unpack", str(fam), "--out", str(tmp_path / "out")]
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "results.py"), *argv], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stderr.startswith("error: "), run.stderr
    assert not (tmp_path / "out").exists()


def test_pack_follows_no_link_out_of_the_family(tmp_path):
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.json").write_text('{"mine": 1}')
    fam = tmp_path / "fam"
    (fam / "run-s1").mkdir(parents=True)
    (fam / "run-s1" / "results.json").write_text("{}")
    os.symlink(outside, fam / "run-s1" / "linked")
    os.symlink(outside / "secret.json", fam / "run-s1" / "file.json")
    assert sorted(archive.files_of(str(fam))) == [os.path.join("run-s1", "results.json")]


def test_a_live_run_is_neither_packed_nor_removed(tmp_path):
    """Round six: `--pack --remove-packed` on a family folder while one of its runs is being written (its lock
    held by a live process) leaves that run whole and out of the archive, and says which; the finished one goes."""
    fam = tmp_path / "fam"
    for name in ("done-s1", "live-s2"):
        (fam / name).mkdir(parents=True)
        (fam / name / "config.json").write_text('{"a": 1}')
        (fam / name / "progress.json").write_text('{"stage": 1}')
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); from infra import "
                               "safety; assert safety.RunLock(%r).acquire(); print('held', flush=True); time.sleep(60)"
                               % (ROOT, str(fam / "live-s2"))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert archive.live_runs(str(fam)) == {str(fam / "live-s2"): holder.pid}
        out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "results.py"), "--pack", str(fam),
                              "--remove-packed"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"skipped {fam / 'live-s2'}: a process (pid {holder.pid}) is writing it" in out.stdout
        assert sorted(archive.read(str(fam / archive.ARCHIVE))) == ["done-s1/config.json", "done-s1/progress.json"]
        assert (fam / "live-s2" / "config.json").is_file() and (fam / "live-s2" / "progress.json").is_file()
        assert not (fam / "done-s1").exists()
    finally:
        holder.kill()
        holder.wait()
    assert archive.live_runs(str(fam)) == {}   # the kernel drops a dead holder's lock
