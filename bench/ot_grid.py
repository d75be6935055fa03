#!/usr/bin/python3
"""Sinkhorn through the grid operator against the online one, whole `tokenflow ot` processes.

Clouds: x ~ N(0, I) and y ~ N((1, 0, ...), diag(1.5^2, 0.7^2, 1, ...)) in d dimensions (spread 1,
anisotropic, shifted), n = m points each, uniform weights; the squared Euclidean cost at
--epsilon, tol --tol, epsilon-scaling from the cost range (the CLI's auto), no plan written.
Each row is one process: wall seconds and peak RSS (from wait4), the iterations, cost and
marginal error of summary.json and, for the grid, the share of rows its certificate left to
exact sums, the multiscale schedule's coarse iterations and seconds (summary.json
"multiscale_levels"; "grid single-scale" is the grid with --multiscale off) and, from n = 10^5,
the row errors of the returned potentials' plan on 200 random rows summed exactly. Prints a markdown table (docs/ot.md, "The grid operator"); --json writes the run, and
--table JSON prints an earlier run's table again.

The peer, up to --pot-up-to points: POT's lazy log-domain Sinkhorn (`ot.bregman.empirical_sinkhorn2`
with isLazy=True and POT's default batchSize: memory O(n + m), pairs formed block by block,
no epsilon-scaling), reg = eps, stopThr = tol on the same L1 marginal error (POT checks it every
10 iterations), in its own process, the cost <C, pi> it returns.

    /usr/bin/python3 bench/ot_grid.py --sizes 5000 20000 100000 --online-up-to 20000 --pot-up-to 5000
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


# "grid single-scale": the grid operator with --multiscale off (every epsilon stage on the points).
SINGLE_SCALE = "grid single-scale"


def run(binary, folder, n, d, operator, epsilon, tol):
    out = os.path.join(folder, f"{operator.replace(' ', '-')}-{n}")
    cmd = [binary, "ot", "--x", os.path.join(folder, f"x{n}.npy"), "--y", os.path.join(folder, f"y{n}.npy"),
           "--epsilon", str(epsilon), "--tol", str(tol), "--operator", "grid" if operator == SINGLE_SCALE else operator,
           "--no-plan", "--out", out]
    if operator == SINGLE_SCALE:
        cmd += ["--multiscale", "off"]
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
    if operator in ("grid", SINGLE_SCALE):
        row["exact_row_share"] = s["grid_rows_exact"] / max(1, s["grid_rows_total"])
        # The multiscale schedule's coarse solves: their iterations and seconds (in the wall time).
        levels = s.get("multiscale_levels", [])
        row["coarse_iterations"] = sum(level["iterations"] for level in levels)
        row["coarse_seconds"] = sum(level["seconds"] for level in levels)
        if n >= 100000:
            row["sampled_row_error_max"], row["sampled_row_error_mean"] = sampled_row_error(folder, out, n, epsilon)
    return row


# The peer's process: loads the clouds, solves, prints one JSON line.
POT_SCRIPT = r"""
import json, sys, warnings
import numpy as np
import ot
x, y = np.load(sys.argv[1]), np.load(sys.argv[2])
eps, tol, max_iter = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loss, log = ot.bregman.empirical_sinkhorn2(x, y, eps, numIterMax=max_iter, stopThr=tol, isLazy=True, log=True)
errors = [float(e) for e in log["err"]]
converged = bool(errors) and errors[-1] <= tol
print(json.dumps(dict(cost=float(loss), iterations=10 * len(errors), marginal_error=errors[-1] if errors else None,
                      status="converged" if converged else "max_iter")))
