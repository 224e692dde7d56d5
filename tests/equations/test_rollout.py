"""The shared rollout loop: EOS in the mask, padding-invariant log-probs, log-probs = −CE, the committed model."""
import pytest
import torch
import torch.nn.functional as F

import rollout
from infra import speedups

from rollout import chat_messages, cut_at_eos, decode, encode_chat, micro_batches, pack, response_logits, sample, token_logprobs


def test_cut_at_eos_keeps_the_eos_and_nothing_after():
    assert cut_at_eos([5, 6, 2, 7, 2], {2}) == [5, 6, 2]
    assert cut_at_eos([5, 6], {2}) == [5, 6]
    assert cut_at_eos([2, 5], {2}) == [2]


def test_response_mask_covers_eos_and_nothing_after():
    _, attention, positions, r_mask, P = pack([[1, 2], [3, 4, 5]], [[7, 8, 2], [9]], 0, "cpu")
    assert r_mask.tolist()[0][:4] == [1, 1, 1, 0] and r_mask.tolist()[1][:2] == [1, 0]
    assert r_mask[:, 4:].sum() == 0
    # positions count real tokens only: 0, 1, 2, ... whatever the left padding
    row = positions[0][attention[0].bool()].tolist()
    assert row == list(range(len(row)))


def test_sampled_responses_end_at_first_eos(tiny):
    model, tok = tiny
    torch.manual_seed(0)
    prompts = [encode_chat(tok, chat_messages({"prompt": "What is 2+3? Put the final answer in \\boxed{}."}))]
    out = sample(model, tok, prompts, group_size=8, max_new_tokens=40)
    assert len(out) == 8
    for r in out:
        assert tok.eos_token_id not in r[:-1]
        assert len(r) <= 40
    assert any(r[-1] == tok.eos_token_id for r in out)


def test_logprobs_alone_equal_logprobs_in_left_padded_batch(tiny):
    model, tok = tiny
    p_short = encode_chat(tok, chat_messages({"prompt": "Hi"}))
    p_long = encode_chat(tok, chat_messages({"prompt": "A much longer prompt than the other one, padded."}))
    r_short, r_long = tok("ok", add_special_tokens=False)["input_ids"], tok("a longer reply", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        lg, m, t = response_logits(model, [p_short, p_long], [r_short, r_long], tok.pad_token_id)
        batch = token_logprobs(lg, t)
        lg1, _, t1 = response_logits(model, [p_short], [r_short], tok.pad_token_id)
        alone = token_logprobs(lg1, t1)
    n = len(r_short)
    assert (batch[0, :n] - alone[0, :n]).abs().max().item() < 1e-5


def test_logprobs_equal_negative_cross_entropy(tiny):
    model, tok = tiny
    p = encode_chat(tok, chat_messages({"prompt": "What is 2+3?"}))
    r = tok("\\boxed{5}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    with torch.no_grad():
        lg, m, t = response_logits(model, [p], [r], tok.pad_token_id)
        lp = token_logprobs(lg, t)[0, :len(r)]
        full = model(torch.tensor([p + r])).logits[0].float()          # no padding at all
        ce = F.cross_entropy(full[len(p) - 1:-1], torch.tensor(r), reduction="none")
    assert (lp + ce).abs().max().item() < 1e-5


def test_committed_model_loads_with_from_pretrained_and_generates():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from infra.models import TINY_DIR
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR)
    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 3e6
    torch.manual_seed(0)
    out = sample(model, tok, [encode_chat(tok, chat_messages({"prompt": "Write a Python lambda that adds 3 to x."}))], 4, 30)
    texts = decode(tok, out)
    assert any("lambda" in t for t in texts)


def test_micro_batches_cover_every_index_once():
    mbs = micro_batches([5, 1, 9, 3, 3], 2)
    assert sorted(i for mb in mbs for i in mb) == [0, 1, 2, 3, 4]
    assert all(len(mb) <= 2 for mb in mbs)
    assert micro_batches([5, 1], 0) == [[1, 0]]


# ---- the shared prefix: each distinct prompt once, the same numbers ----------------------------------
def shared_vs_packed_case(tok, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, 100, (n,), generator=g).tolist() for n in (30, 41, 17)]   # different lengths
    which = [0, 0, 0, 1, 1, 2, 2, 2, 0]                                                    # groups, one straggler
    lengths = (5, 9, 2, 11, 7, 4, 0, 6, 20)
    responses = [torch.randint(5, 100, (n,), generator=g).tolist() + [tok.eos_token_id] for n in lengths]
    return [prompts[i] for i in which], responses


