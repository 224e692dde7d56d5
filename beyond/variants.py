"""beyond/variants.py — SDPO with what other implementations add and the paper does not: the teacher's
kind (T4 live, T5 θ_0, T6 trust region) and the forgetting defences (R1 replay, R2 L2 anchor, R3 KL to θ_0), and
skipping an optimizer step that has nothing to distil.

    python continual.py --method sdpo_5 --teacher base        # SDPO_5% taught by θ_0 (T5)
    python continual.py --method sdpo_5 --anchor 0.026        # + (λ/2)‖θ − θ_0‖² on every step (R2)
    python continual.py --method sdpo --stages math --teacher live   # one domain, taught by the live student (T4)
    python continual.py --method sdpo_0 --distill failed      # SDPO_0 distilling its failed responses only (V1)

A method with sdpo.py's functions (frozen_model, prepare_batch, micro_batch_loss, step_stats, after_step), built
from sdpo.py's own, the third row of experiment/configurations.METHODS: a run takes it when one of the knobs below
is set (and says so in one line), sdpo.py otherwise, so the paper's files never read them. `method(base)` is this
file's method for a sequence whose θ_0 is `base`; its frozen model is a pair {"teacher": the teacher of its kind,
"base": θ_0 where R2 or R3 reads it}.
"""
import dataclasses
import functools
import random
import sys
import types
from typing import Literal

import torch

if __name__ == "__main__":   # (a method, not a command: continual.py runs it)
    print("error: a one-domain run with these knobs is a one-stage continual run: python continual.py --method sdpo "
          "--stages TASK --teacher live (--task X is --stages X, --out runs/NAME is --name NAME)", file=sys.stderr)
    sys.exit(2)

import sdpo  # noqa: E402
from grpo import k3_kl  # noqa: E402
from infra.knobs import knob, must  # noqa: E402
from infra.distributed import clone_model, global_sum  # noqa: E402
from rollout import drop_long_prompts, micro_batches, response_logits, token_logprobs  # noqa: E402
from world import tasks  # noqa: E402

# The knobs, one field each as in sdpo.py (infra/knobs.py; --help-all shows them under "beyond the paper"), over
# SDPO's own: this method is handed one BeyondConfig, SDPO's knobs and these, and hands it on to sdpo.py's functions.
# SETTINGS go into every SDPO run's settings, after sdpo.py's.
@dataclasses.dataclass(frozen=True)
class BeyondConfig(sdpo.SDPOConfig):
    """What other implementations add (--help-all, "beyond the paper"), beside SDPO's knobs."""
    teacher: Literal["ema", "live", "base", "trust_region"] = knob("ema", "the teacher's kind: T1/T2's (the paper), "
                                                                          "T4, T5, T6")
    trust_rate: float = knob(0.05, "T6's λ in z_T = (1 − λ) z_ref + λ z_θ (the official SDPO's update rate)")
    replay: float = knob(0.0, "R1: this share of every stage's prompts from the earlier domains; 0 = off")
    anchor: float = knob(0.0, "R2: (λ/2)‖θ − θ_0‖² added to every optimizer step's loss; 0 = off")
    base_kl: float = knob(0.0, "R3: β·k3(π_0, π_θ) added to SDPO's per-token loss; 0 = off")
    skip_empty_steps: bool = knob(False, "no optimizer step when nothing is distilled (the release steps anyway)")
    distill: Literal["all", "failed"] = knob("all", "V1: the responses SDPO distils: every one with a teacher signal "
                                                    "(the paper), or the failed ones only (reward < 1)")

    def __post_init__(self):   # the values allowed, checked before any work (infra/knobs.must: one error line)
        super().__post_init__()   # SDPO's knobs' checks
        must(0 <= self.trust_rate <= 1, "--trust-rate must be in [0, 1]")
        must(0 <= self.replay < 1, "--replay must be in [0, 1)")
        must(0 <= self.anchor <= 1e6, "--anchor must be in [0, 1e6]")
        must(0 <= self.base_kl <= 1e6, "--base-kl must be in [0, 1e6]")


SETTINGS = ("skip_empty_steps", "teacher", "replay", "anchor", "base_kl")
BEYOND = tuple(vars(BeyondConfig)["__annotations__"])   # its own knobs, not SDPO's it extends


def wanted(settings):
    """Does an SDPO configuration need this file (a knob of it away from its default)?"""
    return any(settings.get(k, v) != v for k, v in vars(BeyondConfig()).items() if k in BEYOND and k != "trust_rate")


