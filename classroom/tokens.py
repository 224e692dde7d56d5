"""classroom/tokens.py — what each method tells each token: SDPO's per-token signal beside GRPO's one number.

    python classroom/tokens.py                                                   # the base model, MATH
    python classroom/tokens.py --model runs/sdpo_a0.05-s0/checkpoints/sdpo_a0.05/stage1-math --task math
    python classroom/tokens.py --model runs/.../stage3-tooluse --task tooluse --out runs/tokens-stage3

For a handful of test prompts it samples a group of G responses (as a training step does), grades
them, and for responses that SDPO would distil (a sibling succeeded, S1) it scores every sampled
token twice: by the student π_θ(·|x, y_<t) and by the teacher, the same weights shown the sibling's
answer (S2). Each token is coloured by its GJSD (S3), the per-token signal SDPO trains on; hovering
shows the student's and the teacher's probability of the sampled token and the teacher's top
alternatives. Beside it, GRPO's signal for the same response: one advantage A_i (G1) for every
token. Loop tokens (§5's artifact loop: at least three back-to-back copies of one short pattern, eight tokens
or more, periodic_loop_tokens; a number said twice is not one) are underlined, the line coloured by
the teacher's push on the token,
log p_T − log p_S: blue where the teacher raises it, orange where it lowers it (the CODING collapse,
docs/studies/collapse.md: does the teacher push the loop up, or fail to push it down?). "Denser" in one
look: SDPO's signal sits on a few tokens (an answer digit, an argument), and formatting tokens get almost none.

Writes OUT/tokens.html (self-contained: no network, no script), OUT/tokens.png (for slides) and
OUT/tokens.json (the numbers). Works on any checkpoint, e.g. every stage of a continual run.
"""
import argparse
import html
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

import torch

import evaluate
from analysis import probes
import grpo
import sdpo
from world import tasks
from infra import errors, flags, safety
from infra.checkpoints import write_atomically
from infra.distributed import setup_torch
from infra.models import load_model
from infra.padding import right_pad
from infra.speedups import SAMPLE_BATCH
from rollout import batch_positions, chat_messages, collect, encode_chat, response_logits

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None


@torch.no_grad()
def token_signals(model, teacher, tok, records, group_size=8, max_new_tokens=64, beta=0.5, seed=0, top=3,
                  sample_batch=SAMPLE_BATCH):
    """Sample and grade a group per record, then the per-token signals of every response.

    Returns a list of dicts, one per response: prompt, reward, advantage (G1), has_signal (S1), and
    tokens: [{'text', 'gjsd' (S3), 'p_student', 'p_teacher', 'push' (log p_T − log p_S of the sampled token),
    'loop' (a loop token), 'teacher_top': [(text, p), ...]}]
    (the SDPO fields are None for a response without a successful sibling; 'loop' is always set).
    sample_batch: responses scored per forward; only their per-token numbers are kept, never [N, T, V].
    """
    torch.manual_seed(seed)
    batch = collect(model, tok, records, group_size, max_new_tokens, temperature=1.0, sample_batch=sample_batch)
    adv = grpo.group_advantages(batch["rewards"], group_size)                                # [N*G] (G1)
    # (S1) the demonstration: the first success in the release's length-balanced order, as sdpo.prepare_batch picks it
    users, m, _ = sdpo.build_teacher_prompts(batch["records"], batch["texts"], batch["rewards"], group_size,
                                             position=batch_positions(batch))                     # (S1)
    # the signalled responses, sample_batch at a time: one forward each for student and teacher (S2)
    signalled = [i for i in range(len(users)) if m[i] > 0]
    scored = {}
    for start in range(0, len(signalled), sample_batch):
        sig = signalled[start:start + sample_batch]
        responses = [batch["response_ids"][i] for i in sig]
        targets = right_pad(responses, tok.pad_token_id, "cpu")[0].unsqueeze(-1)              # [S, T, 1]
        s_logits, _, _ = response_logits(model, [batch["prompt_ids"][i] for i in sig], responses,
                                         tok.pad_token_id)                                      # [S, T, V]
        t_prompts = [encode_chat(tok, chat_messages(batch["records"][i], users[i])) for i in sig]
        t_logp = torch.log_softmax(sdpo.teacher_logits(teacher, t_prompts, responses, tok.pad_token_id), -1)   # [S, T, V] (S2)
        s_logp = torch.log_softmax(s_logits, -1)                                                 # [S, T, V]
        gjsd = sdpo.generalized_jsd(s_logp, t_logp, beta)                                        # [S, T] (S3)
        alt = t_logp.exp().topk(top, -1)                                                         # [S, T, top]
        s_own, t_own = s_logp.cpu().gather(-1, targets)[..., 0], t_logp.cpu().gather(-1, targets)[..., 0]  # [S, T]
        scored.update({i: (s_own[j], t_own[j], gjsd[j], alt.values[j], alt.indices[j]) for j, i in enumerate(sig)})
    out = []
    for i, ids in enumerate(batch["response_ids"]):
        row = {"prompt": batch["records"][i]["prompt"], "reward": float(batch["rewards"][i]),
               "advantage": float(adv[i]), "has_signal": bool(m[i] > 0), "response": batch["texts"][i]}
        texts = [tok.decode([t]) for t in ids]
        loops = periodic_loop_tokens(list(ids))            # [T] (§5's loop, as the eye sees it: underlined)
        repeats = probes.loop_tokens(list(ids))                   # [T] any repeated bigram (the loop probe's)
        if i in scored:
            s_lp, t_lp, g, top_p, top_v = scored[i]
            row["tokens"] = [{"text": texts[t], "gjsd": g[t].item(), "loop": loops[t], "repeat": repeats[t],
                              "p_student": s_lp[t].exp().item(), "p_teacher": t_lp[t].exp().item(),
                              # the teacher's push on the sampled token: log p_T(y_t) − log p_S(y_t)
                              "push": (t_lp[t] - s_lp[t]).item(),
                              "teacher_top": [(tok.decode([int(v)]), round(p.item(), 3)) for p, v in zip(top_p[t], top_v[t])]}
                             for t in range(len(ids))]
        else:
            row["tokens"] = [{"text": texts[t], "gjsd": None, "p_student": None, "p_teacher": None, "push": None,
                              "loop": loops[t], "repeat": repeats[t], "teacher_top": []} for t in range(len(ids))]
        out.append(row)
    return out


