"""infra/flags.py — the command-line flags of continual.py, and every check on them, in one place.

    python continual.py --help      # the paper's knobs first, then the groups below

`--help` opens with **the paper's knobs**: the method and its rates (α, β, γ), the stages,
the steps, the group, the seeds, the model and the learning rate. The rest sits in named groups:

    protocol      the release's rules the paper leaves implicit (GRPO's four steps per batch, the clip,
                  the loss aggregation, the batch order, warmup, SDPO's top-k, CoT, masking, feedback, T3)
    evaluation    which benchmarks, how many prompts and samples (C2, C3), the in-stage curve
    drift         the drift measurements (A4–A8)
    scale         devices, precision, threads, memory (micro-batches, KV cache), torchrun's blocks
    run           where results go, resuming, and running CODING programs

Every check runs before any work starts, says what is wrong in one `error:` line and exits with code 2
(argparse's convention). No check touches the network: a hub model must be in the local Hugging Face
cache (or be a local directory). A flag a model gives its own default to (weight decay, warmup, top-k)
is filled in here (`model_defaults`, `default_topk`).
"""
import argparse
import copy
import dataclasses
import json
import math
import os
import re
import sys
import tempfile

import torch
import yaml   # (pyyaml: a dependency of datasets) a YAML --config

from transformers import HfArgumentParser

from world import sandbox
from world import tasks
from infra.distributed import sample_blocks_per_step
from infra.safety import committed_path
from infra.models import BUILT_IN_MODELS, DTYPES, MODEL_DIRS
from infra import speedups, trackers
from infra.speedups import SAMPLE_BATCH

DEFAULT_STAGES = "math,science,tooluse,coding"
# Each method's learning rate when --lr is not given: on the built-in world, the rate docs/WORLD.md's rule
# chose (the largest mean validation gain over the four domains after 40 single-domain steps, of the grid
# 1e-4, 2e-4, 4e-4; design 7c, the final protocol of 2026-12-03). The release runs 1e-5 for both on 8B
# models (docs/PROTOCOL.md).
LR = {"grpo": 1e-4, "sdpo": 4e-4}
RELEASE_TOPK = 100          # (S4) the release's distillation top-k (actor.yaml)
RANK_FRAC, MASK_Q = 0.1, 0.1   # (A5, A6) r = ceil(0.1 · min(m, n)); the principal mask's top 10% of entries
MAX_STEPS, MAX_PROMPTS, MAX_TOKENS, MAX_EVAL_N = 1_000_000, 65_536, 32_768, 4096   # beyond: surely a typo


# ----------------------------------------------------------------------------------------------
# Knobs: a file declares each of its settings as one field of a dataclass (infra/knobs.py), nanoGPT's one line:
#     beta: float = knob(0.5, "GJSD mix β (S3): 0 forward KL, 0.5 JS, 1 reverse KL")
# with its checks in the dataclass's __post_init__; transformers.HfArgumentParser makes the flag from the field (a
# Literal type gives its choices, a bool a switch). A file's Knobs are its --help group, its Protocol the release's
# rules (--help-all).
# ----------------------------------------------------------------------------------------------
def knob_rows(module, group="paper"):
    """The knobs of a file (grpo, sdpo, continual, beyond.variants), the fields of its Knobs and Protocol dataclasses:
    [{name, default, help, group, table, field}]. group: the --help group of Knobs ("paper", or "beyond" for
    beyond/variants.py); Protocol's are "protocol". table: the dataclass whose __post_init__ checks the knob."""
    return [{"name": f.name, "default": f.default, "help": f.metadata["help"], "table": getattr(module, table),
             "group": group if table == "Knobs" else "protocol", "field": f}
            for table in ("Knobs", "Protocol") if hasattr(module, table)
            for f in dataclasses.fields(getattr(module, table))]


# ----------------------------------------------------------------------------------------------
# The flags, group by group
# ----------------------------------------------------------------------------------------------
def add_knobs(g, knobs, group):
    """The knobs of one --help group as flags, each made by HfArgumentParser from its dataclass field; --alpha takes a
    comma list (a sweep of α, parsed in continual_args)."""
    for k in knobs:
        if k["group"] != group:
            continue
        if k["name"] == "alpha":
            g.add_argument("--alpha", type=str, default=str(k["default"]), help=k["help"])
        else:
            HfArgumentParser._parse_dataclass_field(g, k["field"])


