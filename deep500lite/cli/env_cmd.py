"""``deep500lite env``: the software and hardware a measurement would come from."""

from __future__ import annotations

import json

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser("env", help="show Python, numpy, onnx, frameworks, CPU, GPU and MPI",
                              description="Show the environment measurements are taken in.")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from deep500lite.environment import collect_environment

    env = collect_environment()
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    rows = [("deep500lite", env["deep500lite"]), ("python", f"{env['python']} ({env['platform']})")]
    for k, v in env["packages"].items():
        rows.append((k, v or "absent"))
    for k, v in env["frameworks"].items():
        rows.append((f"framework {k}", v or "absent"))
    cpu = env["cpu"]
    rows.append(("cpu", f"{cpu['model']} ({cpu['logical_cores']} logical cores, {cpu['usable_cores']} usable)"))
    rows.append(("cpu features", " ".join(cpu["features"]) or "unknown"))
    rows.append(("cpu kernels", ", ".join(f"{k}={v}" for k, v in env["cpu_kernels"].items()) or "defaults"))
    rows.append(("gpu", "; ".join(f"{g['name']} ({g['memory']}, driver {g['driver']})" for g in env["gpus"])
                 or "none"))
    rows.append(("mpi", env["mpi_library"] or "absent (pip install 'deep500lite[mpi]')"))
    rows.append(("threads", ", ".join(f"{k}={v}" for k, v in env["threads"].items()) or "defaults"))
    rows.append(("git commit", env["git_commit"] or "not in a git checkout"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    return 0
