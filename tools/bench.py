"""tools/bench.py — what one RL step costs, where the time goes, and how the cost grows.

    python tools/bench.py                      # the fixed configuration on the tiny model (~1 min on 2 cores)
    python tools/bench.py --sweep              # + time per step as group size, response length, width double
    python tools/bench.py --model Qwen/Qwen3-4B-Instruct-2507 --device cuda --repeat 3
    python tools/bench.py --grading            # CODING's sandbox: the cost of grading 64 programs, per jail

Fixed configuration: 8 MATH prompts × a group of 8, up to 48 new tokens, the default GRPO/SDPO
settings. Every figure is the median over `--repeat` runs after one warm-up run:
  rollout      seconds per step (HF generate + grading) and generated tokens per second
  GRPO update  seconds per step (forward + backward + AdamW over the 64 responses)
  SDPO update  seconds per step, and the share spent in the teacher's forward (S2)
  evaluation   sequences per second of Acc@k (sampling + grading, no gradients)
  FLOP/s       achieved by the GRPO update, ≈ 6 · parameters · tokens / time, next to the same run's
               dense matmul FLOP/s (a large square matmul, and one at the model's own layer shape)
  memory       peak resident memory of the process (and peak CUDA memory on a GPU)
It writes JSON (--out) and prints a table. Measure on an otherwise idle machine: two heavy jobs on
2 cores slow each other down many times over.
"""
import argparse
import copy
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # as a script: the repository root

import torch

