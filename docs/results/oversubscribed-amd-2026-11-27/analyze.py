"""Summaries of measure.sh's outputs: per-rank waits of the instrumented job, and step/cycle times of 1-rank runs."""
import glob
import json
import os
import statistics as st
import sys


def waits(folder):
    print(f"instrumented {folder}: per rank, between two allreduces (compute) and inside one (wait); medians")
    for path in sorted(glob.glob(os.path.join(folder, "waits-*.json"))):
        rec = json.load(open(path))
        if len(rec) < 3:
            continue
        cw, cc, ww, wc, cs_v, cs_i, w_v, w_i = ([] for _ in range(8))
        for prev, cur in zip(rec, rec[1:]):
            cw.append(cur[1] - prev[2]); cc.append(cur[3] - prev[4])
            ww.append(cur[2] - cur[1]); wc.append(cur[4] - cur[3])
            cs_v.append(cur[5] - prev[7]); cs_i.append(cur[6] - prev[8])
            w_v.append(cur[7] - cur[5]); w_i.append(cur[8] - cur[6])
        us = lambda v: st.median(v) * 1e6
        print(f"  {os.path.basename(path)}: {len(rec)} waits; compute wall {us(cw):.0f} us, CPU {us(cc):.0f} us, "
              f"context switches {st.mean(cs_v):.1f} voluntary {st.mean(cs_i):.1f} involuntary | wait wall "
              f"{us(ww):.0f} us, CPU {us(wc):.0f} us, context switches {st.mean(w_v):.1f} voluntary "
              f"{st.mean(w_i):.1f} involuntary")


def steps(path):
    d = json.load(open(path))
    s = d["summaries"]["step_time"]
    rows = d["samples"]["steps"]
    cycle = [b["elapsed"] - a["elapsed"] for a, b in zip(rows, rows[1:]) if a["epoch"] == b["epoch"]]
    return (f"step median {s['median'] * 1e6:.1f} us (mean {s['mean'] * 1e6:.1f}); one step to the next, "
            f"median {st.median(cycle) * 1e6:.1f} us")


if __name__ == "__main__":
    if sys.argv[1] == "waits":
        waits(sys.argv[2])
    else:
        for p in sys.argv[2:]:
            print(f"{p}: {steps(p)}")
