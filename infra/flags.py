"""infra/flags.py — the command-line flags of continual.py, and every check on them, in one place.

    python continual.py --help      # the paper's knobs; --help-all: every group

A knob is a dataclass field (infra/knobs.py) made a flag by transformers.HfArgumentParser: the methods' in their
files (grpo.GRPOConfig, sdpo.SDPOConfig, beyond/variants.BeyondConfig, continual.StageRules), the run's own here, one
dataclass per --help group (Experiment, Rules, Evaluation, Drift, Scale, Output). Every check runs before any work starts, says what is wrong in
one `error:` line and exits with code 2 (argparse's convention). No check touches the network: a hub model must be in
the local Hugging Face cache (or be a local directory). A flag a model gives its own default to (weight decay,
warmup, top-k) is filled in here (`model_defaults`, `default_topk`).
"""
import argparse
import copy
import dataclasses
import itertools
import json
import math
import os
import re
import sys
import tempfile
from typing import Literal, Optional

import torch
import yaml   # (pyyaml: a dependency of datasets) a YAML --config

from transformers import HfArgumentParser

from world import sandbox
from world import tasks
from infra.distributed import sample_blocks_per_step
from infra.safety import committed_path
from infra.models import BUILT_IN_MODELS, DTYPES, MODEL_DIRS
from infra import errors, speedups, trackers
from infra.knobs import knob, must
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
# Knobs as rows: each field of a knob dataclass with its --help group (a file's …Config dataclass is its group, its
# …Rules the release's rules, --help-all)
# ----------------------------------------------------------------------------------------------
def rows_of(table, group):
    """A knob dataclass's fields as rows [{name, default, help, group, table, field}] (table: the dataclass that
    checks them); a field marked a rule (infra/knobs.knob) goes to "protocol", --help-all's."""
    return [{"name": f.name, "default": f.default, "help": f.metadata["help"], "table": table, "field": f,
             "group": "protocol" if f.metadata.get("rule") else group} for f in dataclasses.fields(table)]


def knob_rows(module, group="paper"):
    """The knobs of a file (grpo, sdpo, continual, beyond.variants), in its order: each dataclass named …Config
    (grpo.GRPOConfig, sdpo.SDPOConfig, variants.BeyondConfig) in `group`, its fields marked rules and each dataclass
    named …Rules (continual.StageRules) in "protocol". A …Config that extends another (BeyondConfig, SDPO's) gives
    its own fields only."""
    return [row for name, t in vars(module).items() if isinstance(t, type) and name.endswith(("Config", "Rules"))
            for row in rows_of(t, group if name.endswith("Config") else "protocol")
            if row["name"] in vars(t).get("__annotations__", ())]   # (the fields it declares itself)


# ----------------------------------------------------------------------------------------------
# The flags, group by group
# ----------------------------------------------------------------------------------------------
def add_knobs(g, knobs, group):
    """One --help group's knobs as flags, made by HfArgumentParser from their fields; a sweep's takes a comma list."""
    for k in knobs:
        if k["group"] == group:   # (the field without its marks, which HfArgumentParser would hand argparse)
            field = copy.copy(k["field"])
            field.metadata = {key: v for key, v in field.metadata.items() if key not in ("rule", "sweep")}
            if k["field"].metadata.get("sweep"):   # (the comma list as typed; continual_args reads its values)
                field.type, field.default = str, str(field.default)
            HfArgumentParser._parse_dataclass_field(g, field)


def check_knobs(ap, args, knobs):
    """Each knob dataclass built from the parsed values, so its __post_init__ checks them (once per value of a
    sweep: swept(), each α)."""
    for table in {id(k["table"]): k["table"] for k in knobs}.values():   # (each dataclass once)
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(table) if hasattr(args, f.name)}
        try:
            for one in swept(table, args):
                table(**{**values, **one})
        except ValueError as e:   # (a knob's must(); a TypeError would be a bug, and shows as one)
            ap.error(str(e))


