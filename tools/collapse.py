"""tools/collapse.py — the CODING collapse, explained by intervention (declared in docs/studies/collapse.md first).

    python tools/reference.py --family regen --seeds 10,11,12 --jobs 2     # first: stages 1–4 with checkpoints
    python tools/collapse.py --runs runs/regen --seeds 10,11,12 --out runs/collapse          # every cell, resumable
    python tools/collapse.py --runs runs/regen --seeds 10,11,12 --out runs/collapse --probe  # the loop along the stages
    python tools/collapse.py --seeds 10,11,12 --out runs/collapse --orders                   # D.5: two other orders
    python tools/collapse.py --out runs/collapse --summary              # the swap, probe and order tables

Every cell reruns the reference's CODING stage (its prompt order, seeds and settings: no feedback, no warmup,
a fresh AdamW at 4e-4) from one configuration's stage-3 checkpoint, with one thing changed:

    the teacher swap   student ∈ {SDPO_5%, SDPO_0} × teacher ∈ {its own EMA at α = 5% (the control of SDPO_5%),
                       itself frozen at the stage's start (α = 0, the control of SDPO_0), θ_0, GRPO's stage-3
                       model of the same seed}: only the teacher differs; the student, its prompts, its seeds
                       and its optimizer are the reference's
    the loop mask      SDPO_5%'s stage with the distillation loss zeroed on loop tokens (probes.loop_tokens);
                       and a second arm where those tokens of a failed response instead get the student's own
                       negative signal, + mean log π_θ(y_t) over them (a GRPO push with advantage −1)
    GRPO               GRPO's own CODING stage from its stage-3 checkpoint (the step-by-step probe's third run)

Every step of every cell logs the loop probe (`loop_probe`) on its own rollouts, before its update. The cells are
written to OUT/<cell>/seed<S>/result.json (skipped once there, so the command resumes) with the step log beside.
The stage-3 checkpoints are read, never written: stages 1–3 stay byte-identical (tests/test_collapse.py).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import continual  # noqa: E402
import evaluate  # noqa: E402
import sdpo  # noqa: E402
import train  # noqa: E402
from infra import flags, safety  # noqa: E402
from infra import stats  # noqa: E402
from analysis import archive, probes  # noqa: E402
from analysis.figures import plot_loop_stages, plot_loop_steps  # noqa: E402
from experiment import configurations, rundir  # noqa: E402
from world import tasks  # noqa: E402
from infra.checkpoints import atomic_json  # noqa: E402
from infra.distributed import init_distributed  # noqa: E402
from infra.models import load_model  # noqa: E402
from rollout import chat_messages, collect, encode_chat, micro_batches, response_logits, token_logprobs  # noqa: E402

STAGES = ["math", "science", "tooluse", "coding"]
CODING_STAGE = 3                       # 0-based: the reference's fourth stage
RUN_NAMES = {"grpo": "grpo", "sdpo_0": "sdpo_a0", "sdpo_5": "sdpo_a0.05"}
EVAL_N, EVAL_K = 32, 8                 # the reference's CODING test prompts
PROBE_N, PROBE_K = 64, 8               # the probe along the stages: 64 CODING training prompts × 8 at T = 1
STEPS = 40                             # a cell's CODING steps (the reference's stage)
QUICK = []                             # --quick: flags appended to the orders' runs
CAUSAL = 0.5                           # declared: an intervention removes the collapse when CODING ≥ 50% on every seed
# cell: (the student's configuration, the teacher, the loss on loop tokens)
CELLS = {
    "sdpo_5-ema5": ("sdpo_5", "ema5", None), "sdpo_5-start": ("sdpo_5", "start", None),
    "sdpo_5-base": ("sdpo_5", "base", None), "sdpo_5-grpo": ("sdpo_5", "grpo", None),
    "sdpo_0-ema5": ("sdpo_0", "ema5", None), "sdpo_0-start": ("sdpo_0", "start", None),
    "sdpo_0-base": ("sdpo_0", "base", None), "sdpo_0-grpo": ("sdpo_0", "grpo", None),
    "sdpo_5-ema5-maskloops": ("sdpo_5", "ema5", "mask"), "sdpo_5-ema5-pushloops": ("sdpo_5", "ema5", "push"),
    "grpo": ("grpo", None, None),
}
TEACHERS = {"ema5": "its own EMA, α = 5%", "start": "itself frozen at the stage's start", "base": "θ_0",
            "grpo": "GRPO's stage-3 model"}


# ----------------------------------------------------------------------------------------------
# The loop probe: on one batch of rollouts, where the loop tokens are and how the teacher scores them
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def loop_probe(student, teacher, batch, tok):
    """Per batch (before its update): the loop-token share of all responses' tokens and of the failed responses'
    tokens; on the failed responses that have a demonstration, the mean log p_T − log p_S of the sampled token on
    loop tokens and on the others, and the mean p_T(EOS) − p_S(EOS) over their positions. The teacher reads S1's
    reprompt (the first successful sibling's answer); `teacher` is the student itself for GRPO."""
    ids, rewards = batch["response_ids"], batch["rewards"]
    loops = [probes.loop_tokens(r) for r in ids]
    failed = [i for i in range(len(ids)) if float(rewards[i]) != 1.0]
    out = {"loop_share": sum(map(sum, loops)) / max(1, sum(map(len, loops))),
           "loop_share_failed": sum(sum(loops[i]) for i in failed) / max(1, sum(len(loops[i]) for i in failed)),
           "probe_responses": 0, "logratio_loop": None, "logratio_other": None, "eos_push": None}
    texts, _, _ = sdpo.build_teacher_prompts(batch["records"], batch["texts"], rewards, batch["group_size"])
    shown = [i for i in failed if texts[i] is not None]
    if not shown:
        return out
    eos = tok.eos_token_id
    on_loop = on_other = n_loop = n_other = push = n_pos = 0.0
    for idx in micro_batches([len(ids[i]) for i in shown], 0):
        chosen = [shown[j] for j in idx]
        prompts = [batch["prompt_ids"][i] for i in chosen]
        t_prompts = [encode_chat(tok, chat_messages(batch["records"][i], texts[i])) for i in chosen]
        responses = [ids[i] for i in chosen]
        s_logits, mask, targets = response_logits(student, prompts, responses, tok.pad_token_id)   # [b, T, V]
        t_logits = response_logits(teacher, t_prompts, responses, tok.pad_token_id)[0]              # [b, T, V]
        ratio = token_logprobs(t_logits, targets) - token_logprobs(s_logits, targets)             # [b, T]
        eos_gap = torch.softmax(t_logits.float(), -1)[..., eos] - torch.softmax(s_logits.float(), -1)[..., eos]
        for j, i in enumerate(chosen):
            n = len(ids[i])
            is_loop = torch.tensor(loops[i], dtype=torch.bool)
            on_loop += ratio[j, :n][is_loop].sum().item()
            on_other += ratio[j, :n][~is_loop].sum().item()
            n_loop, n_other = n_loop + int(is_loop.sum()), n_other + int((~is_loop).sum())
            push, n_pos = push + eos_gap[j, :n].sum().item(), n_pos + n
    out.update(probe_responses=len(shown), logratio_loop=on_loop / n_loop if n_loop else None,
               logratio_other=on_other / n_other if n_other else None, eos_push=push / max(1, n_pos))
    return out


# ----------------------------------------------------------------------------------------------
# The method a cell trains with: SDPO or GRPO, with the probe, and the loop-token loss of its arm
# ----------------------------------------------------------------------------------------------
def loop_masked_plan(plan, batch, args):
    """SDPO's plan with every loop token dropped from the distillation (S7's keep masks AND not-a-loop-token):
    the distilled responses, micro-batches and token count follow from the new masks."""
    keep = [k & ~torch.tensor(probes.loop_tokens(r), dtype=torch.bool)
            for k, r in zip(plan.token_keep, batch["response_ids"])]
    lengths = [len(r) for r in batch["response_ids"]]
    distilled = [i for i, t in enumerate(plan.user_texts) if t is not None and int(keep[i].sum()) > 0]
    n_tok = sum(int(keep[i].sum()) for i in distilled)
    micro = [[distilled[j] for j in idx] for idx in micro_batches([lengths[i] for i in distilled], args.micro_batch)]
    plan.token_keep = keep
    plan.steps = [{**plan.steps[0], "micro_batches": micro, "n_tok": n_tok}]
    plan.counts["distilled_tokens"] = n_tok
    return plan


def loop_push(model, batch, idx, tok, n_loop):
    """The second arm's term on micro-batch `idx`: Σ log π_θ(y_t) over the loop tokens of its failed responses,
    divided by the batch's count of them (a GRPO push with advantage −1, on the loop tokens only)."""
    prompts, responses = [batch["prompt_ids"][i] for i in idx], [batch["response_ids"][i] for i in idx]
    logits, _, targets = response_logits(model, prompts, responses, tok.pad_token_id)     # [b, T, V]
    logp = token_logprobs(logits, targets)                                                 # [b, T]
    total = logp.new_zeros(())
    for j, i in enumerate(idx):
        if float(batch["rewards"][i]) != 1.0:
            is_loop = torch.tensor(probes.loop_tokens(responses[j]), dtype=torch.bool, device=logp.device)
            total = total + logp[j, :len(responses[j])][is_loop].sum()
    return total / max(1, n_loop)


def cell_method(base_method, probe_teacher=None, loops=None):
    """A method module with the four functions train.run_steps calls: `base_method`'s, with the loop probe on
    every batch (in the step's statistics) and, for SDPO, the cell's loss on loop tokens ("mask" or "push")."""
    def prepare_batch(model, frozen, batch, cfg, args, tok, step):
        probe = loop_probe(model, probe_teacher or frozen or model, batch, tok)
        plan = base_method.prepare_batch(model, frozen, batch, cfg, args, tok, step)
        if loops:
            plan = loop_masked_plan(plan, batch, args)
            failed_loops = [sum(probes.loop_tokens(r)) for i, r in enumerate(batch["response_ids"])
                            if float(batch["rewards"][i]) != 1.0 and plan.user_texts[i] is not None]
            plan.n_loop = sum(failed_loops)   # (the cell's own, beside the method's plan fields)
        plan.probe = probe
        return plan

    def micro_batch_loss(model, frozen, batch, plan, part, idx, cfg, args, tok):
        loss, stats = base_method.micro_batch_loss(model, frozen, batch, plan, part, idx, cfg, args, tok)
        if loops == "push":
            loss = loss + loop_push(model, batch, idx, tok, plan.n_loop)
        return loss, stats

    def step_stats(plan, results):
        return {**base_method.step_stats(plan, results), **plan.probe}

    optional = {name: getattr(base_method, name) for name in ("after_step", "frozen_state") if hasattr(base_method, name)}
    return SimpleNamespace(prepare_batch=prepare_batch, micro_batch_loss=micro_batch_loss, step_stats=step_stats,
                           frozen_model=base_method.frozen_model, **optional)


# ----------------------------------------------------------------------------------------------
# One cell
# ----------------------------------------------------------------------------------------------
def stage_dir(runs, seed, run_name, k):
    """Stage k's (1-based) checkpoint of run_name in the seed's regenerated run directory."""
    found = sorted(glob.glob(os.path.join(runs, f"continual-s{seed}", "checkpoints", run_name, f"stage{k}-*")))
    if not found:
        sys.exit(f"error: no stage-{k} checkpoint of {run_name}, seed {seed}, under {runs} (run "
                 f"`python tools/reference.py --family regen --seeds {seed} --jobs 2` first)")
    return found[0]


def coding_acc(model, tok):
    deg = {}
    acc = evaluate.evaluate(model, tok, ["coding"], n=EVAL_N, k=EVAL_K, seed=0, progress=False, degenerate=deg)
    return acc["coding"], deg["coding"]


def run_cell(runs, out, cell, seed, steps=40):
    """The CODING stage of one cell and seed: CODING Acc@8 before and after, the degenerate share after, the
    steps' rows (with the probe). Returns the result (read back when it is there)."""
    path = os.path.join(out, cell, f"seed{seed}", "result.json")
    if os.path.exists(path):
        return json.load(open(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    student, teacher, loops = CELLS[cell]
    config = {"ema5": "sdpo_5", None: student}.get(teacher, "sdpo_0")   # the teacher's schedule: EMA 5% or frozen
    argv = ["--method", config, "--stages", ",".join(STAGES), "--seed", str(seed), "--threads", "1",
            "--steps", str(steps)]
    _, args, _, _, configs, _ = continual.parse_args(argv)
    (method, settings, run_name), = configs
    args = flags.per_seed(args)[0]
    device = init_distributed(args.device, args.threads)
    start = stage_dir(runs, seed, RUN_NAMES[student], CODING_STAGE)
    model, tok = rundir.load_checkpoint(start, device, args.dtype, what="stage-3 checkpoint")
    t0 = time.time()
    before, _ = coding_acc(model, tok)
    log = os.path.join(os.path.dirname(path), "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    base_method, cfg = configurations.METHODS[method], configurations.config_of(method, settings, args)
    stage = rundir.Stage(CODING_STAGE, "coding", *continual.new_stage(model, tok, "coding", CODING_STAGE, base_method,
                                                                      cfg, settings, args))
    if teacher in ("base", "grpo"):   # the swap: a fixed teacher, never moved (α = 0)
        source = "tiny" if teacher == "base" else stage_dir(runs, seed, RUN_NAMES["grpo"], CODING_STAGE)
        stage.frozen = load_model(source, device)[0].eval().requires_grad_(False)
    probe_teacher = model if method == "grpo" else None   # GRPO has no teacher: the probe asks the student itself
    on_step = rundir.stage_logger(stage, log, run_name,
                                  evaluate.in_stage_curve(model, tok, "coding", stage.args))
    train.run_steps(model, tok, stage.records, stage.args, cell_method(base_method, probe_teacher, loops), cfg,
                    stage.frozen, stage.opt, desc=f"{cell} s{seed}", on_step=on_step)
    after, deg_after = coding_acc(model, tok)
    result = {"cell": cell, "student": student, "teacher": teacher, "loops": loops, "seed": seed, "start": start,
              "coding_before": before, "coding_after": after, "degenerate_after": deg_after,
              "rows": stage.rows, "seconds": round(time.time() - t0, 1)}
    atomic_json(path, result)
    print(f"{cell} seed {seed}: CODING {100 * before:.1f} -> {100 * after:.1f}%, degenerate {100 * deg_after:.1f}%, "
          f"loop share {mean([r['loop_share'] for r in stage.rows]):.3f} ({result['seconds']:.0f}s)", flush=True)
    return result


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# ----------------------------------------------------------------------------------------------
# The probe along the stages: which stage seeds the loops
# ----------------------------------------------------------------------------------------------
def probe_model(model, tok, seed=0):
    """The loop probe on 64 CODING training prompts × 8 samples at T = 1, the model its own teacher."""
    records = tasks.train_records("coding", seed=0)[:PROBE_N]
    torch.manual_seed(seed)
    batch = collect(model, tok, records, PROBE_K, 64, temperature=1.0, top_p=1.0)   # rollouts as a step's
    return loop_probe(model, model, batch, tok)


def probe_stages(runs, out, seed):
    path = os.path.join(out, "probe", f"seed{seed}.json")
    if os.path.exists(path):
        return json.load(open(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    found = {"base": probe_model(*load_model("tiny"))}
    for config in ("grpo", "sdpo_0", "sdpo_5"):
        for k in (1, 2, 3):
            found[f"{config}/stage{k}"] = probe_model(*load_model(stage_dir(runs, seed, RUN_NAMES[config], k)))
    atomic_json(path, found)
    print(f"probe seed {seed}: " + ", ".join(f"{k} {v['loop_share_failed']:.3f}" for k, v in found.items()), flush=True)
    return found


# ----------------------------------------------------------------------------------------------
# The tables
# ----------------------------------------------------------------------------------------------
def interval(values, scale=100, digits=1):
    """mean [95% t-interval over the seeds], × scale, or — with nothing to average."""
    if not values:
        return "—"
    m, lo, hi = stats.mean_interval(values)
    return f"{scale * m:.{digits}f}" + ("" if lo is None else f" [{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]")


def summary(out):
    """The swap table (student × teacher, and the loop arms): CODING after the stage, its degenerate share, the
    loop share of the stage's rollouts, each over the seeds, and whether it clears the declared threshold."""
    lines = ["| cell | student | teacher | loop tokens | seeds | CODING after, % [95%] | every seed ≥ 50%? | "
             "degenerate after, % | loop share of failed tokens, stage mean, % |", "|---|---|---|---|---|---|---|---|---|"]
    for cell, (student, teacher, loops) in CELLS.items():
        rs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, cell, "seed*", "result.json")))]
        if not rs:
            continue
        after = [r["coding_after"] for r in rs]
        loop = [mean([row["loop_share_failed"] for row in r["rows"]]) for r in rs]
        lines.append(f"| `{cell}` | {student} | {TEACHERS.get(teacher, '—')} | {loops or 'distilled'} | {len(rs)} | "
                     f"{interval(after)} | {'yes' if min(after) >= CAUSAL else 'no'} | "
                     f"{interval([r['degenerate_after'] for r in rs])} | {interval(loop)} |")
    return "\n".join(lines)


def seeding_stage(probe, config, stages=("math", "science", "tooluse")):
    """Declared: the stage that seeds the loops is the first whose loop share of failed tokens is ≥ 2× the base's."""
    for k, stage in enumerate(stages, start=1):
        if probe[f"{config}/stage{k}"]["loop_share_failed"] >= 2 * probe["base"]["loop_share_failed"]:
            return stage
    return "none"


def probe_table(out):
    """The probe along the stages: per model, over the seeds, the loop share of failed tokens and how the model,
    as its own teacher with the demonstration, scores loop tokens, the other tokens and the end of the response."""
    probes = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "probe", "seed*.json")))]
    if not probes:
        return ""
    lines = [f"| model ({len(probes)} seeds) | loop share of failed tokens, % [95%] | log p_T − log p_S, loop tokens | "
             "other tokens | p_T(EOS) − p_S(EOS) |", "|---|---|---|---|---|"]
    for key in probes[0]:
        rows = [p[key] for p in probes]
        lines.append(f"| {key} | {interval([r['loop_share_failed'] for r in rows])} | "
                     + " | ".join(interval([r[m] for r in rows if r[m] is not None], scale=1, digits=3)
                                  for m in ("logratio_loop", "logratio_other", "eos_push")) + " |")
    seeded = {config: [seeding_stage(p, config) for p in probes] for config in RUN_NAMES}
    lines.append("")
    lines.append("The stage that seeds the loops (the first with ≥ 2× the base's share), seed by seed: "
                 + "; ".join(f"{config} {', '.join(stages)}" for config, stages in seeded.items()) + ".")
    return "\n".join(lines)


