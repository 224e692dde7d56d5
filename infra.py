"""infra.py — the plumbing, kept apart from the equations: ranks, Ctrl-C, atomic files, one optimizer step.

Nothing here is in the paper. A reader following the math can skip this file: grpo.py and sdpo.py
call `optimizer_step` (accumulate micro-batch gradients → sum over ranks → check finite → clip →
AdamW), train.py and continual.py call the rest.

Data parallelism (torchrun): every rank holds the whole model, samples and grades its own prompts,
and the gradients are summed across ranks before the optimizer step, so every rank applies the same
update and the weights stay bit-identical. Losses are normalised by *global* counts (tokens,
sequences), so the summed gradient is the full-batch gradient. In one process (world size 1) every
function below is a no-op.
"""
import hashlib
import json
import os
import shutil
import signal
import sys

import torch
import torch.distributed as dist


# ----------------------------------------------------------------------------------------------
# Devices and threads
# ----------------------------------------------------------------------------------------------
_THREADS_SET = False


def setup_torch(device="auto", threads=0):
    """Pick the device (CUDA when present for 'auto') and set torch's CPU threads.

    threads 0 (the default): every core this process may use, divided among the torchrun ranks of the
    machine: the fastest choice on an otherwise idle machine. On cores that something else is using,
    torch's threads wait for each other at every operation and a step can take 10-20× longer
    (docs/RESULTS.md): pass --threads 1 there, or run one job at a time.
    """
    global _THREADS_SET
    if threads > 0:
        torch.set_num_threads(threads)
        _THREADS_SET = True
    if not _THREADS_SET:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        # torchrun on CPU: the cores are shared by the ranks of this machine
        torch.set_num_threads(max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
        _THREADS_SET = True
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


# ----------------------------------------------------------------------------------------------
# Ranks (torchrun)
# ----------------------------------------------------------------------------------------------
def init_distributed(device_arg="auto", threads=0):
    """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on CUDA, gloo on CPU); returns the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        use_cuda = device_arg != "cpu" and torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if use_cuda else "gloo")
    device = setup_torch(device_arg, threads)
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    if not is_main():   # non-zero ranks print nothing to stdout (their summaries would repeat rank 0's)
        sys.stdout = open(os.devnull, "w")
    return device


def rank_and_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main():
    """Only rank 0 writes files and prints summaries."""
    return rank_and_world()[0] == 0


def global_sum(x):
    """Σ over ranks of a Python number (identity in one process)."""
    if rank_and_world()[1] == 1:
        return x
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def sum_gradients(model):
    """Σ over ranks of every parameter's gradient (optimizer_step has given every parameter one)."""
    if rank_and_world()[1] == 1:
        return
    for p in model.parameters():
        if p.requires_grad:
            dist.all_reduce(p.grad)


def gather_lists(local):
    """Concatenate a Python list from every rank, in rank order (the same result on every rank)."""
    world = rank_and_world()[1]
    if world == 1:
        return local
    parts = [None] * world
    dist.all_gather_object(parts, local)
    return [x for part in parts for x in part]


def my_share(n, rank=None, world=None):
    """The contiguous range of n items that this rank owns (n divisible by the world size)."""
    if rank is None:
        rank, world = rank_and_world()
    per = -(-n // world)
    return range(min(n, rank * per), min(n, (rank + 1) * per))


def barrier():
    if rank_and_world()[1] > 1:
        dist.barrier()


def weights_digest(model):
    """sha1 of every parameter's bytes: equal digests = bit-identical weights."""
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# One optimizer step from micro-batches (the mechanics shared by GRPO and SDPO)
# ----------------------------------------------------------------------------------------------
class NonFiniteError(RuntimeError):
    """A loss or gradient was NaN/inf: the step was not applied."""


def check_finite(loss, model):
    """Raise NonFiniteError when the loss or any gradient is NaN/inf (the optimizer step is skipped)."""
    if not torch.isfinite(loss).all():
        raise NonFiniteError(f"non-finite loss ({loss.item()})")
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            raise NonFiniteError(f"non-finite gradient in {name}")


def optimizer_step(model, opt, micro_batch_indices, loss_of, max_grad_norm):
    """Accumulate `loss_of(idx)` over the micro-batches, sum gradients over ranks, check, clip, step.

    loss_of(idx) -> (loss tensor, stats dict of floats) for one micro-batch; each loss must already
    be divided by the *whole* batch's count, so that the summed gradient is the full-batch gradient
    whatever the split. Returns (total loss over all ranks, list of the micro-batches' stats).
    Raises NonFiniteError before the step on a non-finite loss or gradient (the weights stay as they
    were), and after it when the step itself made a weight non-finite.
    """
    opt.zero_grad(set_to_none=True)
    total, stats = torch.zeros(()), []
    for idx in micro_batch_indices:
        loss, st = loss_of(idx)
        loss.backward()
        total = total + loss.detach().cpu()
        stats.append(st)
    for p in model.parameters():   # no data here (or no signal): zero gradients, and AdamW still steps
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    sum_gradients(model)                                # data parallel: Σ_ranks ∇ = the full-batch gradient
    total = torch.tensor(global_sum(total.item()))
    check_finite(total, model)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    opt.step()
    for name, p in model.named_parameters():   # a step that overflows (--lr far too large) stops here
        if not torch.isfinite(p).all():
            raise NonFiniteError(f"the optimizer step made {name} non-finite (is --lr too large?)")
    return total.item(), stats


# ----------------------------------------------------------------------------------------------
# Ctrl-C at a step boundary
# ----------------------------------------------------------------------------------------------
class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training, raised at a step boundary: `completed_steps` steps are fully applied."""

    def __init__(self, completed_steps):
        super().__init__(completed_steps)
        self.completed_steps = completed_steps


class StepBoundarySigint:
    """While active, the first Ctrl-C (SIGINT) only sets `requested`; the loop stops at the end of the
    current step, so a saved state is never half an optimizer step. A second Ctrl-C interrupts at once."""

    def __enter__(self):
        self.requested = False
        self._old = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
        try:
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: leave Ctrl-C as it is
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False


# ----------------------------------------------------------------------------------------------
# Files that survive a crash
# ----------------------------------------------------------------------------------------------
def save_checkpoint(model, tok, out_dir, extra=None):
    """save_pretrained into a temporary sibling directory, then rename it into place (atomic swap).

    A crash at any moment leaves either the old checkpoint or the new one, never half of one.
    `extra`: optional {filename: object} saved with torch.save beside the weights (optimizer, RNG...).
    """
    out_dir = out_dir.rstrip("/")
    tmp, old = out_dir + ".tmp", out_dir + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for name, obj in (extra or {}).items():
        torch.save(obj, os.path.join(tmp, name))
    if os.path.exists(out_dir):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def append_jsonl(path, row):
    """One JSON line per step (flushed, so a killed run keeps every finished step)."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def read_jsonl(path):
    """(rows, bad line numbers) of a JSON-lines file: a line cut by a kill, or garbage, is reported, not fatal."""
    rows, bad = [], []
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not an object")
                rows.append(row)
            except ValueError:
                bad.append(n)
    return rows, bad


def atomic_json(path, obj):
    """Write JSON to path.tmp, then rename: readers see the old file or the new one. Rank 0 only."""
    if not is_main():
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)
