#!/usr/bin/env bash
# gpu-check.sh: on a GPU node, check that evoq finds the GPUs and pins one
# slot to each: every evaluation must see exactly one GPU, all of them used.
# Then, if python3 can import torch, run the PyTorch example on the GPUs.
#   usage: deploy/gpu-check.sh [path/to/evoq]
set -uo pipefail
evoq=${1:-evoq}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== GPUs"
nvidia-smi -L || { echo "nvidia-smi not found: no NVIDIA GPU here"; exit 1; }
n=$(nvidia-smi -L | grep -c '^GPU ')

echo "== pinning: $n GPUs, one slot each"
printf 'params:\n  x: {type: float, min: 0, max: 1}\n' > "$work/space.yaml"
"$evoq" run --dir "$work/store" --listen 127.0.0.1:0 --gpus auto --config "$work/space.yaml" \
  --budget $((n * 8)) --init "$n" --pool 1 --json --log-level warn \
  --eval-cmd 'sleep 0.2; echo "{\"fitness\": 0.5, \"metrics\": {\"cuda\": \"$CUDA_VISIBLE_DEVICES\", \"slot\": $EVOQ_SLOT}}"' \
  > "$work/pin.out" || { echo "pinning run failed"; exit 1; }
tail -1 "$work/pin.out"
echo "== slot -> GPU as the evaluations saw it"
"$evoq" run --dir "$work/store2" --listen 127.0.0.1:0 --gpus auto --slots-per-gpu 2 --config "$work/space.yaml" \
  --budget $((n * 8)) --init "$n" --pool 1 --log-level debug \
  --eval-cmd 'sleep 0.2; echo "{\"fitness\": 0.5}"' 2>&1 | grep -E "GPU slots|slots_used" | cut -c1-200

py=""
for c in /usr/bin/python3 "$(command -v python3 || true)"; do
  if [ -n "$c" ] && "$c" -c 'import torch, sklearn' 2>/dev/null; then py=$c; break; fi
done
if [ -n "$py" ]; then
  echo "== PyTorch example on the GPUs ($("$py" -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count())'))"
  here=$(cd "$(dirname "$0")/.." && pwd)
  "$evoq" run --dir "$work/torch" --listen 127.0.0.1:0 --gpus auto --config "$here/examples/pytorch/space.yaml" \
    --eval-cmd "$py $here/examples/pytorch/evaluate.py" --persistent \
    --budget 120 --init 16 --pool 8 --json --log-level warn | tail -4
else
  echo "== no python3 with torch and sklearn here: PyTorch example skipped"
fi