def pick(rows, n):
    """The responses worth showing, spread over the prompts: failed ones with a teacher signal first (what
    SDPO corrects), one success with a signal (what it reinforces), then anything else."""
    def spread(rs):   # round robin over prompts, so one prompt does not fill the page
        by_prompt = {}
        for r in rs:
            by_prompt.setdefault(r["prompt"], []).append(r)
        queues, out = list(by_prompt.values()), []
        while any(queues):
            out += [q.pop(0) for q in queues if q]
        return out
    failed = spread([r for r in rows if r["has_signal"] and r["reward"] == 0])
    good = [r for r in rows if r["has_signal"] and r["reward"] == 1]
    rest = [r for r in rows if not r["has_signal"]]
    return (failed[:max(1, n - 1)] + good[:1] + failed[max(1, n - 1):] + rest)[:n]


def shown(text):
    return text.replace("\n", "⏎")


def color(v, vmax):
    """White (no signal) to red (the largest GJSD shown)."""
    a = 0.0 if v is None or vmax <= 0 else min(1.0, v / vmax)
    return f"rgba(214,39,40,{a:.2f})"


def push_color(push):
    """A loop token's underline: blue where the teacher raises the token (push > 0), orange where it lowers it,
    the stronger the larger |log p_T − log p_S| (full at 2 nats); grey without a teacher signal."""
    if push is None:
        return "rgba(120,120,120,0.8)"
    a = min(1.0, 0.25 + abs(push) / 2)
    return f"rgba(31,119,180,{a:.2f})" if push > 0 else f"rgba(255,127,14,{a:.2f})"


def write_html(rows, path, title):
    vmax = max([t["gjsd"] for r in rows for t in r["tokens"] if t["gjsd"] is not None] or [1e-9])
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
             "body{font-family:sans-serif;max-width:1100px;margin:20px auto;color:#222}"
             ".tok{font-family:monospace;font-size:20px;white-space:pre;border-radius:2px;padding:1px 0}"
             ".row{margin:18px 0;padding:10px;border:1px solid #ddd;border-radius:6px}"
             ".grpo{display:inline-block;font-family:monospace;padding:1px 4px;border-radius:2px}"
             ".lab{color:#666;font-size:12px;margin:4px 0}</style></head><body>",
             f"<h2>{html.escape(title)}</h2>",
             "<p>Each sampled token is coloured by SDPO's per-token signal, GJSD(student ‖ teacher) (S3), from white "
             f"(0) to red (the largest shown, {vmax:.3f} nats). Hover a token: the student's and the teacher's "
             "probability of it, and the teacher's top alternatives. Below: GRPO's signal for the same response, "
             "one advantage A (G1) for every token (green &gt; 0, red &lt; 0). <u>Underlined</u>: a loop token "
             "(three or more back-to-back copies of one short pattern, eight tokens or more); the line is blue where the teacher raises the token "
             "(log p_T − log p_S &gt; 0), orange where it lowers it.</p>"]
    for r in rows:
        parts.append("<div class='row'>")
        parts.append(f"<div class='lab'>prompt: {html.escape(r['prompt'][:300])}</div>")
        parts.append(f"<div class='lab'>reward {r['reward']:.0f} · "
                     + ("SDPO: distilled (a sibling succeeded)" if r["has_signal"] else "SDPO: no signal (no sibling "
                        "succeeded)") + "</div><div>")
        for t in r["tokens"]:
            tip = "no teacher signal" if t["gjsd"] is None else (
                f"GJSD {t['gjsd']:.4f} | student p {t['p_student']:.3f} | teacher p {t['p_teacher']:.3f} | "
                f"push log p_T − log p_S {t['push']:+.3f} | "
                "teacher top: " + ", ".join(f"{shown(a)!r} {p:.2f}" for a, p in t["teacher_top"]))
            if t.get("loop"):
                tip = "loop token | " + tip
            line = f";border-bottom:3px solid {push_color(t.get('push'))}" if t.get("loop") else ""
            parts.append(f"<span class='tok' title='{html.escape(tip, quote=True)}' "
                         f"style='background:{color(t['gjsd'], vmax)}{line}'>{html.escape(shown(t['text']))}</span>")
        a = r["advantage"]
        bg = f"rgba(44,160,44,{min(1, abs(a)):.2f})" if a > 0 else f"rgba(214,39,40,{min(1, abs(a)):.2f})"
        parts.append(f"</div><div class='lab'>GRPO (every token): <span class='grpo' style='background:{bg}'>"
                     f"A = {a:+.3f}</span></div></div>")
    parts.append("</body></html>")
    write_atomically(path, lambda f: f.write("".join(parts)))
    return path


