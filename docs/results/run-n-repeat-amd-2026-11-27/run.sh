#!/bin/bash
# the scaling check of run -n P with repeated runs: calibrate the allreduce model once at 2 and 4 ranks, then run
# the recipe RUNS times on 1, 2 and 4 ranks in alternation (auto choosing by the model), and check the
# prediction against every run; `--check` groups the runs of each rank count (their spread and the
# prediction's error against their median). SET names a set; CAL= (empty) calibrates interleaved.
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
S=${SET:-a}
RUNS=${RUNS:-5}
CAL=${CAL---passes 3}
export OMP_NUM_THREADS=1
for n in 2 4; do
  $D5 bench allreduce -n $n --min-bytes 4KiB --max-bytes 256KiB $CAL --save-model ar-$S.json > ar-$S-n$n.txt 2>&1
done
checks=()
for i in $(seq 1 $RUNS); do
  for n in 1 2 4; do
    rm -rf /tmp/runn-repeat-$S-$n-$i
    DEEP500LITE_ALLREDUCE_MODEL=$PWD/ar-$S.json $D5 run digits_mlp_distributed -n $n \
      --set distributed_kwargs.algorithm=auto --out /tmp/runn-repeat-$S-$n-$i > run-$S-n$n-$i.txt 2>&1
    cp /tmp/runn-repeat-$S-$n-$i/results.json results-$S-n$n-$i.json
    checks+=(--check results-$S-n$n-$i.json)
  done
done
$D5 model scaling digits_mlp_distributed --nodes 1,2,4 --weak --batch 32 --allreduce-model ar-$S.json --host-cores 2 \
  --fusion-mb 1 --no-overlap --accelerator this --step-from results-$S-n1-1.json "${checks[@]}" \
  --json check-$S.json > check-$S.txt 2>&1
echo "check exit $?" >> check-$S.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> check-$S.txt
