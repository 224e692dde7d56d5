"""tools/mediation.py — where SDPO's extra forgetting lands: a SCIENCE stage from one shared MATH checkpoint
(declared in docs/studies/mediation.md before its first run).

    python tools/mediation.py --seeds 10,11 --jobs 2 --root runs/mediation   # θ_1 per seed, then every arm
    python tools/mediation.py --summary --root runs/mediation                # the declared tests, into its report.md
    python tools/mediation.py --summary                                      # the committed family's tests (printed)
    python tools/mediation.py --summary --root results/mediation --into-results   # ... and its report.md, figure
    python tools/mediation.py --seeds 10 --quick --root /tmp/med             # every step in its smallest form

Per seed S: θ_1 = one MATH stage of GRPO at its own rate (the reference's GRPO, 1e-4) from the tiny model,
`med-theta1-sS/`. Then each arm trains one SCIENCE stage from θ_1 (`continual.py --model θ_1 --stages science`),
`med-ARM-LR-sS/`, and is measured: Acc@8 on MATH's first 320 test prompts (the first 32 are the committed ones)
under 2 sampling seeds and on SCIENCE's first 160 under 1, each prompt's scores kept (prompts/measure-*.jsonl);
KL_old = E_MATH[KL(π_1 ‖ π_θ)] and KL_new = E_SCIENCE[KL(π_1 ‖ π_θ)] with the frontier's estimator
(drift.forward_kl_terms on 2 samples of θ_1 per prompt, the same samples for every arm of a seed), and
KL_0 = E_SCIENCE[KL(π_0 ‖ π_θ)], the frontier's own, for continuity; every per-prompt term is kept (measures.json).
An experiment whose measures.json is there is finished and skipped: the family resumes seed by seed.
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import drift  # noqa: E402
import evaluate  # noqa: E402
from analysis import mediation  # noqa: E402
from analysis.figures import plot_mediation  # noqa: E402
from infra import flags, safety  # noqa: E402
from infra.checkpoints import write_atomically  # noqa: E402
from infra.commands import run_command  # noqa: E402
from infra.models import load_model  # noqa: E402
from infra.children import run_all, run_child  # noqa: E402

THETA1 = "--method grpo --stages math --benchmarks math,science --no-drift"   # θ_1: GRPO's MATH stage, its own rate
# the arms' continual.py flags; their rates are analysis/mediation.py's ARM_RATES (declared there)
ARMS = {"grpo": "--method grpo", "sdpo0": "--method sdpo_0", "sdpo0-failed": "--method sdpo_0 --distill failed"}
# --model DIR is a "real" model to continual.py: give it the tiny model's own defaults back (flags.model_defaults,
# default_topk), so an arm trains exactly as the tiny model's SCIENCE stage does
ARM_COMMON = "--stages science --benchmarks math,science --no-drift --weight-decay 0 --topk 0"
# what each model is measured on: benchmark -> (test prompts, sampling seeds); prompt seed 0 for every one
MEASURE = {"math": (320, (0, 1)), "science": (160, (0,))}
KL_SAMPLES, KL_SEED, K = 2, 0, 8
QUICK = ["--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "2", "--eval-k", "1",
         "--max-new-tokens", "16", "--curve-every", "0"]
QUICK_MEASURE = {"math": (4, (0, 1)), "science": (3, (0,))}


def experiments(seed):
    """{name: continual.py flags} of one seed, θ_1 first; the arms' flags name θ_1's checkpoint (`root` filled in)."""
    out = {f"med-theta1-s{seed}": THETA1}
    for arm, arm_flags in ARMS.items():
        for lr in mediation.ARM_RATES[arm]:
            out[f"med-{arm}-lr{lr:g}-s{seed}"] = f"{arm_flags} --lr {lr:g} {ARM_COMMON}"
    return out


def theta1_checkpoint(root, seed):
    return os.path.join(root, f"med-theta1-s{seed}", "checkpoints", "grpo", "stage1-math")


def arm_checkpoint(root, name):
    """The arm's one SCIENCE checkpoint (its configuration's folder, whatever the run calls it)."""
    ckpts = os.path.join(root, name, "checkpoints")
    (config,) = [d for d in os.listdir(ckpts) if os.path.isdir(os.path.join(ckpts, d))]
    return os.path.join(ckpts, config, "stage1-science")


def finished(root, name):
    return os.path.isfile(os.path.join(root, name, "measures.json"))


def child(name, cmd, root):
    """One child process (continual.py, or this file's --measure: each in its own process, since sampling reads
    the process's one torch RNG); its output appended to <root>/<name>.out (kept on failure)."""
    run_child(cmd, os.path.join(root, f"{name}.out"), name, safety.REPO)


def measure(model_dir, theta1_dir, run_dir, quick=False):
    """The declared measures of one model (θ_1 itself or an arm's θ), written to <run_dir>/measures.json with each
    prompt's scores in <run_dir>/prompts/measure-BENCH-sSEED.jsonl."""
    model, tok = load_model(model_dir)
    theta1 = model if os.path.samefile(model_dir, theta1_dir) else load_model(theta1_dir)[0]
    sizes = QUICK_MEASURE if quick else MEASURE
    max_new = 16 if quick else 64
    out = {"model": os.path.relpath(model_dir, run_dir), "acc": {}, "kl": {}, "k": 1 if quick else K}
    for bench, (n, sample_seeds) in sizes.items():
        for s in sample_seeds:
            outcomes = {}
            acc = evaluate.evaluate(model, tok, [bench], n=n, k=out["k"], max_new_tokens=max_new, seed=0,
                                    sample_seed=s, progress=False, outcomes=outcomes)
            evaluate.save_prompt_records(run_dir, f"measure-{bench}-s{s}", outcomes, s)
            out["acc"][f"{bench}-s{s}"] = acc[bench]
    if model is not theta1:   # KL(π_1 ‖ π_θ) on the old and the new task, KL(π_0 ‖ π_θ) on the new (per prompt kept)
        base0 = load_model("tiny")[0]
        for key, bench, ref in (("old", "math", theta1), ("new", "science", theta1), ("zero", "science", base0)):
            records = evaluate.benchmark_records(bench, sizes[bench][0], 0)
            prompts, responses = drift.base_samples(ref, tok, records, KL_SAMPLES, max_new, KL_SEED, 16, {})
            terms = drift.forward_kl_terms(model, ref, prompts, responses, tok.pad_token_id)
            out["kl"][key] = {**drift.kl_stats(terms), "terms": terms, "samples": KL_SAMPLES}
    write_atomically(os.path.join(run_dir, "measures.json"), lambda f: json.dump(out, f, indent=1))


def run_unit(name, flag_text, seed, root, threads, quick, locks):
    """One experiment of one seed, unless finished: its seed's θ_1 first (once, whichever worker gets there), then
    the arm from θ_1's checkpoint."""
    theta1 = f"med-theta1-s{seed}"
    with locks.setdefault(seed, threading.Lock()):
        if not finished(root, theta1):
            run_measured(theta1, THETA1, seed, root, threads, quick)
    if not finished(root, name):
        run_measured(name, f"--model {theta1_checkpoint(root, seed)} {flag_text}", seed, root, threads, quick)


def run_measured(name, flag_text, seed, root, threads, quick):
    """continual.py, then the measures, each a child process; the wall time in <root>/<name>/seconds.txt."""
    print("$ continual.py", flag_text, "--seed", seed, "--name", name, flush=True)
    t0, q = time.time(), ["--quick"] if quick else []
    child(name, [sys.executable, os.path.join(safety.REPO, "continual.py"), *flag_text.split(), "--seed", str(seed),
                 "--runs-dir", root, "--name", name, "--threads", str(threads)] + (QUICK if quick else []), root)
    child(name, [sys.executable, os.path.abspath(__file__), "--measure", name, "--seeds", str(seed), "--root", root,
                 "--threads", str(threads)] + q, root)
    with open(os.path.join(root, name, "seconds.txt"), "w") as f:
        f.write(f"{time.time() - t0:.0f}\n")
    os.remove(os.path.join(root, f"{name}.out"))
    print(f"finished {name} in {time.time() - t0:.0f} s", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default=None, help="comma list of seeds to run (declared: 10-19)")
    ap.add_argument("--jobs", type=int, default=1, help="experiments side by side, one thread each (default 1)")
    ap.add_argument("--root", default=None, help="the family's run folder (required to run: this family runs into no "
                    "committed folder; finished seeds are copied into results/mediation/ and packed); --summary "
                    "alone reads results/mediation")
    ap.add_argument("--summary", action="store_true", help="the declared tests over the finished seeds")
    ap.add_argument("--quick", action="store_true", help="every step in its smallest form, never for a result")
    ap.add_argument("--into-results", action="store_true", help="with --summary: let it write the committed "
                    "family's report (results/mediation/report.md)")
    ap.add_argument("--measure", metavar="NAME", help=argparse.SUPPRESS)   # (a child: one experiment's measures)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.root is None and not (args.summary and args.seeds is None and not args.measure):
        ap.error("give --root DIR (a folder of your own to run into)")
    # --summary alone reads the committed family, wherever the command is run from
    root = os.path.join(safety.REPO, "results", "mediation") if args.root is None else os.path.abspath(args.root)
    flags.check_dir_flag(ap, "--root", root)
    if args.summary and args.seeds is None and not os.path.isdir(root):
        ap.error(f"--root {args.root}: no such folder (the committed family is results/mediation)")
    if args.measure:
        torch.set_num_threads(args.threads)
        seed = int(args.seeds)
        model = theta1_checkpoint(root, seed) if args.measure.startswith("med-theta1-") else \
            arm_checkpoint(root, args.measure)
        return measure(model, theta1_checkpoint(root, seed), os.path.join(root, args.measure), args.quick)
    if args.seeds is None and not args.summary:
        ap.error("nothing to do: give --seeds to run, or --summary")
    if args.seeds is not None:
        try:
            seeds = [int(s) for s in args.seeds.split(",")]
        except ValueError:
            ap.error(f"--seeds: a comma list of integers, got {args.seeds!r}")
        if min(seeds) < 0 or len(set(seeds)) != len(seeds) or not 1 <= args.jobs <= 16:
            ap.error(f"--seeds: distinct seeds >= 0 (got {args.seeds!r}); --jobs in [1, 16] (got {args.jobs})")
        if safety.committed_path(root):
            ap.error(f"{os.path.relpath(root)} is committed: run into a folder of your own (--root DIR)")
        os.makedirs(root, exist_ok=True)
        units = [(name, f, s) for s in seeds for name, f in experiments(s).items() if not finished(root, name)]
        locks = {}
        run_all(units, lambda unit: run_unit(*unit, root, max(1, 2 // args.jobs), args.quick, locks), args.jobs,
                "mediation experiments")
    if args.summary:
        try:
            fam = mediation.read_runs(root)
            text = mediation.summary_text(fam)[0]
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        print(text)
        if safety.committed_path(root) and not args.into_results:
            print(f"\n(printed only: add --into-results to write {os.path.relpath(root)}/report.md)")
        elif os.path.isdir(root):
            write_atomically(os.path.join(root, "report.md"), lambda f: f.write(
                "# Where the extra forgetting lands (`python tools/mediation.py --summary`)\n\n" + text + "\n\n"
                "![each arm's MATH drop and KL_old against its SCIENCE gain, and GRPO's law](mediation.png)\n"))
            plot_mediation(fam, os.path.join(root, "mediation.png"))


if __name__ == "__main__":
    run_command(main)   # (a failure it did not name itself: one error: line, never a traceback)
