"""continual.py — the paper's continual post-training experiment (§4, SPEC C1–C3, A2–A3) in one command.

    python continual.py --method sdpo --alpha 0.05            # the headline: SDPO_5% through four stages
    python continual.py --method grpo,sdpo --seed 0           # the paper's comparison, side by side
    python continual.py --method sdpo --alpha 0,0.01,0.05     # the teacher-EMA sweep
    python continual.py --method grpo,sdpo_0,sdpo_5,sdpo_cot_5,s_sdpo_0   # the paper's Table D.6 configurations

(C1) Stages d_1 … d_K are trained in order (default math → science → tooluse → coding); stage k
starts from stage k−1's weights, θ_k = train(method, θ_{k−1}, D_k), with a fresh AdamW each stage.
For SDPO the teacher restarts from each stage's starting student (T3; --teacher-init carry keeps it).
(C2) The base θ_0 and every θ_k are evaluated on every training domain's test split and every OOD
benchmark: an accuracy matrix acc[stage][benchmark] (Acc@k, C3).
(A2) Δ = Acc(θ, b) − Acc(θ_0, b), δ = Δ / Acc(θ_0, b); (A3) G = max(δ, 0), F = max(−δ, 0) (evaluate.py).

Every configuration (method × α) starts from the same base with the same seed and the same data
order. Results go to runs/<name>/: log.jsonl (one line per step), a Hugging Face checkpoint per
stage, results.json and its table (report.md and plots: tools/report.py). Rerunning the same command resumes where it stopped and ends
with the same results.json: the run object (experiment/rundir.py) keeps the directories, resumes them, and
saves a stage that a Ctrl-C or SIGTERM stops.

Read `main` first: it is the experiment, the stage loop C1–C2 in the paper's order. Each stage calls
train.run_steps, whose `update` calls the method's loss on every micro-batch (grpo.micro_batch_loss or
sdpo.micro_batch_loss), then backward, clip and step.
"""
import argparse
import dataclasses
import sys
from typing import Literal

import torch

import drift
import evaluate
import train
from experiment import configurations, rundir
from infra.knobs import knob
from rollout import drop_long_prompts, prompt_room
from world import tasks

# continual.py's own knob (infra/knobs.py; --help-all shows it): the stage boundary's optimizer. (SDPO's teacher at
# the boundary, T3, is SDPO's: sdpo.SDPOConfig's teacher_init and teacher_mix.)
@dataclasses.dataclass(frozen=True)
class StageRules:
    """The stage boundary's knobs (--help-all)."""
    stage_optimizer: Literal["fresh", "carry"] = knob("fresh", "AdamW at a stage start: fresh (the release) or "
                                                               "carried over")


def parse_args(argv=None):
    """The flags (infra/flags.py), checked before any work starts: (parser, args, stages, benchmarks, configs,
    defaults). configs: [(method, settings, run name)], every configuration of --method in order: plain sdpo once per
    α of --alpha, a configuration of the paper's by its name (sdpo_0, …, experiment/metrics.PAPER), grpo as its flags
    say (experiment/configurations.py)."""
    return configurations.parse_command(argv, sys.modules[__name__])


