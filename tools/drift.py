"""tools/drift.py — recompute a finished continual.py run's drift (A4–A8) from its checkpoints and saved responses.

    python tools/drift.py runs/grpo+sdpo_a0.05-s0          # the drift table of every configuration, and drift.json
    python tools/drift.py RUN_DIR --embed-model BAAI/bge-small-en-v1.5   # response drift in another embedding space

The measures are drift.py's (`stage_drift`, which continual.py calls after every stage); this command reads the
run directory, measures each stage's checkpoint again, prints the tables and writes RUN_DIR/drift.json.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import evaluate  # noqa: E402
from drift import load_embedder, matrices, stage_drift  # noqa: E402
from experiment.report import drift_table  # noqa: E402
from infra import errors, flags  # noqa: E402
from infra.checkpoints import load_responses, with_stage_checkpoints, write_atomically  # noqa: E402
from infra.distributed import setup_torch  # noqa: E402
from infra.flags import check_device_flag, check_model_flag  # noqa: E402
from infra.models import load_model  # noqa: E402
from infra.speedups import SAMPLE_BATCH  # noqa: E402
from rollout import prompt_room  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(usage="python tools/drift.py RUN_DIR [--embed-model M] ... (--help lists all)",
                                 formatter_class=flags.DefaultsShown,
                                 description="Recompute parameter/response drift, KL to base and collapse "
                                             "for a finished continual.py run (SPEC A4–A8).")
    ap.add_argument("run_dir", help="a runs/<name>/ directory written by continual.py")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--sample-batch", type=int, default=SAMPLE_BATCH, help="sequences per forward or generate call")
    knobs = [k for k in flags.run_rows() if k["group"] == "drift" and k["name"] != "no_drift"]   # (flags.Drift)
    flags.add_knobs(ap.add_argument_group("drift (A4–A8)"), knobs, "drift")
    args = ap.parse_args(argv)
    flags.check_knobs(ap, args, knobs)
    if args.embed_model:
        check_model_flag(ap, "--embed-model", args.embed_model)
    check_device_flag(ap, args.device)
    if args.sample_batch < 1:
        ap.error(f"--sample-batch must be >= 1, got {args.sample_batch}")
    cfg_path, prog_path = os.path.join(args.run_dir, "config.json"), os.path.join(args.run_dir, "progress.json")
    if not os.path.isfile(cfg_path) or not os.path.isfile(prog_path):
        ap.error(f"{args.run_dir} is not a continual.py run directory (no config.json / progress.json)")
    try:
        config, progress = json.load(open(cfg_path)), json.load(open(prog_path))
        missing = [k for k in ("model", "benchmarks", "eval_n", "max_new_tokens", "seed") if k not in config]
        assert not missing and isinstance(progress, dict) and "base" in progress, f"missing {missing or 'base'}"
        progress = with_stage_checkpoints(progress, args.run_dir)
    except (ValueError, TypeError, KeyError, AssertionError) as e:
        ap.error(f"{args.run_dir}: config.json or progress.json is damaged ({errors.one_line(e) or 'incomplete'}); "
                 f"rerun the continual.py command that made it to rebuild them")
    device = setup_torch(args.device)
    args.max_new_tokens = config["max_new_tokens"]
    args.eval_k = config.get("eval_k", 8)
    args.eval_seed = config.get("eval_seed", config["seed"])   # (runs before --eval-seed scored with --seed)
    base, tok = load_model(config["model"], device, config.get("dtype"))
    embedder, etok = load_embedder(args.embed_model, base, tok, device)
    benchmarks = config["benchmarks"]
    room = prompt_room(base, args.max_new_tokens)
    kl_records = {b: evaluate.benchmark_records(b, config["eval_n"], args.eval_seed, tok, config.get("max_prompt_len", 0),
                                                room=room) for b in benchmarks}
    base_resp = load_responses(args.run_dir, "base")
    out, embed_cache, base_cache = {}, {}, {}
    for run_name, run in progress.items():
        if run_name == "base":
            continue
        rows, prev_state, prev_resp = [], None, None
        for k, st in enumerate(run["stages"]):
            model, _ = load_model(st["checkpoint"], device, config.get("dtype"))
            resp = load_responses(args.run_dir, f"{run_name}-stage{k + 1}")
            rows.append(stage_drift(model, base, prev_state, resp, base_resp, prev_resp, embedder, etok, tok,
                                    kl_records, args, embed_cache, domain=config["stages"][k], base_cache=base_cache))
            prev_state, prev_resp = matrices(model), resp
            print(f"{run_name} stage {k + 1}: NSS {rows[-1]['params_vs_base']['all']['nss_mean']:.4f}, "
                  f"KL to base {rows[-1]['kl_to_base_mean']:.2f}", file=sys.stderr)
        out[run_name] = rows
        print(f"\n## {run_name}: drift after each stage\n\n" + drift_table(rows, config["stages"]))
    path = os.path.join(args.run_dir, "drift.json")
    write_atomically(path, lambda f: json.dump(out, f, indent=1))
    print(f"\nwrote {path}")
    return out


if __name__ == "__main__":
    main()
