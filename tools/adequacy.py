"""tools/adequacy.py — what this world can decide (docs/studies/equal-footing.md): the measurements its adequacy tests read.

    python tools/adequacy.py math-feedback            # MATH's feedback check at the base (S8), as CODING's was
    python tools/adequacy.py math-feedback --models tiny,runs/regen/continual-s10/checkpoints/sdpo_a0.05/stage3-tooluse
    python tools/adequacy.py traces                   # D1–D3: the thinking base's traces, their length and reliability
    python tools/adequacy.py null-iou --runs runs/regen --seeds 10,11,12   # H7: a random update of GRPO's size

Each writes OUT/<name>.json (default OUT: runs/adequacy/; the committed ones are in results/equal_rate/adequacy/,
written with `--out results/equal_rate/adequacy --into-results`). The tests themselves, and their declared thresholds, are
analysis/claims.py's `adequacy` (docs/studies/equal-footing.md): every number here comes from the world (the
base models, the benchmarks, GRPO's own update), never from an SDPO-versus-GRPO difference.
"""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import drift  # noqa: E402
import evaluate  # noqa: E402
from analysis import probes  # noqa: E402
from infra import safety  # noqa: E402
from world import tasks  # noqa: E402
from infra import flags  # noqa: E402
from infra.checkpoints import atomic_json  # noqa: E402
from infra.models import load_model  # noqa: E402
from rollout import acc_at_k  # noqa: E402

TRACE_DOMAINS = ("math", "science", "tooluse")
TRACE_N, TRACE_K, TRACE_TOKENS = 64, 8, 96        # declared: 64 training prompts × 8 samples, 96 new tokens, seed 0
NULL_DRAWS = 3                                    # random updates per GRPO model


# ----------------------------------------------------------------------------------------------
# D1–D3: a thinking trace, its choice, and whether the answer follows it
# ----------------------------------------------------------------------------------------------
def trace_of(text):
    """The text inside the response's first <think>…</think>, or None when it has no closed trace."""
    m = re.search(r"<think>(.*?)</think>", text, flags=re.S)
    return m.group(1).strip() if m else None


def answer_of(text):
    """The response after its trace (everything after the last </think>)."""
    return text.rsplit("</think>", 1)[-1]


def trace_matches(record, text):
    """Does the trace's choice match the answer's? True / False, or None when either cannot be read.

    math:    'mul 34 10' / 'div 340 10' evaluates to the \\boxed{} number
    science: '1 km = 1000 m' names the factor of the chosen letter's option (its value / the question's quantity)
    tooluse: 'weather(city)' names the `Action:` tool
    Example: trace 'mul 3 10', answer '3*10=30\\n\\boxed{30}' -> True; '\\boxed{300}' -> False.
    """
    trace, answer = trace_of(text), answer_of(text)
    if trace is None:
        return None
    kind = record.get("kind")
    if kind == "math":
        t = re.fullmatch(r"(mul|div) (\d+) (\d+)", trace)
        a = re.search(r"\\boxed\{(\d+)\}", answer)
        if not t or not a or (t.group(1) == "div" and int(t.group(3)) == 0):
            return None
        x, f = int(t.group(2)), int(t.group(3))
        planned = x * f if t.group(1) == "mul" else x / f
        return planned == int(a.group(1))
    if kind == "mcq":
        t = re.fullmatch(r"1 \S+ = (\d+) \S+", trace)
        a = re.search(r"<answer>\s*([A-D])\s*</answer>", answer)
        q = re.match(r"Convert (\d+) ", record["prompt"])
        options = dict(re.findall(r"\(([A-D])\) (\d+) ", record["prompt"]))
        if not t or not a or not q or a.group(1) not in options:
            return None
        return int(options[a.group(1)]) == int(q.group(1)) * int(t.group(1))
    if kind == "tooluse":
        t = re.fullmatch(r"(\w+)\(\w+\)", trace)
        a = re.search(r"Action:\s*(\w+)", answer)
        if not t or not a:
            return None
        return t.group(1) == a.group(1)
    return None


def trace_stats(tok, records, texts):
    """{'responses', 'traced' (share with a closed trace), 'length_mean' (tokens inside the trace, over traced
    responses), 'parsed' (share of traced ones whose choice and answer could both be read), 'reliability'
    (share of parsed ones whose answer follows the trace)}."""
    traces = [trace_of(t) for t in texts]
    lengths = [len(tok(tr, add_special_tokens=False)["input_ids"]) for tr in traces if tr is not None]
    matches = [trace_matches(r, t) for r, t in zip(records, texts)]
    parsed = [m for m in matches if m is not None]
    return {"responses": len(texts), "traced": len(lengths) / max(1, len(texts)),
            "length_mean": sum(lengths) / len(lengths) if lengths else None,
            "parsed": len(parsed) / max(1, len(lengths)),
            "reliability": sum(parsed) / len(parsed) if parsed else None}


