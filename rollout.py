"""rollout.py — sample a group and grade it, score its tokens: what grpo.py, sdpo.py, evaluate.py and train.py share.

    records --chat template--> prompt ids --left pad--> HF generate (G samples each)
            --cut at first EOS (EOS kept)--> response ids --one forward--> per-token log-probs

Plain Hugging Face `generate` and one forward per (prompt, response), no vLLM. The layout wherever a model
scores responses (prompt lengths 2 and 3, responses of lengths 3 and 1, `_` = pad):

    input_ids      [_ p p | r r r]        attention  [0 1 1 | 1 1 1]     positions [0 0 1 | 2 3 4]
                   [p p p | r _ _]                   [1 1 1 | 1 0 0]               [0 1 2 | 3 3 3]
    logits at columns P-1 .. P+T-2 predict the response tokens at columns P .. P+T-1 (the shift).
"""
import re

import torch
from tqdm import tqdm
from transformers import LogitsProcessorList

from infra import speedups
from infra.speedups import SAMPLE_BATCH
from infra.errors import BadData
from world import graders
from infra.distributed import NonFiniteError, first_global_index, gather_lists, gathered, is_main, my_sample_blocks, my_share
from infra.padding import left_pad, right_pad

# speedups.ON is the one switch between the plain path below and its speed-ups (infra/speedups.py: a group's
# prompt computed once, a preallocated KV cache, log-probs recorded while sampling, chunked log-sum-exp). Each
# speed-up gives the plain path's numbers up to float summation order (tests/test_speedups.py). `--plain` sets
# it False. SAMPLE_BATCH (--sample-batch): sequences per forward or generate call (infra/speedups.py).
EVAL_TEMPERATURE, EVAL_TOP_P = 0.6, 0.95  # (C3) release defaults


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
    return tok(chat_text(tok, messages, enable_thinking), add_special_tokens=False)["input_ids"]


def chat_text(tok, messages, enable_thinking=None):
    """A chat rendered with the model's own template as text, ending with the assistant header (encode_chat)."""
    if enable_thinking is None:
        enable_thinking = getattr(tok, "enable_thinking", None)
    kw = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)


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
# Sampling and scoring (layout in the module docstring)
# ----------------------------------------------------------------------------------------------
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
           progress=False, with_logprobs=False):
    """Sample `group_size` responses for every prompt with plain HF generate.

    prompt_ids: list of N id lists. Returns a list of N*group_size response id lists, grouped
    contiguously (prompt 0's G samples first), each cut at its first EOS (the EOS included).
    progress: a progress bar over the `generate` calls (evaluation).
    with_logprobs: also return log π(y_t | h_t) of every response token (drift's KL):
    (responses, [[log-prob per token] per response]).
    """
    if with_logprobs and (temperature not in (0, 1) or top_p < 1):
        raise ValueError("with_logprobs records the model's own distribution: temperature 1 (or 0) and top-p 1 only")
    with gathered(model):   # sharded (torchrun): each rank samples with the whole weights, no collective
        out, logprobs = _sample(model, tok, prompt_ids, group_size, max_new_tokens, temperature, top_p, batch_size,
                                progress, with_logprobs)
    return (out, logprobs) if with_logprobs else out


@torch.inference_mode()   # no autograd bookkeeping at all (the ids leave as Python lists)
def _sample(model, tok, prompt_ids, group_size, max_new_tokens, temperature, top_p, batch_size, progress, with_logprobs):
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
        recorder = speedups.TokenLogprobs() if with_logprobs and speedups.ON else None
        if speedups.ON:   # a preallocated cache, each group's prompt prefilled once (speedups.generation_cache)
            shared = group_size if group_size > 1 and min(len(p) for p in chunk) >= 2 else 0
            gen_kw["cache"] = speedups.generation_cache(model, ids, mask, max_new_tokens, shared)
        # (synced_gpus off: each rank holds the whole weights (infra.gathered) and samples on its own;
        # disable_compile: transformers would otherwise torch.compile the forward for a static cache on a GPU)
        seqs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=sorted(eos), synced_gpus=False,
                              disable_compile=True, logits_processor=LogitsProcessorList([recorder] if recorder else []),
                              **gen_kw)  # [b, P+T]; stops once every row has ended
        new = [cut_at_eos(row, eos) for row in seqs[:, ids.shape[1]:].tolist()]
        out += new
        if with_logprobs:   # recorded while sampling, or (plain) one forward of the sampled responses
            lp = recorder.finish(seqs[:, ids.shape[1]:]) if recorder else \
                token_logprobs(*response_logits(model, chunk, new, tok.pad_token_id)[::2])   # [b, T]
            logprobs += [row[:len(ids_)] for row, ids_ in zip(lp.tolist(), new)]
        del seqs, gen_kw                          # the generation cache goes before the next chunk's
    speedups.free_device_cache(device)
    model.train(was_training)
    return out, logprobs