# ----------------------------------------------------------------------------------------------
# The experiment (C1–C2)
# ----------------------------------------------------------------------------------------------
def main(argv=None):
    """(C1–C2) Every seed of --seed in turn, each in its own run directory (resumable on its own): the base
    θ_0 evaluated once, then every configuration through every stage, in order, each stage evaluated on
    every benchmark. With several seeds, the summary over them: mean accuracies with intervals and the
    verdict on every claim. The run objects (experiment/rundir.py) keep the directories: they resume a stage
    where a stop left it and save it when stopped; they call nothing back."""
    ap, args, stages, benchmarks, configs, defaults = parse_args(argv)
    naming = configurations.naming_knobs()
    with rundir.Experiment(ap, args, stages, benchmarks, configs, defaults, naming) as experiment:   # a dir per seed
        for one in experiment.seed_args:           # one seed: every configuration through every stage
            with experiment.seed(one) as seed:     # its directory, θ_0 loaded
                if not seed.has_base_row():        # (C2) row 0 of the accuracy matrix: θ_0 on every benchmark
                    seed.save_base_row(*evaluate_model(seed.base_model, seed.tok, benchmarks, one, seed.run_dir, "base"))
                meter = drift.drift_meter(one, seed.base_model, seed.tok, benchmarks, seed.run_dir, experiment.device)
                for method, settings, name in configs:
                    # θ_0, or where it stopped; its method: configurations.METHODS (its third row: beyond/)
                    run = seed.run(configurations.method_of(method, settings, seed.base_model), settings, name)
                    cfg = configurations.config_of(method, settings, one)   # its knobs (grpo.GRPOConfig, …)
                    for k in run.stages_left():    # (C1) the stages in order, each from θ_{k−1}
                        theta_prev = drift.weights_before_stage(meter, run.model, run.done, one, run.resume)  # θ_{k−1}
                        stage_args, records, opt, frozen = new_stage(run.model, run.tok, stages[k], k, run.method, cfg,
                                                                     settings, one, run.carried_teacher(k), stages[:k])
                        curve = evaluate.in_stage_curve(run.model, run.tok, stages[k], stage_args)   # (C3) in-stage
                        with run.stage(k, stage_args, records, opt, frozen, curve) as stage:   # resumed; kept if stopped
                            # (C1) θ_k = train(method, θ_{k−1}, D_k): args.steps steps of the method
                            train.run_steps(run.model, run.tok, stage.records, stage_args, run.method, cfg, frozen, opt,
                                            desc=stage.desc, start_step=stage.start, on_step=stage.on_step)
                            # (C2) acc[k][b]: θ_k on every training domain's test set and every OOD benchmark
                            acc, deg, resp = evaluate_model(run.model, run.tok, benchmarks, one, seed.run_dir,
                                                            f"{name}-stage{k + 1}")
                            # (A4–A8) drift of θ_k vs θ_0 and vs θ_{k−1}, the forward KL on D_k
                            moved = drift.measure_drift(meter, run.model, seed.base_model, theta_prev, resp,
                                                        seed.run_dir, name, k, run.tok, one, stages[k])
                            change = evaluate.stage_change(acc, seed.progress["base"]["acc"], stages, k)   # (A3)
                            run.complete(stage, acc, deg, moved, change)   # its checkpoint; the stage recorded done
                # (A2–A3) results.json: the accuracy matrix and each stage's change against θ_0, and results.csv
                seed.write_results(evaluate.results_of(configs, stages, benchmarks, seed.progress, one))
    return experiment.finish()


def new_stage(model, tok, domain, k, method, cfg, settings, args, carried=None, earlier=()):
    """What stage k trains with: its settings and prompts D_k (a method beyond the paper may add prompts of the
    `earlier` stages' domains: beyond/variants.py), a fresh AdamW (the release's: every stage is a job of its own)
    and the method's frozen model: (T3) SDPO's teacher, restarted from θ_{k−1} (or the carried teacher mixed in:
    --teacher-init carry), or GRPO's reference (G4, --kl-coef only). Returns (the stage's settings, its prompts, the
    optimizer, the frozen model)."""
    # the run's settings (the method's knobs are cfg's) with the stage's: the method's rate (--lr, or the method's own:
    # experiment/configurations.py) and a prompt order of its own, the same across methods
    stage_args = argparse.Namespace(**{**vars(args), "lr": settings["lr"], "seed": args.seed * 1000 + k})
    room = prompt_room(model, stage_args.max_new_tokens)   # the prompt tokens the model's positions leave
    records = drop_long_prompts(tok, tasks.train_records(domain, seed=args.seed), args.max_prompt_len,
                                f"{domain} training prompts", room)
    if hasattr(method, "stage_prompts"):   # (beyond/variants.py's method; the paper's methods take D_k as it is)
        records = method.stage_prompts(records, tok, earlier, cfg, args, stage_args.seed, room)
    opt = torch.optim.AdamW(model.parameters(), lr=stage_args.lr, weight_decay=args.weight_decay)
    return stage_args, records, opt, method.frozen_model(model, cfg, carried)


def evaluate_model(model, tok, benchmarks, args, run_dir=None, tag=None):
    """(C2) One row of the accuracy matrix: the model (θ_0 or θ_k) on every benchmark, from the evaluation's own
    seed, with its degenerate shares and its responses (for the drift measures). Returns (acc, degenerate,
    responses). With run_dir, each test prompt's k scores are kept too, in <run_dir>/prompts/<tag>.jsonl."""
    deg, resp, per_prompt = {}, {}, {}
    torch.manual_seed(args.eval_seed)
    acc = evaluate.evaluate(model, tok, benchmarks, degenerate=deg, responses=resp, outcomes=per_prompt,
                            **eval_settings(args))
    if run_dir is not None:
        evaluate.save_prompt_records(run_dir, tag, per_prompt, args.eval_seed)
    return acc, deg, resp


def eval_settings(args):
    """The evaluation's settings (C2, C3): the same for the base and every stage."""
    return dict(n=args.eval_n, k=args.eval_k, max_new_tokens=args.max_new_tokens, seed=args.eval_seed,
                max_prompt_len=args.max_prompt_len, sample_batch=args.sample_batch)


if __name__ == "__main__":
    main()