import drift
import evaluate
from experiment import configurations
from infra import commands, flags, safety
import grpo
import rollout
from world import sandbox
from infra import speedups
import sdpo
import train
from world import tasks
from world import graders
from infra.distributed import setup_torch
from infra.models import load_model, with_autocast
from world.tiny_shape import build_tiny_llama
from infra.memory import GB, LOGIT_BYTES, LOGIT_CASES, MODEL_SHAPES, memory_per_rank, memory_per_stage
from infra.padding import left_pad, round_up
from infra.speedups import SAMPLE_BATCH
from rollout import chat_messages, collect, encode_chat, micro_batches


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, repeat, device, warmup=1):
    """Median wall seconds of fn() over `repeat` runs after `warmup` runs (and every result)."""
    times = []
    for i in range(warmup + repeat):
        sync(device)
        t0 = time.perf_counter()
        fn(i)
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def matmul_flops(device, m, k, n, repeat=5, dtype=torch.float32):
    """Dense matmul FLOP/s for [m, k] @ [k, n]: 2·m·k·n per product, median over repeats."""
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    inner = max(1, int(2e9 // (2 * m * k * n)))   # enough products per timing to last a fraction of a second
    inner = min(inner, 200)

    def run(_):
        for _ in range(inner):
            a @ b
    t, _ = median_time(run, repeat, device)
    return 2 * m * k * n * inner / t


def machine():
    cpu = platform.processor() or "unknown"
    if os.path.exists("/proc/cpuinfo"):   # Linux names the model there; elsewhere platform.processor()
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def peak_memory_mib(device):
    out = {"rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux: KiB
    if device.type == "cuda":
        out["cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2 ** 20
    return out


def method_args(extra=()):
    """The default GRPO/SDPO settings, as the training scripts parse them, except one GRPO optimizer step
    per batch (`--mini-batches 1`): the FLOP counts below assume one forward and backward per token
    (the release's four steps per batch add a scoring forward of π_old and split the same tokens)."""
    args = commands.one_configuration([*flags.knob_rows(grpo), *flags.knob_rows(sdpo)], ["--mini-batches", "1", *extra])
    args.lr = flags.method_lr(args, "grpo")   # (the timings do not depend on it)
    return args


def method_config(method, args):
    """The method's knobs (grpo.GRPOConfig, sdpo.SDPOConfig) as continual.py hands them, from method_args's."""
    return configurations.config_of(method, {}, args)


def update_tokens(batch, unique=True):
    """Tokens a training forward processes, padding excluded: each distinct prompt once (the shared
    prefix, speedups.shared_prefix_logits) plus every response token; unique=False counts every
    prompt copy (a packed forward without sharing)."""
    prompts = {tuple(p) for p in batch["prompt_ids"]} if unique else [tuple(p) for p in batch["prompt_ids"]]
    return sum(len(p) for p in prompts) + sum(len(r) for r in batch["response_ids"])


def padded_tokens(batch, micro_batch):
    """Token slots the forwards actually compute, per micro-batch: distinct prompts × padded prompt
    length + rows × padded response length (with the shared prefix)."""
    lengths = [len(r) for r in batch["response_ids"]]
    total = 0
    for idx in micro_batches(lengths, micro_batch):
        distinct = {tuple(batch["prompt_ids"][i]) for i in idx}
        P = round_up(max(len(p) for p in distinct))
        T = round_up(max(lengths[i] for i in idx))
        total += len(distinct) * P + len(idx) * T
    return total


# ----------------------------------------------------------------------------------------------
# The fixed configuration
# ----------------------------------------------------------------------------------------------
def bench_fixed(model, tok, device, args):
    margs = method_args(["--max-new-tokens", str(args.max_new_tokens), "--micro-batch", str(args.micro_batch)])
    records = tasks.builtin_split(args.task, "train", args.prompts, seed=args.seed) \
        if args.task in tasks.GENERATORS else tasks.task_records(args.task)[:args.prompts]
    out = {"config": {"prompts": len(records), "group_size": args.group_size, "max_new_tokens": args.max_new_tokens,
                      "task": args.task, "repeat": args.repeat, "micro_batch": args.micro_batch}}

    # rollout: sample + grade a group per prompt
    batches = []

    def one_rollout(i):   # (not `rollout`: that name is the module, used below)
        torch.manual_seed(args.seed + i)
        batches.append(collect(model, tok, records, args.group_size, args.max_new_tokens, 1.0, 1.0))
    t, times = median_time(one_rollout, args.repeat, device)
    gen = statistics.median(sum(len(r) for r in b["response_ids"]) for b in batches[1:])
    out["rollout_s"], out["rollout_times"] = t, times
    out["generated_tokens"] = gen
    out["gen_tokens_per_s"] = gen / t
    batch = batches[1]   # the first timed rollout (seed + 1): the same batch whatever --repeat is
    n_params = sum(p.numel() for p in model.parameters())
    out["parameters"] = n_params
    out["update_tokens"] = update_tokens(batch)                  # distinct prompts once + responses
    out["update_tokens_unshared"] = update_tokens(batch, unique=False)
    out["update_tokens_padded"] = padded_tokens(batch, args.micro_batch)
    out["reward_mean"] = batch["rewards"].mean().item()

    # GRPO update on one collected batch (a private copy of the model, its own AdamW)
    m = copy.deepcopy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=margs.lr)
    t, times = median_time(lambda i: train.update(m, opt, grpo, method_config("grpo", margs), None, batch, margs, tok, 1), args.repeat, device)
    out["grpo_update_s"], out["grpo_update_times"] = t, times
    # ≈ 6 · parameters · tokens: forward 2·P per token, backward 4·P per token
    out["grpo_update_flops"] = 6 * n_params * out["update_tokens"] / t

    # where the GRPO update's time goes: one profiled update, the share spent in matrix multiplies
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        train.update(m, opt, grpo, method_config("grpo", margs), None, batch, margs, tok, 1)
    ops = prof.key_averages()
    self_time = {e.key: e.self_cpu_time_total for e in ops} if device.type == "cpu" else \
        {e.key: e.self_device_time_total for e in ops}
    total = sum(self_time.values())
    share = {k: v / total for k, v in sorted(self_time.items(), key=lambda kv: -kv[1])[:6]}
    out["grpo_update_top_ops"] = share
    out["grpo_update_matmul_share"] = sum(v for k, v in self_time.items()
                                          if k in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")) / total

    # SDPO update on the same batch; the teacher's forward timed by wrapping sdpo.teacher_logits
    m = copy.deepcopy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=margs.lr)
    teacher = sdpo.init_teacher(m)
    spent = []
    real_teacher_logits = sdpo.teacher_logits

    def timed_teacher(*a, **kw):
        sync(device)
        t0 = time.perf_counter()
        r = real_teacher_logits(*a, **kw)
        sync(device)
        spent.append(time.perf_counter() - t0)
        return r

    def sdpo_step(i):
        spent.append(None)   # marks the start of run i
        train.update(m, opt, sdpo, method_config("sdpo", margs), teacher, batch, margs, tok, i + 1)
        sdpo.teacher_after_step(teacher, m, i + 1, margs.alpha)   # (T1) as train.run_steps does after it
    sdpo.teacher_logits = timed_teacher
    try:
        t, times = median_time(sdpo_step, args.repeat, device)
    finally:
        sdpo.teacher_logits = real_teacher_logits
    per_run, cur = [], None
    for s in spent:
        if s is None:
            cur = 0.0
            per_run.append(cur)
        else:
            per_run[-1] += s
    teacher_s = statistics.median(per_run[1:])
    out["sdpo_update_s"], out["sdpo_update_times"] = t, times
    out["sdpo_teacher_s"] = teacher_s
    out["sdpo_teacher_share"] = teacher_s / t
    out["sdpo_over_grpo"] = t / out["grpo_update_s"]
    out["sdpo_signal_share"] = sdpo.build_teacher_prompts(batch["records"], batch["texts"], batch["rewards"],
                                                          batch["group_size"])[1].float().mean().item()

    # evaluation: Acc@k sampling + grading, no gradients
    test = evaluate.benchmark_records(args.task, args.eval_prompts, args.seed) if args.task in tasks.GENERATORS \
        else records
    t, _ = median_time(lambda i: rollout.acc_at_k(model, tok, test, args.eval_k, args.max_new_tokens), args.repeat, device)
    out["eval_seqs_per_s"] = len(test) * args.eval_k / t

    # the machine's dense matmul rate, on this run: large square, and the model's own MLP shape
    H = model.config.hidden_size
    inter = getattr(model.config, "intermediate_size", 4 * H)
    out["matmul_flops_square"] = matmul_flops(device, 1024, 1024, 1024, args.repeat)
    rows = out["update_tokens"]
    out["matmul_flops_model_shape"] = matmul_flops(device, rows, H, inter, args.repeat)
    out["grpo_flops_fraction"] = out["grpo_update_flops"] / out["matmul_flops_square"]
    # the same rate counting the padded slots the kernels really compute
    out["grpo_update_flops_padded"] = 6 * n_params * out["update_tokens_padded"] / out["grpo_update_s"]
    # the matmuls' own rate inside the update: the same FLOPs over the time the profiler puts in them
    out["grpo_update_matmul_flops"] = out["grpo_update_flops_padded"] / max(1e-9, out["grpo_update_matmul_share"])
    out.update(peak_memory_mib(device))
    return out


# ----------------------------------------------------------------------------------------------
# Evaluation and drift: what one stage of continual.py spends after its training steps
# ----------------------------------------------------------------------------------------------
def dynamic_cache(model, ids, mask, max_new_tokens, group_size=0):
    """transformers' default generation cache (a DynamicCache, grown by torch.cat at every token) with the
    same shared prefill: what speedups.generation_cache replaced, for the comparison."""
    if group_size <= 1:
        return None
    cache = speedups.shared_prefill(model, ids[::group_size], mask[::group_size])
    cache.batch_repeat_interleave(group_size)
    return cache


def bench_eval(model, tok, device, args):
    """Seconds of each part of one stage's evaluation and drift at continual.py's defaults (8 benchmarks ×
    --eval-n prompts × --eval-k samples), and generate's tokens/s by sample batch and cache."""
    names = tasks.resolve_benchmarks("all")
    records = [r for b in names for r in evaluate.benchmark_records(b, args.eval_n, 0, tok)]
    prompts = [encode_chat(tok, chat_messages(r)) for r in records]
    out = {"config": {"benchmarks": len(names), "prompts": len(records), "k": args.eval_k, "repeat": args.repeat,
                      "max_new_tokens": args.eval_max_new_tokens}}

    def sampling(batch_size, cache_fn=None, m=model, warm=True):
        real = speedups.generation_cache
        if cache_fn:
            speedups.generation_cache = cache_fn
        try:
            made = []

            def run(i):
                torch.manual_seed(i)
                made.append(rollout.sample(m, tok, prompts, args.eval_k, args.eval_max_new_tokens, 0.6, 0.95,
                                           batch_size=batch_size))
            t, _ = median_time(run, args.repeat, device, warmup=0 if warm else 1)
        finally:
            speedups.generation_cache = real
        tokens = statistics.median(sum(len(r) for r in ids) for ids in made[-args.repeat:])   # (the timed runs)
        return {"s": t, "tokens": tokens, "tokens_per_s": tokens / t}

    out["generate"] = {f"static, batch {b}": sampling(b, warm=b != 64) for b in (64, 128, 256, 512)}
    out["generate"][f"dynamic, batch {SAMPLE_BATCH}"] = sampling(SAMPLE_BATCH, dynamic_cache)
    sdpa = copy.deepcopy(model)
    sdpa.set_attn_implementation("sdpa")
    out["generate"][f"static, batch {SAMPLE_BATCH}, SDPA attention"] = sampling(SAMPLE_BATCH, m=sdpa, warm=False)
    del sdpa

    # one stage's evaluation and drift, the trained model played by a perturbed copy of the base
    trained = copy.deepcopy(model)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.002 * torch.randn_like(p))   # (moved a little: it still answers like the base, at its lengths)
    stage = {}
    base_resp, resp = {}, {}
    t, _ = median_time(lambda i: evaluate.evaluate(trained, tok, names, args.eval_n, args.eval_k,
                                                   args.eval_max_new_tokens, progress=False, responses=resp),
                       args.repeat, device)
    stage["evaluation"] = t
    evaluate.evaluate(model, tok, names, args.eval_n, args.eval_k, args.eval_max_new_tokens, progress=False,
                      responses=base_resp)
    t, _ = median_time(lambda i: drift.parameter_drift(model, trained), args.repeat, device)
    stage["drift: weights (A4–A6)"] = t
    for m, label in ((1, "1 per prompt, the default"), (0, f"all {args.eval_k}")):
        def embed(i, m=m):
            def pick(r):
                return [x for b in names for x in drift.first_samples(r[b]["texts"], args.eval_k, m)]
            drift.response_drift(model, tok, pick(base_resp), pick(resp))
        t, _ = median_time(embed, args.repeat, device)
        stage[f"drift: response embeddings (A7), {label}"] = t
    kl_records = {b: evaluate.benchmark_records(b, args.eval_n, 0, tok) for b in names}
    t, _ = median_time(lambda i: drift.kl_to_base_per_benchmark(trained, model, tok, kl_records, 2,
                                                                args.eval_max_new_tokens, 0, SAMPLE_BATCH),
                       args.repeat, device)
    stage["drift: KL to the base (2 samples per prompt)"] = t
    out["stage_s"] = stage
    if args.compile:   # transformers' compiled forward (a CompileConfig that allows the CPU), static cache
        out["compile"] = bench_compile(model, tok, records[:args.prompts], args)
    return out


def bench_compile(model, tok, records, args):
    """One training-shaped rollout (prompts × group) with torch.compile of the forward, against without."""
    from transformers import CompileConfig
    ids, mask = left_pad([encode_chat(tok, chat_messages(r)) for r in records for _ in range(args.group_size)],
                         tok.pad_token_id, next(model.parameters()).device)
    res = {}
    for name, extra in (("plain", {"disable_compile": True}), ("compiled", {"compile_config": CompileConfig()})):
        if name == "compiled":
            extra["compile_config"]._compile_all_devices = True
        times = []
        for i in range(1 + args.repeat):
            t0 = time.perf_counter()
            with torch.inference_mode():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                               min_new_tokens=args.max_new_tokens, do_sample=True, top_k=0, top_p=1.0,
                               pad_token_id=tok.pad_token_id, cache_implementation="static", **extra)
            times.append(time.perf_counter() - t0)
        res[name] = {"first_s": times[0], "ms_per_token": 1000 * statistics.median(times[1:]) / args.max_new_tokens}
    return res


def eval_report(res):
    e = res["eval"]
    c = e["config"]
    lines = [f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, torch {res['machine']['torch']}",
             f"Evaluation as continual.py runs it: {c['benchmarks']} benchmarks, {c['prompts']} prompts × k = {c['k']}, "
             f"≤ {c['max_new_tokens']} new tokens; medians of {c['repeat']} runs after a warm-up.", "",
             "| generate (all the evaluation's samples) | s | tokens | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['s']:.2f} | {v['tokens']:.0f} | {v['tokens_per_s']:.0f} |" for k, v in e["generate"].items()]
    lines += ["", "| one stage, after training | s |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in e["stage_s"].items()]
    if "compile" in e:
        lines += ["", "| training-shaped rollout | first call s | ms per token after |", "|---|---|---|"]
        lines += [f"| {k} | {v['first_s']:.1f} | {v['ms_per_token']:.1f} |" for k, v in e["compile"].items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Scaling sweeps: fixed-length responses, so tokens double exactly
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def forced_batch(model, tok, records, group_size, length, seed):
    """A batch of responses of exactly `length` tokens (EOS suppressed until then), random 0/1 rewards."""
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    prompt_ids = [encode_chat(tok, chat_messages(r)) for r in records]
    expanded = [p for p in prompt_ids for _ in range(group_size)]
    ids, mask = left_pad(expanded, tok.pad_token_id, device)
    model.eval()
    seqs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=length, min_new_tokens=length,
                          do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)
    model.train()
    responses = seqs[:, ids.shape[1]:].tolist()
    rewards = torch.randint(0, 2, (len(expanded),)).float()
    return {"records": [r for r in records for _ in range(group_size)], "prompt_ids": expanded,
            "response_ids": responses, "texts": tok.batch_decode(responses, skip_special_tokens=True),
            "rewards": rewards, "group_size": group_size}


def step_time(model, tok, records, group_size, length, device, repeat):
    """Median seconds of one forced-length rollout and one GRPO update, and the generated tokens."""
    margs = method_args()
    box = {}

    def roll(i):
        box["batch"] = forced_batch(model, tok, records, group_size, length, i)
    t_roll, _ = median_time(roll, repeat, device)
    m = copy.deepcopy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    t_upd, _ = median_time(lambda i: train.update(m, opt, grpo, method_config("grpo", margs), None, box["batch"], margs, tok, 1),
                           repeat, device)
    return {"rollout_s": t_roll, "update_s": t_upd, "step_s": t_roll + t_upd,
            "tokens": len(records) * group_size * length}


def linearity(rows):
    """(t_i / t_0) / (tokens_i / tokens_0) per row: 1.0 = exactly linear in generated tokens."""
    t0, n0 = rows[0]["step_s"], rows[0]["tokens"]
    return [(r["step_s"] / t0) / (r["tokens"] / n0) for r in rows]


def affine_fit(rows):
    """Least squares step_s ≈ a + b·tokens: (a = fixed seconds per step, b = seconds per token, the
    largest relative residual). Linear cost with a fixed part shows up as a small residual."""
    n = [r["tokens"] for r in rows]
    t = [r["step_s"] for r in rows]
    mn, mt = sum(n) / len(n), sum(t) / len(t)
    b = sum((x - mn) * (y - mt) for x, y in zip(n, t)) / sum((x - mn) ** 2 for x in n)
    a = mt - b * mn
    return {"fixed_s": a, "per_token_s": b, "max_rel_residual": max(abs(y - (a + b * x)) / y for x, y in zip(n, t))}


def bench_sweep(model, tok, device, args):
    quick = args.quick   # (--quick: two points per axis, a few tokens: to see that it runs)
    records = tasks.builtin_split("math", "train", 2 if quick else 8, seed=args.seed)
    length, group = (8, 2) if quick else (48, 8)
    out = {"group_size": [], "length": [], "width": []}
    for g in ((2, 4) if quick else (4, 8, 16, 32)):
        out["group_size"].append({"group_size": g, **step_time(model, tok, records, g, length, device, args.sweep_repeat)})
    for L in ((4, 8) if quick else (16, 32, 64, 128)):
        out["length"].append({"length": L, **step_time(model, tok, records, group, L, device, args.sweep_repeat)})
    if args.model == "tiny":   # width: fresh tiny models at half, the same and double width
        for h in ((96, 192) if quick else (96, 192, 384)):
            m = build_tiny_llama(tok, 0)
            cfg = m.config
            cfg.hidden_size, cfg.intermediate_size = h, int(h * 8 / 3) // 16 * 16
            from transformers import LlamaForCausalLM
            torch.manual_seed(0)
            m = LlamaForCausalLM(cfg).to(device)
            m.generation_config.pad_token_id, m.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
            n = sum(p.numel() for p in m.parameters())
            out["width"].append({"width": h, "parameters": n,
                                 **step_time(m, tok, records, group, length, device, args.sweep_repeat)})
    for key in ("group_size", "length"):
        for row, lin in zip(out[key], linearity(out[key])):
            row["vs_linear"] = lin
        out[key + "_fit"] = affine_fit(out[key])
    return out


# ----------------------------------------------------------------------------------------------
def table(rows):
    lines = ["| quantity | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def report(res):
    f, m = res["fixed"], res["machine"]
    c = f["config"]
    g = 1e9
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads)"
             + (f", {m['cuda']}" if m["cuda"] else "") + f"; model {res['model']} ({f['parameters'] / 1e6:.2f}M parameters)",
             f"Config: {c['prompts']} prompts × group {c['group_size']}, ≤ {c['max_new_tokens']} new tokens; "
             f"medians of {c['repeat']} runs after a warm-up.", "",
             table([
                 ("rollout s/step", f"{f['rollout_s']:.3f}"),
                 ("generated tokens/step (median)", f"{f['generated_tokens']:.0f}"),
                 ("generated tokens/s", f"{f['gen_tokens_per_s']:.0f}"),
                 ("GRPO update s/step", f"{f['grpo_update_s']:.3f}"),
                 ("SDPO update s/step", f"{f['sdpo_update_s']:.3f}"),
                 ("SDPO / GRPO update", f"{f['sdpo_over_grpo']:.2f}×"),
                 ("teacher forward share of the SDPO update", f"{100 * f['sdpo_teacher_share']:.0f}%"),
                 ("responses with a teacher signal", f"{100 * f['sdpo_signal_share']:.0f}%"),
                 ("evaluation sequences/s", f"{f['eval_seqs_per_s']:.0f}"),
                 ("GRPO update GFLOP/s (6·P·unique tokens/t)", f"{f['grpo_update_flops'] / g:.1f}"),
                 ("dense matmul GFLOP/s, 1024³", f"{f['matmul_flops_square'] / g:.1f}"),
                 ("dense matmul GFLOP/s, model shape", f"{f['matmul_flops_model_shape'] / g:.1f}"),
                 ("GRPO update / dense matmul", f"{100 * f['grpo_flops_fraction']:.1f}%"),
                 ("tokens in the update: unique (each prompt once) / every prompt copy / computed with padding",
                  f"{f['update_tokens']} / {f['update_tokens_unshared']} / {f['update_tokens_padded']}"),
                 ("GRPO update GFLOP/s counting padded slots", f"{f['grpo_update_flops_padded'] / g:.1f}"),
                 ("share of the GRPO update's time in matmuls (profiler)", f"{100 * f['grpo_update_matmul_share']:.0f}%"),
                 ("matmul GFLOP/s inside the update (padded FLOPs / matmul time)", f"{f['grpo_update_matmul_flops'] / g:.1f}"),
                 ("top ops of the GRPO update (self time)", ", ".join(f"{k.replace('aten::', '')} {100 * v:.0f}%"
                                                                    for k, v in f["grpo_update_top_ops"].items())),
                 ("peak resident memory MiB", f"{f['rss_peak_mib']:.0f}"),
             ] + ([("peak CUDA memory MiB", f"{f['cuda_peak_mib']:.0f}")] if "cuda_peak_mib" in f else []))]
    if "sweep" in res:
        s = res["sweep"]
        lines += ["", "Scaling (forced-length responses, one rollout + one GRPO update; vs linear = "
                  "(t/t₀)/(tokens/tokens₀), 1.00 = linear in generated tokens):", "",
                  "| sweep | value | tokens | rollout s | update s | step s | vs linear |", "|---|---|---|---|---|---|---|"]
        for key in ("group_size", "length"):
            for r in s[key]:
                lines.append(f"| {key} | {r[key]} | {r['tokens']} | {r['rollout_s']:.3f} | {r['update_s']:.3f} | "
                             f"{r['step_s']:.3f} | {r['vs_linear']:.2f} |")
        for key in ("group_size", "length"):
            fit = s[key + "_fit"]
            lines.append(f"| {key}: fit a + b·tokens | a = {fit['fixed_s']:.3f} s | b = {1e6 * fit['per_token_s']:.0f} µs/token | "
                         f"| | max residual {100 * fit['max_rel_residual']:.0f}% | |")
        for r in s["width"]:
            lines.append(f"| width | {r['width']} ({r['parameters'] / 1e6:.2f}M) | {r['tokens']} | {r['rollout_s']:.3f} | "
                         f"{r['update_s']:.3f} | {r['step_s']:.3f} | — |")
    return "\n".join(lines)


def stage_table(tokens=8192, ranks=(1, 8), sample_batches=(4, 16)):
    """Markdown: the peak per GPU in each stage for the paper's models at `tokens` tokens."""
    lines = [f"Per GPU, bf16 compute over fp32 master weights, FSDP2, T = {tokens} tokens (prompt + response); "
             f"S = --sample-batch; SDPO at the release's top-k 100.", "",
             "| model | method | GPUs | S | evaluation | rollout | update | drift |", "|---|---|---|---|---|---|---|---|"]
    for name, s in MODEL_SHAPES.items():
        for method in ("grpo", "sdpo"):
            for n in ranks:
                for S in sample_batches:
                    m = memory_per_stage(s, n, method, tokens, S)
                    lines.append(f"| {name} | {method.upper()} | {n} | {S} | " + " | ".join(
                        f"{m[k] / GB:.0f} GB" for k in ("evaluation", "rollout", "update", "drift")) + " |")
    return "\n".join(lines)


def logit_memory_slope(case, vocab=128_000, lengths=(128, 640)):
    """Run one update micro-batch (forward, loss, backward) of `case` on a 1-layer model with `vocab` ids,
    for one response of each length, in increasing order, in this process; returns bytes per token × V:
    the growth of the peak resident memory (VmHWM) between the two lengths over ΔT·V. Run it in a fresh
    process with MALLOC_MMAP_THRESHOLD_ set, so that freed tensors leave the resident set (main does)."""
    from transformers import LlamaConfig, LlamaForCausalLM   # (transformers is imported where a model is built)
    method, topk, dtype = LOGIT_CASES[case]
    _, tok = load_model("tiny", "cpu")
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.compute_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    if dtype == "bf16":
        with_autocast(model, "cpu", torch.bfloat16)
    teacher = copy.deepcopy(model).requires_grad_(False) if method == "sdpo" else None
    args = types.SimpleNamespace(cot=False, feedback=False, mask_ratio=0.0, micro_batch=0, beta=0.5, topk=topk,
                                 max_grad_norm=1.0, loss_agg="seq-mean-token-mean", kl_coef=0.0, epsilon=0.2,
                                 epsilon_high=0.28, clip_ratio_c=3.0)
    prompt = encode_chat(tok, chat_messages({"prompt": "What is 2+3?"}))
    peaks = []
    for T in lengths:
        response = torch.randint(3, vocab, (T,), generator=torch.Generator().manual_seed(T)).tolist()
        batch = {"prompt_ids": [prompt], "response_ids": [response], "records": [{"prompt": "What is 2+3?"}],
                 "texts": ["x"], "rewards": torch.tensor([1.0]), "group_size": 1}
        if method == "sdpo":
            plan = sdpo.SDPOPlan([], {}, ["What is 2+3? \\boxed{5}"], [torch.ones(T, dtype=torch.bool)])
            loss, _ = sdpo.micro_batch_loss(model, teacher, batch, plan, {"n_tok": T, "n_seq": 1}, [0],
                                            sdpo.SDPOConfig(topk=topk), args, tok)
        else:
            plan = grpo.GRPOPlan([], {}, torch.tensor([1.0]), None)
            loss, _ = grpo.micro_batch_loss(model, None, batch, plan, {"n_tok": T, "n_seq": 1}, [0], grpo.GRPOConfig(),
                                            args, tok)
        loss.backward()
        model.zero_grad(set_to_none=True)
        del loss
        peaks.append(next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                          if line.startswith("VmHWM")))
    return (peaks[1] - peaks[0]) / ((lengths[1] - lengths[0]) * vocab)


