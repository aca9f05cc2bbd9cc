"""Interruption trials: ``deep500lite run``, ``compare`` and ``run -n 2`` stopped by SIGINT, SIGTERM or SIGKILL
at a random moment, then checked for a whole results set and for processes left running.

Usage (from the repository root, with the virtual environment's bin folder first on PATH):

    python docs/results/interruption-trials/trials.py --trials 3 --seed 1 --json trials.json

For each command, one full run first writes the results set the trials start from and gives the
run's length; then each trial starts the command into the same folder, sends the signal after a
delay drawn uniformly from [0, 1.2 x that length) (so some trials land after the end), and waits:

- the command's processes: every process it started carries a tag in its environment, so the
  trial lists them in /proc, wherever they were re-parented; any found is a failure (and killed);
- the results: each folder of the set (``run``: the output folder; ``run -n``: the output folder
  with its rank folders; ``compare``: one folder per framework, and the comparison files) must be
  either exactly the set before the trial (every file's SHA-256 the same) or a whole new one
  (results.json readable, every file written during the trial), and all of them the same: all
  old or all new; anything else is a mix;
- staging folders left (``.NAME.d5-partial-...``): expected only after SIGKILL, which no process
  can clean up after; the next run into the folder removes them (the trial after checks that).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RECIPE = os.path.join(HERE, "trial_recipe.py")
TAG = "DEEP500LITE_TRIAL_TAG"
COMMANDS = {
    "run": ["run", RECIPE, "--progress", "none"],
    "compare": ["compare", RECIPE, "--frameworks", "reference,onnxruntime", "--no-plots"],
    "run -n 2": ["run", RECIPE, "-n", "2", "--no-baseline", "--progress", "none"],
}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


def tagged(tag: str) -> list[int]:
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in env and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def files(folder: str) -> dict[str, tuple[str, float]]:
    """Every file under ``folder`` (staging folders left out): relative path -> (SHA-256, mtime)."""
    out = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if ".d5-" not in d]
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, folder)] = (digest, os.stat(path).st_mtime)
    return out


def groups(command: str, out: str) -> dict[str, str]:
    """The folders whose contents must be whole together: name -> path relative to ``out``."""
    if command == "compare":
        return {"reference": "reference", "onnxruntime": "onnxruntime", "comparison files": "."}
    return {"set": "."}


def classify(command: str, out: str, before: dict, started: float) -> dict[str, str]:
    now = files(out) if os.path.isdir(out) else {}
    verdicts = {}
    for name, sub in groups(command, out).items():
        def part(table):
            if sub == ".":
                keep = (lambda p: p.startswith("comparison")) if command == "compare" else (lambda p: True)
            else:
                keep = (lambda p: p.startswith(sub + os.sep))
            return {p: v for p, v in table.items() if keep(p)}

        old, new = part(before), part(now)
        if {p: v[0] for p, v in old.items()} == {p: v[0] for p, v in new.items()}:
            verdicts[name] = "old"
            continue
        results = [p for p in new if os.path.basename(p) == "results.json" or p.startswith("comparison.json")]
        fresh = all(v[1] >= started for v in new.values())
        readable = bool(results)
        for p in results:
            try:
                with open(os.path.join(out, p), encoding="utf-8") as f:
                    json.load(f)
            except (OSError, ValueError):
                readable = False
        verdicts[name] = "new" if fresh and readable else "MIX"
    return verdicts


def whole(folders: dict[str, str]) -> bool:
    """One whole set: every folder of it the old one, or every folder the new one."""
    return len(set(folders.values())) == 1 and "MIX" not in folders.values()


def staging_left(out: str) -> int:
    """Staging folders of this command's output: beside it (``.NAME.d5-...``) and inside it (compare's)."""
    def staging(name: str) -> bool:
        return ".d5-partial-" in name or ".d5-old-" in name

    count = sum(staging(n) and n.startswith(f".{os.path.basename(out)}.") for n in os.listdir(os.path.dirname(out)))
    if os.path.isdir(out):
        count += sum(staging(n) for n in os.listdir(out))
    return count


def start(command: str, out: str, tag: str) -> subprocess.Popen:
    env = dict(os.environ, **{TAG: tag})
    return subprocess.Popen([sys.executable, "-m", "deep500lite", *COMMANDS[command], "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
                            start_new_session=True)


def trial(command: str, signame: str, out: str, length: float, rng: random.Random) -> dict:
    before = files(out)
    tag = secrets.token_hex(8)
    delay = rng.uniform(0, 1.2 * length)
    started = time.time()
    proc = start(command, out, tag)
    time.sleep(delay)
    sent = proc.poll() is None
    if sent:
        if signame == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the command's process group
        else:
            os.kill(proc.pid, SIGNALS[signame])
    try:
        _, err = proc.communicate(timeout=300)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
        proc.kill()
        _, err = proc.communicate()
    ended = time.time()
    wait = 15.0 if signame == "SIGKILL" else 0.0  # after SIGKILL: the time the dying processes take to go
    deadline = time.monotonic() + wait
    left = tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    last = (err or "").strip().splitlines()[-1:] or [""]
    return {"command": command, "signal": signame, "delay_s": round(delay, 2), "sent": sent,
            "exit": proc.returncode, "ended_after_s": round(ended - started - delay, 2), "hung": hung,
            "processes_left": len(left), "folders": classify(command, out, before, started),
            "staging_left": staging_left(out), "last_line": last[0][:200]}


def table(rows: list[dict]) -> str:
    """The trials as a Markdown table."""
    lines = ["| command | signal | after (s) | sent | exit | ended (s after the signal) | processes left | "
             "results | staging left |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        folders = r["folders"]
        if len(folders) > 1:
            kinds = set(folders.values())
            state = (f"all {kinds.pop()} ({len(folders)} folders)" if whole(folders)
                     else ", ".join(f"{k}: {v}" for k, v in folders.items()))
        else:
            state = next(iter(folders.values()))
        code = f"signal {-r['exit']}" if r["exit"] < 0 else str(r["exit"])
        lines.append(f"| `{r['command']}` | {r['signal']} | {r['delay_s']:.1f} | {'yes' if r['sent'] else 'no: ended'}"
                     f" | {code} | {r['ended_after_s']:.2f} | {r['processes_left']} | {state} | {r['staging_left']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="trials per command and signal (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random delays (default 1)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="commands to try (default all)")
    parser.add_argument("--json", default=None, help="write every trial's outcome to this file")
    parser.add_argument("--work", default=None, help="folder for the results sets (default: a new one in /tmp)")
    parser.add_argument("--table", default=None, metavar="JSON", help="print the table of a --json file and stop")
    args = parser.parse_args()
    if args.table:
        with open(args.table, encoding="utf-8") as f:
            print(table(json.load(f)["trials"]))
        return 0
    rng = random.Random(args.seed)
    work = args.work or f"/tmp/d5-interruption-trials-{os.getpid()}"
    rows = []
    for command in args.commands.split(","):
        out = os.path.join(work, command.replace(" ", ""))
        t0 = time.monotonic()
        first = start(command, out, secrets.token_hex(8))
        _, err = first.communicate(timeout=1200)
        length = time.monotonic() - t0
        if first.returncode not in (0, 1):
            print(f"{command}: the first full run failed ({first.returncode}): {err[-2000:]}", file=sys.stderr)
            return 1
        print(f"{command}: a full run takes {length:.1f} s", flush=True)
        for signame in SIGNALS:
            for _ in range(args.trials):
                row = trial(command, signame, out, length, rng)
                rows.append(row)
                print(json.dumps(row), flush=True)
    bad = [r for r in rows if r["hung"] or r["processes_left"] or not whole(r["folders"])
           or (r["staging_left"] and r["signal"] != "SIGKILL")]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"trials": rows, "failures": len(bad)}, f, indent=1)
    print(table(rows))
    print(f"{len(rows)} trials, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
