"""tools/world.py — the single-domain checks of the built-in world (docs/WORLD.md).

    python tools/world.py lr          # the learning-rate rule: a 3-value grid, one seed, validation split
    python tools/world.py w2          # W2: 40 steps of GRPO and of SDPO_0 on each domain, 3 seeds, test split
    python tools/world.py errors      # TOOLUSE's errors by kind: the base, and W2's seed-0 models after it

Both run a one-stage `continual.py --method grpo` / `--method sdpo --alpha 0` once per (method, setting, domain,
seed) into runs/world/, score θ_0 and the trained model on the setting's split (<run>.json beside the run), skip a
run whose scores are there (so an interrupted check resumes), and print a table. (The committed tables of
docs/WORLD.md came from the one-task runner this replaced: the same loop and evaluation; a stage's prompt order is
seeded by 1000·seed, so seeds other than 0 draw other prompts.) By default
two runs go at a time, one thread each (--jobs 2), which keeps both cores busy through the single-threaded
parts of a run (grading, the sandbox, Python glue).

The rule, fixed before any run: for each method, the learning rate of the grid with the largest mean
Acc@8 gain over the four training domains, after 40 single-domain steps from the base, on the
validation split (tasks.split_of), seed 0. The test split chooses nothing.
W2, fixed before any run: at the chosen learning rates, both methods raise every domain by at least 10
points (mean over 3 seeds), and the 95% t-interval of the gain lies above 0.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import evaluate  # noqa: E402
from infra import flags  # noqa: E402
from infra import stats  # noqa: E402
from infra.checkpoints import atomic_json  # noqa: E402
from world import tasks  # noqa: E402
from world import graders  # noqa: E402
from infra.models import load_model  # noqa: E402
from rollout import acc_at_k  # noqa: E402

METHODS = {"GRPO": ["--method", "grpo"], "SDPO_0": ["--method", "sdpo", "--alpha", "0"]}
CONFIG = {"GRPO": "grpo", "SDPO_0": "sdpo_a0"}   # each method's configuration name: its checkpoints' folder
LR_GRID = [1e-4, 2e-4, 4e-4]
STEPS = 40
SCORE = {"n": 64, "k": 8}   # the scores: Acc@8 on 64 prompts of the split (--quick: 2 prompts, 1 sample)
OUT = os.path.join("runs", "world")
QUICK = []   # --quick: flags appended to every run (one step, few prompts): to see that the commands run


def run_dir(method, domain, lr, seed, split):
    return os.path.join(OUT, f"{split}-{method}-lr{lr:g}-{domain}-s{seed}")


def model_dir(method, domain, lr, seed, split):
    """The trained model of a run: its one stage's checkpoint."""
    return os.path.join(run_dir(method, domain, lr, seed, split), "checkpoints", CONFIG[method], f"stage1-{domain}")


def w2_rate(method, default):
    """The rate W2 ran the method at (its TOOLUSE model of seed 0 under OUT, when there is exactly one), else default."""
    found = [d for d in glob.glob(os.path.join(OUT, f"test-{method}-lr*-tooluse-s0"))
             if os.path.isdir(os.path.join(d, "checkpoints", CONFIG[method], "stage1-tooluse"))]
    return float(os.path.basename(found[0]).split("-lr")[1].split("-")[0]) if len(found) == 1 else default


def score(path, domain, split):
    """Acc@k of the model at `path` on the split's first n prompts, sampled from the evaluation's own seed (0)."""
    model, tok = load_model(path)
    torch.manual_seed(0)
    return acc_at_k(model, tok, tasks.builtin_split(domain, split, SCORE["n"], 0), SCORE["k"])[0]


