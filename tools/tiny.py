"""tools/tiny.py — the built-in tiny base model: a character tokenizer and a ~1.3M-parameter Llama,
supervised-pretrained on the built-in world, committed in Hugging Face format under world/tiny_model/.

    python tools/tiny.py --overwrite-committed           # rebuilds world/tiny_model/ deterministically (seed 0), ~13 min
    python tools/tiny.py --think --overwrite-committed   # the thinking variant world/tiny_model_think/, from world/tiny_model/ (~3 min)
    python tools/tiny.py --out /tmp/model                # a build anywhere else needs no flag

Why it is built this way
------------------------
* The tokenizer is character level (one printable ASCII character = one token), made with the
  `tokenizers` library and wrapped as a `PreTrainedTokenizerFast`, so `AutoTokenizer.from_pretrained`
  loads it like any hub tokenizer. Its chat template is Qwen-style (<|im_start|>role ... <|im_end|>)
  and <|im_end|> is the EOS, exactly as for Qwen3 chat models: one code path serves both.
* The pretraining mixture covers the four training domains and the four OOD benchmarks (a base model
  is competent on everything, as in the paper). A share `NOISE` of its solutions (per domain) carry a plausible
  mistake (a zero too many, another factor's letter, the next listed tool...), so the base model is right only part of the
  time: that leaves room for RL to sharpen it (docs/WORLD.md, W1: Acc@8 between 15% and 60%).
* A share `DEMO` of the training-domain examples are demonstration-in-context examples in the
  exact SDPO reprompt format (SPEC S1, `rollout.fill_reprompt`) with a correct demonstration and the
  correct answer as target. Without them the model cannot use a solution placed in its prompt, and
  SDPO's self-teacher would have nothing to say (NOTES: success *fell* when a demo was shown).
* Test-split prompts are never used (tasks.split_of), so every test split is unseen.

The thinking variant (`--think`, for SDPO-CoT, SPEC S6): like Qwen3-Thinking, it answers every prompt
with a short trace first, `<think>mul 34 10</think>` then the usual solution (each generator's
"thought": the operation, the conversion factor, the tool and its argument...). It is the committed
world/tiny_model/ fine-tuned on the same mixture with the trace added, so world/tiny_model/ and every figure
measured on it stay as they are. Its demonstration examples show the demonstration with its trace
(what SDPO-CoT's teacher sees) or without it (what plain SDPO's teacher sees, S6), half each.
Its responses are longer: run it with --max-new-tokens 96.
"""
import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

import torch

from world import tasks
from infra.flags import check_dir_flag
from infra import safety
from infra.checkpoints import is_checkpoint_dir, save_checkpoint
from infra.distributed import setup_torch
from infra.models import TINY_DIR, load_model
from world.tiny_shape import build_tiny_llama
from infra.padding import round_up
from rollout import chat_messages, encode_chat, fill_reprompt

SPECIALS = ["<|pad|>", "<|bos|>", "<|im_start|>", "<|im_end|>", "<|unk|>"]
CHARS = ["\n"] + [chr(c) for c in range(32, 127)]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The mixture: relative weights of each domain, then the shares of noisy and demonstration examples.
MIX = {"math": 1.2, "science": 1.0, "tooluse": 0.7, "coding": 0.6,   # the harder domains get more
       "math_hard": 0.6, "science_boxed": 0.4, "tool_unseen": 0.3, "logic": 0.6}
# The share of plain examples whose solution has a plausible mistake. On the training domains it sets
# how often the base prefers a wrong answer it could have got right: the room RL has to sharpen (W1).
# The OOD benchmarks get little so that they start well above chance and forgetting has room to show (W3).
NOISE = {"math": 0.55, "science": 0.55, "tooluse": 0.5, "coding": 0.7,
         "math_hard": 0.1,              # (two place-value steps are hard enough for this model already)
         "logic": 0.15}                 # (a 3-way choice: little noise keeps it 10 points above chance, W3)
NOISE_DEFAULT = 0.25                    # the other two OOD benchmarks
DEMO = 0.35    # share of training-domain examples shown with a correct demonstration in the prompt
THINK_DIR = TINY_DIR + "_think"   # the thinking variant (--think)


def with_thought(rec, solution):
    """The thinking variant's response: a short trace, then the solution."""
    return f"<think>{rec['thought']}</think>\n{solution}"


