"""rollout.py — sample a group, score its tokens: what grpo.py, sdpo.py, evaluate.py and train.py share.

    records --chat template--> prompt ids --left pad--> HF generate (G samples each)
            --cut at first EOS (EOS kept)--> response ids --one forward--> per-token log-probs

Simplifications, on purpose: plain Hugging Face `generate` (no vLLM), one process per device,
prompts and responses kept as Python lists of token ids between steps.

Layout used everywhere a model scores responses (a worked example, prompt lengths 2 and 3, responses
of lengths 3 and 1, `_` = pad):

    input_ids      [_ p p | r r r]        attention  [0 1 1 | 1 1 1]     positions [0 0 1 | 2 3 4]
                   [p p p | r _ _]                   [1 1 1 | 1 0 0]               [0 1 2 | 3 3 3]
    logits at columns P-1 .. P+T-2 predict the response tokens at columns P .. P+T-1 (the shift).
"""
import functools
import os
import re
import types

import torch
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList, StaticCache

from machinery import tasks
from machinery.infra import gathered, is_main, is_sharded, shard, under_torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_DIR = os.path.join(HERE, "machinery", "tiny_model")
MODEL_DIRS = {"tiny": TINY_DIR, "tiny_think": TINY_DIR + "_think"}   # the built-in models' directories
PAD_MULTIPLE = 16  # pad lengths up to a multiple of this: CPU kernels are slow on every *new* shape
# --sample-batch: sequences per forward or generate call wherever the count grows with the data (rollout,
# evaluation, the teacher check, drift, classroom/tokens.py); why 128 on a CPU, and what fits on a GPU: docs/GPU.md
SAMPLE_BATCH = 128


