"""torchrun with FSDP2 on CPU (gloo): 2 ranks, each holding half of every weight, give the same losses,
gradient norms and saved weights (for SDPO, step 2's loss is the GJSD to the teacher step 1's EMA made, T1) as one
process with the same global batch (--sample-blocks 2 samples exactly what the two ranks sample), and log the same
per-token statistics and shares. A one-stage continual.py run, as a single-domain run is."""
import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One learning rate for both scripts, not the world's tuned defaults (flags.LR). AdamW turns the float
# rounding of a different summation order into weight differences that grow with the step size: about
# 1% of one step (1.2e-6 at lr 1e-4, measured on design 7c's base). A real data-parallel bug (a rank's
# half of the gradient lost, a shard saved twice) moves a weight by the order of a whole step, lr.
LR = 1e-4
COMMON = ["continual.py", "--stages", "math", "--benchmarks", "math", "--no-drift", "--curve-every", "0", "--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24",
          "--eval-n", "4", "--eval-k", "2", "--device", "cpu", "--seed", "1", "--lr", str(LR)]
TOL = 0.05 * LR   # max |Δw| between the 2-rank and the 1-process weights (summation order differs, nothing else)


def run(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stdout[-1500:] + out.stderr[-3000:]
    return out


# GRPO with two optimizer steps per batch (each on one group of every rank): the π_old and mini-batch
# paths run under torchrun too; SDPO with token masking drawn per step and its EMA teacher. (GRPO's KL
# reference is checked in test_fsdp.py: where the true gradient is 0, AdamW turns float-rounding noise
# into a full lr step, so a run with it cannot match one process to TOL.)
EXTRA = {"grpo": ["--method", "grpo", "--mini-batches", "2"], "sdpo": ["--method", "sdpo", "--mask-ratio", "0.2"]}
CHECKPOINT = {"grpo": "grpo_mb2", "sdpo": "sdpo_a0.05_mask0.2"}
STATS = {"grpo": ["entropy", "clip_frac", "clip_frac_by_step", "groups_with_signal"],   # (logged over the whole batch)
         "sdpo": ["js", "entropy", "teacher_entropy", "reprompt_frac", "demo_frac", "feedback_frac",
                  "distilled_token_frac", "skipped"]}   # (the configuration's name: its checkpoints' folder)


@pytest.mark.parametrize("method", ["grpo", "sdpo"])
def test_torchrun_two_ranks_equal_one_process(tmp_path, method):
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              os.path.join(ROOT, COMMON[0]), *COMMON[1:], *EXTRA[method], "--name", "dp"]
    # torchrun's agent picks its ports by bind-and-release, which can race with other processes: a
    # failed *launch* is retried once (a real failure fails twice; the numbers below are deterministic)
    first = subprocess.run(launch, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PYTHONPATH=ROOT))
    if first.returncode != 0:
        print("first torchrun launch failed, retrying once:\n" + first.stderr[-2000:])
        run(launch, tmp_path)
    run([sys.executable, os.path.join(ROOT, COMMON[0]), *COMMON[1:], *EXTRA[method], "--sample-blocks", "2", "--name",
         "single"], tmp_path)
    # the same samples: identical rewards and response lengths, step by step
    logs = {d: [json.loads(l) for l in (tmp_path / "runs" / d / "log.jsonl").read_text().splitlines()
                if '"step"' in l] for d in ("dp", "single")}
    assert len(logs["dp"]) == 2
    if method == "sdpo":   # not vacuous: at least one step distilled something
        assert any(r["skipped"] == 0 for r in logs["single"])
    for a, b in zip(logs["dp"], logs["single"]):
        assert a["reward"] == b["reward"] and a["response_len"] == b["response_len"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5, abs=1e-7)   # the summed gradients
        # what the step logs is the whole batch's, not rank 0's half of it: per-token means and shares
        for key in STATS[method]:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), f"{key}: 2 ranks {a[key]}, 1 process {b[key]}"
    base = load_file(os.path.join(ROOT, "world/tiny_model", "model.safetensors"))
    dp, single = (load_file(str(tmp_path / "runs" / d / "checkpoints" / CHECKPOINT[method] / "stage1-math" /
                                "model.safetensors")) for d in ("dp", "single"))
    assert dp.keys() == single.keys() == base.keys()   # one whole Hugging Face checkpoint, gathered
    moved = max((dp[k] - base[k]).abs().max().item() for k in dp)
    diff = max((dp[k] - single[k]).abs().max().item() for k in dp)
    assert moved > 1e-7, "training did not change the weights"
    assert diff <= TOL, f"2 ranks vs 1 process: max |dw| = {diff:.2e} (weights moved {moved:.2e})"


# A rank that leaves while a collective it issued is still running (FSDP2 can: its process group outlives
# destroy_process_group) must not abort at exit. Rank 1 issues an all-gather, leaves it unwaited and exits,
# with a slow object torn down while the interpreter finalizes; rank 0 joins the all-gather a second later.
# Without the barrier at exit (infra.distributed.leave_process_group) gloo's thread finished that all-gather
# during the teardown and aborted: "terminate called without an active exception", torchrun failed.
LEAVER = """
import sys, time
import torch
import torch.distributed as dist
from infra import distributed
distributed.init_distributed("cpu")
KEEP = dist.distributed_c10d._get_default_group()   # as FSDP2 holds it

class SlowTeardown:
    def __del__(self):
        time.sleep(2.0)

SLOW = SlowTeardown()
rank = dist.get_rank()
if rank == 0:
    time.sleep(1.0)
out = [torch.zeros(1000) for _ in range(2)]
work = dist.all_gather(out, torch.full((1000,), float(rank)), async_op=True)
if rank == 0:
    work.wait()
    assert out[1][0].item() == 1.0
del out, work
"""


def test_a_rank_leaving_a_running_all_gather_exits_cleanly(tmp_path):
    (tmp_path / "leaver.py").write_text(LEAVER)
    for _ in range(2):
        out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   str(tmp_path / "leaver.py")], ROOT)
        assert "terminate called" not in out.stdout + out.stderr