def settings_of(args):
    """This file's part of a run's settings: SETTINGS, T6's λ where the trust-region teacher reads it, and V1's
    choice where it is not the paper's (so every other run's settings, and results.json, stay as they were)."""
    out = {k: getattr(args, k) for k in SETTINGS}
    out = {**out, "trust_rate": args.trust_rate} if args.teacher == "trust_region" else out
    return {**out, "distill": args.distill} if args.distill != "all" else out


# ----------------------------------------------------------------------------------------------
# The teacher's kind (T4–T6)
# ----------------------------------------------------------------------------------------------
def frozen_model(model, cfg, carried=None, base=None):
    """The teacher at the start of a task or stage, by its kind, and θ_0 for the defences that read it:
    ema: sdpo.py's (T1–T3); live: none, the student itself (T4); base: a copy of θ_0, never moved (T5);
    trust_region: a copy of the stage's starting model, the reference, never moved (T6)."""
    start = model if base is None else base
    teacher = {"ema": lambda: sdpo.frozen_model(model, cfg, carried), "live": lambda: None,
               # (T5) θ_T = θ_0 of the whole sequence
               "base": lambda: sdpo.stage_teacher(start),
               # (T6) the reference: the stage's starting model
               "trust_region": lambda: sdpo.stage_teacher(model)}[cfg.teacher]()
    defended = cfg.anchor or cfg.base_kl     # (R2, R3) read θ_0
    return {"teacher": teacher, "base": (base if base is not None else frozen_copy(model)) if defended else None}


def frozen_copy(model):
    return clone_model(model).eval().requires_grad_(False)


def frozen_state(frozen):
    """The frozen model a stop saves beside the student: the teacher of its kind. (θ_0, where R2 or R3 reads it, is not
    saved: it is the sequence's base model, which a resumed run loads again.)"""
    return frozen["teacher"]


@torch.no_grad()
def live_logits(model, teacher, teacher_prompt_ids, response_ids, pad_id, as_float=True):
    """(T4) θ_T = θ: the current student is its own teacher (TRL's teacher_model_kind="live"), read without a
    gradient, on the teacher's prompt. [b, T, V]"""
    # (T4) the student's logits, the teacher's prompt
    return sdpo.teacher_logits(model, teacher_prompt_ids, response_ids, pad_id, as_float)


@torch.no_grad()
def trust_region_logits(model, rate, teacher, teacher_prompt_ids, response_ids, pad_id, as_float=True):
    """(T6) z_T = (1 − λ)·z_ref + λ·z_θ: the logits of the stage's starting model (`teacher`, never moved) and of
    the current student mixed with λ = --trust-rate, as the official SDPO's TrustRegionTeacher
    (`verl/workers/actor/dp_actor.py:51–65`: torch.lerp(ref, student, teacher_update_rate)). [b, T, V]"""
    ref = sdpo.teacher_logits(teacher, teacher_prompt_ids, response_ids, pad_id, as_float)
    # (T6) z_T = (1 − λ) z_ref + λ z_θ
    return torch.lerp(ref, sdpo.teacher_logits(model, teacher_prompt_ids, response_ids, pad_id, as_float), rate)


def teacher_logits_of(model, cfg):
    """The teacher's logits by its kind, for sdpo.distill_distributions."""
    if cfg.teacher == "live":
        return lambda teacher, *ids, **kw: live_logits(model, teacher, *ids, **kw)
    if cfg.teacher == "trust_region":
        return lambda teacher, *ids, **kw: trust_region_logits(model, cfg.trust_rate, teacher, *ids, **kw)
    return sdpo.teacher_logits


def after_step(frozen, model, step, cfg):
    """sdpo.py's schedule (T1, T2) for the EMA kind; the others never move their weights (T4–T6)."""
    return sdpo.after_step(frozen["teacher"], model, step, cfg) if cfg.teacher == "ema" else False


# ----------------------------------------------------------------------------------------------
# The update: sdpo.py's, with R2, R3 and skipped steps
# ----------------------------------------------------------------------------------------------
def prepare_batch(model, frozen, batch, cfg, args, tok, step):
    """sdpo.prepare_batch, then: with --skip-empty-steps no optimizer step at all when no process has a token to
    distil; with --anchor (R2) one more micro-batch after the others, the anchor's: its loss once per step."""
    plan = sdpo.prepare_batch(model, frozen["teacher"], batch, cfg, args, tok, step)
    if cfg.distill == "failed":   # (V1)
        plan = failed_only(plan, batch, args.micro_batch)
    if cfg.skip_empty_steps and global_sum(plan.steps[0]["n_tok"]) == 0:
        plan.steps = []               # nothing to distil anywhere: no step, no momentum move
    elif cfg.anchor:
        plan.steps[0]["micro_batches"] = plan.steps[0]["micro_batches"] + [[]]   # [] = the anchor's
    return plan