def round_up(n, m=PAD_MULTIPLE):
    return max(m, -(-n // m) * m)


# --dtype: (weight dtype, compute dtype). "bf16" keeps fp32 master weights and computes in bf16 (the
# release: fp32 actor and teacher, bf16 compute), as bf16 autocast in one process or FSDP2's mixed
# precision under torchrun. "bf16-weights" stores the weights themselves in bf16: half the memory, but
# AdamW at lr 1e-6 … 1e-5 then loses most of each update to rounding (docs/GPU.md) — only on purpose.
DTYPES = {"fp32": (torch.float32, torch.float32), "bf16": (torch.float32, torch.bfloat16),
          "bf16-weights": (torch.bfloat16, torch.bfloat16)}


def resolve_dtype(name, device):
    """--dtype -> (weight dtype, compute dtype): 'auto' = fp32 on CPU, bf16 compute on CUDA."""
    if name in (None, "auto"):
        name = "bf16" if torch.device(device).type == "cuda" else "fp32"
    return DTYPES[name]


def with_autocast(model, device_type, dtype):
    """Run the model's forward under autocast: matrix products in `dtype`, the weights stay as they are.

    The wrapper is bound to the model as a method (types.MethodType), never a closure over the model's
    own bound `forward`: `copy.deepcopy` rebinds a method to the copy, so a clone (SDPO's teacher, GRPO's
    reference) computes with *its own* weights. (A closure would keep calling the original: a teacher
    whose weights change nothing.) functools.wraps keeps forward's signature: `generate` reads it."""
    plain_forward = type(model).forward

    @functools.wraps(plain_forward)
    def forward_autocast(self, *args, **kwargs):
        with torch.autocast(device_type, dtype=dtype):
            return plain_forward(self, *args, **kwargs)
    model.forward = types.MethodType(forward_autocast, model)
    return model


def load_model(name="tiny", device="cpu", dtype=None, grad_checkpointing=False, distributed=None, enable_thinking=None):
    """Load a causal LM and its tokenizer: 'tiny' (the committed built-in model), 'tiny_think' (its
    thinking variant), a local HF directory, or a hub id (downloaded to the HF cache; offline it is
    read from the cache). The model's own chat template is used as it is.

    dtype: a --dtype name (see DTYPES; default fp32 on CPU, bf16 compute on CUDA). With bf16 compute over
    fp32 weights, one process wraps the forward in bf16 autocast; under torchrun (`distributed`, default:
    when launched by it) infra.shard's mixed-precision policy does it instead (`model.compute_dtype`).
    grad_checkpointing: recompute activations in the backward (less memory, ~30% slower).
    enable_thinking: --enable-thinking / --disable-thinking, kept on the tokenizer for encode_chat (None:
    the chat template's own default)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    path = MODEL_DIRS.get(name, name)   # (the thinking variant: machinery/tiny.py)
    device = torch.device(device)
    weights, compute = resolve_dtype(dtype, device)
    tok = AutoTokenizer.from_pretrained(path)
    if distributed is None:
        distributed = under_torchrun()
    config = AutoConfig.from_pretrained(path)
    if distributed and not is_main():
        # torchrun: only rank 0 reads the weights; the others build the model empty (meta device), and
        # infra.shard gives each rank its own shard from rank 0's copy (host memory: 1 model, not N)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=weights, **attention_of(config))
        if os.path.isfile(os.path.join(path, "generation_config.json")) or not os.path.isdir(path):
            model.generation_config = GenerationConfig.from_pretrained(path)   # (else from_config's stands)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=weights, **attention_of(config))
    model._weights_on_rank0 = distributed   # read by infra.shard
    if not distributed:        # (torchrun: it stays in host memory until infra.shard moves each rank's shard)
        model = model.to(device)
    model.compute_dtype = compute
    if compute != weights and not distributed:
        with_autocast(model, device.type, compute)
    if grad_checkpointing:   # (transformers 5 renames it; both exist for now)
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    if tok.pad_token_id is None:  # some chat models ship without a pad token; the mask never uses ids
        tok.pad_token = tok.eos_token
    model.generation_config.pad_token_id = tok.pad_token_id
    tok.enable_thinking = enable_thinking
    return model, tok


def load_policy(name="tiny", device="cpu", dtype=None, grad_checkpointing=False, enable_thinking=None):
    """The model to train: load_model, then under torchrun FSDP2 over the processes (infra.shard: each
    keeps 1/N of the weights); in one process, the model as it is."""
    model, tok = load_model(name, device, dtype, grad_checkpointing, enable_thinking=enable_thinking)
    return shard(model, device), tok


def attention_of(config):
    """Character-sized models (hidden size ≤ 256: the built-in tiny models and every checkpoint trained from
    them) use plain ("eager") attention, the faster one there (docs/RESULTS.md, "What a step costs"); real
    models keep transformers' default. Decided from the config, not the name, so that a reloaded stage
    checkpoint computes exactly as the model that was saved."""
    return {"attn_implementation": "eager"} if getattr(config, "hidden_size", 1 << 30) <= 256 else {}


def chat_messages(record, user_text=None):
    """The chat for a record: its system message (if any), then the user turn (or `user_text`)."""
    msgs = [{"role": "system", "content": record["system"]}] if record.get("system") else []
    return msgs + [{"role": "user", "content": record["prompt"] if user_text is None else user_text}]


def encode_chat(tok, messages, enable_thinking=None):
    """Token ids of a chat rendered with the model's own template, ending with the assistant header.

    enable_thinking is passed to templates that take it (Qwen3 thinking models); None uses the
    run's setting (--enable-thinking / --disable-thinking, kept on the tokenizer by load_model), and when
    that is None too the template's own default.
    """
    if enable_thinking is None:
        enable_thinking = getattr(tok, "enable_thinking", None)
    kw = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
    return tok(text, add_special_tokens=False)["input_ids"]


# ----------------------------------------------------------------------------------------------
# The teacher's prompt text (SDPO, S1 and S6). It lives here, beside the student's chat prompt,
# because evaluate.py's teacher check builds it too; sdpo.py chooses *which* demonstration to show.
# ----------------------------------------------------------------------------------------------
# (S1) the release's reprompt templates. Filled by concatenation, in one pass, so braces survive.
SOLUTION_TEMPLATE = "\nCorrect solution:\n\n{successful_previous_attempt}"
REPROMPT_TEMPLATE = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question."
# (S8) the release's feedback section (`feedback_template`), used when no sibling succeeded (--feedback)
# (byte for byte the yaml that runs, `actor.yaml`'s `|-` block: no trailing newline; the dataclass default
# in `actor.py` ends with "\n\n", but the yaml overrides it)
FEEDBACK_TEMPLATE = "\nThe following is feedback from your unsuccessful earlier attempt:\n\n{feedback_raw}"
THINK_SPAN = re.compile(r"<think>.*?</think>\s*", flags=re.S)
LEADING_TRACE = re.compile(r"^.*?</think>\s*", flags=re.S)


def strip_think(text):
    """(S6) Remove <think>…</think> spans from a demonstration (SDPO), then everything up to a lone
    `</think>` (thinking templates pre-fill the opening tag, so the response starts inside the trace),
    as the release's `_remove_thinking_trace` does. SDPO-CoT keeps them.

    Exactly the release's two substitutions, nothing else stripped: the second cuts at the *first* lone
    `</think>` left (`^.*?`, non-greedy), so text after it — a second `</think>` included — stays.
    Example: "I think 3+4=7</think>\\boxed{7}" -> "\\boxed{7}".
    """
    # (S6) matched <think>…</think> spans (and the whitespace after each)
    text = THINK_SPAN.sub("", text)
    # (S6) then everything from the start up to the first remaining </think> (and the whitespace after it)
    return LEADING_TRACE.sub("", text, count=1)


def fill_reprompt(prompt, demonstration=None, feedback=None):
    """(S1) reprompt = prompt + "\\nCorrect solution:\\n\\n" + demo + "\\n\\nCorrectly solve the original question."
    (S8) with `feedback` (and no demonstration): prompt + FEEDBACK_TEMPLATE(feedback) + the same closing line.

    A single pass over each template: a '{' or '}' inside the prompt, the demonstration or the feedback
    is never parsed as a placeholder (str.format on the filled text would break on `\\boxed{68}`).
    """
    # (S1) the solution section (empty without a demonstration)
    solution = "" if demonstration is None else SOLUTION_TEMPLATE.replace("{successful_previous_attempt}", demonstration)
    # (S8) the feedback section (empty without feedback)
    feedback_part = "" if feedback is None else FEEDBACK_TEMPLATE.replace("{feedback_raw}", feedback)
    head, tail = REPROMPT_TEMPLATE.split("{prompt}{solution}{feedback}")
    return head + prompt + solution + feedback_part + tail


# ----------------------------------------------------------------------------------------------
# Batches of token ids (layout in the module docstring)
# ----------------------------------------------------------------------------------------------
def left_pad(seqs, pad_id, device):
    """List of id lists -> (ids [B, P], attention mask [B, P]) padded on the left."""
    P = round_up(max(len(s) for s in seqs))
    ids = torch.full((len(seqs), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), P), dtype=torch.long)
    for b, s in enumerate(seqs):
        if s:
            ids[b, P - len(s):] = torch.tensor(s)
            mask[b, P - len(s):] = 1
    return ids.to(device), mask.to(device)


def cut_at_eos(tokens, eos_ids):
    """Response ids up to and *including* the first EOS; the whole list when no EOS was produced."""
    for t, tid in enumerate(tokens):
        if tid in eos_ids:
            return tokens[:t + 1]
    return tokens


def eos_ids_of(model, tok):
    """Every id that ends a response: the tokenizer's EOS and the generation config's (chat models)."""
    ids = {tok.eos_token_id}
    gen = model.generation_config.eos_token_id
    ids.update(gen if isinstance(gen, (list, tuple)) else [gen])
    return {i for i in ids if i is not None}


def sample(model, tok, prompt_ids, group_size=1, max_new_tokens=48, temperature=1.0, top_p=1.0, batch_size=SAMPLE_BATCH,
           share_prefill=True, progress=False, with_logprobs=False):
    """Sample `group_size` responses for every prompt with plain HF generate.

    prompt_ids: list of N id lists. Returns a list of N*group_size response id lists, grouped
    contiguously (prompt 0's G samples first), each cut at its first EOS (the EOS included).
    share_prefill: run each prompt once through the model before generating (`shared_prefill`): the same
    samples (bit for bit here), without computing every prompt G times.
    progress: a progress bar over the `generate` calls (evaluation).
    with_logprobs: also return log π(y_t | h_t) of every response token, recorded as it was drawn
    (`TokenLogprobs`; drift's KL): (responses, [[log-prob per token] per response]).
    """
    if with_logprobs and (temperature not in (0, 1) or top_p < 1):
        raise ValueError("with_logprobs records the model's own distribution: temperature 1 (or 0) and top-p 1 only")
    with gathered(model):   # sharded (torchrun): each rank samples with the whole weights, no collective
        out, logprobs = _sample(model, tok, prompt_ids, group_size, max_new_tokens, temperature, top_p, batch_size,
                                share_prefill, progress, with_logprobs)
    return (out, logprobs) if with_logprobs else out


@torch.inference_mode()   # no autograd bookkeeping at all (the ids leave as Python lists)
def _sample(model, tok, prompt_ids, group_size, max_new_tokens, temperature, top_p, batch_size, share_prefill,
            progress, with_logprobs):
    device = next(model.parameters()).device
    eos = eos_ids_of(model, tok)
    expanded = [p for p in prompt_ids for _ in range(group_size)]
    was_training = model.training
    model.eval()
    out, logprobs = [], []
    step = max(group_size, batch_size // group_size * group_size)   # chunks of whole groups
    chunks = range(0, len(expanded), step)
    for start in tqdm(chunks, desc="sample", leave=False, disable=not progress or len(chunks) < 2 or not is_main()):
        chunk = expanded[start:start + step]
        ids, mask = left_pad(chunk, tok.pad_token_id, device)  # [b, P]
        gen_kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=top_p) if temperature > 0 \
            else dict(do_sample=False)
        shared = group_size if share_prefill and group_size > 1 and min(len(p) for p in chunk) >= 2 else 0
        recorder = TokenLogprobs() if with_logprobs else None
        # (synced_gpus off: under FSDP transformers would keep every rank stepping until all are done;
        # here each rank holds the whole weights (infra.gathered) and samples on its own. disable_compile:
        # transformers would otherwise torch.compile the forward on a GPU when given a static cache.)
        seqs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=sorted(eos), synced_gpus=False,
                              cache=generation_cache(model, ids, mask, max_new_tokens, shared),
                              disable_compile=True, logits_processor=LogitsProcessorList([recorder] if recorder else []),
                              **gen_kw)  # [b, P+T]; stops once every row has ended
        for row in seqs[:, ids.shape[1]:].tolist():
            out.append(cut_at_eos(row, eos))
        if recorder:
            lp = recorder.finish(seqs[:, ids.shape[1]:])                                 # [b, T]
            logprobs += [row[:len(ids_)] for row, ids_ in zip(lp.tolist(), out[-len(chunk):])]
        del seqs, gen_kw                          # the generation cache goes before the next chunk's
    free_device_cache(device)
    model.train(was_training)
    return out, logprobs


class TokenLogprobs(LogitsProcessor):
    """A logits processor that records log π(y_t | h_t) of every token `generate` draws, with the memory
    of one step: each call keeps that step's log-softmax [b, V], and the next call's input_ids end with
    the token drawn from it; `finish` takes the last step's. It sees the model's own logits when nothing
    else changes them (temperature 1 or greedy, top-p 1): the log-probs a fresh forward would give, up
    to float summation order (tests/test_rollout.py)."""

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


def right_pad(seqs, pad_id, device):
    """List of id lists -> (ids [B, T], mask [B, T]) padded on the right (responses)."""
    T = round_up(max(len(s) for s in seqs))
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids.to(device), mask.to(device)


def pack(prompt_ids, response_ids, pad_id, device):
    """Left-padded prompts then right-padded responses in one batch (layout in the module docstring).

    Returns input_ids [B, P+T], attention_mask [B, P+T], position_ids [B, P+T],
    response_mask [B, T] (1 on response tokens, the EOS included), and P.
    """
    p_ids, p_mask = left_pad(prompt_ids, pad_id, device)   # [B, P]
    r_ids, r_mask = right_pad(response_ids, pad_id, device)  # [B, T]
    input_ids = torch.cat([p_ids, r_ids], dim=1)        # [B, P+T]
    attention = torch.cat([p_mask, r_mask], dim=1)      # [B, P+T]
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P+T] real tokens count 0, 1, 2, ...
    return input_ids, attention, positions, r_mask, p_ids.shape[1]


def response_logits(model, prompt_ids, response_ids, pad_id, share_prefix=True, as_float=True):
    """Logits that predict each response token: [B, T, V], with the response mask [B, T] and ids [B, T].

    The plain forward is `packed_logits`: each prompt and its response in one row. With share_prefix
    (the default) and prompts that repeat (a group's G responses share one prompt), each distinct prompt
    is computed once instead (`shared_prefix_logits`): the same logits up to float summation order
    (tests/test_rollout.py checks it), and far fewer tokens. A reader can take it to be the plain forward.
    as_float=False keeps the compute dtype (bf16 on GPUs): no fp32 copy of a [B, T, V] tensor, for the
    top-k path that only ever needs k values per position in fp32 (sdpo.topk_logprobs).
    """
    if share_prefix and prefix_can_be_shared(model, prompt_ids):
        logits, r_mask, r_ids = shared_prefix_logits(model, prompt_ids, response_ids, pad_id)
    else:
        logits, r_mask, r_ids = packed_logits(model, prompt_ids, response_ids, pad_id)
    return (logits.float() if as_float else logits), r_mask, r_ids


def packed_logits(model, prompt_ids, response_ids, pad_id):
    """The plain forward: every (prompt, response) pair in one row (rollout.pack); logits [B, T, V] in the
    compute dtype, response mask [B, T], response ids [B, T]."""
    device = next(model.parameters()).device
    input_ids, attention, positions, r_mask, P = pack(prompt_ids, response_ids, pad_id, device)
    T = r_mask.shape[1]
    # only the last T+1 columns (P-1 .. P+T-1) go through the LM head: no logits for prompt positions,
    # which for a 150k-token vocabulary is most of the head's time and memory
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                   logits_to_keep=T + 1).logits                                          # [B, T+1, V]
    # the shift: the logit at column c predicts the token at column c+1 (kept column 0 = column P-1)
    return logits[:, :T], r_mask, input_ids[:, P:]                                      # [B, T, V], [B, T], [B, T]


def prefix_can_be_shared(model, prompt_ids):
    """Some prompt repeats, and the model can run from a cache: not with activation checkpointing (it
    drops the cache), and a sharded model only when gathered (its forwards must match on every rank)."""
    return (len(set(map(tuple, prompt_ids))) < len(prompt_ids)
            and not getattr(model, "is_activation_checkpointing", False)
            and (not is_sharded(model) or getattr(model, "_gathered", False)))


def shared_prefix_logits(model, prompt_ids, response_ids, pad_id):
    """response_logits with every distinct prompt computed once (a group's G responses share it).

    1. The U distinct prompts, left-padded, run once with the cache on: per layer, keys and values
       [U, H, P, D], and the logit at each prompt's last position (it predicts the first response token).
    2. Each response row takes its prompt's keys/values (index_select, so the gradient of all G rows
       flows back into the one prompt forward) and the responses run on top of them, their positions
       continuing after the prompt's real length, the prompt's padding masked out.
    3. The logits: [the prompt's last logit, response columns 0 .. T-2]. The same shift as the packed
       layout, so the result equals `response_logits` up to float summation order.

    Worked example: 8 prompts of 94 tokens × 8 responses of 19 tokens. Packed: 64 × (94 + 19) = 7,232
    token positions; shared: 8 × 94 + 64 × 19 = 1,968, about 3.7× fewer.
    """
    from transformers import DynamicCache   # (transformers is imported where a model is used: quick CLI errors)
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


def token_logprobs(logits, targets):
    """log π(y_t | h_t) of the sampled ids: log_softmax(logits)[y_t]. logits [B, T, V], targets [B, T] -> [B, T]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sampled_logprobs(logits, targets):
    """log π(y_t | h_t) = x_{y_t} − logsumexp(x), [B, T, V] logits in any dtype -> [B, T] fp32, without an
    fp32 copy of the logits (chunked_logsumexp): for measurements, where nothing flows back."""
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float() - chunked_logsumexp(logits)


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


def decode(tok, response_ids):
    """Response texts for the graders (special tokens such as the EOS dropped)."""
    return tok.batch_decode(response_ids, skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------
# One group per prompt: sample, decode, grade
# ----------------------------------------------------------------------------------------------
def collect(model, tok, records, group_size, max_new_tokens, temperature=1.0, top_p=1.0, enable_thinking=None,
            sample_batch=SAMPLE_BATCH):
    """Rollouts for one step: G responses per record, graded. Everything is grouped contiguously.

    Returns a dict: records [N*G], prompt_ids [N*G] (id lists), response_ids [N*G] (id lists, EOS
    included), texts [N*G], rewards tensor [N*G] (1.0 right, 0.0 wrong), feedback [N*G] (what each
    response's grader says about it, "" for nothing: SDPO's environment feedback, S8), group_size.
    """
    prompt_ids = [encode_chat(tok, chat_messages(r), enable_thinking) for r in records]
    response_ids = sample(model, tok, prompt_ids, group_size, max_new_tokens, temperature, top_p, sample_batch)
    texts = decode(tok, response_ids)
    expanded = [r for r in records for _ in range(group_size)]
    graded = tasks.check_many(expanded, texts)
    rewards = torch.tensor([score for score, _ in graded], dtype=torch.float32)
    return {"records": expanded, "prompt_ids": [p for p in prompt_ids for _ in range(group_size)],
            "response_ids": response_ids, "texts": texts, "rewards": rewards,
            "feedback": [note for _, note in graded], "group_size": group_size}


def balanced_order(seq_lengths):
    """The release's batch order on one rank (verl's `_balance_batch`, `balance_batch: True`): responses
    sorted by their workload 24576·L + L² — the same order as L, prompt + response tokens — ties by
    position, then laid out as the even-ranked ascending followed by the odd-ranked descending (short
    at both ends, long in the middle). Returns the indices in that order. GRPO's mini-batches are then
    contiguous slices of it, and SDPO's demonstration is the first success in it.

    Example, lengths [5, 9, 3, 7, 4, 8]: ranked by length [2, 4, 0, 3, 5, 1] -> evens [2, 0, 5] +
    odds reversed [1, 3, 4] -> [2, 0, 5, 1, 3, 4].
    """
    ranked = sorted(range(len(seq_lengths)), key=lambda i: (seq_lengths[i], i))
    return ranked[::2] + ranked[1::2][::-1]


def batch_order(seq_lengths, blocks, mode):
    """The order of a rank's batch: 'balanced' (the release's, within each of its `blocks` sample blocks:
    one per rank, so the order does not depend on how many ranks share the step) or 'contiguous'
    (sampling order). Returns a list of `blocks` index lists."""
    per = len(seq_lengths) // blocks
    if mode == "contiguous":
        return [list(range(b * per, (b + 1) * per)) for b in range(blocks)]
    return [[b * per + j for j in balanced_order(seq_lengths[b * per:(b + 1) * per])] for b in range(blocks)]


def batch_positions(batch, blocks=1, mode="balanced"):
    """Each response's place in its block's order (batch_order over prompt + response lengths): [N*G]."""
    lengths = [len(p) + len(r) for p, r in zip(batch["prompt_ids"], batch["response_ids"])]
    position = [0] * len(lengths)
    for block in batch_order(lengths, blocks, mode):
        for place, i in enumerate(block):
            position[i] = place
    return position


def micro_batches(lengths, size):
    """Index lists of at most `size` sequences, length-aware: sorted by length so padding stays small.

    size <= 0 means one batch. The update is the same whatever the split (losses use global counts).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if not order:   # e.g. a rank none of whose responses has a teacher signal
        return []
    size = len(order) if size <= 0 else size
    return [order[i:i + size] for i in range(0, len(order), size)]


def drop_long_prompts(tok, records, max_len, what="records"):
    """--max-prompt-len: drop records whose chat prompt is longer than max_len tokens (the release does
    the same), saying how many. max_len 0 keeps everything."""
    if not max_len:
        return records
    kept = [r for r in records if len(encode_chat(tok, chat_messages(r))) <= max_len]
    if len(kept) < len(records):
        print(f"--max-prompt-len {max_len}: dropped {len(records) - len(kept)} of {len(records)} {what}")
    if not kept:
        raise ValueError(f"--max-prompt-len {max_len}: every prompt of the {what} is longer")
    return kept


BUILT_IN_MODELS = ("tiny", "tiny_think")
