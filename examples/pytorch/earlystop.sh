#!/bin/sh
# Full training against each early-stopping rule on the PyTorch example, on
# the same seeds and slots; then examples/pytorch/compare.py on each seed's
# exports. Run from the repository root; stores and exports go to $OUT.
set -e
OUT=${OUT:-/tmp/evoq-earlystop}
mkdir -p "$OUT"
go build -o "$OUT/evoq" ./cmd/evoq
for seed in 1 2 3 4 5; do
  for rule in none median asha; do
    budget=120; [ $rule != none ] && budget=480
    rm -rf "$OUT"/$rule-$seed
    "$OUT/evoq" run --dir "$OUT"/$rule-$seed --listen 127.0.0.1:0 --run pt-$rule-$seed --config examples/pytorch/space.yaml \
      --eval-cmd '/usr/bin/python3 examples/pytorch/evaluate.py' --persistent --slots 2 --init 12 --pool 6 \
      --seed $seed --budget $budget --early-stop $rule $( [ $rule != none ] && echo --max-step 12 --eta 3 ) --json \
      > "$OUT"/$rule-$seed.json 2> "$OUT"/$rule-$seed.err
    "$OUT/evoq" export --dir "$OUT"/$rule-$seed --run pt-$rule-$seed --format jsonl > "$OUT"/$rule-$seed.jsonl
  done
  python3 examples/pytorch/compare.py "$OUT"/none-$seed.jsonl "$OUT"/median-$seed.jsonl "$OUT"/asha-$seed.jsonl
done