def failed_only(plan, batch, micro_batch=0):
    """(V1) m_i ← m_i · 1[r_i < 1]: of the responses sdpo.prepare_batch distils, keep the failed ones. A response
    that already succeeded is then never pulled toward its teacher: under Appendix B's Razor policy the base keeps
    its conditional distribution within successful responses, so SDPO's pull on them is the teacher's projection
    alone (the mediation experiment's arm: docs/studies/mediation.md). The step's counts are the kept responses' (S5 divides by them)."""
    step = plan.steps[0]
    kept = [i for idx in step["micro_batches"] for i in idx if float(batch["rewards"][i]) < 1.0]   # (V1)
    lengths = [len(batch["response_ids"][i]) for i in kept]
    n_tok = sum(int(plan.token_keep[i].sum()) for i in kept)
    micro = [[kept[j] for j in idx] for idx in micro_batches(lengths, micro_batch)]
    return dataclasses.replace(plan, steps=[{**step, "micro_batches": micro, "n_tok": n_tok}],
                               counts={**plan.counts, "distilled_tokens": n_tok})


def micro_batch_loss(model, frozen, batch, plan, part, idx, cfg, args, tok):
    """sdpo.micro_batch_loss's equations with the teacher of its kind, plus (R3) the KL to θ_0 per distilled
    token; the empty micro-batch is (R2)'s anchor."""
    if not idx:   # (R2) the anchor's micro-batch
        return l2_anchor(model, frozen["base"], cfg.anchor), {"js_sum": 0.0, "entropy_sum": 0.0,
                                                                "teacher_entropy_sum": 0.0}
    s_dist, t_dist, mask, entropies = sdpo.distill_distributions(model, frozen["teacher"], batch, plan, idx, cfg, tok,
                                                                 teacher_logits_of(model, cfg))    # (S2, S4, S7)
    per_token = sdpo.generalized_jsd(s_dist, t_dist.detach(), cfg.beta)                    # [b, T] (S3)
    stats = sdpo.loss_stats(per_token, entropies, mask)
    if cfg.base_kl:    # (R3) + β·k3(π_0, π_θ) on the sampled tokens
        prompts, responses = [batch["prompt_ids"][i] for i in idx], [batch["response_ids"][i] for i in idx]
        per_token = per_token + cfg.base_kl * base_kl_per_token(model, frozen["base"], prompts, responses, tok)
    loss = sdpo.sdpo_loss(per_token, mask, num_tokens=part["n_tok"], mode=args.loss_agg, num_seqs=part["n_seq"])
    return loss, stats


def step_stats(plan, results):
    """sdpo.step_stats; a skipped step logs as an empty one (every count 0, skipped = 1)."""
    if not plan.steps:
        plan = dataclasses.replace(plan, steps=[{"micro_batches": [], "n_tok": 0, "n_seq": 0}])
        results = [(0.0, [], 0.0)]
    return sdpo.step_stats(plan, results)


def l2_anchor(model, base, lam):
    """(R2) L2 anchoring to θ_0: (λ/2) Σ_p ‖θ_p − θ_0,p‖², whose gradient is λ(θ − θ_0) (the forgetting
    defence of a nanochat fork's --preserve-knowledge). base: θ_0, never moved."""
    # (R2) (λ/2) ‖θ − θ_0‖²
    return 0.5 * lam * sum(((p - p0.detach()) ** 2).sum() for p, p0 in zip(model.parameters(), base.parameters()))


def base_kl_per_token(model, base, prompts, responses, tok):
    """(R3) G4's k3 = π_0/π_θ − log(π_0/π_θ) − 1 at every sampled response token [b, T]: the KL to θ_0
    (the whole sequence's base), a penalty on SDPO's loss (as GRPO's --kl-coef on its own). Gradient flows
    through π_θ only."""
    logits, _, targets = response_logits(model, prompts, responses, tok.pad_token_id)     # [b, T, V], [b, T]
    logp = token_logprobs(logits, targets)                                                 # [b, T] log π_θ
    with torch.no_grad():
        base_logp = token_logprobs(response_logits(base, prompts, responses, tok.pad_token_id)[0], targets)
    # (R3) k3 of G4 with π_ref = π_0
    return k3_kl(logp, base_logp)                                                          # [b, T]