def train(job, threads):
    """Train one method on one domain (a one-stage continual.py run, which resumes a stopped one) unless its scores
    are there (<run>.json); the run's output goes to <run>.out beside it."""
    method, domain, lr, seed, split = job
    out = run_dir(*job)
    if os.path.exists(out + ".json"):
        return
    cmd = [sys.executable, os.path.join(ROOT, "continual.py"), *METHODS[method], "--stages", domain, "--benchmarks",
           domain, "--no-drift", "--curve-every", "0", "--eval-n", "1", "--eval-k", "1", "--steps", str(STEPS),
           "--lr", str(lr), "--seed", str(seed), "--runs-dir", OUT, "--name", os.path.basename(out),
           "--threads", str(threads), *QUICK]
    print("$", " ".join(cmd[1:]), flush=True)
    os.makedirs(OUT, exist_ok=True)
    with open(out + ".out", "w") as f:
        status = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if status:
        sys.exit(f"error: {method} on {domain} stopped (exit {status}); its output is in {out}.out")


def run_all(jobs, n_jobs):
    """Every job, n_jobs at a time (each with 2 // n_jobs threads, at least 1); then, one at a time in this process
    (models are not loaded from two threads at once), θ_0 and each trained model scored on the job's split."""
    with ThreadPoolExecutor(n_jobs) as pool:
        list(pool.map(lambda job: train(job, max(1, 2 // n_jobs)), jobs))
    for method, domain, lr, seed, split in jobs:
        out = run_dir(method, domain, lr, seed, split)
        if not os.path.exists(out + ".json"):
            atomic_json(out + ".json", {"acc_before": score("tiny", domain, split),
                                        "acc_after": score(model_dir(method, domain, lr, seed, split), domain, split)})


def one_run(method, domain, lr, seed, split):
    """(Acc before, Acc after) of a finished run."""
    s = json.load(open(run_dir(method, domain, lr, seed, split) + ".json"))
    return s["acc_before"], s["acc_after"]


def lr_grid(n_jobs):
    """Returns {method: chosen lr}, and prints the grid of mean validation gains."""
    run_all([(m, d, lr, 0, "valid") for m in METHODS for lr in LR_GRID for d in tasks.TRAIN_DOMAINS], n_jobs)
    chosen = {}
    print("\n| method | lr | " + " | ".join(tasks.TRAIN_DOMAINS) + " | mean gain |\n|---|---|" + "---|" * 5)
    for method in METHODS:
        means = {}
        for lr in LR_GRID:
            gains = [100 * (a - b) for b, a in (one_run(method, d, lr, 0, "valid") for d in tasks.TRAIN_DOMAINS)]
            means[lr] = sum(gains) / len(gains)
            print(f"| {method} | {lr:g} | " + " | ".join(f"{g:+.1f}" for g in gains) + f" | {means[lr]:+.1f} |")
        chosen[method] = max(LR_GRID, key=lambda lr: means[lr])
    print("\nchosen: " + ", ".join(f"{m} lr {lr:g}" for m, lr in chosen.items()))
    return chosen


def w2(lrs, n_jobs, seeds=(0, 1, 2)):
    """W2 on the test split: mean gain over seeds and its 95% interval, per method and domain."""
    run_all([(m, d, lrs[m], s, "test") for m in METHODS for d in tasks.TRAIN_DOMAINS for s in seeds], n_jobs)
    print("\n| method | domain | base Acc@8 % | gain, points (95% interval) | per seed | W2 |\n|---|---|---|---|---|---|")
    ok = True
    for method in METHODS:
        for d in tasks.TRAIN_DOMAINS:
            runs = [one_run(method, d, lrs[method], s, "test") for s in seeds]
            mean, lo, hi = stats.mean_interval([100 * (a - b) for b, a in runs])
            met = mean >= 10 and lo > 0
            ok &= met
            print(f"| {method} | {d} | {100 * runs[0][0]:.1f} | {mean:+.1f} [{lo:+.1f}, {hi:+.1f}] | "
                  + ", ".join(f"{100 * (a - b):+.1f}" for b, a in runs) + f" | {'met' if met else '**not met**'} |")
    print(f"\nW2 {'met' if ok else 'NOT met'}")
    return ok


def tool_error_kinds(records, responses, scores, k):
    """Counts of 'right', 'wrong tool' and 'right tool, wrong input' over k samples per record, and the
    accuracy per right tool."""
    kinds, per_tool = Counter(), defaultdict(list)
    for i, (text, score) in enumerate(zip(responses, scores)):
        gold = json.loads(records[i // k]["answer"])[0]["Action"]
        said = graders.ACTION.search(text)
        per_tool[gold].append(score)
        kinds["right" if score else "wrong tool" if not said or said.group(1) != gold else "right tool, wrong input"] += 1
    return kinds, {t: sum(v) / len(v) for t, v in sorted(per_tool.items())}


def tool_errors(lrs, n=64, k=8):
    """Why TOOLUSE learns little (docs/WORLD.md): its errors by kind, on the same 64 test prompts × 8, for the
    base and for W2's seed-0 models (each run's stage checkpoint)."""
    records = evaluate.benchmark_records("tooluse", n, seed=0)
    models = [("base", "tiny")] + [(m, model_dir(m, "tooluse", lrs[m], 0, "test")) for m in METHODS]
    print("| model | Acc@8 % | right | wrong tool | right tool, wrong input | Acc@8 per tool |\n|---|---|---|---|---|---|")
    for label, path in models:
        model, tok = load_model(path)
        torch.manual_seed(0)
        acc, _, responses, scores, _ = acc_at_k(model, tok, records, k=k)
        kinds, per_tool = tool_error_kinds(records, responses, scores, k)
        print(f"| {label} | {100 * acc:.1f} | {kinds['right']} | {kinds['wrong tool']} | {kinds['right tool, wrong input']} | "
              + ", ".join(f"{t} {100 * a:.0f}" for t, a in per_tool.items()) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["lr", "w2", "errors"])
    ap.add_argument("--lr-grpo", type=float, default=None, help="W2 at this GRPO lr (default: the grid's choice)")
    ap.add_argument("--lr-sdpo", type=float, default=None, help="W2 at this SDPO_0 lr (default: the grid's choice)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2, one thread each)")
    ap.add_argument("--quick", action="store_true", help="every run in its smallest form (one step, two test prompts, "
                    "one sample): to see that the command runs; its criteria then decide nothing (exit 0)")
    args = ap.parse_args(argv)
    if args.quick:
        QUICK[:] = ["--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--max-new-tokens", "16"]
        SCORE.update(n=2, k=1)
    for flag, v in (("--lr-grpo", args.lr_grpo), ("--lr-sdpo", args.lr_sdpo)):
        if v is not None and not (math.isfinite(v) and 1e-12 <= v <= 1):
            ap.error(f"{flag} must be in [1e-12, 1], got {v}")
    if not 1 <= args.jobs <= 16:
        ap.error(f"--jobs must be in [1, 16], got {args.jobs}")
    if args.part == "errors":
        lrs = {"GRPO": args.lr_grpo or w2_rate("GRPO", flags.LR["grpo"]),
               "SDPO_0": args.lr_sdpo or w2_rate("SDPO_0", flags.LR["sdpo"])}
        missing = [m for m in METHODS if not os.path.isdir(model_dir(m, "tooluse", lrs[m], 0, "test"))]
        if missing:
            ap.error(f"no W2 model of {', '.join(missing)} on TOOLUSE under {OUT}/: run `python tools/world.py w2` first")
    if args.part == "lr":
        lr_grid(args.jobs)
    elif args.part == "errors":
        tool_errors(lrs, **({"n": 2, "k": 1} if args.quick else {}))
    else:
        lrs = lr_grid(args.jobs) if args.lr_grpo is None or args.lr_sdpo is None else \
            {"GRPO": args.lr_grpo, "SDPO_0": args.lr_sdpo}
        sys.exit(0 if w2(lrs, args.jobs) or args.quick else 1)


if __name__ == "__main__":
    main()