def build_tokenizer():
    """Character-level PreTrainedTokenizerFast with pad/bos/eos/unk and a Qwen-style chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<|unk|>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every char, newlines too
    tk.decoder = decoders.Fuse()  # join characters back without spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<|pad|>", bos_token="<|bos|>",
                                  eos_token="<|im_end|>", unk_token="<|unk|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def corpus_example(rng, tok, think=False):
    """One pretraining example: (prompt ids, response ids incl. EOS), from the train split only.
    think: the thinking variant (a trace before every answer; demonstrations with or without theirs)."""
    names, weights = zip(*MIX.items())
    while True:
        name = rng.choices(names, weights)[0]
        demo = name in tasks.TRAIN_DOMAINS and rng.random() < DEMO
        noisy = not demo and rng.random() < NOISE.get(name, NOISE_DEFAULT)
        gen_rng = random.Random(rng.random())
        rec = tasks.GENERATORS[name](gen_rng, noisy=noisy)
        if tasks.split_of(rec["prompt"]) != "test":   # (train and valid)
            break
    target = with_thought(rec, rec["solution"]) if think else rec["solution"]
    if demo:  # a correct solution shown in the exact reprompt format (S1); the target is that solution
        shown = target if think and rng.random() < 0.5 else rec["solution"]   # (S6: kept for CoT, else stripped)
        msgs = chat_messages(rec, user_text=fill_reprompt(rec["prompt"], shown))
    else:
        msgs = chat_messages(rec)
    return encode_chat(tok, msgs), tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def make_batches(rng, tok, batch_size, n_batches, think=False):
    """Length-bucketed batches: draw batch_size*n_batches examples, sort by length, cut, shuffle."""
    pool = [corpus_example(rng, tok, think) for _ in range(batch_size * n_batches)]
    pool.sort(key=lambda pr: len(pr[0]) + len(pr[1]))
    batches = [pool[i:i + batch_size] for i in range(0, len(pool), batch_size)]
    rng.shuffle(batches)
    return batches


def sft_loss(model, batch, pad_id):
    """Mean cross-entropy of the response tokens (EOS included) given their prompts.

    Each example is laid out contiguously, prompt then response, right-padded to a multiple of 16
    (tighter than the RL layout of rollout.pack, which pads prompts and responses separately).
    """
    L = round_up(max(len(p) + len(r) for p, r in batch))
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(batch), L))
    attn = torch.zeros((len(batch), L), dtype=torch.long)
    for b, (p, r) in enumerate(batch):
        ids[b, :len(p) + len(r)] = torch.tensor(p + r)
        attn[b, :len(p) + len(r)] = 1
        loss_mask[b, len(p):len(p) + len(r)] = 1  # targets: the response tokens and the EOS
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()  # [B, L-1, V]
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [B, L-1]
    mask = loss_mask[:, 1:]
    return -(logp * mask).sum() / mask.sum()


def pretrain(model, tok, steps, batch_size=28, lr=3e-3, seed=0, log_every=100, think=False):
    """AdamW with linear warm-up and cosine decay on freshly drawn examples (never the same twice)."""
    from tqdm import tqdm
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    model.train()
    batches, bar = [], tqdm(range(steps), desc="pretrain", dynamic_ncols=True)
    for step in bar:
        if not batches:
            batches = make_batches(rng, tok, batch_size, 16, think)
        loss = sft_loss(model, batches.pop(), tok.pad_token_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="python tools/tiny.py [--out DIR] [--seed S] ... (--help lists all)")
    ap.add_argument("--steps", type=int, default=None, help="pretraining steps (batch 28; default 1800, --think 400)")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default 3e-3, --think 1e-3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--think", action="store_true", help="build the thinking variant from the committed world/tiny_model/")
    ap.add_argument("--out", default=None, help="where to write the model (default: world/tiny_model/, or "
                                                "world/tiny_model_think/ with --think)")
    ap.add_argument("--overwrite-committed", action="store_true", help="allow writing over the committed "
                    "world/tiny_model/ or world/tiny_model_think/ (every committed result was measured on them)")
    args = ap.parse_args(argv)
    if args.out is not None and (not args.out.strip() or any(ord(c) < 32 for c in args.out)):
        ap.error(f"--out: {args.out!r} is not a directory name")
    steps = (400 if args.think else 1800) if args.steps is None else args.steps   # (--steps 0 is 0, refused)
    lr = (1e-3 if args.think else 3e-3) if args.lr is None else args.lr
    args.out = args.out or (THINK_DIR if args.think else TINY_DIR)
    if not 1 <= steps <= 10**6:
        ap.error(f"--steps must be in [1, 10^6], got {steps}")
    if args.seed < 0:
        ap.error(f"--seed must be >= 0, got {args.seed}")
    if not (math.isfinite(lr) and lr > 0):
        ap.error(f"--lr must be a finite number > 0, got {lr}")
    check_dir_flag(ap, "--out", args.out)
    committed = [d for d in (TINY_DIR, THINK_DIR) if os.path.exists(d) and os.path.exists(args.out)
                 and os.path.samefile(d, args.out)]
    if committed and not args.overwrite_committed:
        ap.error(f"--out {args.out} is the committed {os.path.basename(committed[0].rstrip('/'))}/, which every "
                 f"committed result was measured on; give another --out, or --overwrite-committed to rebuild it")
    safety.refuse_committed(ap.error, "--out", args.out, args.overwrite_committed)
    if os.path.isdir(args.out) and os.listdir(args.out) and not is_checkpoint_dir(args.out):
        ap.error(f"--out {args.out} exists and is not a model directory; nothing was changed. Give another --out")
    setup_torch("cpu")
    torch.manual_seed(args.seed)
    if args.think:   # the committed base, fine-tuned with traces
        model, tok = load_model("tiny", "cpu")
    else:
        tok = build_tokenizer()
        model = build_tiny_llama(tok, args.seed)
    n = sum(p.numel() for p in model.parameters())
    print(f"tiny model{' (thinking variant)' * args.think}: {n / 1e6:.2f}M parameters, vocabulary {len(tok)}")
    t0 = time.time()
    pretrain(model, tok, steps, lr=lr, seed=args.seed + 1000 * args.think, think=args.think)
    print(f"pretrained {steps} steps in {time.time() - t0:.0f}s")
    if not all(torch.isfinite(p).all() for p in model.parameters()):   # (too large an --lr): nothing is saved
        print(f"error: the weights are not finite after pretraining (is --lr {lr} too large?); nothing was "
              f"written to {args.out}", file=sys.stderr)
        sys.exit(1)
    save_checkpoint(model, tok, args.out)
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