def measure_logit_memory(cases=LOGIT_CASES, vocab=128_000):
    """{case: bytes per token × V}, each case in a fresh interpreter (a peak only ever grows)."""
    out = {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    for case in cases:
        # (chunks of 64 positions: the chunk's own fp32 temporaries are then the same at both lengths and
        # leave the slope; they are the separate term min(T, ROWS_PER_CHUNK)·V·chunk_bytes of memory_per_rank)
        code = (f"from tools import bench; from infra import speedups; import torch; torch.set_num_threads(1); speedups.ROWS_PER_CHUNK = 64; "
                f"print(bench.logit_memory_slope({case!r}, {vocab}))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if res.returncode != 0:
            raise RuntimeError(res.stderr[-2000:])
        out[case] = float(res.stdout.strip().splitlines()[-1])
    return out


def memory_table(tokens=10240, prompts_per_step=32, group_size=8):
    """Markdown: the peak per GPU of each model and method on 1, 4 and 8 GPUs of 80 and 141 GB. Sampling
    runs S sequences at once (`--sample-batch S`): the largest power of two, up to each GPU's share of the
    step, whose rollout fits the GPU ('—': none does)."""
    lines = [f"Per GPU, bf16 compute over fp32 master weights, FSDP2; T = {tokens} tokens (prompt + response) per "
             f"update micro-batch (one response, as the release); {prompts_per_step} prompts × {group_size} samples "
             f"per step, shared over the GPUs; SDPO at the release's top-k 100.", "",
             "| model | method | GPUs | sharded states | update peak | 80 GB: S, rollout peak | 141 GB: S, rollout peak |",
             "|---|---|---|---|---|---|---|"]
    for name, s in MODEL_SHAPES.items():
        for method in ("grpo", "sdpo"):
            for n in (1, 4, 8):
                m = memory_per_rank(s, n, method, tokens)
                cells = []
                for cap in (80, 141):
                    fits = [S for S in (2 ** i for i in range(12)) if S <= prompts_per_step * group_size // n
                            and memory_per_rank(s, n, method, tokens, S)["rollout_total"] < cap * GB]
                    if m["update_total"] >= cap * GB:
                        cells.append("update does not fit")
                    elif not fits:
                        cells.append("rollout does not fit")
                    else:
                        cells.append(f"S = {fits[-1]}, {memory_per_rank(s, n, method, tokens, fits[-1])['rollout_total'] / GB:.0f} GB")
                lines.append(f"| {name} ({m['parameters'] / 1e9:.2f}B) | {method.upper()} | {n} | "
                             f"{m['update']['sharded states'] / GB:.0f} GB | {m['update_total'] / GB:.0f} GB | "
                             f"{cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def bench_grading(repeat):
    """Seconds to grade the built-in CODING test split's 64 reference answers (graders.grade_many, the path
    training and evaluation take) in each jail this machine has — the batch sharing one jail (layer 0b)
    and one jail per program — and with no jail (--unsafe-code). Medians of `repeat` runs after a warm-up."""
    records = tasks.builtin_split("coding", "test", 64, 0)
    answers = [r["solution"] for r in records]   # (the built-in world's own format: a bare lambda)
    saved, rows = (sandbox.JAILS, sandbox.ALLOW_UNJAILED, sandbox.SHARED_JAIL), []
    try:
        for kind in [k for k in sandbox.JAILS if sandbox.first_working_jail((k,))] + [None]:
            for shared in (True, False):
                sandbox.JAILS, sandbox.ALLOW_UNJAILED, sandbox.SHARED_JAIL = (kind,) if kind else (), kind is None, shared
                if shared and not sandbox.shares_jail(kind):
                    continue
                times = []
                for _ in range(repeat + 1):
                    t0 = time.time()
                    assert graders.grade_many(records, answers) == [1.0] * len(records), "a reference answer failed"
                    times.append(time.time() - t0)
                rows.append({"jail": kind or "none (--unsafe-code)", "shared": shared, "programs": len(records),
                             "seconds": statistics.median(times[1:]), "runs": repeat})
    finally:
        sandbox.JAILS, sandbox.ALLOW_UNJAILED, sandbox.SHARED_JAIL = saved
    return rows


def grading_report(rows):
    lines = [f"Machine: {machine()['cpu']}, {machine()['cores']} cores; medians of {rows[0]['runs']} runs after a warm-up\n",
             "| jail | programs share it (0b) | 64 programs, s | per program, ms |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['jail']} | {'yes' if r['shared'] else 'no: one jail each'} | {r['seconds']:.2f} | "
                     f"{1000 * r['seconds'] / r['programs']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Cost of one RL step: rollout, GRPO and SDPO updates, evaluation, FLOP/s.",
                                 usage="python tools/bench.py [--sweep] [--repeat N] [--model M] ... (--help lists all)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    ap.add_argument("--task", default="math", help="built-in domain or a JSON(-lines) file of records")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--micro-batch", type=int, default=0, help="sequences per forward in the updates (0 = all)")
    ap.add_argument("--eval-prompts", type=int, default=16)
    ap.add_argument("--eval-k", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs after one warm-up; medians are reported")
    ap.add_argument("--sweep", action="store_true", help="also the scaling sweeps (group size, length, width)")
    ap.add_argument("--sweep-repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join("runs", "bench.json"), help="JSON output")
    ap.add_argument("--memory", action="store_true", help="print the per-GPU memory table of the paper's models "
                                                          "under FSDP2 (a formula: nothing runs) and stop")
    ap.add_argument("--memory-tokens", type=int, default=10240, help="prompt + response tokens for --memory")
    ap.add_argument("--eval", action="store_true", help="time one stage's evaluation and drift, and generate by "
                    "sample batch and cache (~3 min at --repeat 3), and stop")
    ap.add_argument("--eval-n", type=int, default=32, help="prompts per benchmark for --eval (continual.py's)")
    ap.add_argument("--eval-max-new-tokens", type=int, default=64, help="new tokens for --eval (continual.py's)")
    ap.add_argument("--compile", action="store_true", help="with --eval: also generate with transformers' "
                    "torch.compile of the forward (its compile time counts once)")
    ap.add_argument("--logit-memory", action="store_true", help="measure the bytes per (token × vocabulary id) "
                    "of each update's logits (LOGIT_BYTES), each case in a fresh process (~90 s), and stop")
    ap.add_argument("--grading", action="store_true", help="time grading 64 CODING programs in each jail, shared "
                    "and one per program (layer 0b), and with none, and stop")
    ap.add_argument("--quick", action="store_true", help="every mode in its smallest form (one timed run, a few prompts "
                    "and tokens, one logit case): to see that the command runs, never for a number")
    args = ap.parse_args(argv)
    if args.quick:   # (flags that shrink the run)
        vars(args).update(repeat=1, sweep_repeat=1, prompts=4, group_size=2, max_new_tokens=8, eval_prompts=2, eval_k=1,
                          eval_n=2, eval_max_new_tokens=8, memory_tokens=512)
    for flag, ok, allowed in (("--threads", 0 <= args.threads <= 1024, "in [0, 1024]"),
                              ("--micro-batch", args.micro_batch >= 0, ">= 0"),
                              ("--memory-tokens", 1 <= args.memory_tokens <= 10**7, "in [1, 10^7]"),
                              ("--eval-n", args.eval_n >= 1, ">= 1"),
                              ("--eval-max-new-tokens", args.eval_max_new_tokens >= 1, ">= 1"),
                              ("--seed", 0 <= args.seed < 2**31, "in [0, 2^31)")):
        if not ok:   # (every mode's flags, before any mode runs)
            ap.error(f"{flag} must be {allowed}")
    if not args.out.strip() or os.path.isdir(args.out) or (os.path.dirname(args.out)
                                                              and os.path.isfile(os.path.dirname(args.out))):
        ap.error(f"--out: {args.out!r} is not a file name this can write (empty, a folder, or under a file)")
    safety.refuse_committed(ap.error, "--out", args.out)
    if args.grading:
        rows = bench_grading(args.repeat)
        print(grading_report(rows))
        return rows
    if args.memory:
        print(memory_table(args.memory_tokens))
        print("\nPeak per stage at 8k tokens\n\n" + stage_table())
        return None
    if args.logit_memory:
        measured = measure_logit_memory(["sdpo top-100"] if args.quick else LOGIT_CASES, 16_000 if args.quick else 128_000)
        print("| update | bytes per token × V, measured | LOGIT_BYTES (the formula's) |\n|---|---|---|")
        for case, b in measured.items():
            print(f"| {case} | {b:.1f} | {LOGIT_BYTES[case]:.1f} |")
        return measured
    for flag in ("prompts", "group_size", "max_new_tokens", "eval_prompts", "eval_k", "repeat", "sweep_repeat"):
        if getattr(args, flag) < (2 if flag == "group_size" else 1):
            ap.error(f"--{flag.replace('_', '-')} must be >= {2 if flag == 'group_size' else 1}")
    if args.task not in tasks.GENERATORS and not os.path.isfile(args.task):
        ap.error(f"--task: unknown task '{args.task}'")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.exists(args.out) and not os.path.isfile(args.out):
        ap.error(f"--out: '{args.out}' is not a file path that can be written")
    flags.check_dir_flag(ap, "--out", out_dir)
    flags.check_model_flag(ap, "--model", args.model)
    flags.check_device_flag(ap, args.device)
    device = setup_torch(args.device, args.threads)
    model, tok = load_model(args.model, device)
    t0 = time.time()
    res = {"model": args.model, "machine": machine()}
    if args.eval:   # one stage's evaluation and drift, part by part
        res["eval"] = bench_eval(model, tok, device, args)
    else:
        res["fixed"] = bench_fixed(model, tok, device, args)
        if args.sweep:
            res["sweep"] = bench_sweep(model, tok, device, args)
    res["seconds"] = time.time() - t0
    print(eval_report(res) if args.eval else report(res))
    print(f"\n{res['seconds']:.0f}s; wrote {args.out}")
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return res


if __name__ == "__main__":
    main()
