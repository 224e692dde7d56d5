"""infra/speedups.py — the speed-ups of rollout.py, each the same numbers as the plain path it replaces
(tests/test_speedups.py holds each to it), all behind one switch, `speedups.ON` (`--plain` turns them off):

    shared_prefix_logits   a group's G responses share one prompt: compute it once, not G times
    generation_cache       `generate` writes into one preallocated StaticCache, the prompts prefilled once per group
    TokenLogprobs          record log π(y_t | h_t) while sampling, instead of a second forward
    chunked_logsumexp      log Σ exp over a 150k vocabulary without an fp32 copy of the logits
    token_entropy          the same for the per-token entropy of the logs

Nothing here is from the paper: read rollout.py's plain path instead.
"""
import torch
from transformers import DynamicCache, LogitsProcessor, StaticCache

from infra.distributed import is_sharded
from infra.padding import left_pad, right_pad

# The one switch: True = the speed-ups below, False = rollout.py's plain path (`--plain`, infra/flags.py).
ON = True
# --sample-batch: sequences per forward or generate call wherever the count grows with the data (rollout,
# evaluation, the teacher check, drift, classroom/tokens.py); what fits on a GPU: docs/GPU.md
SAMPLE_BATCH = 128


def prefix_can_be_shared(model, prompt_ids):
    """Some prompt repeats, and the model can run from a cache: not with activation checkpointing (it
    drops the cache), and a sharded model only when gathered (its forwards must match on every rank)."""
    return (len(set(map(tuple, prompt_ids))) < len(prompt_ids)
            and not getattr(model, "is_activation_checkpointing", False)
            and (not is_sharded(model) or getattr(model, "_gathered", False)))


def shared_prefix_logits(model, prompt_ids, response_ids, pad_id):
    """rollout.packed_logits with every distinct prompt computed once (a group's G responses share it).

    1. The U distinct prompts, left-padded, run once with the cache on: per layer, keys and values
       [U, H, P, D], and the logit at each prompt's last position (it predicts the first response token).
    2. Each response row takes its prompt's keys/values (index_select, so the gradient of all G rows
       flows back into the one prompt forward) and the responses run on top of them, their positions
       continuing after the prompt's real length, the prompt's padding masked out.
    3. The logits: [the prompt's last logit, response columns 0 .. T-2]. The same shift as the packed
       layout, so the result equals `rollout.packed_logits` up to float summation order.

    Worked example: 8 prompts of 94 tokens × 8 responses of 19 tokens. Packed: 64 × (94 + 19) = 7,232
    token positions; shared: 8 × 94 + 64 × 19 = 1,968, about 3.7× fewer.
    """
    device = next(model.parameters()).device
    distinct, row_of = {}, []
    for p in prompt_ids:
        row_of.append(distinct.setdefault(tuple(p), len(distinct)))
    rows = torch.tensor(row_of, device=device)                                          # [B] -> prompt row
    p_ids, p_mask = left_pad([list(p) for p in distinct], pad_id, device)              # [U, P]
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)                                       # [U, P]
    prefix = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True,
                   logits_to_keep=1)                                                     # logits [U, 1, V]
    cache = DynamicCache()
    for layer, kv in enumerate(prefix.cache.layers):                                    # keys [U, H, P, D]
        cache.update(kv.keys.index_select(0, rows), kv.values.index_select(0, rows), layer)   # -> [B, H, P, D]
    r_ids, r_mask = right_pad(response_ids, pad_id, device)                             # [B, T]
    T = r_ids.shape[1]
    attention = torch.cat([p_mask.index_select(0, rows), r_mask], dim=1)                # [B, P+T]
    positions = p_mask.sum(-1).index_select(0, rows)[:, None] + torch.arange(T, device=device)  # [B, T]
    out = model(input_ids=r_ids, attention_mask=attention, position_ids=positions, cache=cache,
                use_cache=True).logits                                                   # [B, T, V]
    logits = torch.cat([prefix.logits.index_select(0, rows), out[:, :T - 1]], dim=1)    # [B, T, V] the shift
    return logits, r_mask, r_ids


def generation_cache(model, ids, mask, max_new_tokens, group_size=0):
    """The KV cache `generate` writes into: a StaticCache of P + max_new_tokens positions, allocated once.

    (transformers' default DynamicCache grows by torch.cat at every new token, copying the whole cache
    each time: on the tiny model that copy was half of an evaluation's time; tools/bench.py --generate.)
    group_size > 1: ids/mask [U·G, P] hold each prompt G times in a row; the keys/values of each distinct
    prompt but its last token are computed once (`shared_prefill`) and written to all G rows, so that
    `generate` only runs the last prompt token and the new ones — the same samples.
    """
    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + max_new_tokens)
    if group_size > 1:
        prefix = shared_prefill(model, ids[::group_size], mask[::group_size])
        for layer, computed in zip(cache.layers, prefix.layers):   # [U, H, P-1, D] -> [U·G, H, P-1, D]
            layer.update(computed.keys.repeat_interleave(group_size, 0),
                         computed.values.repeat_interleave(group_size, 0))
    return cache