def test_shared_prefix_gives_the_packed_log_probs_and_gradients(tiny, monkeypatch):
    """speedups.shared_prefix_logits (speedups.ON on) against the plain packed forward (off)."""
    import copy
    model, tok = tiny
    prompts, responses = shared_vs_packed_case(tok)
    grads = []
    for share in (False, True):
        monkeypatch.setattr(speedups, "ON", share)
        m = copy.deepcopy(model)
        logits, mask, targets = response_logits(m, prompts, responses, tok.pad_token_id)
        logp = token_logprobs(logits, targets)                                            # [B, T]
        weights = torch.linspace(-1, 2, logp.shape[0])[:, None]                           # any loss will do
        (logp * mask * weights).sum().backward()
        grads.append((logp.detach() * mask, torch.cat([p.grad.flatten() for p in m.parameters()])))
    (lp0, g0), (lp1, g1) = grads
    assert (lp0 - lp1).abs().max().item() < 2e-5
    assert (g0 - g1).abs().max().item() <= 1e-4 * g0.abs().max().item()
    assert g0.abs().max().item() > 0


def test_log_probs_recorded_while_sampling_are_a_fresh_forwards(tiny):
    """sample(with_logprobs=True): the same samples as without, and for every response token the log-prob
    one forward of the model gives it afterwards (brute force: response_logits), sampled or greedy, with
    the batch split into chunks; over-long rows stop at max_new_tokens, short ones at their EOS."""
    model, tok = tiny
    prompts = [encode_chat(tok, chat_messages({"prompt": p})) for p in ("What is 2+2?", "Name a tool.", "Hi")]
    for temperature in (1.0, 0.0):
        torch.manual_seed(0)
        responses, logp = sample(model, tok, prompts, 3, 20, temperature=temperature, batch_size=4, with_logprobs=True)
        torch.manual_seed(0)
        assert sample(model, tok, prompts, 3, 20, temperature=temperature, batch_size=4) == responses
        assert [len(lp) for lp in logp] == [len(r) for r in responses]
        with torch.no_grad():
            logits, _, targets = response_logits(model, [p for p in prompts for _ in range(3)], responses, tok.pad_token_id)
            fresh = token_logprobs(logits, targets)                                       # [9, T]
        worst = max(abs(fresh[i, t].item() - lp) for i, row in enumerate(logp) for t, lp in enumerate(row))
        assert worst < 2e-5
    with torch.no_grad():   # a wrong recording (the token before) would be far off
        assert max(abs(fresh[i, t + 1].item() - row[t]) for i, row in enumerate(logp) for t in range(len(row) - 1)) > 0.1
    with pytest.raises(ValueError, match="temperature 1"):   # a tempered distribution is not the model's own
        sample(model, tok, prompts, 1, 4, temperature=0.6, with_logprobs=True)


def test_shared_prefix_is_used_only_when_prompts_repeat(tiny, monkeypatch):
    from infra import speedups
    model, tok = tiny
    calls = []
    real = speedups.shared_prefix_logits
    monkeypatch.setattr(speedups, "shared_prefix_logits", lambda *a: calls.append(1) or real(*a))
    prompts, responses = shared_vs_packed_case(tok)
    rollout.response_logits(model, prompts[:1] + prompts[3:4], responses[:2], tok.pad_token_id)
    assert calls == []                                       # two different prompts: the packed path
    rollout.response_logits(model, prompts[:3], responses[:3], tok.pad_token_id)
    assert calls == [1]
    monkeypatch.setattr(speedups, "ON", False)          # the switch: the plain path whatever the prompts
    rollout.response_logits(model, prompts[:3], responses[:3], tok.pad_token_id)
    assert calls == [1]


def test_sampled_logprobs_equal_log_softmax_gathered_in_any_dtype():
    """rollout.sampled_logprobs (x_y − chunked logsumexp, no fp32 copy) = log_softmax(x)[y] in float64."""
    g = torch.Generator().manual_seed(0)
    logits = 4 * torch.randn(3, 5, 70, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 70, (3, 5), generator=g)
    want = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    got = rollout.sampled_logprobs(logits.float(), targets)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, atol=1e-5)
    bf16 = rollout.sampled_logprobs(logits.bfloat16(), targets)          # the logits' own rounding only
    assert torch.allclose(bf16.double(), torch.log_softmax(logits.bfloat16().double(), -1).gather(
        -1, targets.unsqueeze(-1)).squeeze(-1), atol=1e-5)