# Table D.5 (exploratory): SDPO_5% with two other stage orders, the same seeds, every stage as continual.py runs it
ORDERS = {"math-tooluse-science-coding": "math,tooluse,science,coding",
          "math-science-coding-tooluse": "math,science,coding,tooluse"}
REFERENCE = os.path.join(safety.REPO, "results", "reference")   # the reference's own order, the same seeds


def order_row(path):
    """One SDPO_5% run (its results.json and the progress.json beside it): CODING right after its own stage, CODING's
    degenerate share then and after the last stage, and F on the earlier domains."""
    result = json.load(open(path))
    stages = json.load(open(os.path.join(os.path.dirname(path), "progress.json")))["sdpo_a0.05"]["stages"]
    k = result["stages"].index("coding")
    return {"coding_after": stages[k]["acc"]["coding"], "degenerate_after": stages[k]["degenerate"]["coding"],
            "degenerate_last": stages[-1]["degenerate"]["coding"],
            "forget_earlier": result["runs"]["sdpo_a0.05"]["avg_forget_earlier"]}


def orders_table(out, seeds=(10, 11, 12)):
    """Table D.5 (exploratory): the reference's order and the two others, over the same seeds."""
    paths = {"math-science-tooluse-coding (the reference)":
             [os.path.join(archive.materialized(REFERENCE), f"continual-s{s}", "results.json") for s in seeds]}
    paths.update({o: [os.path.join(out, "order", f"{o}-s{s}", "results.json") for s in seeds] for o in ORDERS})
    lines = ["| order (SDPO_5%, exploratory) | seeds | CODING right after its stage, % [95%] | CODING degenerate then, % | "
             "CODING degenerate after the last stage, % | F on earlier domains, % |", "|---|---|---|---|---|---|"]
    for order, files in paths.items():
        rows = [order_row(f) for f in files if os.path.isfile(f)]
        if rows:
            lines.append(f"| {order} | {len(rows)} | " + " | ".join(
                interval([r[m] for r in rows]) for m in ("coding_after", "degenerate_after", "degenerate_last",
                                                         "forget_earlier")) + " |")
    return "\n".join(lines) if len(lines) > 3 else ""


