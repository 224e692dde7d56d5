"""--dtype bf16 on one device: bf16 compute (autocast) over fp32 master weights moves the weights as far
as fp32 does; bf16 weights themselves (--dtype bf16-weights) lose most of each small AdamW update to
rounding — the failure the release avoids by keeping fp32 master weights."""
import types

import pytest
import torch

from infra import distributed
from infra import models, speedups
import rollout
import sdpo
from conftest import config_for
import train


def displacement(dtype, steps=30, lr=1e-6):
    """‖θ_30 − θ_0‖ after `steps` AdamW steps of next-token loss on one fixed batch."""
    torch.manual_seed(0)
    model, _ = models.load_model("tiny", "cpu", dtype)
    start = [p.detach().float().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    ids = torch.randint(3, model.config.vocab_size, (8, 32), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        logits = model(input_ids=ids).logits.float()                                   # [8, 32, V]
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.sqrt(sum(((p.detach().float() - s) ** 2).sum() for p, s in zip(model.parameters(), start))).item()


def test_bf16_compute_over_fp32_weights_trains_like_fp32():
    model, _ = models.load_model("tiny", "cpu", "bf16")
    assert next(model.parameters()).dtype == torch.float32 and model.compute_dtype == torch.bfloat16
    assert model(input_ids=torch.tensor([[3, 4, 5]])).logits.dtype == torch.bfloat16   # the forward is autocast
    fp32, bf16, bf16_weights = displacement("fp32"), displacement("bf16"), displacement("bf16-weights")
    assert abs(bf16 / fp32 - 1) < 0.05, (fp32, bf16)          # within a few percent of fp32
    assert bf16_weights / fp32 < 0.5, (fp32, bf16_weights)    # most of the update lost to rounding


def test_dtype_names():
    assert models.resolve_dtype("auto", "cpu") == (torch.float32, torch.float32)
    assert models.resolve_dtype("auto", "cuda") == (torch.float32, torch.bfloat16)
    assert models.resolve_dtype("bf16-weights", "cpu") == (torch.bfloat16, torch.bfloat16)
    model, _ = models.load_model("tiny", "cpu", "bf16-weights")
    assert model.dtype == torch.bfloat16


def test_bf16_autocast_samples_like_fp32_with_and_without_the_shared_prefill(monkeypatch):
    """The autocast wrapper keeps forward's signature (generate reads it): without that, generate misread
    the shared-prefill cache and sampled garbage (math Acc@4 3.9% instead of 22.7%)."""
    from world import tasks
    fp32, tok = models.load_model("tiny", "cpu", "fp32")
    bf16, _ = models.load_model("tiny", "cpu", "bf16")
    prompts = [rollout.encode_chat(tok, rollout.chat_messages(r)) for r in tasks.builtin_split("math", "test", 4)]
    want = rollout.sample(fp32, tok, prompts, 2, 24, temperature=0)
    shared = rollout.sample(bf16, tok, prompts, 2, 24, temperature=0)
    monkeypatch.setattr(speedups, "ON", False)   # plain generate: its own cache, no shared prefill
    plain = rollout.sample(bf16, tok, prompts, 2, 24, temperature=0)
    assert shared == plain
    assert sum(a == b for a, b in zip(shared, want)) >= 6   # bf16 rounding may flip a near-tie, not the answers


# ---- the teacher and the reference are models of their own in every --dtype ----
DTYPE_NAMES = ["fp32", "bf16", "bf16-weights"]


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()                                      # [1, T, V]


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_a_clone_computes_with_its_own_weights(dtype):
    """infra.clone_model (SDPO's teacher, GRPO's reference): zero the clone's weights and its logits must
    change. With bf16 autocast as a closure over the student's bound forward, the clone kept calling the
    student (difference 0.0)."""
    model, _ = models.load_model("tiny", "cpu", dtype)
    clone = distributed.clone_model(model)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        for p in clone.parameters():
            p.zero_()
    assert (logits_of(model, ids) - logits_of(clone, ids)).abs().max().item() > 1.0
    assert model(input_ids=ids).logits.dtype == clone(input_ids=ids).logits.dtype   # the same compute dtype


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_an_sdpo_step_with_alpha_0_leaves_the_teacher_as_it_was(dtype):
    """(T1, α = 0) one SDPO step moves the student, and the teacher's outputs stay bit-identical."""
    from equations.test_grpo import fake_batch
    model, tok = models.load_model("tiny", "cpu", dtype)
    teacher = sdpo.stage_teacher(model)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    before, student_before = logits_of(teacher, ids), logits_of(model, ids)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    args = types.SimpleNamespace(cot=False, feedback=False, mask_ratio=0.0, micro_batch=0, beta=0.5, topk=None,
                                 mini_batch_order="balanced", sample_blocks=0,
                                 max_grad_norm=1.0, loss_agg="seq-mean-token-mean")
    train.update(model, opt, sdpo, config_for(sdpo.SDPOConfig, args), teacher, fake_batch(tok), args, tok, 1)
    sdpo.teacher_after_step(teacher, model, 1, alpha=0.0)
    assert (logits_of(model, ids) - student_before).abs().max().item() > 0    # the student moved
    assert torch.equal(logits_of(teacher, ids), before)                       # the teacher did not
