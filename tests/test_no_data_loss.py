"""Nothing a user types loses data: a command deletes or replaces only a run it made itself, writes into
committed folders only with the flag that says so, one writer per run directory, SIGTERM and a stop during the
end-of-stage evaluation keep the work, and the reference runner checks its input and its results."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from infra import checkpoints, safety
from analysis import archive
from infra.checkpoints import save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = ["--method", "grpo,sdpo", "--stages", "math,coding", "--benchmarks", "math,coding",
         "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
         "--max-new-tokens", "40", "--curve-every", "0", "--seed", "5", "--mini-batches", "2"]


def run(script, args, cwd=ROOT, timeout=900):
    return subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def start(script, args, cwd):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, script), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def one_error_line(p):
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    return lines[-1]


# ----------------------------------------------------------------------------------------------
# What holds committed work
# ----------------------------------------------------------------------------------------------
def test_committed_paths(tmp_path):
    assert safety.committed_path(os.path.join(ROOT, "results", "reference", "continual-s10"))
    assert safety.committed_path(os.path.join(ROOT, "docs"))
    assert safety.committed_path(os.path.join(ROOT, "world", "tiny_model"))
    assert safety.committed_path(ROOT) == "the repository itself"
    assert safety.committed_path(os.path.dirname(ROOT))                     # a folder holding the repository
    assert safety.committed_path(os.path.join(ROOT, "README.md")) == "tracked by git"
    assert safety.committed_path(os.path.join(ROOT, "runs", "anything")) is None
    assert safety.committed_path(str(tmp_path / "x")) is None


def test_the_lock_names_its_holder(tmp_path):
    a, b = safety.RunLock(str(tmp_path / "run")), safety.RunLock(str(tmp_path / "run"))
    assert a.acquire()
    assert not b.acquire() and b.held_by() == os.getpid()
    a.release()
    assert b.acquire()
    b.release()
    assert not (tmp_path / "run").exists()   # the lock sits beside the directory, never in it


def test_save_checkpoint_never_replaces_what_is_not_a_checkpoint(tiny, tmp_path):
    model, tok = tiny
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(FileExistsError):
        save_checkpoint(model, tok, str(mine))
    assert (mine / "thesis.tex").read_text() == "years of work" and sorted(os.listdir(tmp_path)) == ["notes"]
    save_checkpoint(model, tok, str(tmp_path / "ckpt"))
    save_checkpoint(model, tok, str(tmp_path / "ckpt"))   # a checkpoint over a checkpoint: allowed, atomic


# ----------------------------------------------------------------------------------------------
# The deletions and the committed-results writes, each one line and exit 2, nothing touched
# ----------------------------------------------------------------------------------------------
def test_overwrite_never_deletes_a_directory_continual_did_not_make(tmp_path):
    victim = tmp_path / "docs"
    victim.mkdir()
    (victim / "keep.md").write_text("mine")
    p = run("continual.py", SMOKE + ["--runs-dir", str(tmp_path), "--name", "docs", "--overwrite"])
    line = one_error_line(p)
    assert "not a run of continual.py" in line and "--overwrite" not in line
    assert (victim / "keep.md").read_text() == "mine"
    (victim / "config.json").write_text(json.dumps({"program": "something-else.py"}))
    line = one_error_line(run("continual.py", SMOKE + ["--runs-dir", str(tmp_path), "--name", "docs", "--overwrite"]))
    assert "did not write" in line and (victim / "keep.md").exists()


@pytest.mark.parametrize("script,args,made", [
    ("continual.py", SMOKE + ["--runs-dir", "results/reference", "--name", "continual-s99"],
     "results/reference/continual-s99"),
    ("continual.py", SMOKE + ["--runs-dir", ".", "--name", "docs", "--overwrite"], None),
    ("tools/tiny.py", ["--out", "tests/not-a-model", "--steps", "1"], "tests/not-a-model"),
    ("tools/tiny.py", ["--out", "docs", "--steps", "1"], None),
    ("evaluate.py", ["--benchmarks", "math", "--n", "2", "--k", "1", "--out", "results/base/new.json"],
     "results/base/new.json"),
])
def test_no_command_writes_into_committed_folders_without_its_flag(script, args, made):
    before = sorted(os.listdir(os.path.join(ROOT, "docs")))
    line = one_error_line(run(script, args))
    assert "committed" in line and "--overwrite-committed" in line
    assert made is None or not os.path.exists(os.path.join(ROOT, made))
    assert sorted(os.listdir(os.path.join(ROOT, "docs"))) == before


# ----------------------------------------------------------------------------------------------
# Every stop keeps the work: SIGTERM, a stop during the evaluation, a second writer
# ----------------------------------------------------------------------------------------------
def results_of(cwd, name):
    r = json.loads((cwd / "runs" / name / "results.json").read_text())
    for one in r["runs"].values():
        one["checkpoints"] = [os.path.basename(c) for c in one["checkpoints"]]
    return r


def wait_for_lines(log, n, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= n):
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ref")
    p = start("continual.py", SMOKE + ["--name", "ref", "--steps", "6"], cwd)
    p.communicate(timeout=1200)
    assert p.returncode == 0
    return cwd


@pytest.mark.parametrize("sig,lines", [(signal.SIGTERM, 2),    # in the middle of the first stage's steps
                                       (signal.SIGINT, 6)])    # right after its last step: in its evaluation
def test_a_stop_keeps_the_stage_and_resumes_to_the_same_result(reference_run, tmp_path, sig, lines):
    p = start("continual.py", SMOKE + ["--name", "c", "--steps", "6"], tmp_path)
    wait_for_lines(tmp_path / "runs" / "c" / "log.jsonl", lines)
    p.send_signal(sig)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert (tmp_path / "runs" / "c" / "partial" / "optimizer.pt").exists()
    again = start("continual.py", SMOKE + ["--name", "c", "--steps", "6"], tmp_path)
    out, _ = again.communicate(timeout=1200)
    assert again.returncode == 0 and "resuming stage" in out
    ref = results_of(reference_run, "ref")
    assert results_of(tmp_path, "c") == ref


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path):
    first = start("continual.py", SMOKE + ["--name", "w", "--steps", "6"], tmp_path)
    wait_for_lines(tmp_path / "runs" / "w" / "log.jsonl", 1)
    second = run("continual.py", SMOKE + ["--name", "w", "--steps", "6"], cwd=tmp_path)
    assert second.returncode == 1 and f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    first.communicate(timeout=1200)
    assert first.returncode == 0


# ----------------------------------------------------------------------------------------------
# The reference runner: its input, its children, its results
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,says", [
    ([], "nothing to do"),
    (["--seeds", "-1", "--root", "{tmp}"], "distinct seeds >= 0"),
    (["--seeds", "10,10", "--root", "{tmp}"], "distinct seeds >= 0"),
    (["--seeds", "", "--root", "{tmp}"], "comma list of integers"),
    (["--seeds", "10", "--jobs", "-3", "--root", "{tmp}"], "--jobs"),
    (["--seeds", "10"], "--into-results"),
    (["--family", "defences", "--seeds", "100"], "--into-results"),
])
def test_the_reference_runner_checks_its_input_from_any_directory(tmp_path, args, says):
    p = run("tools/reference.py", [a.replace("{tmp}", str(tmp_path / "r")) for a in args], cwd=tmp_path)
    assert says in one_error_line(p)
    assert not (tmp_path / "results").exists() and not (tmp_path / "r").exists()


def test_a_finished_family_says_there_is_nothing_to_do(tmp_path):
    (tmp_path / "continual-s3").mkdir()
    (tmp_path / "continual-s3" / "results.json").write_text("{}")
    p = run("tools/reference.py", ["--family", "regen", "--seeds", "3", "--root", str(tmp_path)], cwd=tmp_path)
    assert p.returncode == 0 and "nothing to do" in p.stdout


def edited_after_its_run(path):
    """The checksum its run would have written beside it, then one byte more in the file (valid JSON still)."""
    path.with_name(path.name + ".sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "\n")
    path.write_text(path.read_text() + " ")


def copy_reference(dst, pairs):
    import shutil
    for src, name in pairs:
        shutil.copytree(archive.resolve(os.path.join(ROOT, "results", "reference", src)), dst / name)


@pytest.mark.parametrize("damage,says", [
    (lambda d: (d / "continual-s10" / "results.json").write_text("{bad"), "not valid JSON"),
    (lambda d: copy_reference(d, [("continual-s11", "continual-s12")]), "seed 11's results, not seed 12's"),
    (lambda d: ((d / "math-s10").mkdir(), (d / "math-s10" / "results.json").mkdir()), "is not a file"),
    (lambda d: copy_reference(d, [("math-s11", "tooluse-s11")]), "not on tooluse's stages"),
    # a results.json edited after its run wrote it (still valid JSON, the right seed): its checksum says so
    (lambda d: edited_after_its_run(d / "continual-s10" / "results.json"),
     "is not what its run wrote"),
])
def test_the_summary_trusts_no_results_file(tmp_path, damage, says):
    copy_reference(tmp_path, [("continual-s10", "continual-s10")])
    (tmp_path / "report.md").write_text("the committed report")
    damage(tmp_path)
    p = run("tools/reference.py", ["--summary", "--root", str(tmp_path)], cwd=tmp_path)
    line = one_error_line(p)
    assert says in line and str(tmp_path) in line
    assert (tmp_path / "report.md").read_text() == "the committed report"


@pytest.mark.parametrize("family", ["paper", "equal", "frontier"])
def test_a_summary_never_writes_over_a_file_it_did_not_make(tmp_path, family):
    """Round six: `--summary --root DIR` wrote DIR/report.md over the user's own file, even with no
    finished seed there. Now: nothing to summarise, or a report.md not its own, is one line and nothing written."""
    (tmp_path / "report.md").write_text("my own notes")
    p = run("tools/reference.py", ["--family", family, "--summary", "--root", str(tmp_path)], cwd=tmp_path)
    assert "no finished seed" in one_error_line(p) and (tmp_path / "report.md").read_text() == "my own notes"
    if family == "paper":   # with a finished seed, still not over a file it did not make
        copy_reference(tmp_path, [("continual-s10", "continual-s10")])
        p = run("tools/reference.py", ["--summary", "--root", str(tmp_path)], cwd=tmp_path)
        assert "is not a report this command wrote" in one_error_line(p)
        assert (tmp_path / "report.md").read_text() == "my own notes"


def test_a_failed_child_is_one_line_and_its_log_is_kept(tmp_path):
    (tmp_path / "continual-s10").mkdir()
    (tmp_path / "continual-s10" / "mine.txt").write_text("not a run")
    for attempt in (1, 2):
        p = run("tools/reference.py", ["--family", "regen", "--seeds", "10", "--root", str(tmp_path)], cwd=tmp_path)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        line = [x for x in p.stderr.splitlines() if x.startswith("error:")][-1]
        assert "continual-s10 stopped (exit 2)" in line and "not a run of continual.py" in line
        assert (tmp_path / "continual-s10.out").read_text().count("=== ") == attempt   # the older log kept
    assert (tmp_path / "continual-s10" / "mine.txt").read_text() == "not a run"


def children_of(root):
    """The pids of continual.py processes writing under `root`."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if pid.isdigit() and b"continual.py" in b" ".join(cmd) and str(root).encode() in b" ".join(cmd):
            found.append(int(pid))
    return found