def run_order(out, order, seed):
    """One data order of SDPO_5%: `continual.py --method sdpo_5 --stages ORDER` into OUT/order/<order>-s<seed>/."""
    root, name = os.path.join(out, "order"), f"{order}-s{seed}"
    if os.path.isfile(os.path.join(root, name, "results.json")):
        return
    cmd = [sys.executable, os.path.join(safety.REPO, "continual.py"), "--method", "sdpo_5", "--stages", ORDERS[order],
           "--seed", str(seed), "--runs-dir", os.path.abspath(root), "--name", name, "--threads", "1", *QUICK] + \
        (["--overwrite-committed"] if safety.committed_path(root) else [])   # (main checked --into-results)
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


COMMITTED = os.path.join(safety.REPO, "results", "collapse")   # the committed cells (docs/studies/collapse.md), read by default

# The figures: the three configurations' own CODING stage and θ_0's rescue, step by step; the probe along the stages
STEP_CELLS = {"sdpo_5-ema5": "SDPO_5%, its own EMA teacher", "sdpo_5-ema5-maskloops": "SDPO_5%, own teacher, loops masked",
              "sdpo_0-ema5": "SDPO_0, its own EMA teacher", "sdpo_5-base": "SDPO_5%, teacher θ_0", "grpo": "GRPO"}


