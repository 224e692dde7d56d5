"""infra/distributed.py — several processes (torchrun) and one optimizer step's mechanics, kept apart from the equations.

Nothing here is in the paper. Several GPUs (torchrun): PyTorch's FSDP2 (`fully_shard`, per decoder layer and the root).
Each rank holds 1/N of every weight (fp32 master weights), of its gradient and of AdamW's states; a layer's
weights are all-gathered (in bf16 with `--dtype bf16`) just before the layer runs and freed after;
gradients are reduce-scattered in fp32 and *summed* over ranks. Each rank samples and grades its own
prompts; losses are normalised by *global* counts (tokens, sequences), so the summed gradient is the
full-batch gradient. SDPO's teacher (and GRPO's reference) is sharded the same way, so the EMA (T1)
updates each rank's shard from the student's matching shard. Under torchrun this holds even for one
process (one GPU runs the code that sixty-four run). Without torchrun nothing is sharded and every
collective below is a no-op; `--dtype bf16` then means bf16 autocast over fp32 weights (`infra/models.py`).

The paper's loop (train.py) enters here through frankly named calls: `whole_batch(plan)` (the step's counts
over every process), `clip_and_step(...)` (the checked, clipped optimizer step), `my_sample_blocks`.
"""
import atexit
import contextlib
import datetime
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

# (torch.distributed.fsdp and .checkpoint take 1.2 s to import, and only torchrun runs need them: they
# are imported where a model is sharded, below, so that every other command starts that much sooner)


# ----------------------------------------------------------------------------------------------
# Devices and threads
# ----------------------------------------------------------------------------------------------
_THREADS_SET = False


def setup_torch(device="auto", threads=0):
    """Pick the device (CUDA when present for 'auto') and set torch's CPU threads.

    threads 0 (the default): OMP_NUM_THREADS when it is set (outside torchrun, which sets it itself),
    else every core this process may use, divided among the torchrun ranks of the machine: the fastest
    choice on an otherwise idle machine. On cores that something else is using, torch's threads wait for
    each other at every operation and a step can take 10-20× longer (docs/HISTORY.md): pass --threads 1
    (or set OMP_NUM_THREADS=1) there, or run one job at a time.
    """
    global _THREADS_SET
    # CUDA: let freed blocks of one shape (generation's cache) serve another (the update's activations)
    # instead of fragmenting; read when CUDA first allocates, so set before that (a user's setting stands)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if threads > 0:
        torch.set_num_threads(threads)
        _THREADS_SET = True
    if not _THREADS_SET and os.environ.get("OMP_NUM_THREADS") and not under_torchrun():
        _THREADS_SET = True   # torch took its thread count from OMP_NUM_THREADS when it started: it stands
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
def under_torchrun():
    """Launched by torchrun (even with one process): the sharded path (FSDP2) is taken."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(device_arg="auto", threads=0):
    """Join the torchrun process group (NCCL on CUDA, gloo on CPU), even for one process: under torchrun
    the model is always sharded, so one GPU runs the same code as many. Returns the device."""
    if under_torchrun() and not dist.is_initialized():
        use_cuda = device_arg != "cpu" and torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        # CUDA tensors over NCCL, the small CPU ones (counts, Python objects) over gloo
        # (a long wait is normal: rank 0 alone measures drift, the others wait for it)
        dist.init_process_group("cuda:nccl,cpu:gloo" if use_cuda else "gloo", timeout=datetime.timedelta(hours=2))
        atexit.register(leave_process_group)
    device = setup_torch(device_arg, threads)
    if dist.is_initialized() and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    if not is_main():   # non-zero ranks print nothing to stdout (their summaries would repeat rank 0's)
        sys.stdout = open(os.devnull, "w")
    return device


def leave_process_group():
    """At exit: wait for the other ranks (gloo), then destroy the process group before the interpreter tears
    down; else gloo's threads could finish a collective, or be destroyed, while it does ("terminate called without
    an active exception", a SIGABRT, a failed torchrun after the work had finished: tests/test_distributed.py)."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "gloo":
            with contextlib.suppress(RuntimeError):   # (a rank that failed never comes: wait two minutes at most)
                dist.barrier(async_op=True).wait(timeout=datetime.timedelta(minutes=2))
            time.sleep(0.1)   # (and gloo's threads a moment to free what they finished)
        dist.destroy_process_group()


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