def test_killing_the_runner_ends_its_children(tmp_path):
    p = start("tools/reference.py", ["--family", "regen", "--seeds", "10", "--root", str(tmp_path)], tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline and not children_of(tmp_path):
        time.sleep(0.2)
    assert children_of(tmp_path), "the runner started no child"
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    deadline = time.time() + 90
    while time.time() < deadline and children_of(tmp_path):
        time.sleep(0.5)
    assert not children_of(tmp_path), "an orphan continual.py outlived its runner"


# ----------------------------------------------------------------------------------------------
# Every flag bounded; a flag that changes nothing says so
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script,args,says", [
    ("continual.py", ["--lr", "1e-320"], "--lr"),
    ("continual.py", ["--method", "sdpo", "--topk", "100000"], "larger than tiny's vocabulary"),
    ("continual.py", ["--method", "sdpo", "--anchor", "1e300"], "--anchor"),
    ("continual.py", ["--method", "sdpo", "--base-kl", "1e300"], "--base-kl"),
    ("tools/gpu_check.py", ["check", "/tmp/x", "--tol", "inf"], "--tol"),
    ("tools/gpu_check.py", ["check", "/tmp/no-such-reference-here"], "no reference there"),
    ("tools/world.py", ["w2", "--lr-grpo", "inf"], "--lr-grpo"),
    ("tools/world.py", ["w2", "--lr-sdpo", "-1"], "--lr-sdpo"),
    ("tools/world.py", ["w2", "--jobs", "0"], "--jobs"),
    # round six: every size has a ceiling a typo cannot pass
    ("continual.py", ["--method", "grpo", "--epochs", "100000"], "--epochs must be in [1, 64]"),
    ("continual.py", ["--curve-k", "5000000"], "--curve-k must be in [1, 1024]"),
    ("continual.py", ["--curve-n", "5000000"], "--curve-n must be in [1, 4096]"),
    ("continual.py", ["--kl-samples", "100000"], "--kl-samples must be in [1, 1024]"),
])
def test_bounded_flags(tmp_path, script, args, says):
    assert says in one_error_line(run(script, args, cwd=tmp_path))


