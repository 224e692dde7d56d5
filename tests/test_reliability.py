"""Numerical faults stop before the step; same seed -> same results; SIGKILL at a random moment, then resume."""
import json
import os
import random
import signal
import subprocess
import sys
import time
import types

import pytest
import torch

import grpo
import sdpo
from conftest import config_for
import train
from infra.distributed import NonFiniteError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def batch_for(tok):
    p = tok("Q", add_special_tokens=False)["input_ids"]
    texts = ["\\boxed{1}", "\\boxed{2}", "\\boxed{1}", "x"]
    return {"prompt_ids": [p] * 4, "response_ids": [tok(t, add_special_tokens=False)["input_ids"] for t in texts],
            "texts": texts, "records": [{"prompt": "Q", "kind": "math", "answer": "1"}] * 4,
            "rewards": torch.tensor([1., 0, 1, 0]), "group_size": 4}


def args_for(**kw):
    base = dict(adv_std=False, epochs=1, mini_batches=1, micro_batch=0, kl_coef=0.0, epsilon=0.2, epsilon_high=0.28,
                loss_agg="token-mean", max_grad_norm=1.0, seed=0, alpha=0.05, beta=0.5, topk=None, cot=False,
                refresh_every=0, gamma=1.0, clip_ratio_c=3.0, mask_ratio=0.0, feedback=False, sample_blocks=0,
                mini_batch_order="balanced")
    base.update(kw)
    return types.SimpleNamespace(**base)


def poison(model):
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")  # tied with the embeddings: every forward is NaN


def flat(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_grpo_nan_stops_before_the_step(fresh_tiny):
    model, tok = fresh_tiny
    poison(model)
    before = flat(model).clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError):
        train.update(model, opt, grpo, grpo.GRPOConfig(mini_batches=1), None, batch_for(tok), args_for(), tok, 1)
    assert torch.equal(flat(model).nan_to_num(7.0), before.nan_to_num(7.0))  # the step was not applied


def test_sdpo_nan_never_reaches_the_teacher(fresh_tiny):
    model, tok = fresh_tiny
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    teacher = sdpo.frozen_model(model, sdpo.SDPOConfig())
    teacher_before = flat(teacher).clone()
    poison(model)
    with pytest.raises(NonFiniteError):   # the update raises before the step; the schedule refuses too
        train.update(model, opt, sdpo, config_for(sdpo.SDPOConfig, args_for()), teacher, batch_for(tok), args_for(), tok, 1)
    with pytest.raises(NonFiniteError):
        sdpo.after_step(teacher, model, 1, sdpo.SDPOConfig())
    assert torch.equal(flat(teacher), teacher_before)
    assert torch.isfinite(flat(teacher)).all()


SMOKE = ["--method", "grpo,sdpo", "--stages", "math,coding", "--benchmarks", "math,coding",
         "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--eval-n", "4", "--eval-k", "2",
         "--max-new-tokens", "40", "--curve-every", "0", "--seed", "5", "--mini-batches", "2"]


def cli(args, cwd):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "continual.py"), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def results_of(cwd, name):
    r = json.loads((cwd / "runs" / name / "results.json").read_text())
    for run in r["runs"].values():
        run["checkpoints"] = [os.path.basename(c) for c in run["checkpoints"]]
    return r


def test_same_seed_same_results_and_sigkill_then_resume(tmp_path):
    # (determinism, same machine: a run killed at a random moment and resumed equals one run through; when
    # the kill lands after the last write, the second run is a plain rerun of the same command)
    p = cli(SMOKE + ["--name", "a"], tmp_path)
    p.communicate(timeout=300)
    assert p.returncode == 0
    delay = random.Random(1234).uniform(2.0, 9.0)                      # a seeded random moment
    p = cli(SMOKE + ["--name", "k"], tmp_path)
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode in (0, -signal.SIGKILL)   # killed mid-run (or, rarely, after its last write)
    p = cli(SMOKE + ["--name", "k"], tmp_path)                          # the same command again
    p.communicate(timeout=300)
    assert p.returncode == 0
    assert results_of(tmp_path, "k") == results_of(tmp_path, "a")


def test_ctrl_c_saves_the_stage_and_resume_matches(tmp_path):
    ref6 = cli(SMOKE + ["--name", "ref6", "--steps", "6"], tmp_path)
    ref6.communicate(timeout=300)
    assert ref6.returncode == 0
    p = cli(SMOKE + ["--name", "c", "--steps", "6"], tmp_path)   # longer stages, so Ctrl-C lands in training
    deadline = time.time() + 120
    log = tmp_path / "runs" / "c" / "log.jsonl"
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 2):
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert (tmp_path / "runs" / "c" / "partial" / "optimizer.pt").exists()
    again = cli(SMOKE + ["--name", "c", "--steps", "6"], tmp_path)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0
    assert "resuming stage" in out
    assert results_of(tmp_path, "c") == results_of(tmp_path, "ref6")
    assert not (tmp_path / "runs" / "c" / "partial").exists()


def test_threads_follow_omp_num_threads_else_every_core():
    """infra.setup_torch: OMP_NUM_THREADS, when set, is the thread count (the suite's workers run so); else
    every core this process may use; under torchrun the cores divided among the machine's ranks, whatever
    OMP_NUM_THREADS torchrun put there itself."""
    code = "from infra import distributed; import torch; distributed.setup_torch('cpu'); print(torch.get_num_threads())"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_RANK", "WORLD_SIZE")}

    def threads(**extra):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                             env=dict(env, PYTHONPATH=ROOT, **extra))
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    cores = len(os.sched_getaffinity(0))
    assert threads() == cores
    assert threads(OMP_NUM_THREADS="1") == 1   # (on one core this cannot tell the two apart; CI has two)
    assert threads(OMP_NUM_THREADS="1", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1") == cores