# ----------------------------------------------------------------------------------------------
# (R1) Replay: a share of a stage's prompts from the earlier domains
# ----------------------------------------------------------------------------------------------
def replay_mix(records, earlier, share, n_prompts, seed):
    """(R1) Replay: the stage's prompt list with exactly round(share · n_prompts) of its first n_prompts (the
    stage's whole budget, steps × prompts per step, one epoch of train.prompt_order) drawn from the earlier
    domains (in turn, each shuffled by `seed`), the rest from the stage's own domain. Each record keeps its
    own kind, so it is graded by its own domain's grader; the stage's own records come first (its warmup).
    records: the stage's own; earlier: [records of each earlier domain]."""
    rng = random.Random(seed)
    # (R1) round(r · n) replayed prompts, n − round(r · n) of the stage's own
    n_old = round(share * n_prompts)
    pools = [rng.sample(pool, len(pool)) for pool in earlier]
    old = []
    for i in range(n_old):                     # the earlier domains in turn
        pool = pools[i % len(pools)]
        old.append(pool[(i // len(pools)) % len(pool)])
    return records[:n_prompts - n_old] + old


def stage_prompts(records, tok, earlier_domains, cfg, args, stage_seed, room=0):
    """(R1) This method's prompts for a stage: D_k as continual.new_stage built it, with --replay's share from the
    earlier stages' domains (`replayed`). args: the run's; stage_seed: the stage's."""
    return replayed(records, tok, earlier_domains, cfg.replay, args, stage_seed, room)


def replayed(records, tok, earlier_domains, share, args, stage_seed, room=0):
    """A stage's prompts with `share` (--replay) of them from the earlier stages' domains (R1); as they are with
    share 0 or no earlier stage. args: the run's (its seed picks every domain's training prompts); room: the
    prompt tokens the model's positions leave (rollout.prompt_room)."""
    if not share or not earlier_domains:
        return records
    old = [drop_long_prompts(tok, tasks.train_records(d, seed=args.seed), args.max_prompt_len, f"{d} prompts", room)
           for d in earlier_domains]
    return replay_mix(records, old, share, args.steps * args.prompts_per_step, stage_seed)


# ----------------------------------------------------------------------------------------------
# The method, its name and its warnings
# ----------------------------------------------------------------------------------------------
def method(base=None):
    """This file's method for a sequence whose θ_0 is `base` (None: the starting model of the task)."""
    return types.SimpleNamespace(frozen_model=functools.partial(frozen_model, base=base), frozen_state=frozen_state,
                                 prepare_batch=prepare_batch, micro_batch_loss=micro_batch_loss,
                                 step_stats=step_stats, after_step=after_step, stage_prompts=stage_prompts)


def run_name(s):
    """sdpo.run_name, then what this file adds: sdpo_a0.05_live, sdpo_a0.05_base_replay0.2, sdpo_a0.05_tr (T6 at
    λ = 0.05; _tr0.1 at another), sdpo_a0.05_anchor0.026, sdpo_a0.05_nofb_skip0. s: a dict (or namespace)."""
    s = s if isinstance(s, dict) else vars(s)
    name = sdpo.run_name(s) + ("_skip0" if s.get("skip_empty_steps") else "")
    name += {"live": "_live", "base": "_base", "trust_region": "_tr"}.get(s.get("teacher", "ema"), "")
    if s.get("teacher") == "trust_region" and s.get("trust_rate", BeyondConfig.trust_rate) != BeyondConfig.trust_rate:
        name += f"{s['trust_rate']:g}"
    name += f"_replay{s['replay']:g}" if s.get("replay") else ""
    name += f"_anchor{s['anchor']:g}" if s.get("anchor") else ""
    name += f"_basekl{s['base_kl']:g}" if s.get("base_kl") else ""
    name += "_failedonly" if s.get("distill", "all") == "failed" else ""
    return name


def warnings_of(args, stages):
    """Flags of this file that change nothing in this command: one line each."""
    out = []
    if getattr(args, "replay", 0) and len(stages) < 2:
        out.append("--replay draws from the earlier stages' domains, and one stage has none: it changes nothing")
    if args.teacher in ("live", "base", "trust_region") and any(a != sdpo.SDPOConfig.alpha for a in args.alpha):
        out.append(f"--alpha is the EMA teacher's rate (T1); --teacher {args.teacher} never moves by it: it changes "
                   f"only the run's name" + (" (T6's λ is --trust-rate)" if args.teacher == "trust_region" else ""))
    if args.teacher in ("live", "base", "trust_region") and getattr(args, "refresh_every", 0):
        out.append(f"--refresh-every is StableSDPO's schedule for the EMA teacher (T2); --teacher {args.teacher} is "
                   f"never refreshed: it changes nothing")
    if args.trust_rate != BeyondConfig.trust_rate and args.teacher != "trust_region":
        out.append("--trust-rate is the trust-region teacher's λ (T6), and --teacher is not trust_region: it changes "
                   "nothing")
    return out