def test_world_errors_on_a_fresh_clone_says_what_to_run_first(tmp_path):
    assert "run `python tools/world.py w2` first" in one_error_line(run("tools/world.py", ["errors"], cwd=tmp_path))


@pytest.mark.parametrize("args,says", [
    (["--method", "grpo", "--alpha", "0.5"], "--alpha is read only by SDPO"),
    (["--method", "sdpo", "--teacher", "live", "--alpha", "0.5"], "never moves by it"),
    (["--method", "sdpo", "--replay", "0.2", "--stages", "math"], "--replay"),
])
def test_a_flag_that_changes_nothing_is_named(capsys, args, says):
    import continual
    continual.parse_args(args)
    assert says in capsys.readouterr().err


def test_locks_and_caches_live_in_a_private_folder_of_this_user(tmp_path, monkeypatch):
    """Round five: the run-lock folder and the archive cache had fixed names in /tmp, so a second user could never
    run continual.py, or could plant a link or an empty cache there. Now <tmp>/sdpo-<uid>, mode 700, checked."""
    import stat
    import tempfile
    from infra import safety
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = safety.private_temp("run-locks")
    base = tmp_path / f"sdpo-{os.getuid()}"
    assert path == str(base / "run-locks") and stat.S_IMODE(os.stat(base).st_mode) == 0o700
    assert safety.lock_path("runs/x").startswith(str(base))
    os.chmod(base, 0o777)   # open to others: refused, nothing read from it
    with pytest.raises(OSError, match="not this user's private folder"):
        safety.private_temp("results")
    os.chmod(base, 0o700)
    shutil.rmtree(base)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", base)   # a link planted in its place: refused
    with pytest.raises(OSError, match="not this user's private folder"):
        safety.private_temp("results")