def write_png(rows, path, title):
    """The same view as a picture: one line of coloured tokens per response, its GRPO advantage beside it."""
    if plt is None:
        return None
    vmax = max([t["gjsd"] for r in rows for t in r["tokens"] if t["gjsd"] is not None] or [1e-9])
    width = max(len(r["tokens"]) for r in rows)
    fig, ax = plt.subplots(figsize=(min(22, 2.5 + 0.22 * width), 0.9 + 0.55 * len(rows)))
    ax.set_xlim(0, width + 9)
    ax.set_ylim(len(rows), -0.8)
    ax.axis("off")
    ax.set_title(f"{title}\nred: SDPO's per-token GJSD (max {vmax:.3f}); right: GRPO's one advantage A per response\n"
                 "underlined: a loop token, blue where the teacher raises it, orange where it lowers it", fontsize=9)
    for y, r in enumerate(rows):
        for x, t in enumerate(r["tokens"]):
            a = 0.0 if t["gjsd"] is None else min(1.0, t["gjsd"] / vmax)
            ax.add_patch(plt.Rectangle((x, y - 0.4), 1, 0.8, color=(0.84, 0.15, 0.16, a), lw=0))
            ax.text(x + 0.5, y, shown(t["text"])[:2], ha="center", va="center", fontsize=7, family="monospace")
            if t.get("loop"):   # a loop token: underlined in the colour of the teacher's push
                ax.add_patch(plt.Rectangle((x, y + 0.3), 1, 0.12, lw=0, color=matplotlib.colors.to_rgba(
                    "tab:grey" if t.get("push") is None else ("tab:blue" if t["push"] > 0 else "tab:orange"))))
        adv = r["advantage"]
        ax.text(width + 1, y, f"r={r['reward']:.0f}  A={adv:+.2f}", va="center", fontsize=7,
                color="green" if adv > 0 else ("red" if adv < 0 else "grey"))
    # the colour scale: white (0) to the red of the largest GJSD shown, as the tokens are painted
    scale = matplotlib.colors.LinearSegmentedColormap.from_list("gjsd", [(1, 1, 1), (0.84, 0.15, 0.16)])
    bar = fig.colorbar(matplotlib.cm.ScalarMappable(matplotlib.colors.Normalize(0, vmax), scale), ax=ax,
                       fraction=0.02, pad=0.01)
    bar.set_label("SDPO's GJSD per token (nats)", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    return path


def periodic_loop_tokens(ids, min_copies=3, max_period=12, min_span=8):
    """[bool per token]: the loops the eye calls loops. Token t is one when it repeats the token one period back
    inside a stretch of at least `min_copies` back-to-back copies of one pattern of 1–`max_period` tokens, the
    stretch at least `min_span` tokens long; the first copy is not marked (as in loop_tokens).

    Example: "lambdambdambda" -> the period-4 stretch "ambdambdambda" (13 tokens, 3¼ copies): its tokens after
    the first "ambd" are marked. A number said twice ("1600 … \\boxed{1600}") is not: two copies, far apart;
    nor "1000" (a stretch of 3). probes.loop_tokens (any repeated bigram) marks both; the CODING loop probe and
    the masked arm (tools/collapse.py) use that one, this view underlines this one.
    """
    out = [False] * len(ids)
    for period in range(1, max_period + 1):
        t = period
        while t < len(ids):
            start = t
            while t < len(ids) and ids[t] == ids[t - period]:   # the stretch start−period … t−1 has this period
                t += 1
            span = t - start + period
            if t > start and span >= min_copies * period and span >= min_span:
                out[start:t] = [True] * (t - start)
            t = max(t, start + 1)
    return out


def loop_line(rows):
    """One line: the underlined loop tokens' count, then the quantities of tools/collapse.py's loop probe on this
    page's responses (its tokens are any repeated bigram, probes.loop_tokens): their share of all sampled
    tokens, and the teacher's mean push on them and on the others where it has a signal."""
    every = [t for r in rows for t in r["tokens"]]
    pushed = [t for t in every if t["push"] is not None]
    on_loop, on_other = [t["push"] for t in pushed if t["repeat"]], [t["push"] for t in pushed if not t["repeat"]]
    mean = lambda v: f"{sum(v) / len(v):+.3f} ({len(v)} tokens)" if v else "— (none)"   # noqa: E731
    return (f"loop tokens (underlined): {sum(t['loop'] for t in every)} of {len(every)} sampled; the loop probe's "
            f"repeated-bigram tokens: {sum(t['repeat'] for t in every)}, the teacher's push log p_T − log p_S on "
            f"them {mean(on_loop)}, on the others {mean(on_other)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Per-token view of the SDPO and GRPO signals (S1–S3, G1).",
                                 usage="python classroom/tokens.py [--model CKPT] [--task TASK] [--out DIR] ... (--help lists all)")
    ap.add_argument("--model", default="tiny", help="the student: 'tiny', a checkpoint directory, or a hub id")
    ap.add_argument("--teacher", default=None, help="the teacher's weights (default: the student's, as at a stage start)")
    ap.add_argument("--task", default="math", help=f"built-in domain ({', '.join(tasks.TRAIN_DOMAINS)}) or a file")
    ap.add_argument("--prompts", type=int, default=6, help="test prompts sampled")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--show", type=int, default=6, help="responses shown")
    ap.add_argument("--beta", type=float, default=0.5, help="GJSD mix (S3)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-batch", type=int, default=SAMPLE_BATCH, help="sequences per generate or forward call")
    ap.add_argument("--out", default=os.path.join("runs", "tokens"))
    args = ap.parse_args(argv)
    for flag, ok in (("--prompts", args.prompts >= 1), ("--group-size", args.group_size >= 2),
                     ("--show", args.show >= 1), ("--beta", 0 <= args.beta <= 1), ("--sample-batch", args.sample_batch >= 1),
                     ("--max-new-tokens", 1 <= args.max_new_tokens <= 4096)):
        if not ok:
            ap.error(f"{flag} is out of range")
    if args.seed < 0:
        ap.error(f"--seed must be >= 0, got {args.seed}")
    for flag, m in (("--model", args.model), ("--teacher", args.teacher)):
        if m is not None:
            flags.check_model_flag(ap, flag, m)
    flags.check_dir_flag(ap, "--out", args.out)
    safety.refuse_committed(ap.error, "--out", args.out)
    try:
        tasks.check_task(args.task)
        records = evaluate.benchmark_records(args.task, args.prompts, args.seed)
    except Exception as e:
        ap.error(f"--task: {errors.one_line(e)}")
    device = setup_torch("cpu" if not torch.cuda.is_available() else "auto")
    model, tok = load_model(args.model, device)
    teacher = sdpo.stage_teacher(model) if args.teacher is None else load_model(args.teacher, device)[0].eval()
    rows = token_signals(model, teacher, tok, records, args.group_size, args.max_new_tokens, args.beta, args.seed,
                         sample_batch=args.sample_batch)
    chosen = pick(rows, args.show)
    os.makedirs(args.out, exist_ok=True)
    title = f"{args.task}: {os.path.basename(os.path.normpath(args.model))}"
    page = write_html(chosen, os.path.join(args.out, "tokens.html"), title)
    png = write_png(chosen, os.path.join(args.out, "tokens.png"), title)
    with open(os.path.join(args.out, "tokens.json"), "w") as f:
        json.dump(chosen, f, indent=1)
    distilled = [t["gjsd"] for r in rows if r["has_signal"] for t in r["tokens"]]
    print(f"{sum(r['has_signal'] for r in rows)} of {len(rows)} responses have a teacher signal; mean GJSD per "
          f"distilled token {sum(distilled) / max(1, len(distilled)):.4f}, max {max(distilled or [0]):.4f}")
    print(loop_line(rows))
    print(f"wrote {page}" + (f", {png}" if png else "") + f", {os.path.join(args.out, 'tokens.json')}")
    return chosen


if __name__ == "__main__":
    main()
