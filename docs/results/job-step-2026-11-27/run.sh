#!/bin/bash
# The job's step three ways (step_figures.py) for `run -n 2` and `run -n 4` of the bundled recipe,
# four runs each, alternating. Outputs land beside this script.
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
PY=${PY:-../../../.venv/bin/python}
export OMP_NUM_THREADS=1
for i in 1 2 3 4; do
  for n in 2 4; do
    rm -rf /tmp/jobstep-$n-$i
    $D5 run digits_mlp_distributed -n $n --out /tmp/jobstep-$n-$i > run-n$n-$i.txt 2>&1
  done
done
$PY step_figures.py /tmp/jobstep-2-{1,2,3,4} /tmp/jobstep-4-{1,2,3,4} > figures.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> figures.txt
cat figures.txt