def check_knobs(ap, args, knobs):
    """Each knob dataclass built from the parsed values, so its __post_init__ checks them (with a sweep of α, once per
    α): the first that fails is one error line."""
    for table in {id(k["table"]): k["table"] for k in knobs}.values():   # (each dataclass once)
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(table) if hasattr(args, f.name)}
        sweep = values.pop("alpha", None)
        try:
            for alpha in sweep if isinstance(sweep, list) else [sweep]:
                table(**values, **({} if alpha is None else {"alpha": alpha}))
        except ValueError as e:   # (a knob's must(); a TypeError would be a bug, and shows as one)
            ap.error(str(e))


def add_paper_knobs(ap, knobs, methods):
    """The settings the paper varies or states: about a dozen. methods: the names --method takes."""
    g = ap.add_argument_group("the paper's knobs")
    g.add_argument("--method", default="sdpo", help=f"comma list of {', '.join(methods)} (sdpo with --alpha and the "
                   "SDPO flags), or the paper's named configurations (sdpo_0, sdpo_5, sdpo_cot_0, sdpo_cot_5, s_sdpo_0, "
                   "stable_sdpo)")
    g.add_argument("--stages", default=DEFAULT_STAGES, help="training domains in order (C1): built-in ones ("
                   f"{', '.join(tasks.GENERATORS)}), JSON(-lines) files, or hf:NAME; one for a single-domain run")
    add_knobs(g, knobs, "paper")   # the method files' own (sdpo.py's KNOBS: α, β, K, γ)
    g.add_argument("--steps", type=int, default=40, help="optimizer steps per stage")
    g.add_argument("--prompts-per-step", type=int, default=8, help="prompts per step")
    g.add_argument("--group-size", "--num-generations", type=int, default=8, dest="group_size",
                   help="responses sampled per prompt (G)")
    g.add_argument("--seed", "--seeds", dest="seed", type=seed_list, default=[0], metavar="S[,S...]",
                   help="training seed(s): a comma list runs everything once per seed (each resumable on its own)")
    g.add_argument("--model", default="tiny", help="'tiny' (built in), 'tiny_think', a local HF directory, or a "
                   "hub id in the local cache")
    g.add_argument("--lr", type=float, default=None,
                   help="AdamW learning rate; when not given, each method's own: " +
                        ", ".join(f"{m.upper()} {lr:g}" for m, lr in LR.items()))
    return g


def add_protocol(ap, knobs):
    """The release's rules (docs/PROTOCOL.md): each default is what the paper's code ran."""
    g = ap.add_argument_group("protocol (the release's rules)")
    add_knobs(g, knobs, "protocol")   # GRPO's (G1–G5), SDPO's (S4–S8), continual.py's (T3): the files' own
    g.add_argument("--loss-agg", default="seq-mean-token-mean", choices=["seq-mean-token-mean", "token-mean"],
                   help="(G5, S5) seq-mean-token-mean: the mean over responses of each response's token-mean, what "
                        "the release computes (one response per micro-batch); token-mean: over all tokens")
    g.add_argument("--mini-batch-order", choices=["balanced", "contiguous"], default="balanced",
                   help="the batch's order: 'balanced', the release's length-balanced order (GRPO's mini-batches are "
                        "bands of similar length; SDPO's demonstration is the first success in it), or "
                        "'contiguous', whole groups in sampling order")
    g.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping")
    g.add_argument("--weight-decay", type=float, default=None, help="AdamW's weight decay; default 0.01 (the "
                   "release's) for a real model, 0 for the built-in tiny one (docs/PROTOCOL.md)")
    g.add_argument("--warmup-steps", type=int, default=None, help="linear learning-rate warmup from 0 over this "
                   "many batches (the first batch moves nothing); default: the release's for the domain, 10 for "
                   "SCIENCE and TOOLUSE, 0 for MATH and CODING (world/tasks.RELEASE_RULES)")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=1.0, help="rollout sampling temperature")
    g.add_argument("--top-p", type=float, default=1.0, help="rollout nucleus sampling")


def add_evaluation(ap):
    g = ap.add_argument_group("evaluation (C2, C3)")
    g.add_argument("--benchmarks", default="all", help="evaluated after every stage: all | train | ood | list")
    g.add_argument("--eval-n", type=int, default=32, help="test prompts per benchmark")
    g.add_argument("--eval-k", type=int, default=8, help="samples per prompt (Acc@k, C3)")
    g.add_argument("--eval-seed", type=int, default=0, help="picks the test prompts and seeds the evaluation "
                   "sampling, whatever the training seed: every seed and method is scored on the same prompts")
    g.add_argument("--curve-every", type=int, default=20, help="in-stage eval of the current domain every N steps "
                   "(0 = off)")
    g.add_argument("--curve-n", type=int, default=16, help="prompts of the in-stage curve")
    g.add_argument("--curve-k", type=int, default=4, help="samples per prompt of the in-stage curve")