def swept(table, args):
    """Each combination of the values of a knob dataclass's sweeps (its fields marked sweep=True, a comma list on the
    command line, parsed by continual_args): [{name: value}], one configuration each; [{}] for a dataclass with none."""
    names = [f.name for f in dataclasses.fields(table) if f.metadata.get("sweep") and hasattr(args, f.name)]
    lists = [v if isinstance(v, list) else [v] for v in (getattr(args, n) for n in names)]
    return [dict(zip(names, values)) for values in itertools.product(*lists)]


# The run's own knobs: one dataclass per --help group (the methods' are in their files), each field its flag, default
# and help, each check one `must` line in __post_init__, as for the methods' knobs. --seed (a comma list) and
# --enable-thinking/--disable-thinking (a pair) are made by hand in `parser`.
@dataclasses.dataclass(frozen=True)
class Experiment:
    """The paper's knobs that are the run's, not a method's."""
    method: str = knob("sdpo", "comma list of methods (grpo, sdpo with --alpha and the SDPO flags), or "
                               "the paper's named configurations (sdpo_0, sdpo_5, sdpo_cot_0, sdpo_cot_5, s_sdpo_0, "
                               "stable_sdpo)")
    stages: str = knob(DEFAULT_STAGES, "training domains in order (C1): built-in ones (" + ", ".join(tasks.GENERATORS)
                       + "), or JSON(-lines) record files (tools/prepare_data.py writes the paper's datasets "
                       "as such); one for a single-domain run")
    steps: int = knob(40, "optimizer steps per stage")
    prompts_per_step: int = knob(8, "prompts per step")
    group_size: int = knob(8, "responses sampled per prompt (G)", aliases=["--num-generations"])
    model: str = knob("tiny", "'tiny' (built in), 'tiny_think', a local HF directory, or a hub id in the local cache")
    lr: Optional[float] = knob(None, "AdamW learning rate; when not given, each method's own: "
                               + ", ".join(f"{m.upper()} {lr:.0e}".replace("e-0", "e-") for m, lr in LR.items()))

    def __post_init__(self):
        must(1 <= self.steps <= MAX_STEPS, f"--steps must be in [1, {MAX_STEPS}]")
        must(1 <= self.prompts_per_step <= MAX_PROMPTS, f"--prompts-per-step must be in [1, {MAX_PROMPTS}]")
        must(2 <= self.group_size <= 1024, "--group-size must be in [2, 1024] (advantages and teachers need siblings)")
        must(self.lr is None or (math.isfinite(self.lr) and 1e-12 <= self.lr <= 1),
             "--lr must be in [1e-12, 1] (smaller is 0 or a denormal in fp32/bf16 weights' updates)")