# ----------------------------------------------------------------------------------------------
# A full disk while a checkpoint is written (round five): one line, no .tmp left, the old one stands
# ----------------------------------------------------------------------------------------------
FULL_DISK = ("import sys, transformers, safetensors; "
             "def full(self, *a, **k): raise safetensors.SafetensorError('Error while serializing: I/O error: "
             "No space left on device (os error 28)')\n"
             "transformers.PreTrainedModel.save_pretrained = full\n"
             "sys.path.insert(0, %r); sys.argv = [%r] + %r\n"
             "import runpy; runpy.run_path(%r, run_name='__main__')")


def full_disk_run(script, args, cwd):
    code = FULL_DISK % (ROOT, script, args, os.path.join(ROOT, script))
    return subprocess.run([sys.executable, "-c", code.replace("; def", "\ndef")], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


def test_a_full_disk_while_saving_a_checkpoint_leaves_the_old_one_and_no_tmp(tmp_path, monkeypatch):
    import safetensors
    import transformers
    from infra.models import load_model
    model, tok = load_model("tiny")
    out = str(tmp_path / "ckpt")
    save_checkpoint(model, tok, out)
    before = sorted(os.listdir(out))

    def full(self, *a, **k):
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full)
    with pytest.raises(OSError) as e:
        save_checkpoint(model, tok, out)
    assert e.value.filename == out and "No space left on device" in e.value.strerror
    assert sorted(os.listdir(tmp_path)) == ["ckpt"] and sorted(os.listdir(out)) == before   # no .tmp, old intact