def add_drift(ap, switch=True):
    """switch: --no-drift too (continual.py; drift.py's own command always measures)."""
    g = ap.add_argument_group("drift (A4–A8)")
    if switch:
        g.add_argument("--no-drift", action="store_true", help="skip the drift measurements after each stage")
    g.add_argument("--rank-frac", type=float, default=RANK_FRAC, help="r = ceil(rank_frac · min(m, n)) (A5, A6)")
    g.add_argument("--mask-q", type=float, default=MASK_Q, help="principal mask: top-q fraction of entries (A6)")
    g.add_argument("--kl-samples", type=int, default=2, help="samples per prompt for KL(π_θ‖π_0)")
    g.add_argument("--embed-model", default=None, help="HF encoder for response drift (default: the base model)")
    g.add_argument("--embed-samples", type=int, default=1, help="response drift (A7) compares the first N of each "
                   "prompt's --eval-k responses (0 = all k: about 5x the time; the mean moved by up to 0.002 here, "
                   "docs/HISTORY.md)")


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each flag's default, once: none where the default is None (its help says what happens) or the
    help already names it; and each flag spelled once (--mini-batches, not also HfArgumentParser's --mini_batches)."""
    def _get_help_string(self, action):
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _format_action_invocation(self, action):
        one = copy.copy(action)
        one.option_strings = [o for o in action.option_strings if "_" not in o or o.replace("_", "-") not in
                              action.option_strings]
        return super()._format_action_invocation(one)


def add_scale(ap):
    """Where and how fast: none of these changes what is computed, except --dtype."""
    g = ap.add_argument_group("scale (devices, memory, torchrun)")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    g.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="bf16: bf16 compute over fp32 weights; bf16-weights: the weights in bf16 too (AdamW "
                        "loses small updates); auto: fp32 on CPU, bf16 on CUDA")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores of this process; use 1 "
                   "when other jobs share the cores). The numbers depend on it: config.json records it")
    g.add_argument("--micro-batch", type=int, default=0, help="sequences per forward (0 = all); same update")
    g.add_argument("--sample-batch", type=int, default=SAMPLE_BATCH, help="sequences per generate or scoring "
                   "call in rollouts, evaluation and drift (whole groups; their KV cache bounds the memory: python "
                   "tools/bench.py --memory)")
    g.add_argument("--sample-blocks", type=int, default=0,
                   help="sample each step's prompts in this many independently seeded blocks (0 = one per rank); "
                        "a one-process run with --sample-blocks N reproduces an N-rank torchrun run")
    g.add_argument("--grad-checkpointing", action="store_true", help="recompute activations in the backward (big models)")
    g.add_argument("--plain", action="store_true", help="turn every speed-up off (speedups.ON): plain generate "
                   "with its own cache, one packed forward per (prompt, response), no chunking; the same numbers up "
                   "to float summation order, slower")
    g.add_argument("--max-prompt-len", type=int, default=0, help="drop prompts longer than this many tokens (0 = keep all)")
    thinking = g.add_mutually_exclusive_group()   # (one or the other, never both)
    thinking.add_argument("--enable-thinking", dest="enable_thinking", action="store_const", const=True, default=None,
                          help="pass enable_thinking=True to the chat template (Qwen3 thinking models)")
    thinking.add_argument("--disable-thinking", dest="enable_thinking", action="store_const", const=False,
                          help="pass enable_thinking=False to the chat template")


def add_run(ap):
    g = ap.add_argument_group("run (where results go, resuming, CODING)")
    g.add_argument("--name", default=None, help="run directory name under runs/ (default from the flags)")
    g.add_argument("--runs-dir", default="runs")
    g.add_argument("--overwrite", action="store_true", help="replace a run directory of continual.py that holds "
                   "a different run (never a directory continual.py did not make)")
    g.add_argument("--overwrite-committed", action="store_true", help="write the run directory under the "
                   "repository's committed folders (results/, docs/, …): only to add to a committed reference")
    g.add_argument("--keep-optimizer", action="store_true", help="save each stage's final AdamW state in its "
                   "checkpoint (as --stage-optimizer carry does), for a later run to carry it over")
    g.add_argument("--unsafe-code", action="store_true", help="run CODING programs even where no OS jail (bubblewrap, "
                   "unshare) is available, with the sandbox's inner layers only (docs/RELIABILITY.md)")
    g.add_argument("--report-to", default="none", choices=trackers.CHOICES, help="also log every step, every stage's "
                   "accuracies, G and F, and the configuration to TensorBoard or trackio (infra/trackers.py; the "
                   "packages: requirements-trackers.txt)")