@dataclasses.dataclass(frozen=True)
class Rules:
    """The release's rules that are the run's (docs/PROTOCOL.md): each default is what the paper's code ran."""
    loss_agg: Literal["seq-mean-token-mean", "token-mean"] = knob(
        "seq-mean-token-mean", "(G5, S5) seq-mean-token-mean: the mean over responses of each response's token-mean, "
        "what the release computes (one response per micro-batch); token-mean: over all tokens")
    mini_batch_order: Literal["balanced", "contiguous"] = knob(
        "balanced", "the batch's order: 'balanced', the release's length-balanced order (GRPO's mini-batches are "
        "bands of similar length; SDPO's demonstration is the first success in it), or 'contiguous', whole groups in "
        "sampling order")
    max_grad_norm: float = knob(1.0, "gradient clipping")
    weight_decay: Optional[float] = knob(None, "AdamW's weight decay; default 0.01 (the release's) for a real model, 0 "
                                               "for the built-in tiny one (docs/PROTOCOL.md)")
    warmup_steps: Optional[int] = knob(None, "linear learning-rate warmup from 0 over this many batches (the first "
                                             "batch moves nothing); default: the release's for the domain, 10 for "
                                             "SCIENCE and TOOLUSE, 0 for MATH and CODING (world/tasks.RELEASE_RULES)")
    max_new_tokens: int = knob(64, "the longest response, in tokens")
    temperature: float = knob(1.0, "rollout sampling temperature")
    top_p: float = knob(1.0, "rollout nucleus sampling")

    def __post_init__(self):
        must(math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0, "--max-grad-norm must be finite and > 0")
        must(self.weight_decay is None or (math.isfinite(self.weight_decay) and 0 <= self.weight_decay <= 1),
             "--weight-decay must be in [0, 1]")
        must(self.warmup_steps is None or 0 <= self.warmup_steps <= 10**6, "--warmup-steps must be in [0, 10^6]")
        must(1 <= self.max_new_tokens <= MAX_TOKENS, f"--max-new-tokens must be in [1, {MAX_TOKENS}]")
        must(math.isfinite(self.temperature) and 1e-3 <= self.temperature <= 100, "--temperature must be in [0.001, 100]")
        must(0 < self.top_p <= 1, "--top-p must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Which benchmarks, how many prompts and samples (C2, C3), the in-stage curve."""
    benchmarks: str = knob("all", "the benchmarks (continual.py: after every stage): all | train | ood | list")
    eval_n: int = knob(32, "test prompts per benchmark")
    eval_k: int = knob(8, "samples per prompt (Acc@k, C3)")
    eval_seed: int = knob(0, "picks the test prompts and seeds the evaluation sampling, whatever the training seed: "
                             "every seed and method is scored on the same prompts")
    curve_every: int = knob(20, "in-stage eval of the current domain every N steps (0 = off)")
    curve_n: int = knob(16, "prompts of the in-stage curve")
    curve_k: int = knob(4, "samples per prompt of the in-stage curve")

    def __post_init__(self):
        must(1 <= self.eval_n <= MAX_EVAL_N, f"--eval-n must be in [1, {MAX_EVAL_N}]")
        must(1 <= self.eval_k <= 1024, "--eval-k must be in [1, 1024]")
        must(0 <= self.eval_seed < 2**31, "--eval-seed must be in [0, 2^31)")
        must(self.curve_every >= 0, "--curve-every must be >= 0")
        must(1 <= self.curve_n <= MAX_EVAL_N, f"--curve-n must be in [1, {MAX_EVAL_N}]")
        must(1 <= self.curve_k <= 1024, "--curve-k must be in [1, 1024]")   # (round six: a typo asked for 77 GB)


@dataclasses.dataclass(frozen=True)
class Drift:
    """The drift measurements (A4–A8); drift.py's own command takes these too."""
    no_drift: bool = knob(False, "skip the drift measurements after each stage")
    rank_frac: float = knob(RANK_FRAC, "r = ceil(rank_frac · min(m, n)) (A5, A6)")
    mask_q: float = knob(MASK_Q, "principal mask: top-q fraction of entries (A6)")
    kl_samples: int = knob(2, "samples per prompt for KL(π_θ‖π_0)")
    embed_model: Optional[str] = knob(None, "HF encoder for response drift (default: the base model)")
    embed_samples: int = knob(1, "response drift (A7) compares the first N of each prompt's --eval-k responses (0 = "
                                 "all k: about 5x the time; the mean moved by up to 0.002 here, docs/HISTORY.md)")

    def __post_init__(self):
        must(0 < self.rank_frac <= 1, f"--rank-frac must be in (0, 1], got {self.rank_frac}")
        must(0 < self.mask_q <= 1, f"--mask-q must be in (0, 1], got {self.mask_q}")
        must(1 <= self.kl_samples <= 1024, f"--kl-samples must be in [1, 1024], got {self.kl_samples}")
        must(self.embed_samples >= 0, f"--embed-samples must be >= 0 (0 = all), got {self.embed_samples}")


@dataclasses.dataclass(frozen=True)
class Scale:
    """Where and how fast: none of these changes what is computed, except --dtype."""
    device: str = knob("auto", "auto | cpu | cuda | cuda:N")
    dtype: Literal[("auto", *DTYPES)] = knob("auto", "bf16: bf16 compute over fp32 weights; bf16-weights: the weights "
                                                     "in bf16 too (AdamW loses small updates); auto: fp32 on CPU, bf16 "
                                                     "on CUDA")
    threads: int = knob(0, "torch CPU threads (0 = all cores of this process; use 1 when other jobs share the cores). "
                           "The numbers depend on it: config.json records it")
    micro_batch: int = knob(0, "sequences per forward (0 = all); same update")
    sample_batch: int = knob(SAMPLE_BATCH, "sequences per generate or scoring call in rollouts, evaluation and drift "
                                           "(whole groups; their KV cache bounds the memory: python tools/bench.py "
                                           "--memory)")
    sample_blocks: int = knob(0, "sample each step's prompts in this many independently seeded blocks (0 = one per "
                                 "rank); a one-process run with --sample-blocks N reproduces an N-rank torchrun run")
    grad_checkpointing: bool = knob(False, "recompute activations in the backward (big models)")
    plain: bool = knob(False, "turn every speed-up off (speedups.ON): plain generate with its own cache, one packed "
                              "forward per (prompt, response), no chunking; the same numbers up to float summation "
                              "order, slower")
    max_prompt_len: int = knob(0, "drop prompts longer than this many tokens (0 = keep all)")

    def __post_init__(self):
        must(self.micro_batch >= 0, "--micro-batch must be >= 0")
        must(self.sample_batch >= 1, "--sample-batch must be >= 1")
        must(self.sample_blocks >= 0, "--sample-blocks must be >= 0")
        must(0 <= self.threads <= 1024, "--threads must be in [0, 1024]")
        must(self.max_prompt_len >= 0, "--max-prompt-len must be >= 0")


@dataclasses.dataclass(frozen=True)
class Output:
    """Where results go, resuming, and running CODING programs."""
    name: Optional[str] = knob(None, "run directory name under runs/ (default from the flags)")
    runs_dir: str = knob("runs", "where run directories go")
    overwrite: bool = knob(False, "replace a run directory of continual.py that holds a different run (never a "
                                  "directory continual.py did not make)")
    overwrite_committed: bool = knob(False, "write the run directory under the repository's committed folders "
                                            "(results/, docs/, …): only to add to a committed reference")
    keep_optimizer: bool = knob(False, "save each stage's final AdamW state in its checkpoint (as --stage-optimizer "
                                       "carry does), for a later run to carry it over")
    unsafe_code: bool = knob(False, "run CODING programs even where no OS jail (bubblewrap, unshare) is available, "
                                    "with the sandbox's inner layers only (docs/RELIABILITY.md)")
    report_to: Literal[trackers.CHOICES] = knob("none", "also log every step, every stage's accuracies, G and F, and "
                                                        "the configuration to TensorBoard or trackio "
                                                        "(infra/trackers.py; the packages: requirements-trackers.txt)")

    def __post_init__(self):
        must(self.name is None or (bool(self.name.strip()) and self.name not in (".", "..") and os.sep not in self.name
                                   and not (os.altsep and os.altsep in self.name) and not has_control(self.name)),
             f"--name must be a plain directory name inside --runs-dir (no '/', no control character, not '.' or "
             f"'..'), got {self.name!r}")


# The run's knobs by --help group, in --help's order (the methods' knobs join the first two)
RUN_KNOBS = {"paper": Experiment, "protocol": Rules, "evaluation": Evaluation, "drift": Drift, "scale": Scale,
             "run": Output}
GROUPS = {"paper": "the paper's knobs", "protocol": "protocol (the release's rules)",
          "beyond": "beyond the paper (beyond/variants.py: teacher kinds T4–T6, defences R1–R3)",
          "evaluation": "evaluation (C2, C3)", "drift": "drift (A4–A8)", "scale": "scale (devices, memory, torchrun)",
          "run": "run (where results go, resuming, CODING)"}


def run_rows():
    """The run's own knobs as rows, each in its --help group."""
    return [row for group, table in RUN_KNOBS.items() for row in rows_of(table, group)]


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each flag's default once (none where it is None or the help names it), each flag spelled once,
    and a switch without a value."""
    def _get_help_string(self, action):
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _format_action_invocation(self, action):
        one = copy.copy(action)
        one.option_strings = [o for o in action.option_strings if "_" not in o or o.replace("_", "-") not in
                              action.option_strings]
        if one.nargs == "?" and one.const is True:   # a switch (a bool knob): --plain, as argparse shows its own
            one.nargs = 0
        return super()._format_action_invocation(one)


# The flags continual.py makes by hand beside the knobs (a knob of one of these names could not be a flag)
HAND_MADE = ("seed", "seeds", "enable_thinking", "disable_thinking", "config", "help", "help_all")


def one_row_per_name(ap, knobs):
    """Each knob name once. Two dataclasses may declare the same knob (a student's method its own `beta`): alike
    (the same type and default), it is one flag that sets both; declared differently, or under the name of a flag
    made by hand, one command line cannot tell them apart, and the command stops in one line (exit 2)."""
    rows, where = {}, lambda k: f"{k['table'].__module__}.{k['table'].__name__} (default {k['default']!r})"
    for k in knobs:
        first = rows.setdefault(k["name"], k)
        if k["name"] in HAND_MADE or (first["field"].type, first["default"]) != (k["field"].type, k["default"]):
            ap.error(f"--{k['name'].replace('_', '-')} is " + ("a flag continual.py makes itself" if first is k else
                     f"a knob of {where(first)}") + f" and a knob of {where(k)}: one command line cannot tell them "
                     f"apart; rename one of them")
    return list(rows.values())


def parser(description, usage, knobs=(), show_all=True):
    """continual.py's parser, the paper's knobs first; show_all False: `--help` lists those only, `--help-all` every
    flag."""
    ap = HfArgumentParser([], description=description, usage=usage, formatter_class=DefaultsShown,
                          epilog=None if show_all else "--help-all lists every flag: the release's protocol, "
                          "evaluation, drift, scale, where runs go, and what goes beyond the paper")
    run, groups = run_rows(), {}
    knobs = [k for k in one_row_per_name(ap, [*run, *knobs]) if k not in run]   # (a knob of the run's name: the run's)
    for group, title in GROUPS.items():
        if group != "beyond" or any(k["group"] == "beyond" for k in knobs):
            groups[group] = ap.add_argument_group(title)
    first = [r for r in run if r["name"] in ("method", "stages")]   # the paper's: the method and its rates first
    add_knobs(groups["paper"], first + list(knobs), "paper")
    add_knobs(groups["paper"], [r for r in run if r not in first], "paper")
    groups["paper"].add_argument("--seed", "--seeds", dest="seed", type=seed_list, default=[0], metavar="S[,S...]",
                                 help="training seed(s): a comma list runs everything once per seed (each resumable "
                                      "on its own)")
    for group in list(groups)[1:]:   # the methods' protocol and beyond, then the run's own
        add_knobs(groups[group], [*knobs, *run], group)
    thinking = groups["scale"].add_mutually_exclusive_group()   # (one or the other, never both)
    thinking.add_argument("--enable-thinking", dest="enable_thinking", action="store_const", const=True, default=None,
                          help="pass enable_thinking=True to the chat template (Qwen3 thinking models)")
    thinking.add_argument("--disable-thinking", dest="enable_thinking", action="store_const", const=False,
                          help="pass enable_thinking=False to the chat template")
    ap.add_argument("--config", default=None, help="a JSON or YAML file of settings, applied before the flags typed "
                    "with it (they win): a run's own config.json reruns it")
    ap.add_argument("--help-all", action="help", help="show every flag, not only the paper's knobs, and exit")
    if not show_all:   # --help: the paper's knobs; the rest stays in --help-all
        for action in ap._actions:
            if action not in groups["paper"]._group_actions and action.dest not in ("help", "help_all", "threads",
                                                                                    "config"):
                action.help = argparse.SUPPRESS
    return ap


# ----------------------------------------------------------------------------------------------
# The entry point: parse, check, fill in the model's defaults
# ----------------------------------------------------------------------------------------------
# What a run's config.json records beyond its flags (derived from them), and where it was written: a --config never
# sends a run into the directory another machine recorded (round six), so runs_dir and name come from the command
CONFIG_IGNORED = ("runs", "program", "config", "code", "runs_dir", "name", "invocations")


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
    if os.path.exists(path) and not os.path.isfile(path):   # (a FIFO would wait forever, a folder mislead)
        ap.error(f"--config {path}: not a regular file")
    try:
        text = open(path).read(1 << 20)   # (a settings file; a typo naming a huge file stops reading here)
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
    """--config FILE: its settings become the parser's defaults (as TRL's parser does), so a flag typed with it
    wins; each goes in as its flag's text, so argparse checks its type. Returns the command line without --config."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(argv)
    path = known.config
    for key, value in (config_settings(ap, path) if path else {}).items():
        actions = [a for a in ap._actions if a.dest == key and a.option_strings]
        if key in CONFIG_IGNORED or value is None:
            continue
        if not actions or (actions[0].nargs == 0 and value not in [a.const for a in actions]):
            ap.error(f"--config {path}: '{key}' is not a setting of this command" if not actions else
                     f"--config {path}: '{key}' takes {' or '.join(str(a.const) for a in actions)}, got {value!r}")
        ap.set_defaults(**{key: value if actions[0].nargs == 0 else
                           ",".join(map(str, value)) if isinstance(value, list) else str(value)})
    return rest


def continual_args(argv, presets, knobs, warnings=None):
    """continual.py: (parser, checked args, stages, benchmarks, defaults). presets: the named configurations;
    knobs: {who reads them: knob_rows}; warnings(args, stages): lines naming flags that change nothing here."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rows = [k for who in knobs.values() for k in who]
    methods = [who for who in knobs if who != "every method"]
    ap = parser("Continual post-training: GRPO vs SDPO through stages (SPEC C1–C3).",
                "python continual.py [--method grpo,sdpo,...] [--alpha A[,A...]] [--stages S,...] [--seed S] ... "
                "(--help: the paper's knobs; --help-all: every flag)", rows, "--help-all" in argv)
    defaults = vars(ap.parse_args([]))
    args = ap.parse_args(with_config(ap, argv))
    for flag, value in (("--method", args.method), ("--stages", args.stages), ("--benchmarks", args.benchmarks)):
        check_list_flag(ap, flag, value)
    args.method = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in args.method if m not in (*methods, *presets)]
    if bad or not args.method:
        ap.error(f"--method: unknown '{','.join(bad)}'; known: {', '.join([*methods, *presets])}")
    for row in {r["name"]: r for r in rows if r["field"].metadata.get("sweep")}.values():   # a sweep (SDPO's α)
        flag, text = "--" + row["name"].replace("_", "-"), getattr(args, row["name"])
        check_list_flag(ap, flag, text)
        try:   # (each value of the field's type: one configuration each, experiment/configurations.py)
            setattr(args, row["name"], [row["field"].type(v) for v in text.split(",")])
        except ValueError:
            ap.error(f"{flag} takes a {row['field'].type.__name__} or a comma list of them, got '{text}'")
        defaults[row["name"]] = [row["default"]]
    check_knobs(ap, args, [*run_rows(), *rows])   # every knob's own check (__post_init__), the run's first
    check_common(ap, args)
    check_grpo(ap, args, used="grpo" in args.method)
    check_sdpo(ap, args)
    stages, benchmarks = check_stages_and_benchmarks(ap, args)
    check_dir_flag(ap, "--runs-dir", args.runs_dir)   # (--name's form is Output's __post_init__)
    # a flag left to the model's own default is not a change (model_defaults, default_topk)
    defaults.update(model_defaults(args.model), topk=default_topk(args.model))
    check_unused_flags(args, defaults, knobs, presets, typed_flags(ap, [a for a in argv if a != "--help-all"]))
    for line in [*run_warnings(args), *(warnings(args, stages) if warnings else [])]:
        print(f"warning: {line}", file=sys.stderr)
    set_switches(args)
    return ap, args, stages, benchmarks, defaults


def run_warnings(args):
    """The run's own flags that change nothing in this command (round four): one line each."""
    out = []
    if getattr(args, "teacher_mix", 1.0) != 1.0 and getattr(args, "teacher_init", "restart") != "carry":
        out.append("--teacher-mix mixes the carried teacher (T3), and --teacher-init is not carry: it changes nothing")
    if args.warmup_steps is not None and args.warmup_steps >= args.steps:
        out.append(f"--warmup-steps {args.warmup_steps} lasts past the stage's {args.steps} steps: the learning rate "
                   f"never reaches its full value")
    return out


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------
def check_common(ap, args):
    """What the knobs' own checks cannot see, before any work: the models, the device, the tracker, the sample
    blocks against the ranks; then the model's own defaults."""
    check_model_flag(ap, "--model", args.model)
    if args.embed_model:
        check_model_flag(ap, "--embed-model", args.embed_model)
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
            ap.error(errors.one_line(e))
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
    return stages, benchmarks


def typed_flags(ap, argv):
    """The settings the command line names, whatever their values (a --config file's are not typed here)."""
    saved, saved_config = {a.dest: a.default for a in ap._actions}, ap._defaults   # (--config's settings live in both)
    try:
        for a in ap._actions:
            a.default = argparse.SUPPRESS
        ap._defaults = {}
        typed, _ = ap.parse_known_args(argv)
    finally:
        for a in ap._actions:
            a.default = saved[a.dest]
        ap._defaults = saved_config
    return set(vars(typed)) - {"config"}


def check_unused_flags(args, defaults, knobs, presets=(), typed=()):
    """A knob that only methods not chosen read, set away from its default or typed, is named in a warning.
    knobs: {method name or "every method": rows}; presets: the named configurations (SDPO's)."""
    runs = {"sdpo" if m in presets else m for m in args.method}   # the methods that will run
    for who, rows in knobs.items():
        for name in [k["name"] for k in rows] if who not in runs | {"every method"} else []:
            if getattr(args, name) != defaults.get(name) or name in typed:
                print(f"warning: --{name.replace('_', '-')} is read only by {who.upper()}, which --method "
                      f"{','.join(args.method)} does not run: it changes nothing", file=sys.stderr)


def has_control(text):
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


def check_list_flag(ap, flag, value):
    """A comma list: every entry named (`a,,b`, a trailing comma and an empty value are refused)."""
    if isinstance(value, str) and any(not item.strip() for item in value.split(",")):
        ap.error(f"{flag}: an empty entry in '{value}' (give a comma list like a,b)")


def check_model_flag(ap, flag, name):
    """A model flag names 'tiny', 'tiny_think', a local directory, or a hub model in the local cache (nothing
    is downloaded): one line saying which is wrong, before any work."""
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
    """The two process-wide switches, set once every check has passed: the speed-ups (--plain) and --unsafe-code."""
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


def method_lr(args, method):
    """The learning rate of `method` ("grpo" or "sdpo"): --lr if given, else the method's own (LR)."""
    return LR[method] if args.lr is None else args.lr


def model_defaults(model):
    """The optimizer settings a model gets when its flags are not given: the release's AdamW weight decay
    0.01 on a real model, 0 on the built-in ones (docs/PROTOCOL.md says why). The warmup is the
    release's for each domain on every model (train.stage_warmup)."""
    return {"weight_decay": 0.0 if model in BUILT_IN_MODELS else 0.01}


def default_topk(model):
    """(S4) --topk when not given: the release's 100 for a real model (a full-vocabulary GJSD over 150k ids
    at 8k tokens does not fit a GPU, docs/GPU.md); None (the full vocabulary) for the built-in tiny model."""
    return None if model in BUILT_IN_MODELS else RELEASE_TOPK
