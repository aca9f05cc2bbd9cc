#!/bin/bash
# the allreduce accuracy check, retaken with the ranks keeping freed memory (the default since this folder):
# alternating 2- and 4-rank runs of the accuracy check command; runs FIRST..LAST (default 1..4).
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
for i in $(seq "${FIRST:-1}" "${LAST:-4}"); do
  for n in 2 4; do
    $D5 bench allreduce -n $n --min-bytes 64KiB --max-bytes 64MiB --factor 4 --max-time 0.5 --interleave 48 \
      --calibration-factor 2 --algorithms ring,recursive_doubling,rabenseifner,tree,auto \
      --save-model model-n$n-$i.json --json bench-n$n-$i.json > out-n$n-$i.txt 2>&1
    echo "n=$n run $i rc=$? $(date -u +%H:%M:%S) $(grep 'within 20%' out-n$n-$i.txt | head -1)"
    ../../../.venv/bin/python compact.py bench-n$n-$i.json rows-n$n-$i.json && rm bench-n$n-$i.json
  done
done