def parser(description, usage, knobs=(), show_all=True, methods=("grpo", "sdpo")):
    """continual.py's whole parser, the paper's knobs first. knobs: knob_rows of the files a run reads, each a flag
    in its group. show_all False: `--help` lists the paper's knobs only, `--help-all` every flag. methods: the
    names --method takes beside the presets (train.METHODS')."""
    ap = HfArgumentParser([], description=description, usage=usage, formatter_class=DefaultsShown,
                                 epilog=None if show_all else "--help-all lists every flag: the release's protocol, "
                                 "evaluation, drift, scale, where runs go, and what goes beyond the paper")
    paper = add_paper_knobs(ap, knobs, methods)
    add_protocol(ap, knobs)
    if any(k["group"] == "beyond" for k in knobs):
        add_knobs(ap.add_argument_group("beyond the paper (beyond/variants.py: teacher kinds T4–T6, defences R1–R3)"),
                  knobs, "beyond")
    add_evaluation(ap)
    add_drift(ap)
    add_scale(ap)
    add_run(ap)
    ap.add_argument("--config", default=None, help="a JSON or YAML file of settings, applied before the flags typed "
                    "with it (they win): a run's own config.json reruns it")
    ap.add_argument("--help-all", action="help", help="show every flag, not only the paper's knobs, and exit")
    if not show_all:   # --help: the paper's knobs; the rest stays in --help-all
        for action in ap._actions:
            if action not in paper._group_actions and action.dest not in ("help", "help_all", "threads", "config"):
                action.help = argparse.SUPPRESS
    return ap


# ----------------------------------------------------------------------------------------------
# The entry point: parse, check, fill in the model's defaults
# ----------------------------------------------------------------------------------------------
CONFIG_IGNORED = ("runs", "program", "config", "code")   # what a run's config.json records beyond its flags (derived from them)


class NoAliases(yaml.SafeLoader):
    """YAML without aliases (*name): a 532-byte file of nested aliases once expanded to 2 GB. A --config holds
    settings, which never need one."""
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("an alias (*name) is not allowed in a --config file")
        return super().compose_node(parent, index)


def config_settings(ap, path):
    """{setting: value} of a --config file: JSON (a run's own config.json) or YAML; one error line if it cannot be
    read or is not a mapping."""
    try:
        text = open(path).read()
        if path.endswith((".yaml", ".yml")):
            cfg = yaml.load(text, Loader=NoAliases)
        else:
            cfg = json.loads(text)
    except OSError as e:
        ap.error(f"--config {path}: {e.strerror or e}")
    except ValueError as e:
        ap.error(f"--config {path}: not a JSON file of settings (a run's config.json) nor YAML (.yaml, .yml): "
                 f"{str(e).splitlines()[0][:160]}")
    except Exception as e:   # a YAML syntax error
        ap.error(f"--config {path}: not valid YAML ({str(e).splitlines()[0][:200]})")
    if not isinstance(cfg, dict):
        ap.error(f"--config {path}: expected a mapping of settings, got {type(cfg).__name__}")
    return cfg