def response_logits(model, prompt_ids, response_ids, pad_id, as_float=True):
    """Logits that predict each response token: [B, T, V], with the response mask [B, T] and ids [B, T].

    One forward of every prompt and its response packed in one row (`packed_logits`). With the speed-ups on
    and prompts that repeat (a group's G responses share one), each distinct prompt is computed once
    instead (speedups.shared_prefix_logits): the same logits up to float summation order.
    as_float=False keeps the compute dtype (bf16 on GPUs): no fp32 copy of a [B, T, V] tensor, for the
    top-k path that only ever needs k values per position in fp32 (sdpo.topk_logprobs).
    """
    if speedups.ON and speedups.prefix_can_be_shared(model, prompt_ids):
        logits, r_mask, r_ids = speedups.shared_prefix_logits(model, prompt_ids, response_ids, pad_id)
    else:
        logits, r_mask, r_ids = packed_logits(model, prompt_ids, response_ids, pad_id)
    return (logits.float() if as_float else logits), r_mask, r_ids


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


def token_logprobs(logits, targets):
    """log π(y_t | h_t) of the sampled ids: log_softmax(logits)[y_t]. logits [B, T, V], targets [B, T] -> [B, T]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def decode(tok, response_ids):
    """Response texts for the graders (special tokens such as the EOS dropped)."""
    return tok.batch_decode(response_ids, skip_special_tokens=True)


@torch.no_grad()
def response_logprobs(model, prompt_ids, response_ids, pad_id, micro_batch=0):
    """log π(y_t | h_t) of every response under `model`, no gradient (GRPO's π_old, G2): a list of [|y_i|]
    tensors, computed `micro_batch` responses at a time (0: all at once)."""
    lengths = [len(r) for r in response_ids]
    out = [None] * len(lengths)
    with gathered(model):   # sharded: a plain forward per micro-batch on every rank (infra.gathered)
        for idx in micro_batches(lengths, micro_batch):
            logits, _, targets = response_logits(model, [prompt_ids[i] for i in idx], [response_ids[i] for i in idx],
                                                 pad_id)                                 # [b, T, V]
            lp = token_logprobs(logits, targets)                                           # [b, T]
            for j, i in enumerate(idx):
                out[i] = lp[j, :lengths[i]]
    return out


def logsumexp_fp32(logits):
    """log Σ_v exp(x_v) in fp32 over the last dimension, [..., V] -> [...], with its gradient (SDPO's top-k).
    Speed-ups on: chunk by chunk, without an fp32 copy of the logits (speedups.chunked_logsumexp)."""
    return speedups.chunked_logsumexp(logits) if speedups.ON else torch.logsumexp(logits.float(), dim=-1)


@torch.no_grad()
def token_entropy(logits):
    """Per-token entropy H(π(·|h_t)) = −Σ_v p log p, [B, T, V] -> [B, T] (fp32), for the logs."""
    if speedups.ON:   # chunk by chunk, never an fp32 log-softmax of the whole batch
        return speedups.token_entropy(logits)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def sampled_logprobs(logits, targets):
    """log π(y_t | h_t) in fp32 for measurements (nothing flows back), logits in any dtype: [B, T, V] -> [B, T]."""
    return speedups.sampled_logprobs(logits, targets) if speedups.ON else token_logprobs(logits.float(), targets)


# ----------------------------------------------------------------------------------------------
# One group per prompt: sample, decode, grade — for a training step (collect) and for evaluation (C3)
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
    graded = graders.check_many(expanded, texts)
    rewards = torch.tensor([score for score, _ in graded], dtype=torch.float32)
    return {"records": expanded, "prompt_ids": [p for p in prompt_ids for _ in range(group_size)],
            "response_ids": response_ids, "texts": texts, "rewards": rewards,
            "feedback": [note for _, note in graded], "group_size": group_size}


@torch.no_grad()
def acc_at_k(model, tok, records, k=8, max_new_tokens=64, temperature=EVAL_TEMPERATURE, top_p=EVAL_TOP_P,
             prompts=None, batch_size=SAMPLE_BATCH, progress=False):
    """(C3) Acc@k = mean over prompts of (1/k) Σ_j correct(y_j), y_j ~ π(·|x) at the eval temperature.

    prompts: optional user texts replacing each record's prompt (the teacher check's reprompts).
    batch_size: sequences generated at once (--sample-batch): it bounds the KV cache, not the result's size.
    progress: a progress bar over the `generate` calls.
    Returns (accuracy, per-prompt accuracies [N], responses [N*k], scores [N*k],
    hit_limit [N*k]: whether each response ran to max_new_tokens without an EOS).
    """
    texts = [None] * len(records) if prompts is None else prompts
    mine = my_share(len(records))  # data parallel: each rank samples its share, the results are gathered
    prompt_ids = [encode_chat(tok, chat_messages(records[i], texts[i])) for i in mine]
    if prompt_ids:
        ids = sample(model, tok, prompt_ids, k, max_new_tokens, temperature, top_p, batch_size, progress=progress)
    else:   # (torchrun, fewer prompts than ranks) this rank still joins the gather of the weights the others wait in
        with gathered(model):
            ids = []
    responses = decode(tok, ids) if ids else []
    scores = graders.grade_many([records[i] for i in mine for _ in range(k)], responses)
    hit_limit = [len(i) >= max_new_tokens for i in ids]
    responses, scores, hit_limit = gather_lists(responses), gather_lists(scores), gather_lists(hit_limit)
    # (C3) the mean correctness of each prompt's k samples, then the mean over prompts
    per_prompt = [sum(scores[i * k:(i + 1) * k]) / k for i in range(len(records))]
    return sum(per_prompt) / max(1, len(per_prompt)), per_prompt, responses, scores, hit_limit


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


def prompt_room(model, max_new_tokens):
    """The most prompt tokens the model's positions leave beside a response of max_new_tokens (0: the model's
    config names no limit). A longer prompt would run past the positions: its records are dropped, as the
    release drops long prompts (drop_long_prompts)."""
    positions = getattr(model.config, "max_position_embeddings", None) or 0
    if positions and max_new_tokens >= positions:
        raise BadData(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the model's {positions} positions")
    return positions - max_new_tokens if positions else 0


def prompt_fits(tok, record, limit):
    """Whether a record's chat prompt is at most `limit` tokens. A token covers at least one byte of the text
    (+1: a tokenizer's leading-space marker), so a text that short is in without being tokenized."""
    text = chat_text(tok, chat_messages(record))
    return len(text.encode()) + 1 <= limit or len(tok(text, add_special_tokens=False)["input_ids"]) <= limit


def drop_long_prompts(tok, records, max_len, what="records", room=0):
    """Drop the records whose chat prompt is longer than --max-prompt-len (max_len; the release does the same) or
    than the model's positions leave for the response (room, prompt_room), saying how many and why. Neither
    set (0): everything is kept."""
    limits = [(n, why) for n, why in ((max_len, f"--max-prompt-len {max_len}"),
                                      (room, f"the model's positions less --max-new-tokens ({room} tokens)")) if n]
    if not limits:
        return records
    limit, why = min(limits)
    kept = [r for r in records if prompt_fits(tok, r, limit)]
    if len(kept) < len(records):
        print(f"{why}: dropped {len(records) - len(kept)} of {len(records)} {what}")
    if not kept:
        raise BadData(f"{why}: every prompt of the {what} is longer")
    return kept


# ----------------------------------------------------------------------------------------------
# One step's rollout: G responses per prompt, sampled in seeded blocks and graded
# ----------------------------------------------------------------------------------------------
def sample_seed(seed, step, block):
    """The sampling seed of one block of one step: every step reproducible on its own (so a run resumes
    exactly), and each block of prompts its own stream (block 0's is the one-process seed)."""
    return seed * 100_003 + step + 1_000_003 * block


def sample_and_grade(model, tok, chosen, args, step):
    """G responses for each of this process's share of the step's prompts, graded (rollout.collect).

    The step's prompts are cut into `--sample-blocks` blocks of whole prompts (default: one per process
    under torchrun, infra.my_sample_blocks), each sampled under its own seed, so a step's samples do not
    depend on how many processes share it (a group never straddles two). One process: one block.
    """
    blocks, mine = my_sample_blocks(args.sample_blocks)
    per = len(chosen) // blocks
    parts = []
    for b in mine:
        torch.manual_seed(sample_seed(args.seed, step, b))
        try:
            parts.append(collect(model, tok, chosen[b * per:(b + 1) * per], args.group_size, args.max_new_tokens,
                                 args.temperature, args.top_p, sample_batch=args.sample_batch))
        except RuntimeError as e:   # torch's "probability tensor contains either inf, nan or element < 0"
            if "inf" not in str(e) and "nan" not in str(e):
                raise
            raise NonFiniteError(f"the policy's probabilities are not finite at step {step + 1} "
                                 f"(is --lr too large?)") from None
    batch = {k: [x for p in parts for x in p[k]] for k in ("records", "prompt_ids", "response_ids", "texts", "feedback")}
    batch["rewards"] = torch.cat([p["rewards"] for p in parts])    # [N*G] (this process's prompts)
    batch["group_size"] = args.group_size
    batch["blocks"] = max(1, len(mine))   # sample blocks in it: the batch's order is made block by block
    batch["first_index"] = first_global_index(len(batch["response_ids"]))   # its first response in the whole batch
    return batch
