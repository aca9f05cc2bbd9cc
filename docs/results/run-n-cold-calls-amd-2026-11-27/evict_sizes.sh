#!/bin/bash
# What a cold call adds, against how much each rank reads before it (--evict), on 2 and 4 ranks: one pass of the
# 4 KiB-256 KiB calibration per setting; prints the warm medians' median and every cold median, in microseconds.
cd "$(dirname "$0")"
D5=${D5:-../../../.venv/bin/deep500lite}
PY=${PY:-../../../.venv/bin/python}
export OMP_NUM_THREADS=1
for e in 2MiB 8MiB 32MiB 128MiB; do
  for n in 2 4; do
    rm -f /tmp/evict-sizes.json
    $D5 bench allreduce -n $n --min-bytes 4KiB --max-bytes 256KiB --passes 1 --algorithms recursive_doubling \
      --evict $e --save-model /tmp/evict-sizes.json > /dev/null 2>&1
    $PY - "$e" "$n" <<'PYEOF'
import json, statistics, sys
e, p = sys.argv[1], sys.argv[2]
d = json.load(open("/tmp/evict-sizes.json"))
warm = statistics.median(s for _, _, s in d["measurements"][p]) * 1e6
cold = [round(s * 1e6) for _, _, s in d["cold"][p]["measurements"]]
print(f"--evict {e:>6}, {p} ranks: warm median {warm:.0f} us; cold (4, 32, 256 KiB x ring, recursive doubling, "
      f"rabenseifner, tree) {cold}")
PYEOF
  done
done