def with_config(ap, argv):
    """The command line with --config FILE's settings in front of the flags typed after it (so a typed flag wins):
    each setting becomes the flag that sets it (`lr: 1e-4` -> --lr 1e-4, a list -> a comma list, true -> the
    switch). A run's own config.json reruns it: `python continual.py --config runs/X/config.json`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(argv)
    if known.config is None:
        return argv
    tokens = []
    for key, value in config_settings(ap, known.config).items():
        if key in CONFIG_IGNORED or value is None:
            continue
        actions = [a for a in ap._actions if a.dest == key and a.option_strings]
        if not actions:
            ap.error(f"--config {known.config}: '{key}' is not a setting of this command")
        if all(a.nargs == 0 for a in actions):   # switches: the one whose constant is the value (or none)
            hit = [a for a in actions if a.const == value]
            tokens += hit[0].option_strings[:1] if hit else []
            continue
        flag = actions[0].option_strings[0]
        tokens += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return tokens + rest


def continual_args(argv, presets, knobs, warnings=None):
    """continual.py: (parser, checked args, stages, benchmarks, defaults). presets: the paper's named
    configurations (continual.PRESETS, each an SDPO one); knobs: {who reads them (each method by its name,
    "every method"): their knob_rows}; warnings(args, stages): lines naming flags that change nothing here.
    defaults: every flag's default for this model, for naming runs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rows = [k for who in knobs.values() for k in who]
    methods = [who for who in knobs if who != "every method"]
    ap = parser("Continual post-training: GRPO vs SDPO through stages (SPEC C1–C3).",
                "python continual.py [--method grpo,sdpo,...] [--alpha A[,A...]] [--stages S,...] [--seed S] ... "
                "(--help: the paper's knobs; --help-all: every flag)", rows, "--help-all" in argv, methods)
    defaults = vars(ap.parse_args([]))
    args = ap.parse_args(with_config(ap, argv))
    for flag, value in (("--method", args.method), ("--alpha", args.alpha), ("--stages", args.stages),
                        ("--benchmarks", args.benchmarks)):
        check_list_flag(ap, flag, value)
    args.method = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in args.method if m not in (*methods, *presets)]
    if bad or not args.method:
        ap.error(f"--method: unknown '{','.join(bad)}'; known: {', '.join([*methods, *presets])}")
    try:
        args.alpha = [float(a) for a in str(args.alpha).split(",") if a.strip()]
    except ValueError:
        ap.error(f"--alpha must be a number in [0, 1] or a comma list of them, got '{args.alpha}'")
    if not args.alpha:
        ap.error("--alpha must be a number in [0, 1] or a comma list of them")
    check_common(ap, args)
    check_knobs(ap, args, rows)
    check_grpo(ap, args, used="grpo" in args.method)
    check_sdpo(ap, args)
    check_drift(ap, args)
    stages, benchmarks = check_stages_and_benchmarks(ap, args)
    check_run_dir_flags(ap, args)
    # a flag left to the model's own default is not a change (model_defaults, default_topk)
    defaults.update(model_defaults(args.model), topk=default_topk(args.model))
    check_unused_flags(args, defaults, knobs, presets, typed_flags(ap, [a for a in argv if a != "--help-all"]))
    for line in warnings(args, stages) if warnings else []:
        print(f"warning: {line}", file=sys.stderr)
    set_switches(args)
    return ap, args, stages, benchmarks, defaults


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------
def check_common(ap, args):
    """One-line errors (exit code 2) for values outside their range, before any work starts or any file
    is written. Every float must be finite; sizes have a generous upper bound (a typo like 1e9 prompts
    per step would otherwise run for minutes into a MemoryError). Then the model's own defaults."""
    finite = lambda v: math.isfinite(v)   # noqa: E731
    checks = [("--steps", 1 <= args.steps <= MAX_STEPS, f"in [1, {MAX_STEPS}]"),
              ("--prompts-per-step", 1 <= args.prompts_per_step <= MAX_PROMPTS, f"in [1, {MAX_PROMPTS}]"),
              ("--group-size", 2 <= args.group_size <= 1024, "in [2, 1024] (advantages and teachers need siblings)"),
              ("--max-new-tokens", 1 <= args.max_new_tokens <= MAX_TOKENS, f"in [1, {MAX_TOKENS}]"),
              ("--lr", args.lr is None or (finite(args.lr) and 1e-12 <= args.lr <= 1),
               "in [1e-12, 1] (smaller is 0 or a denormal in fp32/bf16 weights' updates)"),
              ("--weight-decay", args.weight_decay is None or (finite(args.weight_decay) and 0 <= args.weight_decay <= 1),
               "in [0, 1]"),
              ("--warmup-steps", args.warmup_steps is None or 0 <= args.warmup_steps <= 10**6, "in [0, 10^6]"),
              ("--temperature", finite(args.temperature) and 1e-3 <= args.temperature <= 100, "in [0.001, 100]"),
              ("--top-p", 0 < args.top_p <= 1, "in (0, 1]"),
              ("--eval-n", 1 <= args.eval_n <= MAX_EVAL_N, f"in [1, {MAX_EVAL_N}]"),
              ("--eval-k", 1 <= args.eval_k <= 1024, "in [1, 1024]"),
              ("--micro-batch", args.micro_batch >= 0, ">= 0"),
              ("--sample-batch", args.sample_batch >= 1, ">= 1"),
              ("--max-grad-norm", finite(args.max_grad_norm) and args.max_grad_norm > 0, "finite and > 0"),
              ("--max-prompt-len", args.max_prompt_len >= 0, ">= 0"), ("--sample-blocks", args.sample_blocks >= 0, ">= 0"),
              ("--threads", 0 <= args.threads <= 1024, "in [0, 1024]"),
              ("--eval-seed", 0 <= args.eval_seed < 2**31, "in [0, 2^31)")]
    for flag, ok, allowed in checks:
        if not ok:
            ap.error(f"{flag} must be {allowed}")
    check_model_flag(ap, "--model", args.model)
    check_device_flag(ap, args.device)
    trackers.check_available(ap.error, args.report_to)
    world, blocks = sample_blocks_per_step(0), sample_blocks_per_step(args.sample_blocks)   # (torchrun's ranks)
    if blocks % world:
        ap.error(f"--sample-blocks {blocks} must be a multiple of the {world} ranks")
    if args.prompts_per_step % blocks:
        ap.error(f"--prompts-per-step {args.prompts_per_step} must be divisible by the {blocks} sample blocks "
                 f"(one per rank unless --sample-blocks says otherwise)")
    for key, value in model_defaults(args.model).items():   # flags left to the model's default
        if getattr(args, key) is None:
            setattr(args, key, value)


