#!/usr/bin/python3
"""Sinkhorn through the grid operator against the online one, whole `tokenflow ot` processes.

Clouds: x ~ N(0, I) and y ~ N((1, 0, ...), diag(1.5^2, 0.7^2, 1, ...)) in d dimensions (spread 1,
anisotropic, shifted), n = m points each, uniform weights; the squared Euclidean cost at
--epsilon, tol --tol, epsilon-scaling from the cost range (the CLI's auto), no plan written.
Each row is one process: wall seconds and peak RSS (from wait4), the iterations, cost and
marginal error of summary.json and, for the grid, the share of rows its certificate left to
exact sums. Prints a markdown table (docs/ot.md, "The grid operator"); --json writes the rows.

    /usr/bin/python3 bench/ot_grid.py --sizes 20000 100000 200000 --online-up-to 20000
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def clouds(n, d, seed):
    rng = np.random.default_rng(seed)
    scale = np.ones(d)
    scale[0] = 1.5
    if d > 1:
        scale[1] = 0.7
    shift = np.zeros(d)
    shift[0] = 1.0
    return rng.standard_normal((n, d)), rng.standard_normal((n, d)) * scale + shift


def run(binary, folder, n, d, operator, epsilon, tol):
    out = os.path.join(folder, f"{operator}-{n}")
    cmd = [binary, "ot", "--x", os.path.join(folder, f"x{n}.npy"), "--y", os.path.join(folder, f"y{n}.npy"),
           "--epsilon", str(epsilon), "--tol", str(tol), "--operator", operator, "--no-plan", "--out", out]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace")
    if code not in (0, 1):
        sys.exit(f"ot_grid: {' '.join(cmd)} exited {code}: {stderr.strip()}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    row = dict(n=n, d=d, operator=operator, wall_seconds=wall, peak_rss_mb=usage.ru_maxrss / 1024.0,
               status=s["status"], iterations=s["iterations"], cost=s["cost"], marginal_error=s["marginal_error"])
    if operator == "grid":
        row["exact_row_share"] = s["grid_rows_exact"] / max(1, s["grid_rows_total"])
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20000, 100000])
    p.add_argument("--d", type=int, default=2)
    p.add_argument("--epsilon", type=float, default=0.05)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--online-up-to", type=int, default=20000, help="run the online operator up to this n")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "tokenflow"))
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for n in a.sizes:
            x, y = clouds(n, a.d, a.seed)
            np.save(os.path.join(folder, f"x{n}.npy"), x)
            np.save(os.path.join(folder, f"y{n}.npy"), y)
            for operator in (["online"] if n <= a.online_up_to else []) + ["grid"]:
                rows.append(run(a.binary, folder, n, a.d, operator, a.epsilon, a.tol))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    print("| n = m | operator | status | iterations | seconds | peak RSS (MB) | cost | marginal error | rows summed exactly |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        share = f"{100 * r['exact_row_share']:.2f} %" if "exact_row_share" in r else "-"
        print(f"| {r['n']} | {r['operator']} | {r['status']} | {r['iterations']} | {r['wall_seconds']:.1f} | "
              f"{r['peak_rss_mb']:.0f} | {r['cost']:.6f} | {r['marginal_error']:.2g} | {share} |")
    load = os.getloadavg()[0]
    print(f"\n_Measured {time.strftime('%Y-%m-%d')} on {cpu_name()} ({os.cpu_count()} cores), d = {a.d}, "
          f"eps {a.epsilon}, tol {a.tol}, load {load:.1f} at the end, by `bench/ot_grid.py --d {a.d} --sizes "
          f"{' '.join(map(str, a.sizes))} --online-up-to {a.online_up_to}`._")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rows=rows, cpu=cpu_name(), epsilon=a.epsilon, tol=a.tol, d=a.d), f, indent=1)


if __name__ == "__main__":
    main()
