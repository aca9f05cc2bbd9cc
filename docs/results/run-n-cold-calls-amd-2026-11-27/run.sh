#!/bin/bash
# the scaling check of run -n P, retaken with cold calls in the allreduce calibration (bench allreduce --evict, default auto):
# calibrate the allreduce model at 2 and 4 ranks, run the recipe on 1, 2 and 4 ranks with auto choosing by it,
# and check the prediction against the runs. Outputs land beside this script (SET names a set: a, b, ...).
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
S=${SET:-a}
CAL=${CAL---passes 3}  # CAL= (empty): the default interleaved calibration instead
export OMP_NUM_THREADS=1
for n in 2 4; do
  $D5 bench allreduce -n $n --min-bytes 4KiB --max-bytes 256KiB $CAL --save-model ar-$S.json > ar-$S-n$n.txt 2>&1
done
for n in 1 2 4; do
  rm -rf /tmp/runn-cold-$S-run$n
  DEEP500LITE_ALLREDUCE_MODEL=$PWD/ar-$S.json $D5 run digits_mlp_distributed -n $n --set distributed_kwargs.algorithm=auto \
    --out /tmp/runn-cold-$S-run$n > run-$S-n$n.txt 2>&1
  cp /tmp/runn-cold-$S-run$n/results.json results-$S-n$n.json
done
$D5 model scaling digits_mlp_distributed --nodes 1,2,4 --weak --batch 32 --allreduce-model ar-$S.json --host-cores 2 \
  --fusion-mb 1 --no-overlap --accelerator this --step-from results-$S-n1.json \
  --check results-$S-n1.json,results-$S-n2.json,results-$S-n4.json > check-$S.txt 2>&1
echo "check exit $?" >> check-$S.txt
