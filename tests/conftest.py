import dataclasses
import os
import signal
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import sdpo  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--documented", action="store_true",
                     help="also run every documented command in its smallest form (tests/test_documented_commands.py; "
                          "about 13 minutes on 2 cores)")


def pytest_configure(config):
    """Under pytest-xdist (the README runs `-n 2`) each worker computes with one torch thread, and so does every
    process a test starts (OMP_NUM_THREADS=1, which infra.setup_torch honours; torchrun's ranks divide the
    cores among themselves as ever). Two workers of one thread each then never put more threads than
    cores on a 2-core machine, where torch's threads would wait for each other at every operation."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    # The suite presses Ctrl-C on the runs it starts. Started in the background of a script (`pytest … &`), it
    # inherits an ignored SIGINT, and so would they: a Ctrl-C outside the training steps would then be lost. Give
    # it back (its children then start with Python's own Ctrl-C handler).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tiny():
    """The committed tiny model and its tokenizer (fp32, CPU)."""
    from infra.distributed import setup_torch
    from infra.models import load_model
    setup_torch("cpu")
    return load_model("tiny", "cpu")


@pytest.fixture
def fresh_tiny(tiny):
    """A private copy of the tiny model (tests that train must not touch the shared one)."""
    import copy
    model, tok = tiny
    return copy.deepcopy(model), tok


def random_logp(*shape, seed=0, sharp=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(sharp * torch.randn(*shape, generator=g, dtype=torch.float64), -1).float()


def gjsd_loss(student_logp, teacher_logp, token_mask, beta=0.5, **kw):
    """What sdpo.micro_batch_loss computes from two log-distributions [b, T, V]: the per-token GJSD (S3) against
    sg[teacher], reduced by sdpo.sdpo_loss (S5). Returns (loss, per-token GJSD [b, T])."""
    per_token = sdpo.generalized_jsd(student_logp, teacher_logp.detach(), beta)
    return sdpo.sdpo_loss(per_token, token_mask, **kw), per_token


def interrupted_copy(run, run_name, keep):
    """A copy of a finished continual run directory (runs/full -> runs/part) as if it had stopped after
    `keep` stages of `run_name`: later progress dropped, results.json removed. Returns the copy's path."""
    import json
    import shutil
    part = run.parent / "part"
    shutil.copytree(run, part)
    progress = json.loads((part / "progress.json").read_text())
    progress[run_name]["stages"] = progress[run_name]["stages"][:keep]   # (its checkpoint paths still say runs/full:
    # a run directory is read from where it is, whatever the paths it recorded, infra.stage_checkpoint)
    (part / "progress.json").write_text(json.dumps(progress))
    (part / "results.json").unlink()
    return part


def results_as_if_full(part):
    """results.json of a resumed copy, with its checkpoint paths renamed back to runs/full."""
    import json
    again = json.loads((part / "results.json").read_text())
    for r in again["runs"].values():
        r["checkpoints"] = [c.replace("runs/part", "runs/full") for c in r["checkpoints"]]
    return again


def config_for(table, args):
    """A method's knobs as continual.py hands them (grpo.GRPOConfig, sdpo.SDPOConfig, …): each field's value in a
    test's namespace `args`, its default where the namespace has none."""
    return table(**{f.name: getattr(args, f.name) for f in dataclasses.fields(table) if hasattr(args, f.name)})
