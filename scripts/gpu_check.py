"""The GPU check: the sharded bf16 path (FSDP2, fp32 master weights) against the CPU fp32 path, on the
same batch. `bash scripts/gpu_check.sh` runs it on a GPU machine in a few minutes; the test suite runs
it on CPU (2 gloo ranks) so that it is known to work before a GPU is ever lent.

    python scripts/gpu_check.py reference OUT --ranks N [--model M]   one CPU process, fp32: OUT/reference.json
    torchrun --nproc_per_node N scripts/gpu_check.py check OUT [--model M] [--device cuda] [--dtype bf16]

`reference` samples one batch per method (a fixed seed, on the CPU) and saves it with the loss and the
gradient norm of one update of each method (GRPO: the release's 4 steps per batch; SDPO: one step, the
EMA teacher). `check` loads the same batch, runs the same update on every rank's share of it (the
ranks' sums are the whole batch's), prints the step time and each rank's peak memory, and exits 1 when
the loss or the gradient norm is off by more than --tol (relative; the loss also LOSS_ATOL absolute,
GRPO's being ≈ 0) from the reference.
"""
import argparse
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import grpo      # noqa: E402
import infra     # noqa: E402
import rollout   # noqa: E402
import sdpo      # noqa: E402
import tasks     # noqa: E402

PROMPTS, GROUP, NEW_TOKENS = 4, 4, 32
LOSS_ATOL = 1e-3


def method_args(method, extra=()):
    """The method's default settings (what grpo.py / sdpo.py would run), with a small lr."""
    ap = argparse.ArgumentParser()
    rollout.add_common_args(ap)
    (grpo.add_grpo_args if method == "grpo" else sdpo.add_sdpo_args)(ap)
    return ap.parse_args(["--lr", "1e-5", "--mini-batches", "2", *extra] if method == "grpo" else ["--lr", "1e-5", *extra])


def update(model, tok, batch, method, blocks=0):
    """One update of the method on `batch`: its stats (loss, grad_norm, ...). blocks: in one process, the
    number of ranks to take the same steps as (GRPO's mini-batches take whole groups from every rank)."""
    args = method_args(method, ["--sample-blocks", str(blocks)])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    torch.manual_seed(7)
    if method == "grpo":
        return grpo.grpo_update(model, opt, batch, args, None, tok.pad_token_id)
    teacher = sdpo.init_teacher(model)
    stats = sdpo.sdpo_update(model, teacher, opt, batch, args, tok, 1)
    sdpo.ema_update(teacher, model, args.alpha)
    return stats


def reference(out, model_name, ranks):
    infra.setup_torch("cpu")
    result = {}
    for method in ("grpo", "sdpo"):
        model, tok = rollout.load_model(model_name, "cpu", "fp32")
        records = tasks.builtin_split("math", "train", PROMPTS, seed=3)
        torch.manual_seed(11 if method == "grpo" else 12)
        batch = rollout.collect(model, tok, records, GROUP, NEW_TOKENS)
        stats = update(model, tok, batch, method, blocks=ranks)
        result[method] = {"batch": {k: batch[k] for k in ("prompt_ids", "response_ids", "texts", "records")},
                          "rewards": batch["rewards"].tolist(),
                          **{k: stats[k] for k in ("loss", "grad_norm")}}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(result, f)
    print("reference: " + ", ".join(f"{m} loss {r['loss']:.6f} grad norm {r['grad_norm']:.6f}" for m, r in result.items()))


def check(out, model_name, device_arg, dtype, tol):
    device = infra.init_distributed(device_arg)
    rank, world = infra.rank_and_world()
    ref = json.load(open(os.path.join(out, "reference.json")))
    bad = []
    for method in ("grpo", "sdpo"):
        model, tok = rollout.load_model(model_name, device, dtype)
        model = infra.shard(model, device)
        saved = ref[method]["batch"]
        n = len(saved["response_ids"])
        mine = infra.my_share(n // GROUP, rank, world)          # whole groups: this rank's prompts
        idx = [g * GROUP + j for g in mine for j in range(GROUP)]
        batch = {k: [saved[k][i] for i in idx] for k in saved}
        batch["rewards"] = torch.tensor([ref[method]["rewards"][i] for i in idx])
        batch["group_size"] = GROUP
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        stats = update(model, tok, batch, method)
        if device.type == "cuda":
            torch.cuda.synchronize()
        took = time.time() - t0
        peak = torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else float("nan")
        peaks = infra.gather_lists([peak])
        for key in ("loss", "grad_norm"):   # (both are over all ranks; entropy and such are per rank)
            want, got = ref[method][key], stats[key]
            # GRPO's loss is ≈ 0 by construction (advantages sum to 0 in a group): it gets an absolute
            # allowance of LOSS_ATOL besides the relative one
            ok = abs(got - want) <= tol * abs(want) + (LOSS_ATOL if key == "loss" else 0.0)
            if not ok:
                bad.append(f"{method} {key}: {got:.6f} vs CPU {want:.6f}")
            print(f"{method} {key}: {got:.6f} (CPU fp32 {want:.6f}) {'ok' if ok else 'MISMATCH'}")
        print(f"{method}: update {took:.2f} s on {world} rank(s), {dtype}, FSDP2; peak memory per rank (GB): "
              + ", ".join(f"{p:.2f}" for p in peaks))
    if infra.is_main():
        with open(os.path.join(out, f"check-{world}.json"), "w") as f:
            json.dump({"world": world, "dtype": dtype, "mismatches": bad}, f)
    if bad:
        print("GPU check FAILED: " + "; ".join(bad), file=sys.stderr)
        sys.exit(1)
    print("GPU check passed")


def main(argv=None):
    ap = argparse.ArgumentParser(description="The sharded bf16 path against the CPU fp32 path, on one batch.")
    ap.add_argument("mode", choices=["reference", "check"])
    ap.add_argument("out")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="bf16", choices=list(rollout.DTYPES))
    ap.add_argument("--tol", type=float, default=0.05, help="largest relative difference from the CPU reference")
    ap.add_argument("--ranks", type=int, default=1, help="reference: the number of ranks the check will run on")
    args = ap.parse_args(argv)
    if args.mode == "reference":
        reference(args.out, args.model, args.ranks)
    else:
        check(args.out, args.model, args.device, args.dtype, args.tol)


if __name__ == "__main__":
    main()
