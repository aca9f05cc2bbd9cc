#!/usr/bin/env bash
# bench allreduce at P ranks under glibc's default allocator settings or with mmap off and no trimming.
# Usage (repository root, after scripts/setup.sh): bash malloc.sh P default1 nommap1 ...; writes $OUT/NAME-nP.txt
set -u
OUT=${OUT:-/tmp/malloc}; mkdir -p "$OUT"
export OMP_NUM_THREADS=1
P=$1; shift
for cfg in "$@"; do
  case $cfg in default*) E="";; nommap*) E="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824";; esac
  date -u +%T
  env $E .venv/bin/deep500lite bench allreduce -n "$P" --min-bytes 64KiB --max-bytes 64MiB --factor 4 --max-time 0.5 \
      --interleave 48 --calibration-factor 2 --algorithms ring,recursive_doubling,rabenseifner,tree,auto \
      --save-model "$OUT/model-$cfg-n$P.json" > "$OUT/$cfg-n$P.txt" 2>&1
  echo "$cfg n=$P: $(grep -E 'within 20%' "$OUT/$cfg-n$P.txt" | head -1)"
done