def shared_prefill(model, ids, mask):
    """The keys/values of every prompt but its last token: ids, mask [U, P] -> a cache of [U, H, P-1, D]."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)                                      # [U, P]
    prefix = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                   use_cache=True, logits_to_keep=1)
    return prefix.cache


class TokenLogprobs(LogitsProcessor):
    """A logits processor that records log π(y_t | h_t) of every token `generate` draws, with the memory
    of one step: each call keeps that step's log-softmax [b, V], and the next call's input_ids end with
    the token drawn from it; `finish` takes the last step's. It sees the model's own logits when nothing
    else changes them (temperature 1 or greedy, top-p 1): the log-probs a fresh forward would give, up
    to float summation order (tests/equations/test_rollout.py)."""

    def __init__(self):
        self.last, self.columns = None, []

    def take(self, drawn):   # drawn: [b], the tokens drawn from self.last
        if self.last is not None:
            self.columns.append(self.last.gather(-1, drawn[:, None]).squeeze(-1))     # [b]
            self.last = None

    def __call__(self, input_ids, scores):                                             # scores [b, V]
        self.take(input_ids[:, -1])
        self.last = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, new_ids):
        """new_ids [b, T], the generated columns -> their log-probs [b, T]."""
        self.take(new_ids[:, -1])
        assert len(self.columns) == new_ids.shape[1], "one recorded step per generated column"
        return torch.stack(self.columns, dim=1)


def free_device_cache(device):
    """Hand the allocator's cached blocks back between rollout and update (CUDA only; a no-op on CPU):
    generation's KV cache and the update's activations have different shapes, and with
    expandable_segments (infra.setup_torch) the freed memory is reusable rather than fragmented."""
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


ROWS_PER_CHUNK = 1024   # positions per chunk of a full-vocabulary reduction: [1024, 152k] fp32 is 0.6 GB


@torch.no_grad()
def token_entropy(logits, rows=None):
    """Per-token entropy H(π(·|h_t)) = -Σ_v p log p, [B, T, V] -> [B, T] (fp32), for the logs.

    Computed `rows` positions at a time, so the fp32 log-softmax never exists for the whole batch
    (each position's entropy is its own row: the same numbers as one big call)."""
    rows = rows or ROWS_PER_CHUNK
    flat = logits.reshape(-1, logits.shape[-1])                                        # [B*T, V]
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for s in range(0, flat.shape[0], rows):
        logp = torch.log_softmax(flat[s:s + rows].float(), dim=-1)                     # [rows, V]
        out[s:s + rows] = -(logp.exp() * logp).sum(-1)
    return out.reshape(logits.shape[:-1])


class ChunkedLogSumExp(torch.autograd.Function):
    """log Σ_v exp(x_v) over the last dimension, in fp32, `rows` positions at a time, for logits in any
    dtype. Autograd keeps only the logits themselves (which the graph holds anyway) and the result:
    torch.logsumexp(x.float()) would keep an fp32 copy of the whole [B, T, V] tensor for its backward.
    Backward: ∂lse/∂x_v = softmax(x)_v, again chunk by chunk, returned in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, rows):
        flat = logits.reshape(-1, logits.shape[-1])                                    # [N, V]
        lse = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)    # [N]
        for s in range(0, flat.shape[0], rows):
            lse[s:s + rows] = torch.logsumexp(flat[s:s + rows].float(), dim=-1)
        ctx.save_for_backward(logits, lse)
        ctx.rows = rows
        return lse.reshape(logits.shape[:-1])                                          # [B, T]

    @staticmethod
    def backward(ctx, grad_lse):
        logits, lse = ctx.saved_tensors
        flat, g = logits.reshape(-1, logits.shape[-1]), grad_lse.reshape(-1)
        grad = torch.empty_like(flat)                                                  # [N, V], logits' dtype
        for s in range(0, flat.shape[0], ctx.rows):
            # ∂lse/∂x = softmax(x) = exp(x − lse), in place on one fp32 copy of the chunk
            part = flat[s:s + ctx.rows].to(torch.float32, copy=True)
            grad[s:s + ctx.rows] = part.sub_(lse[s:s + ctx.rows, None]).exp_().mul_(g[s:s + ctx.rows, None])
        return grad.reshape(logits.shape), None


def chunked_logsumexp(logits, rows=None):
    """fp32 log Σ_v exp(logits) over the last dim, [B, T, V] -> [B, T], with the memory of one chunk."""
    return ChunkedLogSumExp.apply(logits, rows or ROWS_PER_CHUNK)


@torch.no_grad()
def sampled_logprobs(logits, targets):
    """log π(y_t | h_t) = x_{y_t} − logsumexp(x), [B, T, V] logits in any dtype -> [B, T] fp32, without an
    fp32 copy of the logits (chunked_logsumexp): for measurements, where nothing flows back."""
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float() - chunked_logsumexp(logits)
