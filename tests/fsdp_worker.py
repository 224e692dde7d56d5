"""Run under torchrun (2 CPU ranks, gloo) by tests/test_fsdp.py: the sharded path's plumbing, checked.

    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_worker.py state OUT_DIR
    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_worker.py memory OUT_DIR
    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_worker.py both OUT_DIR
Rank 0 writes OUT_DIR/state.json and OUT_DIR/memory.json with what it found.
"""
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from infra import memory    # noqa: E402
from infra import commands, flags    # noqa: E402
import grpo     # noqa: E402
from infra import checkpoints, distributed    # noqa: E402
from infra import models    # noqa: E402
import rollout  # noqa: E402
import sdpo     # noqa: E402
import train  # noqa: E402
from world import tasks    # noqa: E402


def step(model, opt, ids):
    """One AdamW step of a next-token loss (the same on every rank: the gradient is summed over ranks)."""
    logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def check_state(out):
    """Checkpoint, optimizer state and teacher survive a save and a load into freshly sharded models."""
    model, tok = models.load_model("tiny", "cpu")
    model = distributed.shard(model, "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, 90, (2, 16), generator=torch.Generator().manual_seed(0))
    step(model, opt, ids)
    teacher = sdpo.init_teacher(model)
    step(model, opt, ids)
    sdpo.ema_update(teacher, model, 0.3)                  # (T1) shard by shard
    ckpt = os.path.join(out, "ckpt")
    checkpoints.save_checkpoint(model, tok, ckpt, opt=opt, teacher=teacher)   # (states: one file per rank)
    again, _ = models.load_model(ckpt, "cpu")           # the directory from_pretrained loads
    again = distributed.shard(again, "cpu")
    opt2 = torch.optim.AdamW(again.parameters(), lr=1e-3)
    checkpoints.load_optimizer(ckpt, again, opt2)
    teacher2 = sdpo.init_teacher(again)
    checkpoints.load_teacher(ckpt, teacher2)
    step(model, opt, ids)                                 # the same next step from both
    step(again, opt2, ids)
    a, b = distributed.full_state_dict(model), distributed.full_state_dict(again)
    # GRPO's KL reference (G4) is a sharded copy too: one on-policy update with --kl-coef, the reference
    # gathered for its forwards; at the first step the student is the reference, so KL ≈ 0
    args = commands.one_configuration(flags.knob_rows(grpo), ["--kl-coef", "0.1", "--mini-batches", "1"])
    ref = distributed.clone_model(again).eval().requires_grad_(False)
    torch.manual_seed(0)
    batch = rollout.collect(again, tok, tasks.builtin_split("math", "test", 1), 4, 16)
    kl = train.update(again, opt2, grpo, grpo.GRPOConfig(kl_coef=0.1, mini_batches=1), ref, batch, args, tok, 1)["kl"]
    t1, t2 = distributed.full_state_dict(teacher), distributed.full_state_dict(teacher2)
    # the sharded clone computes with its own weights: zero them, and its logits must change
    zeroed = distributed.clone_model(again)
    with torch.no_grad():
        for p in zeroed.parameters():
            p.zero_()
        with distributed.gathered(again, zeroed):
            clone_gap = (again(input_ids=ids).logits.float() - zeroed(input_ids=ids).logits.float()).abs().max().item()
    shards = [p.to_local().numel() for p in model.parameters()]
    if distributed.is_main():
        result = {"resumed_step_diff": max((a[k] - b[k]).abs().max().item() for k in a),
                  "teacher_diff": max((t1[k] - t2[k]).abs().max().item() for k in t1),
                  "teacher_moved": max((t1[k] - a[k]).abs().max().item() for k in t1),
                  "local_fraction": sum(shards) / sum(v.numel() for k, v in a.items()),
                  "sharded": distributed.is_sharded(model) and distributed.is_sharded(teacher2) and distributed.is_sharded(ref),
                  "first_step_kl": kl, "zeroed_clone_gap": clone_gap}
        json.dump(result, open(os.path.join(out, "state.json"), "w"))


def rss(field):
    """This process's resident memory (VmRSS) or its high-water mark (VmHWM), in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def check_memory(out, tokens=512):
    """A model big enough to see (33M parameters), built sharded (never whole on one rank): the peak
    resident memory of SDPO-like steps on each rank, against memory.memory_per_rank (fp32 compute)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(models.TINY_DIR)
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 512, 2048, 8
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 8, 8, 64
    ids = torch.randint(3, cfg.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    warm = AutoModelForCausalLM.from_config(cfg)          # kernels and libraries loaded before the baseline
    inv_freq = warm.model.rotary_emb.inv_freq.clone()
    warm(input_ids=ids[:, :16]).logits.sum().backward()
    del warm
    base = rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:       # reset the high-water mark to the current RSS
        f.write("5")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()   # as the formula
    model.train()
    model = distributed.shard(model, "cpu")
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    model.model.rotary_emb.inv_freq.copy_(inv_freq)
    teacher = sdpo.init_teacher(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for _ in range(2):
        with distributed.gathered(teacher):                    # as train.update: the teacher whole for the update
            with torch.no_grad():
                t_logp = torch.log_softmax(teacher(input_ids=ids).logits.float(), -1)
            s_logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
            loss = (s_logp.exp() * (s_logp - t_logp)).sum(-1).mean()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sdpo.ema_update(teacher, model, 0.05)
    peak = rss("VmHWM") - base
    shape = memory.shape_of_config(cfg)
    formula = memory.memory_per_rank(shape, distributed.rank_and_world()[1], "sdpo", tokens, compute_bytes=4)
    peaks = distributed.gather_lists([peak])
    if distributed.is_main():
        json.dump({"measured": peaks, "formula": formula["update_total"], "parameters": formula["parameters"],
                   "parts": formula["update"]}, open(os.path.join(out, "memory.json"), "w"))


if __name__ == "__main__":
    distributed.init_distributed("cpu", threads=1)
    if sys.argv[1] in ("memory", "both"):   # (first: its high-water mark starts from a clean process)
        check_memory(sys.argv[2])
    if sys.argv[1] in ("state", "both"):
        check_state(sys.argv[2])
    torch.distributed.destroy_process_group()