def check_grpo(ap, args, used=True):
    """What GRPO's knobs' own checks (check_knobs) cannot see alone: the mini-batches must cut each sample
    block evenly. used: GRPO is among the methods that will run (continual.py)."""
    per_block = args.prompts_per_step // sample_blocks_per_step(args.sample_blocks)
    if used and per_block % args.mini_batches:
        ap.error(f"--mini-batches {args.mini_batches}: the mini-batches are equal slices of each sample block "
                 f"(whole groups with --mini-batch-order contiguous), so the {per_block} prompts per sample block "
                 f"(--prompts-per-step / blocks) must be divisible by it")


def check_sdpo(ap, args):
    """(S4) --topk left to the model: the release's 100 for a real model, the full vocabulary for the tiny one; a
    --topk above a local model's vocabulary is one error line before any work (a hub model is checked when loaded)."""
    vocab = vocabulary_size(args.model)
    if args.topk and vocab and args.topk > vocab:
        ap.error(f"--topk {args.topk} is larger than {args.model}'s vocabulary ({vocab} ids); give at most {vocab}, "
                 f"or 0 for the full vocabulary")
    args.topk = default_topk(args.model) if args.topk is None else (args.topk or None)


def vocabulary_size(model):
    """The vocabulary of a built-in or local model, from its config.json; None for a hub id (not read here)."""
    path = MODEL_DIRS.get(model, model)
    try:
        return int(json.load(open(os.path.join(path, "config.json")))["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_drift(ap, args):
    if args.embed_model:
        check_model_flag(ap, "--embed-model", args.embed_model)
    if not 0 < args.rank_frac <= 1:
        ap.error(f"--rank-frac must be in (0, 1], got {args.rank_frac}")
    if not 0 < args.mask_q <= 1:
        ap.error(f"--mask-q must be in (0, 1], got {args.mask_q}")
    if args.kl_samples < 1:
        ap.error(f"--kl-samples must be >= 1, got {args.kl_samples}")
    if args.embed_samples < 0:
        ap.error(f"--embed-samples must be >= 0 (0 = all), got {args.embed_samples}")


def check_stages_and_benchmarks(ap, args):
    """continual.py's stages and benchmarks: known names, readable files, enough test prompts; every
    trained domain is evaluated too. Returns (stages, benchmarks)."""
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    for s in stages:
        try:
            tasks.check_task(s)
        except ValueError as e:
            ap.error(f"--stages: {e}")
    if not stages:
        ap.error("--stages: no stage given")
    twice = sorted({s for s in stages if stages.count(s) > 1})
    if twice:   # allowed (a domain trained again later is a real design), but rarely meant: said once
        print(f"warning: --stages names {', '.join(twice)} more than once: each occurrence is a stage of its own, "
              f"trained again on the same domain", file=sys.stderr)
    try:
        benchmarks = tasks.resolve_benchmarks(args.benchmarks)
    except ValueError as e:
        ap.error(f"--benchmarks: {e}")
    for path in [s for s in stages + benchmarks if s not in tasks.GENERATORS]:
        try:  # a data file is read once before any work: a bad line stops here, naming file:line
            tasks.task_records(path)
        except Exception as e:  # (a hub task that cannot be fetched says why, in one line)
            ap.error(tasks.one_line(e))
    for b in benchmarks + stages:   # enough test prompts for --eval-n (and the in-stage curve)?
        if b in tasks.GENERATORS:
            try:
                tasks.builtin_split(b, "test", max(args.eval_n, args.curve_n), args.eval_seed)
            except ValueError as e:
                ap.error(f"--eval-n / --curve-n: {e}")
    check_code_jail(ap, args, stages + benchmarks)
    for s in stages:  # every trained domain is evaluated too
        if s not in benchmarks:
            benchmarks.insert(len([b for b in benchmarks if b in stages]), s)
    for flag in ("curve_every", "curve_n", "curve_k"):
        if getattr(args, flag) < (0 if flag == "curve_every" else 1):
            ap.error(f"--{flag.replace('_', '-')} must be >= {0 if flag == 'curve_every' else 1}")
    return stages, benchmarks


def check_run_dir_flags(ap, args):
    check_dir_flag(ap, "--runs-dir", args.runs_dir)
    if args.name is not None and (not args.name.strip() or args.name in (".", "..") or os.sep in args.name
                                  or (os.altsep and os.altsep in args.name) or has_control(args.name)):
        ap.error(f"--name must be a plain directory name inside --runs-dir (no '/', no control character, not "
                 f"'.' or '..'), got {args.name!r}")


def typed_flags(ap, argv):
    """The settings the command line names, whatever their values (a --config file's are not typed here)."""
    saved = {a.dest: a.default for a in ap._actions}
    try:
        for a in ap._actions:
            a.default = argparse.SUPPRESS
        typed, _ = ap.parse_known_args(argv)
    finally:
        for a in ap._actions:
            a.default = saved[a.dest]
    return set(vars(typed)) - {"config"}


def check_unused_flags(args, defaults, knobs, presets=(), typed=()):
    """continual.py: a knob that only the method(s) not chosen read is named in a warning (it changes nothing),
    when it differs from its default or is typed. knobs: {"grpo": rows, "sdpo": rows, ..., "every method": rows};
    presets: the named configurations, each SDPO's. (α is not among them: it names every SDPO run, and its default
    is always there.)"""
    runs = {"sdpo" if m in presets else m for m in args.method}   # the methods that will run
    for who, rows in knobs.items():
        for name in [k["name"] for k in rows if k["name"] != "alpha"] if who not in runs | {"every method"} else []:
            if getattr(args, name) != defaults.get(name) or name in typed:
                print(f"warning: --{name.replace('_', '-')} is read only by {who.upper()}, which --method "
                      f"{','.join(args.method)} does not run: it changes nothing", file=sys.stderr)
    alpha_given = args.alpha != [float(a) for a in str(defaults.get("alpha", "0.05")).split(",")] or "alpha" in typed
    if alpha_given and "sdpo" not in runs:
        print(f"warning: --alpha is SDPO's teacher rate (T1), and --method {','.join(args.method)} runs no SDPO: it "
              f"changes nothing", file=sys.stderr)


def has_control(text):
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


def check_list_flag(ap, flag, value):
    """A comma list: every entry named (`a,,b`, a trailing comma and an empty value are refused)."""
    if isinstance(value, str) and any(not item.strip() for item in value.split(",")):
        ap.error(f"{flag}: an empty entry in '{value}' (give a comma list like a,b)")


def check_model_flag(ap, flag, name):
    """A model flag names 'tiny', 'tiny_think', a local model directory, or a hub model in the local cache
    (nothing is downloaded at run time, and nothing here touches the network): say which one is wrong,
    in one line, before any work."""
    if name in BUILT_IN_MODELS:
        return
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            ap.error(f"{flag}: '{name}' is not a model directory (no config.json)")
        return
    if not re.fullmatch(r"[\w-][\w.-]*(/[\w.-]+)?", name) or os.path.isdir(name.split("/")[0]):
        # not a hub id (org/name), or a path under a local folder (runs/nope): a missing directory
        ap.error(f"{flag}: no such model directory '{name}'")
    from huggingface_hub import try_to_load_from_cache   # a hub id: its config must be in the local cache
    if not isinstance(try_to_load_from_cache(name, "config.json"), str):
        ap.error(f"{flag}: '{name}' is neither a local model directory nor a hub model in the local cache; "
                 f"download it first (`hf download {name}`) or give its directory")


def check_dir_flag(ap, flag, path):
    """An output directory flag: not empty, no control character; it may not exist yet, but it (and every
    folder above it) must not be a file."""
    if not path.strip() or has_control(path):
        ap.error(f"{flag}: {path!r} is not a directory name (empty, or a control character in it)")
    p = os.path.abspath(path)
    while True:
        if os.path.exists(p):
            if not os.path.isdir(p):
                ap.error(f"{flag}: '{path}' cannot be a directory ('{p}' is a file)")
            if committed_path(p):   # committed work: no probe made there (the command's own refusal comes next)
                return
            try:   # the only sure test: make (and remove) a folder there (/proc says "writable" to root, yet refuses)
                os.rmdir(tempfile.mkdtemp(dir=p))
            except OSError:
                ap.error(f"{flag}: '{p}' is not writable")
            return
        p = os.path.dirname(p)


def check_device_flag(ap, device):
    """--device: auto, cpu, cuda or cuda:N, and CUDA only where it exists."""
    if device == "auto":
        return
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError):
        ap.error(f"--device: '{device}' is not a device (auto, cpu, cuda, cuda:N)")
    if d.type not in ("cpu", "cuda"):
        ap.error(f"--device: '{device}' is not supported (auto, cpu, cuda, cuda:N)")
    if d.type == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {device}: this machine has no CUDA device (use --device cpu or auto)")
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        ap.error(f"--device {device}: there are only {torch.cuda.device_count()} CUDA devices")


def check_code_jail(ap, args, names):
    """A task or benchmark among names whose records are code runs its programs in an OS jail
    (world/sandbox.py, layer 0): where this machine has none, one line and exit 2, unless --unsafe-code."""
    if any(tasks.has_code(name) for name in names):
        try:
            sandbox.check_jail(allow_unjailed=bool(getattr(args, "unsafe_code", False)))
        except sandbox.NoJail as e:
            ap.error(str(e))


def set_switches(args):
    """The command's two process-wide switches, set once every check has passed (no check sets one): the speed-ups
    (infra/speedups.ON; --plain turns them off) and running CODING programs without an OS jail (--unsafe-code)."""
    speedups.ON = not getattr(args, "plain", False)
    sandbox.ALLOW_UNJAILED = bool(getattr(args, "unsafe_code", False))


def seed_list(text):
    """--seed 0 or --seed 0,1,2: a list of distinct seeds in [0, 2^31) (argparse reports a bad one in one line)."""
    try:
        seeds = [int(x) for x in str(text).split(",")]   # (an empty item, as in 0,,1, is an error too)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 0 or 0,1,2, got '{text}'") from None
    if not seeds or len(set(seeds)) < len(seeds) or not all(0 <= x < 2**31 for x in seeds):
        raise argparse.ArgumentTypeError(f"expected distinct integers in [0, 2^31) like 0 or 0,1,2, got '{text}'")
    return seeds


def per_seed(args):
    """One copy of the parsed flags per training seed, each with `seed` a single integer."""
    return [argparse.Namespace(**{**vars(args), "seed": s}) for s in args.seed]


def one_configuration(knobs, argv=()):
    """The flags of one configuration (one seed, one α), unchecked, with every default: what a tool that calls
    train.update or train.run_steps itself starts from (tools/bench.py, tools/gpu_check.py, tests)."""
    args = per_seed(parser("", "", knobs).parse_args(list(argv)))[0]
    if hasattr(args, "alpha"):   # (the sweep's comma list: one α here)
        args.alpha = float(args.alpha)
    return args


def method_lr(args, method):
    """The learning rate of `method` ("grpo" or "sdpo"): --lr if given, else the method's own (LR)."""
    return LR[method] if args.lr is None else args.lr


def model_defaults(model):
    """The optimizer settings a model gets when its flags are not given: the release's AdamW weight decay
    0.01 on a real model, 0 on the built-in ones (docs/PROTOCOL.md says why). The warmup is the
    release's for each domain on every model (train.stage_warmup)."""
    if model in BUILT_IN_MODELS:
        return {"weight_decay": 0.0}
    return {"weight_decay": 0.01}


def default_topk(model):
    """(S4) --topk when not given: the release's 100 for a real model (a full-vocabulary GJSD over 150k ids
    at 8k tokens does not fit a GPU, docs/GPU.md); None (the full vocabulary) for the built-in tiny model."""
    return None if model in BUILT_IN_MODELS else RELEASE_TOPK
