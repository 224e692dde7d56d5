"""The speed-ups (infra/speedups.py) against the plain path they replace, switched by speedups.ON.

Each speed-up must give the plain path's numbers up to float summation order: the shared-prefix forward
(tests/equations/test_rollout.py, and inside whole updates in tests/test_protocol.py), and here sampling with the
preallocated, group-prefilled cache, log-probs recorded while sampling, the chunked log-sum-exp, the chunked
entropy, and the --plain flag that turns them all off."""
import pytest
import torch

import rollout
from infra import speedups
from world import tasks


def prompts_of(tok, n=4):
    records = tasks.builtin_split("math", "test", n) + tasks.builtin_split("tooluse", "test", n)   # lengths differ
    return [rollout.encode_chat(tok, rollout.chat_messages(r)) for r in records]


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_sampling_with_and_without_the_speed_ups_draws_the_same_tokens(tiny, monkeypatch, temperature):
    """The same seed draws the same responses from plain generate (transformers' own cache, each prompt
    computed G times) as from the static, group-prefilled cache, and records the same log-probs as the plain
    path's second forward (to 2e-5)."""
    model, tok = tiny
    prompts = prompts_of(tok)
    runs = {}
    for fast in (True, False):
        monkeypatch.setattr(speedups, "ON", fast)
        torch.manual_seed(0)
        runs[fast] = rollout.sample(model, tok, prompts, 4, 24, temperature=temperature, batch_size=8,
                                    with_logprobs=True)
    (fast_ids, fast_lp), (plain_ids, plain_lp) = runs[True], runs[False]
    assert fast_ids == plain_ids and len(fast_ids) == 4 * len(prompts)
    assert len({tuple(r) for r in fast_ids}) > 1 or temperature == 0   # (sampled: not one response repeated)
    worst = max(abs(a - b) for ra, rb in zip(fast_lp, plain_lp) for a, b in zip(ra, rb))
    assert worst < 2e-5


def test_the_reductions_equal_their_plain_forms(monkeypatch):
    """logsumexp_fp32 (value and gradient), token_entropy and sampled_logprobs: chunked (speed-ups on, in
    chunks of 3 positions) against the one-call torch forms (off), in bf16 and fp32."""
    torch.manual_seed(0)
    monkeypatch.setattr(speedups, "ROWS_PER_CHUNK", 3)
    for dtype in (torch.float32, torch.bfloat16):
        x = (3 * torch.randn(2, 5, 50)).to(dtype)
        y = torch.randint(0, 50, (2, 5))
        out = {}
        for fast in (True, False):
            monkeypatch.setattr(speedups, "ON", fast)
            leaf = x.clone().requires_grad_(True)
            lse = rollout.logsumexp_fp32(leaf)
            (lse * torch.linspace(-1, 1, 5)).sum().backward()
            out[fast] = (lse.detach(), leaf.grad.float(), rollout.token_entropy(x), rollout.sampled_logprobs(x, y))
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        for a, b in zip(out[True], out[False]):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert (a - b).abs().max().item() <= tol


def test_plain_flag_turns_every_speed_up_off(monkeypatch):
    """--plain on a training script's command line sets speedups.ON to False before any work; without
    it the speed-ups stay on."""
    import continual
    monkeypatch.setattr(speedups, "ON", True)
    continual.parse_args([])
    assert speedups.ON is True
    continual.parse_args(["--plain"])
    assert speedups.ON is False
    continual.parse_args([])
    assert speedups.ON is True
