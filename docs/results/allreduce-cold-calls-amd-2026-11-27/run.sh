#!/bin/bash
# bench allreduce at 2 and 4 ranks, 64 KiB-64 MiB, as in docs/allreduce-model.md (cold calls with the default --evict auto), timed. RUN names a run.
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
R=${RUN:-1}
export OMP_NUM_THREADS=1
for n in 2 4; do
  /usr/bin/time -f "wall %e s" $D5 bench allreduce -n $n --min-bytes 64KiB --max-bytes 64MiB --factor 4 --max-time 0.5 \
    --interleave 48 --calibration-factor 2 --algorithms ring,recursive_doubling,rabenseifner,tree,auto \
    --save-model model-$R.json > bench-$R-n$n.txt 2>&1
done