def figures(out, into):
    """loop_steps.png and loop_stages.png from the finished cells and probes under `out`, written into `into`."""
    cells, tests = {}, {}
    for cell in STEP_CELLS:
        paths = sorted(glob.glob(os.path.join(out, cell, "seed*", "result.json")))
        if paths:
            done = [json.load(open(p)) for p in paths]
            cells[cell] = [d["rows"] for d in done]
            tests[cell] = [(d["coding_before"], d["coding_after"]) for d in done]
    probes = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "probe", "seed*.json")))]
    if not cells and not probes:
        sys.exit(f"error: no finished cell or probe under {out}")
    os.makedirs(into, exist_ok=True)
    made = [plot_loop_steps(cells, os.path.join(into, "loop_steps.png"), labels=STEP_CELLS, tests=tests) if cells else None,
            plot_loop_stages(probes, os.path.join(into, "loop_stages.png"),
                                   stages=["math", "science", "tooluse"],   # (the reference's order)
                                   labels={"grpo": "GRPO", "sdpo_0": "SDPO_0", "sdpo_5": "SDPO_5%"}) if probes else None]
    return [m for m in made if m] or ["nothing (matplotlib is missing)"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 usage="python tools/collapse.py [--summary] [--figures DIR] [--out DIR] ... (--help lists all)")
    ap.add_argument("--runs", default=os.path.join("runs", "regen"), help="the regenerated reference (--family regen)")
    ap.add_argument("--out", default=None, help="where the cells go (default runs/collapse); --summary and --figures "
                    "read it (default: the committed cells, results/collapse)")
    ap.add_argument("--seeds", default="10,11,12", help="comma list of reference seeds (default 10,11,12)")
    ap.add_argument("--cells", default=",".join(CELLS), help=f"comma list of cells (default all: {', '.join(CELLS)})")
    ap.add_argument("--probe", action="store_true", help="the loop probe at the base and after stages 1-3 instead")
    ap.add_argument("--summary", action="store_true", help="print the tables of the finished cells")
    ap.add_argument("--into-results", action="store_true", help="let --out be under results/ (the committed cells)")
    ap.add_argument("--orders", action="store_true", help="SDPO_5%% with the two other stage orders instead (D.5)")
    ap.add_argument("--figures", metavar="DIR", help="draw the step-by-step and along-the-stages figures of the "
                    "finished cells and probes into DIR (with --summary: both)")
    ap.add_argument("--overwrite-committed", action="store_true", help="let --figures be a committed folder (docs/img)")
    ap.add_argument("--quick", action="store_true", help="every cell, probe and order in its smallest form (one step, a "
                    "few prompts): to see that the command runs, never for a result")
    args = ap.parse_args(argv)
    if args.out is None:   # (reading: the committed cells, from any directory; running: a folder of yours)
        args.out = COMMITTED if (args.summary or args.figures) else os.path.join("runs", "collapse")
    if args.figures:
        flags.check_dir_flag(ap, "--figures", args.figures)
        safety.refuse_committed(ap.error, "--figures", args.figures, args.overwrite_committed)
    if not (args.summary or args.figures):
        safety.refuse_committed(ap.error, "--out", args.out, args.into_results, "--into-results")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: a comma list of integers, got {args.seeds!r}")
    if (args.summary or args.figures) and not os.path.isdir(args.out):
        ap.error(f"--out {args.out}: no such folder of cells to read (the committed ones: leave --out out)")
    if args.summary:
        cells = archive.materialized(args.out)   # (the committed cells: from their archive)
        print("\n\n".join(t for t in (summary(cells), probe_table(cells), orders_table(cells, seeds)) if t))
    if args.figures:
        print("wrote " + ", ".join(figures(archive.materialized(args.out), args.figures)))
    if args.summary or args.figures:
        return
    global EVAL_N, EVAL_K, PROBE_N, PROBE_K, STEPS
    if args.quick:
        EVAL_N, EVAL_K, PROBE_N, PROBE_K, STEPS = 2, 1, 4, 2, 1
        QUICK[:] = ["--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "2", "--eval-k", "1",
                    "--max-new-tokens", "16", "--curve-every", "0", "--kl-samples", "1"]
    cells = args.cells.split(",")
    if not set(cells) <= set(CELLS) or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        ap.error(f"--cells: from {', '.join(CELLS)}; --seeds: distinct and >= 0")
    for seed in seeds:
        if args.orders:
            for order in ORDERS:
                run_order(args.out, order, seed)
            continue
        if args.probe:
            probe_stages(args.runs, args.out, seed)
            continue
        for cell in cells:
            run_cell(args.runs, args.out, cell, seed, STEPS)


if __name__ == "__main__":
    main()
