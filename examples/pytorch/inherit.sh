#!/bin/sh
# The PyTorch example searched from scratch and with --inherit, on the same
# seeds, budget, slots and flags (both store checkpoints, so both pay for
# saving them); then examples/pytorch/inherit_compare.py on every seed's
# pair of exports. Run from the repository root; stores and exports go to
# $OUT.
set -e
OUT=${OUT:-/tmp/evoq-inherit}
mkdir -p "$OUT"
go build -o "$OUT/evoq" ./cmd/evoq
pairs=
for seed in 1 2 3 4 5; do
  for mode in scratch inherit; do
    rm -rf "$OUT"/$mode-$seed
    "$OUT/evoq" run --dir "$OUT"/$mode-$seed --listen 127.0.0.1:0 --run pt-$mode-$seed --config examples/pytorch/space.yaml \
      --eval-cmd '/usr/bin/python3 examples/pytorch/evaluate.py' --persistent --slots 2 --init 12 --pool 6 \
      --seed $seed --budget 120 $( [ $mode = inherit ] && echo --inherit ) --json \
      > "$OUT"/$mode-$seed.json 2> "$OUT"/$mode-$seed.err
    "$OUT/evoq" export --dir "$OUT"/$mode-$seed --run pt-$mode-$seed --format jsonl > "$OUT"/$mode-$seed.jsonl
  done
  pairs="$pairs $OUT/scratch-$seed.jsonl $OUT/inherit-$seed.jsonl"
done
python3 examples/pytorch/inherit_compare.py $pairs