"""


def sampled_row_error(folder, out, n, epsilon, rows=200, seed=0):
    """The largest and the mean |(pi 1)_i / a_i - 1| over `rows` random rows of the plan of the
    returned potentials (f.npy, g.npy), each row summed exactly in float64 over all m columns:
    (pi 1)_i / a_i = sum_j b_j exp((f_i + g_j - |x_i - y_j|^2) / eps), uniform weights. The mean
    estimates the row part of the marginal error (the columns are exact for f)."""
    x, y = np.load(os.path.join(folder, f"x{n}.npy")), np.load(os.path.join(folder, f"y{n}.npy"))
    f, g = np.load(os.path.join(out, "f.npy")), np.load(os.path.join(out, "g.npy"))
    log_b = -np.log(len(y))
    errors = []
    for i in np.random.default_rng(seed).choice(len(x), size=min(rows, len(x)), replace=False):
        z = log_b + (f[i] + g - ((y - x[i]) ** 2).sum(1)) / epsilon
        top = z.max()
        errors.append(abs(np.expm1(top + np.log(np.exp(z - top).sum()))))
    return max(errors), float(np.mean(errors))


def run_pot(folder, n, d, epsilon, tol, max_iter):
    cmd = ["/usr/bin/python3", "-c", POT_SCRIPT, os.path.join(folder, f"x{n}.npy"), os.path.join(folder, f"y{n}.npy"),
           str(epsilon), str(tol), str(max_iter)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"ot_grid: POT exited {os.waitstatus_to_exitcode(status)}: {proc.stderr.read().decode().strip()}")
    s = json.loads(stdout.strip().splitlines()[-1])
    return dict(n=n, d=d, operator="POT lazy", wall_seconds=wall, peak_rss_mb=usage.ru_maxrss / 1024.0, **s)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20000, 100000])
    p.add_argument("--d", type=int, default=2)
    p.add_argument("--epsilon", type=float, default=0.05)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--online-up-to", type=int, default=20000, help="run the online operator up to this n")
    p.add_argument("--single-scale-from", type=int, default=100000,
                   help="from this n also the grid with --multiscale off (the multiscale schedule needs 2^15 points)")
    p.add_argument("--pot-up-to", type=int, default=0, help="run POT's lazy Sinkhorn up to this n (0: never)")
    p.add_argument("--pot-max-iter", type=int, default=10000, help="POT's numIterMax (its default)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "tokenflow"))
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--table", metavar="JSON", help="print the table of an earlier run's --json file and stop")
    a = p.parse_args()
    if a.table:
        with open(a.table) as f:
            print_table(json.load(f))
        return
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for n in a.sizes:
            x, y = clouds(n, a.d, a.seed)
            np.save(os.path.join(folder, f"x{n}.npy"), x)
            np.save(os.path.join(folder, f"y{n}.npy"), y)
            single = [SINGLE_SCALE] if n >= a.single_scale_from else []
            for operator in (["online"] if n <= a.online_up_to else []) + ["grid"] + single:
                rows.append(run(a.binary, folder, n, a.d, operator, a.epsilon, a.tol))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
            if n <= a.pot_up_to:
                rows.append(run_pot(folder, n, a.d, a.epsilon, a.tol, a.pot_max_iter))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    result = dict(rows=rows, cpu=cpu_name(), cores=os.cpu_count(), epsilon=a.epsilon, tol=a.tol, d=a.d,
                  date=time.strftime("%Y-%m-%d"), load=os.getloadavg()[0],
                  command=f"bench/ot_grid.py --d {a.d} --sizes {' '.join(map(str, a.sizes))} --online-up-to "
                          f"{a.online_up_to}{f' --pot-up-to {a.pot_up_to}' if a.pot_up_to else ''}"
                          f"{f' --single-scale-from {a.single_scale_from}' if a.single_scale_from != 100000 else ''}")
    print_table(result)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


def print_table(run):
    """The markdown table of a run (this script's --json document)."""
    print("| n = m | operator | status | iterations | coarse iterations (s) | seconds | peak RSS (MB) | cost | marginal error | "
          "rows summed exactly | sampled row error (max, mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in run["rows"]:
        share = f"{100 * r['exact_row_share']:.3g} %" if "exact_row_share" in r else "-"
        error = f"{r['marginal_error']:.2g}" if r["marginal_error"] is not None else "-"
        coarse = f"{r['coarse_iterations']} ({r['coarse_seconds']:.1f})" if r.get("coarse_iterations") else "-"
        sampled = (f"{r['sampled_row_error_max']:.1e}, {r['sampled_row_error_mean']:.1e}"
                   if "sampled_row_error_max" in r else "-")
        print(f"| {r['n']} | {r['operator']} | {r['status']} | {r['iterations']} | {coarse} | {r['wall_seconds']:.1f} | "
              f"{r['peak_rss_mb']:.0f} | {r['cost']:.6f} | {error} | {share} | {sampled} |")
    ratios = []
    for n in sorted({r["n"] for r in run["rows"]}):
        by = {r["operator"]: r for r in run["rows"] if r["n"] == n}
        for other in ("online", "POT lazy", SINGLE_SCALE):
            if "grid" in by and other in by:
                ratios.append(f"{other} / grid at n = m = {n}: {by[other]['wall_seconds'] / by['grid']['wall_seconds']:.3g}x "
                              f"({by[other]['iterations']} against {by['grid']['iterations']} iterations)")
    if ratios:
        print("\nTime ratios: " + "; ".join(ratios) + ".")
    print(f"\n_Measured {run['date']} on {run['cpu']} ({run['cores']} cores), d = {run['d']}, eps {run['epsilon']}, "
          f"tol {run['tol']}, load {run['load']:.1f} at the end, by `{run['command']}`._")


if __name__ == "__main__":
    main()
