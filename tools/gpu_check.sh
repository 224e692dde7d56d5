#!/usr/bin/env bash
# The GPU check, ready for the first GPU machine: at most a few minutes on one GPU.
#
#   bash tools/gpu_check.sh              # every visible GPU; MODEL=... to choose the model
#   DEVICE=cpu NGPU=2 bash tools/gpu_check.sh   # the same script on 2 CPU ranks (the test suite does this)
#
# 1. A reference on the CPU (one process, fp32): one sampled batch per method, and the loss and
#    gradient norm of one GRPO update (2 steps per batch) and one SDPO update (with its EMA teacher).
# 2. The same batch and updates under torchrun on the GPUs, bf16 compute over fp32 master weights,
#    FSDP2: exits non-zero when a loss or gradient norm differs from the CPU's (tools/gpu_check.py).
# 3. Memory at a long response length (MEM_TOKENS, default 4096) with a real vocabulary: a randomly
#    initialised Llama of Qwen3-0.6B's shape (MEM_SHAPE; 'cpu' for the small one the suite uses) runs
#    evaluation (--sample-batch MEM_S, default 8), a GRPO update, an SDPO update at top-k 100 and drift;
#    each stage's peak per rank next to bench.memory_per_stage, non-zero exit when one is off by > 25%;
#    and a zeroed clone (the teacher) must compute with its own weights.
# 4. A few real steps (STEPS, default 3; 0 skips them) of GRPO and SDPO (one-stage continual.py runs) on the GPUs at bf16: step
#    time and peak memory per step.
# The model of 1, 2 and 4: Qwen/Qwen3-0.6B when it is in the local Hugging Face cache, else the tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
DEVICE=${DEVICE:-cuda}
NGPU=${NGPU:-$(python -c "import torch; print(torch.cuda.device_count())")}
if [ "$NGPU" -lt 1 ]; then echo "gpu_check: no GPU visible" >&2; exit 2; fi
MODEL=${MODEL:-$(python -c "from huggingface_hub import try_to_load_from_cache as c; print('Qwen/Qwen3-0.6B' if isinstance(c('Qwen/Qwen3-0.6B', 'config.json'), str) else 'tiny')")}
RUN="python -m torch.distributed.run --standalone --nproc_per_node $NGPU"
# a torchrun launch that fails is tried once more (its rendezvous port can race with the launch before);
# a real failure fails twice
twice() { "$@" || { echo "gpu_check: that launch failed; trying it once more"; "$@"; }; }
echo "gpu_check: $NGPU rank(s) on $DEVICE, model $MODEL, output in $OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
rm -rf "$OUT"; mkdir -p "$OUT"

echo "== 1. CPU reference (fp32, one process)"
timeout 300 python tools/gpu_check.py reference "$OUT" --ranks "$NGPU" --model "$MODEL"

echo "== 2. the same batch on the GPUs: bf16 compute, fp32 master weights, FSDP2"
twice timeout 300 $RUN tools/gpu_check.py check "$OUT" --model "$MODEL" --device "$DEVICE" --dtype bf16

echo "== 3. memory per stage at a long response length, against the formula (bench.memory_per_stage)"
twice env MALLOC_MMAP_THRESHOLD_=131072 timeout 480 $RUN tools/gpu_check.py memory "$OUT" --device "$DEVICE" \
  --shape "${MEM_SHAPE:-qwen3-0.6b}" --tokens "${MEM_TOKENS:-4096}" --sample-batch "${MEM_S:-8}"

echo "== 4. a few real steps of each method"
[ "${STEPS:-3}" -gt 0 ] || { echo "gpu_check: passed (STEPS=0: no real steps)"; exit 0; }
for script in grpo sdpo; do
  extra=""; [ "$script" = grpo ] && extra="--mini-batches 2"
  timeout 300 $RUN continual.py --method "$script" --model "$MODEL" --device "$DEVICE" --dtype bf16 --stages math \
    --benchmarks math --no-drift --curve-every 0 --steps "${STEPS:-3}" --prompts-per-step $((4 * NGPU)) --group-size 4 \
    --max-new-tokens 64 --eval-n 8 --eval-k 2 $extra --runs-dir "$OUT" --name "$script" > "$OUT/$script.log" 2>&1 \
    || { tail -30 "$OUT/$script.log"; exit 1; }
  python - "$OUT/$script/log.jsonl" "$script" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
for r in rows:
    print(f"{sys.argv[2]} step {r['step']}: rollout {r['rollout_s']:.2f} s, update {r['update_s']:.2f} s, "
          f"peak {r.get('peak_gpu_gb', float('nan')):.2f} GB (rank 0), loss {r['loss']:.5f}, reward {r['reward']:.2f}")
PY
done
echo "gpu_check: passed"