@pytest.mark.parametrize("script,args", [
    ("continual.py", ["--method", "grpo", "--mini-batches", "2", "--stages", "math", "--benchmarks", "math", "--steps", "1",
                      "--prompts-per-step", "2", "--group-size", "2", "--eval-n", "2", "--eval-k", "1",
                      "--max-new-tokens", "16", "--curve-every", "0", "--no-drift", "--threads", "1"]),
])
def test_a_full_disk_under_a_run_is_one_line_and_leaves_no_tmp(tmp_path, script, args):
    p = full_disk_run(script, args, tmp_path)
    lines = [line for line in p.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines[-1].startswith("error: ") and "the checkpoint could not be written" in lines[-1] \
        and "No space left on device" in lines[-1], lines[-1]
    left = [os.path.join(d, n) for d, dirs, files in os.walk(tmp_path) for n in dirs + files if n.endswith(".tmp")]
    assert not left, left


KL_RUN = ["--method", "grpo", "--kl-coef", "0.5", "--stages", "math", "--benchmarks", "math", "--steps", "8",
          "--prompts-per-step", "2", "--group-size", "4", "--eval-n", "4", "--eval-k", "2", "--max-new-tokens", "40",
          "--curve-every", "0", "--seed", "5", "--mini-batches", "2", "--no-drift", "--threads", "1", "--lr", "1e-3"]


def test_grpo_with_a_kl_term_resumes_against_the_stage_s_start(tmp_path):
    """A stopped GRPO stage with --kl-coef resumes with (G4)'s reference as it was, θ_{k−1}: the stop
    saves it beside the student, as SDPO's teacher. Before, the resumed stage rebuilt it from the stopped weights:
    the k3 KL after the resume fell to ~0 and results.json differed."""
    whole = start("continual.py", KL_RUN + ["--name", "whole"], tmp_path)
    whole.communicate(timeout=900)
    assert whole.returncode == 0
    p = start("continual.py", KL_RUN + ["--name", "cut"], tmp_path)
    wait_for_lines(tmp_path / "runs" / "cut" / "log.jsonl", 3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 130 and "interrupted" in err, err
    again = start("continual.py", KL_RUN + ["--name", "cut"], tmp_path)
    out, _ = again.communicate(timeout=900)
    assert again.returncode == 0 and "resuming stage" in out
    kl = lambda name: [json.loads(line).get("kl") for line in (tmp_path / "runs" / name / "log.jsonl").open()]   # noqa: E731
    assert kl("cut") == kl("whole") and max(kl("whole")[4:]) > 0
    assert results_of(tmp_path, "cut") == results_of(tmp_path, "whole")


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    """Round six: write_atomically's temporary file is each writer's own (mkstemp beside the target). Two summaries
    writing one report at once both finish; the report is one of them, whole; nothing is left behind."""
    path, errors, gate = str(tmp_path / "report.md"), [], threading.Barrier(2)

    def writer(text):
        def write(f):
            gate.wait(timeout=10)   # both temporary files are open at once
            f.write(text)
        try:
            checkpoints.write_atomically(path, write)
        except Exception as e:   # noqa: BLE001  (any error is the failure)
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(t * 1000,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and open(path).read() in ("a" * 1000, "b" * 1000)
    assert os.listdir(tmp_path) == ["report.md"] and os.stat(path).st_mode & 0o777 == 0o666 & ~checkpoints.UMASK
