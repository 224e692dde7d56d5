"""evaluate.py — Acc@k of a model on benchmarks (SPEC C3), and the self-teacher check.

    python evaluate.py --model tiny --benchmarks all --k 8
    python evaluate.py --model runs/x/stage2 --benchmarks math,logic --k 4 --out eval.json

(C3) Acc@k: for each prompt sample k responses (release defaults: temperature 0.6, top-p 0.95)
and average correctness over the k samples and over the prompts. It is an *average* accuracy,
not pass@k.

Teacher check: SDPO's teacher is the model itself with a correct solution shown in its prompt
(SPEC S1). For each training domain we sample without a demonstration, take a successful sample
of the same prompt as the demonstration (exactly what SDPO does with a successful sibling), and
sample again with the reprompt. Both rates are reported on the same prompts (those that had a
success to show), so the difference is the demonstration's effect — the signal SDPO depends on.
"""
import dataclasses
import hashlib
import json
import os
import time
from typing import Optional

import torch
from transformers import HfArgumentParser

from infra import errors, safety
from world import tasks
from infra.flags import (MAX_EVAL_N, DefaultsShown, check_code_jail, check_device_flag, check_dir_flag, check_knobs,
                         check_model_flag, rows_of, run_rows, set_switches)
from infra.knobs import knob, must
from infra.distributed import init_distributed, is_main, shard
from infra.checkpoints import write_atomically
from infra.models import MODEL_DIRS, load_model
from infra.speedups import SAMPLE_BATCH
from rollout import EVAL_TEMPERATURE, EVAL_TOP_P, acc_at_k, drop_long_prompts, fill_reprompt, prompt_room


def benchmark_records(name, n, seed=0, tok=None, max_prompt_len=0, split="test", room=0):
    """The test records of a benchmark: the built-in test split (or split="valid"), or the first n records of a
    record file (tools/prepare_data.py writes the paper's datasets as such); with max_prompt_len, or room (the
    prompt tokens the model's positions leave: rollout.prompt_room), over-long prompts are dropped first (needs
    tok)."""
    if name in tasks.GENERATORS:
        records = tasks.builtin_split(name, split, n, seed)
    else:
        records = tasks.task_records(name)
    if max_prompt_len or room:
        records = drop_long_prompts(tok, records, max_prompt_len, f"{name} test prompts", room)
    return records[:n]


# ----------------------------------------------------------------------------------------------
# Metrics (Appendix A)
# ----------------------------------------------------------------------------------------------
def change_metrics(acc, base):
    """(A2) Δ = acc − base, δ = Δ / base;  (A3) G = max(δ, 0), F = max(−δ, 0).

    acc, base: accuracies in [0, 1]. δ, G, F are fractions (×100 for %). When base = 0, δ is
    undefined unless Δ = 0: then δ, G, F are None (reported as "—") and Δ still says what happened.
    Example: base 0.40, acc 0.30 -> Δ = −0.10, δ = −0.25, G = 0, F = 0.25.
    """
    # (A2) absolute change
    delta = acc - base
    if base == 0:
        rel = 0.0 if delta == 0 else None
    else:
        # (A2) relative change δ = Δ / Acc(θ_0, b)
        rel = delta / base
    if rel is None:
        return {"delta": delta, "rel": None, "gain": None, "forget": None}
    # (A3) gain and forgetting
    return {"delta": delta, "rel": rel, "gain": max(rel, 0.0), "forget": max(-rel, 0.0)}


