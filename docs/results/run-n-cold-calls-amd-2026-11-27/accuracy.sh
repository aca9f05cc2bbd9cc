#!/bin/bash
# the allreduce accuracy check with cold calls in the calibration (the default --evict auto), 2 and 4 ranks, timed.
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
export OMP_NUM_THREADS=1
for n in 2 4; do
  /usr/bin/time -f "wall %e s" $D5 bench allreduce -n $n --min-bytes 64KiB --max-bytes 64MiB --factor 4 --max-time 0.5 \
    --interleave 48 --calibration-factor 2 --algorithms ring,recursive_doubling,rabenseifner,tree,auto \
    --save-model accuracy-model.json > accuracy-n$n.txt 2>&1
done
