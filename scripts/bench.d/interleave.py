#!/usr/bin/env python3
"""Interleaved timing of shell commands, for ratios that machine drift cannot bend.

hyperfine runs all runs of one command, then all of the next: on these shared 2-core
machines a minute of other work lands on one command only, and a workload that grows the
repository it runs in (a commit loop) makes every later command slower. Here each round runs
every command once, in a shuffled order; a command's ratio to its baseline is the median of
the per-round ratios (both measured within the same seconds).

Usage: interleave.py RUNS WARMUP OUT.json NAME=COMMAND...  (each COMMAND split as a shell
would split it and run without a shell, as `hyperfine -N` does; stderr discarded; a failing
command stops the benchmark). NAME is "workload|variant"; the variant "bare" is the baseline
of its workload. A command whose stdout ends with a line `inner-us N` reports the time of its
own inner part (a loop timed by the command itself, start-up and exit left out): those
are kept too, with their ratio to the baseline's in the same round.
Writes {"results": [{"command": NAME, "times": [seconds...], "ratio_to_bare": r,
"inner_times": [seconds...], "inner_ratio_to_bare": r}]} (the inner keys only where both
the command and its baseline reported one every round).
"""
import json
import random
import shlex
import statistics
import subprocess
import sys
import time

runs, warmup, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cmds = [(name, shlex.split(cmd)) for name, cmd in (a.split("=", 1) for a in sys.argv[4:])]
times = {name: [] for name, _ in cmds}
inner = {name: [] for name, _ in cmds}
for round_no in range(warmup + runs):
    order = cmds[:]
    random.shuffle(order)
    for name, cmd in order:
        t0 = time.perf_counter()
        done = subprocess.run(cmd, check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if round_no >= warmup:
            times[name].append(time.perf_counter() - t0)
            last = done.stdout.decode(errors="replace").strip().splitlines()[-1:]
            if last and last[0].startswith("inner-us "):
                inner[name].append(int(last[0].split()[1]) / 1e6)
results = []
for name, _ in cmds:
    bare = times[name.split("|")[0] + "|bare"]
    ratio = statistics.median(t / b for t, b in zip(times[name], bare))
    result = {"command": name, "times": times[name], "ratio_to_bare": ratio}
    bare_inner = inner[name.split("|")[0] + "|bare"]
    if len(inner[name]) == runs and len(bare_inner) == runs:
        result["inner_times"] = inner[name]
        result["inner_ratio_to_bare"] = statistics.median(
            t / b for t, b in zip(inner[name], bare_inner))
    results.append(result)
json.dump({"results": results}, open(out, "w"))