def measure_traces(seed=0, n=TRACE_N, k=TRACE_K):
    """D1–D3's premise on the thinking base: per training domain, its traces' length and reliability."""
    model, tok = load_model("tiny_think")
    out = {}
    for domain in TRACE_DOMAINS:
        records = tasks.builtin_split(domain, "train", n, seed)
        torch.manual_seed(seed)
        _, _, texts, _, _ = acc_at_k(model, tok, records, k, TRACE_TOKENS)
        out[domain] = trace_stats(tok, [r for r in records for _ in range(k)], texts)
        print(domain, json.dumps(out[domain]), flush=True)
    return out


# ----------------------------------------------------------------------------------------------
# H7: the principal-mask IoU of a structure-free update of GRPO's size (the null model)
# ----------------------------------------------------------------------------------------------
def null_update(base, trained, generator):
    """{name: W + ‖ΔW‖_F · R / ‖R‖_F} for every 2-D matrix, ΔW = trained − base, R ~ N(0, 1) of W's shape: a
    random update with the trained model's per-matrix Frobenius norm (the other tensors as in base)."""
    a, b = drift.matrices(base), drift.matrices(trained)
    out = {}
    for name, W in a.items():
        R = torch.randn(W.shape, generator=generator, dtype=torch.float64)
        scale = torch.linalg.matrix_norm(b[name].double() - W.double()) / torch.linalg.matrix_norm(R)
        out[name] = (W.double() + scale * R).float()
    return out


def measure_null_iou(runs, seeds, run_name="grpo", draws=NULL_DRAWS):
    """Per seed: GRPO's own IoU (A6, mean over matrices) of its final model vs the base, and the null model's."""
    base, _ = load_model("tiny")
    out = {}
    for seed in seeds:
        found = sorted(d for d in os.listdir(os.path.join(runs, f"continual-s{seed}", "checkpoints", run_name))
                       if os.path.isfile(os.path.join(runs, f"continual-s{seed}", "checkpoints", run_name, d, "config.json")))
        path = os.path.join(runs, f"continual-s{seed}", "checkpoints", run_name, found[-1])
        trained, _ = load_model(path)
        own = drift.parameter_drift(base, trained)["all"]["iou_mean"]
        g = torch.Generator().manual_seed(seed)
        null = [drift.parameter_drift(base, null_update(base, trained, g))["all"]["iou_mean"] for _ in range(draws)]
        out[str(seed)] = {"checkpoint": path, "own_iou": own, "null_iou": null, "null_iou_mean": sum(null) / len(null)}
        print(seed, json.dumps(out[str(seed)]), flush=True)
    return out


def measure_math_feedback(models=("tiny",), n=32, k=8, seed=0):
    """MATH's feedback check: Acc@k with the grader's report in S8's reprompt against without it, on the same
    test prompts, for each model (the base, or checkpoints: MATH's grader reports only a misformatted answer,
    which the base never writes)."""
    out = {}
    for name in models:
        model, tok = load_model(name)
        torch.manual_seed(seed)
        out[name] = probes.feedback_check(model, tok, evaluate.benchmark_records("math", n, seed), k, 64)
        print(name, json.dumps(out[name]), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["math-feedback", "traces", "null-iou"])
    ap.add_argument("--out", default=os.path.join("runs", "adequacy"), help="folder of the JSON (default runs/adequacy)")
    ap.add_argument("--runs", default=os.path.join("runs", "regen"),
                    help="null-iou: the regenerated reference (tools/reference.py --family regen)")
    ap.add_argument("--seeds", default="10,11,12", help="null-iou: the seeds whose GRPO final model it reads")
    ap.add_argument("--models", default="tiny", help="math-feedback: comma list of models or checkpoint folders")
    ap.add_argument("--into-results", action="store_true", help="let --out be under results/ (the committed ones)")
    ap.add_argument("--quick", action="store_true", help="a few prompts and samples: to see that the command runs, "
                    "never for the declared measurement")
    args = ap.parse_args(argv)
    safety.refuse_committed(ap.error, "--out", args.out, args.into_results, "--into-results")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: a comma list of integers, got {args.seeds!r}")
    if args.quick:
        seeds = seeds[:1]
    flags.check_dir_flag(ap, "--out", args.out)   # before the measurement: a file there would lose its work
    if args.what == "null-iou":
        def stages(s):
            d = os.path.join(args.runs, f"continual-s{s}", "checkpoints", "grpo")
            return [f for f in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, f, "config.json"))] \
                if os.path.isdir(d) else []
        missing = [s for s in seeds if not stages(s)]
        if missing:
            ap.error(f"no GRPO checkpoints under {args.runs} for seeds {missing}: run "
                     f"`python tools/reference.py --family regen --seeds {args.seeds} --jobs 2` first")
    models = args.models.split(",")
    for m in models:   # a built-in model or a model folder (config.json), said in one line before any work
        flags.check_model_flag(ap, "--models", m)
    small = {"n": 2, "k": 1} if args.quick else {}
    result = {"math-feedback": lambda: measure_math_feedback(models, **small), "traces": lambda: measure_traces(**small),
              "null-iou": lambda: measure_null_iou(args.runs, seeds)}[args.what]()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.what}.json")
    atomic_json(path, result)
    print(f"wrote {path}: {json.dumps(result)[:300]}")


if __name__ == "__main__":
    main()