def global_max(x):
    """max over ranks of a Python number (identity in one process)."""
    if rank_and_world()[1] == 1:
        return x
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def gather_lists(local):
    """Concatenate a Python list from every rank, in rank order (the same result on every rank)."""
    world = rank_and_world()[1]
    if world == 1:
        return local
    parts = [None] * world
    dist.all_gather_object(parts, local)
    return [x for part in parts for x in part]


def first_global_index(n_local):
    """The index, in the whole batch (all ranks, in rank order), of this rank's first of its n_local
    items: one all-gather (0 in one process)."""
    return sum(gather_lists([n_local])[:rank_and_world()[0]])


def my_share(n, rank=None, world=None):
    """The contiguous range of n items that this rank owns (n divisible by the world size)."""
    if rank is None:
        rank, world = rank_and_world()
    per = -(-n // world)
    return range(min(n, rank * per), min(n, (rank + 1) * per))


def sample_blocks_per_step(sample_blocks=0):
    """How many blocks a step's prompts are cut into: --sample-blocks, or one per process (read from
    torchrun's environment, so that the flags can be checked before the process group exists)."""
    return sample_blocks or int(os.environ.get("WORLD_SIZE", "1"))


def my_sample_blocks(sample_blocks=0):
    """(blocks, this rank's block indices): a step's prompts are cut into `--sample-blocks` blocks
    (default one per rank), each sampled under its own seed (train.sample_and_grade)."""
    rank, world = rank_and_world()
    blocks = sample_blocks or world
    return blocks, my_share(blocks, rank, world)


def barrier():
    if rank_and_world()[1] > 1:
        dist.barrier()


# ----------------------------------------------------------------------------------------------
# Sharding (FSDP2) under torchrun
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def weights_snapshot(model):
    """A copy of this process's part of the weights (its shards under FSDP2), for update_size."""
    return [getattr(p, "to_local", lambda: p)().detach().clone() for p in model.parameters()]


@torch.no_grad()
def update_size(model, before):
    """The size of one batch's update, over every process's shards: ‖Δθ‖/‖θ‖ (θ before the update) and
    the largest per-coordinate move max |Δθ|. A fresh AdamW's first step moves every coordinate with a
    gradient by about the learning rate, whatever the gradient's size."""
    sq_delta, sq_theta, largest = 0.0, 0.0, 0.0
    for p, old in zip(model.parameters(), before):
        delta = (getattr(p, "to_local", lambda: p)().float() - old.float())
        sq_delta += delta.pow(2).sum().item()
        sq_theta += old.float().pow(2).sum().item()
        largest = max(largest, delta.abs().max().item() if delta.numel() else 0.0)
    sq_delta, sq_theta = global_sum(sq_delta), global_sum(sq_theta)
    return {"update_rel": (sq_delta ** 0.5) / max(sq_theta ** 0.5, 1e-30), "update_max": global_max(largest)}


def is_sharded(model):
    if not dist.is_initialized():   # (nothing is sharded without torchrun)
        return False
    from torch.distributed.fsdp import FSDPModule
    return isinstance(model, FSDPModule)


def fsdp_modules(model):
    from torch.distributed.fsdp import FSDPModule
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard(model, device=None):
    """FSDP2 over all ranks: `fully_shard` each decoder layer, then the root (embeddings, final norm,
    LM head); each rank keeps its 1/N of every weight, moved to `device`. When the model computes in
    bf16 over fp32 weights (`model.compute_dtype`, set by models.load_model) a MixedPrecisionPolicy
    all-gathers the fp32 shards as bf16 for compute and reduce-scatters the gradients in fp32.
    Gradients are *summed* over ranks (our losses carry the global normalisation). Without torchrun the
    model is returned as it is. A model that only rank 0 has read (models.load_model under torchrun:
    the other ranks hold it on the meta device) is filled from rank 0's weights, each rank its shard."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    world = rank_and_world()[1]
    if not dist.is_initialized() or is_sharded(model):
        return model
    device = torch.device(device) if device is not None else next(model.parameters()).device
    weights = next(model.parameters()).dtype
    compute = getattr(model, "compute_dtype", weights)
    low = compute if compute != weights else None
    policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32 if low is not None else None)
    from_rank0 = getattr(model, "_weights_on_rank0", False)
    whole = model.state_dict() if from_rank0 and is_main() else {}   # (rank 0: before its weights are cut)
    mesh = init_device_mesh(device.type, (world,))
    for layer in model.get_decoder().layers:               # (Qwen3, Olmo 3, Llama, the tiny model: its blocks)
        fully_shard(layer, mesh=mesh, mp_policy=policy)     # (moves this rank's shard to the device)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if from_rank0:
        if not is_main():
            model.to_empty(device=device)           # meta -> this rank's (uninitialised) shard
        load_full_state_dict(model, whole)          # rank 0's weights, broadcast shard by shard
        for b in model.buffers():                   # (buffers outside the state dict: rotary frequencies)
            dist.broadcast(b, src=0)
        model._weights_on_rank0 = False
    for m in fsdp_modules(model):
        m.set_gradient_divide_factor(1.0)          # Σ over ranks, not the mean
        m.set_force_sum_reduction_for_comms(True)  # (a plain SUM: gloo has no pre-scaled sum)
    model.compute_dtype = compute
    return model


def clone_model(model):
    """A separate copy of a model's weights, sharded the same way (SDPO's teacher, GRPO's reference).
    A sharded model cannot be deep-copied: the copy is built empty on the meta device, sharded, then
    given the same local shards (and buffers), which is exact."""
    if not is_sharded(model):
        import copy
        return copy.deepcopy(model)
    from transformers import AutoModelForCausalLM   # (transformers is imported where a model is built)
    device = next(model.parameters()).device
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(model.config, dtype=next(model.parameters()).dtype)
    twin.compute_dtype = getattr(model, "compute_dtype", None) or next(model.parameters()).dtype
    shard(twin, device)
    twin.to_empty(device=device)
    with torch.no_grad():
        for a, b in zip(twin.parameters(), model.parameters()):
            a.copy_(b)          # DTensor to DTensor: each rank copies its own shard
        for a, b in zip(twin.buffers(), model.buffers()):
            a.copy_(b)          # (rotary frequencies: not sharded)
    twin.generation_config = model.generation_config
    return twin


@contextlib.contextmanager
def gathered(*models):
    """Every rank holds the whole (bf16) weights of these models for a while: forwards whose number
    differs between ranks (sampling, scoring, the teacher) then need no collective. A no-op for
    unsharded models and when already gathered."""
    todo = [m for m in models if m is not None and is_sharded(m) and not getattr(m, "_gathered", False)]
    for model in todo:
        for m in fsdp_modules(model):
            m.set_reshard_after_forward(False)
            m.unshard()
        model._gathered = True
    try:
        yield
    finally:
        for model in todo:
            for m in fsdp_modules(model):
                m.reshard()
                m.set_reshard_after_forward(True)
            model._gathered = False


def full_state_dict(model):
    """The model's whole state dict on CPU: gathered on rank 0 from every rank's shards (every rank must
    call it; the others get {}). Unsharded: the model's own state dict."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state_dict(model, state):
    """Inverse of full_state_dict: rank 0's whole state dict into every rank's shards."""
    if not is_sharded(model):
        return model.load_state_dict(state)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def idle_loss(model):
    """A zero loss through every layer: a rank with fewer micro-batches than the others runs these, so
    that all ranks take part in the same number of sharded forwards and backwards."""
    ids = torch.zeros((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    return model(input_ids=ids).logits.float().sum() * 0.0


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
        if p.grad is not None and not all_finite(p.grad):
            raise NonFiniteError(f"non-finite gradient in {name}")


def all_finite(t):
    """Whether every entry is finite, on every rank's shard (the same answer on all ranks)."""
    ok = bool(torch.isfinite(t.to_local() if hasattr(t, "to_local") else t).all())   # (this rank's part)
    return ok if rank_and_world()[1] == 1 or not hasattr(t, "to_local") else global_sum(0 if ok else 1) == 0


# ----------------------------------------------------------------------------------------------
# The plumbing of one optimizer step (train.update reads as zero, backward, clip, step)
# ----------------------------------------------------------------------------------------------
def idle_micro_batches(model, n_local):
    """Sharded (torchrun): how many idle micro-batches this rank runs after its own n_local, so that every
    rank takes part in as many backwards (and their collectives) as the busiest one. 0 in one process."""
    return int(global_max(n_local)) - n_local if is_sharded(model) else 0


def checked_total(model, total, n_local=0):
    """The step's loss summed over ranks, after its gradients are accumulated; NonFiniteError (before any
    step: the weights stay as they were) on a non-finite loss or gradient. Weights that got no gradient
    (no data here, or no signal) get zeros, and AdamW still steps, as the release does.
    n_local: this rank's micro-batches; under torchrun a rank with fewer than the busiest runs idle ones first."""
    for _ in range(idle_micro_batches(model, n_local)):
        idle_loss(model).backward()
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    total = torch.tensor(global_sum(total.item()))
    check_finite(total, model)
    return total.item()


def clip_gradients(model, max_grad_norm):
    """Clip the whole gradient to norm max_grad_norm; returns its norm before clipping (sharded: whole)."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    return norm.item()


def check_weights(model):
    """NonFiniteError when a weight is non-finite: after an optimizer step (--lr far too large), or before the
    teacher moves toward the student (T1, T2), which then stays as it was."""
    for name, p in model.named_parameters():
        if not all_finite(p):
            raise NonFiniteError(f"the optimizer step made {name} non-finite (is --lr too large?)")


# ----------------------------------------------------------------------------------------------
# The paper's loop enters here (train.update): a batch's counts over every process, one checked step
# ----------------------------------------------------------------------------------------------
class EmptyLossWarning(UserWarning):
    """A step with no token in the loss (SDPO: no successful sibling, no feedback): infra/steps.py says it."""


@contextlib.contextmanager
def whole_batch(plan, frozen, step):
    """One batch's optimizer steps as every process sees them: each step's token and response counts summed over
    the processes (G5, S5: every micro-batch's loss divides by the whole batch's counts, so the summed gradients are
    the whole batch's however it is split), and the method's frozen model(s) gathered for their forwards (their
    number differs between processes, so they need no collective). The plan's "counts" (the logs' shares) are summed
    too. plan: the method's (grpo.GRPOPlan, sdpo.SDPOPlan). One process: the counts as they are.
    A batch with no token in its loss (SDPO: no response had a successful sibling or feedback) is said once."""
    for part in plan.steps:
        part["n_tok"], part["n_seq"] = global_sum(part["n_tok"]), global_sum(part["n_seq"])
    plan.counts = {k: global_sum(v) for k, v in plan.counts.items()}   # (the logs' shares)
    if all(part["n_tok"] == 0 for part in plan.steps) and is_main():   # (infra/steps.py says it, once a stage)
        warnings.warn(f"step {step}", EmptyLossWarning)   # (step: train.update's, counted from 1)
    frozen_models = frozen.values() if isinstance(frozen, dict) else [frozen]   # (beyond/variants.py: a pair)
    with gathered(*frozen_models):
        yield


def clip_and_step(model, opt, total, n_micro, max_grad_norm):
    """One optimizer step, once the micro-batches' gradients are accumulated: the loss summed over processes and
    checked (NonFiniteError before the step on a non-finite loss or gradient: the weights stay as they were), the
    whole gradient clipped to max_grad_norm, AdamW's step, the new weights checked. n_micro: this process's
    micro-batches (under torchrun a process with fewer runs idle ones, so all take part in the collectives).
    Returns (the step's loss, ‖∇‖ before clipping)."""
    total = checked_total(model, total, n_micro)   # Σ over processes; stops if non-finite
    grad_norm = clip_gradients(model, max_grad_norm)
    opt.step()
    check_weights(model)
    return total, grad_norm