def mean_or_none(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(acc_rows, stages, benchmarks):
    """Per run: metrics of every stage vs the base, and the headline averages.

    acc_rows: [K+1][B] accuracies (row 0 = base). Returns
      per_stage[k][b]: change_metrics of θ_k vs θ_0,
      avg_gain_trained: mean over stages k of G(θ_k, d_k) — how much each stage specialised,
      avg_forget_earlier: mean over j < K of F(θ_K, d_j) — what the final model lost on earlier domains,
      avg_forget_ood: mean over OOD benchmarks of F(θ_K, b).
    """
    base = acc_rows[0]
    per_stage = [{b: change_metrics(row[i], base[i]) for i, b in enumerate(benchmarks)} for row in acc_rows[1:]]
    final = per_stage[-1] if per_stage else {}
    ood = [b for b in benchmarks if b not in stages]
    return {
        "per_stage": per_stage,
        "avg_gain_trained": mean_or_none([per_stage[k][d]["gain"] for k, d in enumerate(stages) if d in benchmarks]),
        "avg_forget_earlier": mean_or_none([final[d]["forget"] for d in stages[:-1] if d in final]),
        "avg_forget_ood": mean_or_none([final[b]["forget"] for b in ood]),
    }


def stage_change(acc, base, stages, k):
    """(A3) Stage k's own figures, as a tracker logs them: θ_k's gain G on its domain d_k and the mean forgetting F
    over the earlier domains d_1 … d_{k−1} (None where undefined). acc, base: {benchmark: accuracy}."""
    forgets = [change_metrics(acc[d], base[d])["forget"] for d in stages[:k]]
    return {"gain": change_metrics(acc[stages[k]], base[stages[k]])["gain"], "forget": mean_or_none(forgets)}


def results_of(configs, stages, benchmarks, progress, args):
    """results.json of one seed: per run the accuracy matrix (C2), Δ/δ/G/F per stage and benchmark and the averages
    (A2–A3, summarize), drift, curves. progress: the run directory's record of every stage (experiment/rundir.py)."""
    base = progress["base"]
    out = {"stages": stages, "benchmarks": benchmarks, "seed": args.seed,
           "eval": {"n": args.eval_n, "k": args.eval_k, "seed": args.eval_seed},
           "base": {k: v for k, v in base.items() if k != "seconds"}, "runs": {}}
    for method, settings, run_name in configs:
        done = progress[run_name]["stages"]
        rows = [[base["acc"][b] for b in benchmarks]] + [[s["acc"][b] for b in benchmarks] for s in done]
        out["runs"][run_name] = {
            "method": method, "settings": settings,
            "acc": rows,
            **summarize(rows, stages, benchmarks),
            "degenerate": [sum(s["degenerate"].values()) / len(s["degenerate"]) for s in done],
            "drift": [s.get("drift") for s in done],
            "curves": [s["curve"] for s in done],
            "mean_reward": [s["mean_reward"] for s in done],
            "js_steps": [s.get("js_steps") for s in done],            # per stage, per step (SDPO; GRPO: None)
            "entropy_steps": [s.get("entropy_steps") for s in done],
            "checkpoints": [s["checkpoint"] for s in done],
        }
    return out


@torch.no_grad()
def teacher_check(model, tok, records, k=8, max_new_tokens=64, sample_batch=SAMPLE_BATCH):
    """Success without vs with a correct demonstration (a successful own sample) in the prompt."""
    _, per_prompt, responses, scores, _ = acc_at_k(model, tok, records, k, max_new_tokens, batch_size=sample_batch)
    shown, reprompts, before = [], [], []
    for i, rec in enumerate(records):
        ok = [resp for resp, s in zip(responses[i * k:(i + 1) * k], scores[i * k:(i + 1) * k]) if s == 1.0]
        if ok:
            shown.append(rec)
            reprompts.append(fill_reprompt(rec["prompt"], ok[0]))
            before.append(per_prompt[i])
    if not shown:
        return {"prompts_with_demo": 0, "without_demo": None, "with_demo": None}
    with_demo, _, _, _, _ = acc_at_k(model, tok, shown, k, max_new_tokens, prompts=reprompts, batch_size=sample_batch)
    return {"prompts_with_demo": len(shown), "prompts": len(records),
            "without_demo": sum(before) / len(before), "with_demo": with_demo}


# ----------------------------------------------------------------------------------------------
# Collapse (A8): measured on every evaluation's samples; drift.py reports it per stage
# ----------------------------------------------------------------------------------------------
def repeated_pattern(text, min_repeats=4, max_period=12):
    """The short pattern that the end of `text` repeats at least `min_repeats` times, else None.

    Example: '...\\boxed\\boxed\\boxed\\boxed' -> '\\boxed'.
    """
    for period in range(1, max_period + 1):
        tail = text[-period * min_repeats:]
        if len(tail) == period * min_repeats and tail == tail[:period] * min_repeats:
            return tail[:period]
    return None


def is_degenerate(text, hit_length_limit):
    """(A8) A collapsed response: it runs to the length limit repeating one short pattern."""
    return hit_length_limit and repeated_pattern(text) is not None


def collapse(texts, hit_limit):
    """(A8) {'share': fraction of degenerate responses, 'patterns': {pattern: count}, most common first}."""
    counts = {}
    for text, hit in zip(texts, hit_limit):
        if is_degenerate(text, hit):   # (A8) repeats one short pattern up to the length limit
            pat = repeated_pattern(text)
            counts[pat] = counts.get(pat, 0) + 1
    return {"share": sum(counts.values()) / max(1, len(texts)),
            "patterns": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}


def markdown_table(headers, rows):
    """A small Markdown table; floats printed as percentages with one decimal."""
    def cell(v):
        if isinstance(v, float):
            return f"{100 * v:.1f}"
        return "—" if v is None else str(v)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def evaluate(model, tok, names, n=64, k=8, max_new_tokens=64, seed=0, progress=True, degenerate=None,
             responses=None, max_prompt_len=0, sample_batch=SAMPLE_BATCH, passes=None, outcomes=None, sample_seed=None):
    """Acc@k per benchmark: {name: accuracy}.

    Every benchmark's prompts are sampled together, in as few `generate` calls as --sample-batch allows
    (1 prompt's k samples never straddle two calls), under one seed: the same prompts and the same kind
    of samples as one call per benchmark, but not the same random draws (tests/test_evaluation.py checks both).
    degenerate: optional dict filled with each benchmark's share of collapsed responses (A8);
    responses: optional dict filled with {'texts': [N*k], 'hit_limit': [N*k]} per benchmark (for drift.py);
    passes: optional dict filled with each benchmark's pass@k (`pass_at_k`);
    outcomes: optional dict filled with each benchmark's per-prompt record (`prompt_outcomes`): each test prompt's
    id and its k scores, so that an interval can resample the prompts too.
    sample_seed: the sampling's seed when it is not `seed` (which picks the prompts): the same prompts, other draws.
    """
    room = prompt_room(model, max_new_tokens)
    per_benchmark = {name: benchmark_records(name, n, seed, tok, max_prompt_len, room=room) for name in names}
    records = [r for name in names for r in per_benchmark[name]]
    torch.manual_seed(seed if sample_seed is None else sample_seed)
    _, per_prompt, texts, scores, hit = acc_at_k(model, tok, records, k, max_new_tokens, batch_size=sample_batch,
                                                 progress=progress)
    out, start = {}, 0
    for name in names:
        m = len(per_benchmark[name])
        rows = slice(start * k, (start + m) * k)                    # this benchmark's m·k samples
        out[name] = sum(per_prompt[start:start + m]) / max(1, m)   # (C3) Acc@k, its prompts only
        if passes is not None:
            passes[name] = pass_at_k(scores[rows], k)
        if degenerate is not None:
            degenerate[name] = collapse(texts[rows], hit[rows])["share"]   # (A8)
        if responses is not None:
            responses[name] = {"texts": texts[rows], "hit_limit": hit[rows]}
        if outcomes is not None:
            outcomes[name] = prompt_outcomes(per_benchmark[name], scores[rows], k)
        start += m
    return out


def in_stage_curve(model, tok, domain, args):
    """The light in-stage curve (C3): every --curve-every steps, Acc@--curve-k of the model being trained on
    --curve-n test prompts of its stage's domain, from the evaluation's seed. Returns curve(step) -> the point, or
    None between points (and always with --curve-every 0)."""
    test = benchmark_records(domain, args.curve_n, args.eval_seed) if args.curve_every > 0 else []

    def curve(step):
        if not test or step % args.curve_every:   # (--curve-every 0: no test prompts, no curve)
            return None
        torch.manual_seed(args.eval_seed)   # (training steps seed themselves: train.run_steps)
        return acc_at_k(model, tok, test, args.curve_k, args.max_new_tokens, batch_size=args.sample_batch)[0]
    return curve


def prompt_outcomes(records, scores, k):
    """Per test prompt: its position in the benchmark's test split, the first 12 hex digits of its text's SHA-1
    (its identity whatever the split's length) and its k scores, [{'prompt', 'sha1', 'scores'}]. The mean of a
    prompt's scores is its Acc@k term (C3)."""
    return [{"prompt": i, "sha1": hashlib.sha1(r["prompt"].encode()).hexdigest()[:12],
             "scores": [float(x) for x in scores[i * k:(i + 1) * k]]} for i, r in enumerate(records)]


def save_prompt_records(run_dir, tag, outcomes, eval_seed):
    """One evaluation's per-prompt records ({benchmark: prompt_outcomes}), one JSON line per (benchmark, prompt),
    written atomically (a rerun of the same evaluation replaces them); by the main process alone under torchrun."""
    if not is_main():
        return
    path = os.path.join(run_dir, "prompts", f"{tag}.jsonl")   # beside results.json
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [json.dumps({"benchmark": b, "eval_seed": eval_seed, **row}) for b, rows in outcomes.items() for row in rows]
    write_atomically(path, lambda f: f.write("".join(line + "\n" for line in lines)))


def pass_at_k(scores, k):
    """pass@k: the share of prompts with at least one correct response among their k samples (scores
    [N*k], prompt by prompt). Acc@k averages the k samples; pass@k − Acc@k is how much of what the
    model *can* do it does not do reliably: the room that sharpening (RL) has."""
    prompts = [scores[i:i + k] for i in range(0, len(scores), k)]
    return sum(max(p) == 1.0 for p in prompts) / max(1, len(prompts))


def world_criteria(acc, passes, train_domains):
    """The built-in world's criteria (docs/WORLD.md), judged on the base model alone:
      W1, room to sharpen, for each training domain: 15% ≤ Acc@k ≤ 60%, Acc@k ≥ chance + 15 points, and
          pass@k ≥ Acc@k + 20 points (the skill is there, not yet reliable);
      W3, room to forget, for every benchmark: Acc@k ≥ chance + 10 points.
    acc, passes: {benchmark: fraction}. Returns [(criterion, benchmark, ok, what was measured)]."""
    rows = []
    for b in train_domains:
        a, p, c = acc[b], passes[b], tasks.chance_level(b) or 0.0
        rows.append(("W1", b, 0.15 <= a <= 0.60 and a >= c + 0.15 and p >= a + 0.20,
                     f"Acc {100 * a:.1f} in [15, 60], >= chance {100 * c:.0f} + 15; pass {100 * p:.1f} >= Acc + 20"))
    for b, a in acc.items():
        c = tasks.chance_level(b) or 0.0
        rows.append(("W3", b, a >= c + 0.10, f"Acc {100 * a:.1f} >= chance {100 * c:.0f} + 10"))
    return rows


def weights_sha1(model):
    """The SHA-1 of a local model's model.safetensors ('tiny', 'tiny_think' or a directory), else None: a saved
    evaluation names the exact weights it measured."""
    path = os.path.join(MODEL_DIRS.get(model, model), "model.safetensors")
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


# evaluate.py's own knobs; the model, the benchmarks, the response length, the device, dtype, prompt length, batch
# of sampling and --unsafe-code (SHARED, below) are the run's (infra/flags.py): the same fields, defaults, checks
@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
    """What evaluate.py asks beside the run's knobs."""
    k: int = knob(8, "samples per prompt (Acc@k)")
    n: int = knob(48, "prompts per benchmark")
    seed: int = knob(0, "picks the test prompts and seeds the sampling")
    no_teacher_check: bool = knob(False, "skip the with/without-demonstration check")
    out: Optional[str] = knob(None, "write the results as JSON here")
    overwrite_committed: bool = knob(False, "let --out write in committed folders (rebuilds results/base/tiny.json)")

    def __post_init__(self):
        must(1 <= self.k <= 1024, f"--k must be in [1, 1024], got {self.k}")
        must(1 <= self.n <= MAX_EVAL_N, f"--n must be in [1, {MAX_EVAL_N}], got {self.n}")
        must(0 <= self.seed < 2**31, f"--seed must be in [0, 2^31), got {self.seed}")


SHARED = ("model", "benchmarks", "max_new_tokens", "device", "dtype", "max_prompt_len", "sample_batch", "unsafe_code")


def parse_args(argv=None):
    """evaluate.py's flags, made and checked as continual.py's are (infra/flags.py): one error line, exit 2."""
    ap = HfArgumentParser([], description="Acc@k of a model on benchmarks (SPEC C3) and the teacher check.",
                          formatter_class=DefaultsShown,
                          usage="python evaluate.py [--model M] [--benchmarks all|train|ood|LIST] [--k K] [--n N] ... "
                                "(--help lists all)")
    rows = [r for r in run_rows() if r["name"] in SHARED] + rows_of(EvaluateConfig, "evaluate")
    for row in rows:
        HfArgumentParser._parse_dataclass_field(ap, row["field"])
    thinking = ap.add_mutually_exclusive_group()
    thinking.add_argument("--enable-thinking", dest="enable_thinking", action="store_const", const=True, default=None)
    thinking.add_argument("--disable-thinking", dest="enable_thinking", action="store_const", const=False)
    args = ap.parse_args(argv)
    check_knobs(ap, args, rows)   # each dataclass's own checks (__post_init__)
    check_model_flag(ap, "--model", args.model)
    check_device_flag(ap, args.device)
    if args.out is not None:   # checked before the evaluation runs, not after it
        if not args.out.strip():
            ap.error("--out: give a file path (it was empty)")
        if os.path.isdir(args.out):
            ap.error(f"--out: '{args.out}' is a directory; give a file path")
        check_dir_flag(ap, "--out", os.path.dirname(os.path.abspath(args.out)))
        safety.refuse_committed(ap.error, "--out", args.out, args.overwrite_committed)
    try:
        names = tasks.resolve_benchmarks(args.benchmarks)
        for n in names:   # files and hub datasets are read once up front: a bad one stops here, in one line
            if n not in tasks.GENERATORS:
                tasks.task_records(n)
    except Exception as e:
        ap.error(errors.one_line(e))
    check_code_jail(ap, args, names)
    return ap, args, names


def main(argv=None):
    ap, args, names = parse_args(argv)
    set_switches(args)   # (--unsafe-code: the graders may run programs without a jail)
    device = init_distributed(args.device)   # torchrun: the prompts are shared out, the results gathered
    model, tok = load_model(args.model, device, args.dtype, enable_thinking=args.enable_thinking)
    model = shard(model, device)   # torchrun: each rank keeps 1/N of the weights; sampling gathers them
    t0 = time.time()
    try:
        passes = {}
        accs = evaluate(model, tok, names, args.n, args.k, args.max_new_tokens, args.seed,
                        max_prompt_len=args.max_prompt_len, sample_batch=args.sample_batch, passes=passes)
    except ValueError as e:
        ap.error(str(e))
    result = {"model": args.model, "weights_sha1": weights_sha1(args.model), "k": args.k, "n": args.n,
              "seed": args.seed, "acc": accs, "pass": passes, "chance": {n: tasks.chance_level(n) for n in names}}
    print(f"\nAcc@{args.k} and pass@{args.k} of {args.model} ({args.n} prompts each, T={EVAL_TEMPERATURE}, "
          f"top-p={EVAL_TOP_P}); chance: the accuracy of guessing, where the format has one")
    print(markdown_table(["benchmark", f"Acc@{args.k} %", f"pass@{args.k} %", "chance %"],
                         [[n, a, passes[n], result["chance"][n]] for n, a in accs.items()]))
    trained = [n for n in names if n in tasks.TRAIN_DOMAINS]
    if all(n in tasks.GENERATORS for n in names):   # the built-in world: its criteria on this model
        result["world_criteria"] = [list(r) for r in world_criteria(accs, passes, trained)]
        no = {c: ", ".join(b for c2, b, ok, _ in result["world_criteria"] if c2 == c and not ok) for c in ("W1", "W3")}
        print(f"\nRoom to learn (docs/WORLD.md: Acc in [15%, 60%], pass 20 points above): {'not on ' + no['W1'] if no['W1'] else 'yes'}; "
              f"room to forget (Acc 10 points above chance): {'not on ' + no['W3'] if no['W3'] else 'yes'}")
    if trained and not args.no_teacher_check:
        checks = {}
        for name in trained:
            torch.manual_seed(args.seed)
            records = benchmark_records(name, args.n, args.seed, tok, args.max_prompt_len,
                                        room=prompt_room(model, args.max_new_tokens))
            checks[name] = teacher_check(model, tok, records, args.k,
                                         args.max_new_tokens, args.sample_batch)
        result["teacher_check"] = checks
        print("\nTeacher check: success on the same prompts without / with a correct demonstration (S1)")
        print(markdown_table(["domain", "prompts with a success", "without demo %", "with demo %"],
                             [[n, f"{c['prompts_with_demo']}/{args.n}", c["without_demo"], c["with_demo"]]
                              for n, c in checks.items()]))
    print(f"\nevaluation took {time.time() - t0:.0f} s")
    if args.out and is_main():
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)   # (a new folder: --out runs/base/x.json)
        write_atomically(args.out, lambda f: json.dump(result, f, indent=1))
    return result


if __name__ == "__main__":
    main()
