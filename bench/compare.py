#!/usr/bin/python3
"""tokenflow against its peers, side by side in one run (`make bench`).

Each comparison runs every contender as a whole process (start-up, input, compute, output),
`--repeats` times, interleaved and in rotating order so that the load of a shared machine falls on
all of them alike, and reports medians and the ratio peer / tokenflow. The script also measures
the machine's ceilings (a GEMM through NumPy's OpenBLAS, and the exponential throughput of
tokenflow's kernels and of glibc's libmvec) and the attention kernel's achieved pairs/s and GFLOP/s
(tokenflow_bench, Google Benchmark) against them.

Adding a comparison (Sinkhorn against POT, exact OT against POT, ...): write a function that
returns a Comparison (its contenders as command lines, an optional cross-check of their outputs,
the goal ratios) and append it to COMPARISONS. Nothing else changes.

Usage: bench/compare.py [--build build] [--repeats 5] [--quick] [--grid] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"
# Debian's numpy links libblas.so.3, which is the reference BLAS unless libopenblas0-pthread is the
# selected alternative; the peers load OpenBLAS explicitly so that NumPy is NumPy+OpenBLAS either way.
OPENBLAS_DIRS = ["/usr/lib/x86_64-linux-gnu/openblas-pthread", "/usr/lib/aarch64-linux-gnu/openblas-pthread"]


def peer_env() -> dict:
    env = dict(os.environ)
    for d in OPENBLAS_DIRS:
        if Path(d, "libblas.so.3").exists():
            env["LD_LIBRARY_PATH"] = d + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            break
    return env


def openblas_in_use() -> bool:
    return any(Path(d, "libblas.so.3").exists() for d in OPENBLAS_DIRS)


# ---- contenders and comparisons ------------------------------------------------------------------

@dataclass
class Contender:
    name: str                      # "tokenflow", "numpy", "torch", "pot", ...
    argv: list[str]
    env: Optional[dict] = None
    output: Optional[Path] = None  # what the cross-check reads
    # A contender measured on a bounded number of iterations: returns the seconds to add to each
    # of its whole-process times for the iterations it did not run (called after all runs).
    extrapolate: Optional[Callable[[], float]] = None


@dataclass
class Comparison:
    title: str
    contenders: list[Contender]                 # the first one is tokenflow
    goals: dict[str, float] = field(default_factory=dict)  # peer name -> minimal ratio peer/tokenflow
    check: Optional[Callable[[list[Contender]], str]] = None  # returns a one-line cross-check
    note: str = ""


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def attention_comparison(work: Path, tf: Path, n: int, d: int, dtype: str, steps: int = 20,
                         dt: float = 0.01, random_keys: bool = False, goal: float = 0.0) -> Comparison:
    """Softmax attention (tokenflow simulate's defaults: Q = K = V = W = I, uniform weights; with
    random_keys, K = I + N(0, 0.1^2) instead, so that the logits are not symmetric), `steps`
    explicit Euler steps from the same N(0, I) points, in the three codes."""
    import numpy as np

    tag = f"attention_n{n}_d{d}_{dtype}{'_K' if random_keys else ''}"
    x0 = work / f"{tag}_x0.npy"
    rng = np.random.default_rng(0)
    np.save(x0, rng.standard_normal((n, d)))
    key_line, key_args = "", []
    if random_keys:
        K = np.eye(d) + 0.1 * rng.standard_normal((d, d))
        np.save(work / f"{tag}_K.npy", K)
        key_line = "K = [" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in K) + "]\n"
        key_args = ["--K", str(work / f"{tag}_K.npy")]
    config = write_toml(work / f"{tag}.toml", f"""dtype = "{dtype}"
[init]
kind = "file"
path = "{x0}"
[attention]
kind = "softmax"
{key_line}[run]
T = {steps * dt!r}
dt = {dt!r}
integrator = "euler"
""")
    out_tf = work / f"{tag}_tokenflow"
    contenders = [
        Contender("tokenflow", [str(tf), "simulate", "--config", str(config), "--out", str(out_tf)],
                  output=out_tf / "positions.npy"),
    ]
    for peer in ("numpy", "torch"):
        out = work / f"{tag}_{peer}.npy"
        contenders.append(Contender(peer, [PYTHON, str(ROOT / "bench" / "peers" / f"attention_{peer}.py"),
                                           "--x0", str(x0), "--out", str(out), "--steps", str(steps),
                                           "--dt", str(dt), "--dtype", dtype] + key_args, env=peer_env(),
                                    output=out))

    def check(cs: list[Contender]) -> str:
        ref = np.load(cs[0].output).astype(np.float64)
        parts = []
        for c in cs[1:]:
            if c.output and c.output.exists():
                parts.append(f"{c.name} {np.abs(np.load(c.output).astype(np.float64) - ref).max():.1e}")
        return "max |x_T - x_T(tokenflow)|: " + ", ".join(parts)

    keys = ", K != Q" if random_keys else ""
    return Comparison(f"softmax attention, {steps} Euler steps, n = {n}, d = {d}, {dtype}{keys}", contenders,
                      goals={"numpy": goal} if goal else {}, check=check)


def ot_points(work: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """x ~ N(0, I_3), y ~ N(0.5 * 1, I_3), n each (uniform weights on both sides)."""
    import numpy as np

    x, y = work / f"ot_x{n}.npy", work / f"ot_y{n}.npy"
    rng = np.random.default_rng(seed)
    np.save(x, rng.standard_normal((n, 3)))
    np.save(y, rng.standard_normal((n, 3)) + 0.5)
    return x, y


def sinkhorn_comparison(work: Path, tf: Path, n: int = 4000, eps: float = 0.1, tol: float = 1e-6,
                        log_cap: int = 20) -> Comparison:
    """Entropic OT, |x - y|^2 in R^3, epsilon 0.1, tol 1e-6, in each tool's own stopping rule:
    tokenflow stops when the l1 marginal error |pi 1 - a|_1 + |pi^T 1 - b|_1 < tol, checked every
    iteration (its plan's columns are exact); POT when the l2 norm of the column error < tol,
    checked every 10 iterations (its rows are exact). l1 >= l2, so tokenflow's rule is the stricter.
    tokenflow: `tokenflow ot --operator auto` (kernel mode at this size) with --no-plan (f, g and
    summary.json are written; POT forms its plan in memory and writes nothing). POT's
    sinkhorn_log runs `log_cap` iterations only; its time is extrapolated (see the note)."""
    import json as _json

    x, y = ot_points(work, n)
    out_tf = work / f"sinkhorn{n}_tokenflow"
    contenders = [Contender("tokenflow", [str(tf), "ot", "--x", str(x), "--y", str(y), "--epsilon", repr(eps),
                                          "--tol", repr(tol), "--no-plan", "--out", str(out_tf)],
                            output=out_tf / "summary.json")]
    peer = [PYTHON, str(ROOT / "bench" / "peers" / "ot_pot.py"), "--x", str(x), "--y", str(y),
            "--epsilon", repr(eps), "--tol", repr(tol)]
    pot_out, log_out = work / f"sinkhorn{n}_pot.json", work / f"sinkhorn{n}_pot_log.json"
    contenders.append(Contender("pot", peer + ["--method", "sinkhorn", "--out", str(pot_out)], env=peer_env(),
                                output=pot_out))

    def log_extra() -> float:
        # POT's sinkhorn_log runs the same iterates as its kernel mode (in exact arithmetic) with the
        # same stopping rule, so it needs the kernel mode's iteration count; the time of the
        # missing iterations is its measured time per iteration (last run) times their number.
        need = _json.load(open(pot_out))["iterations"]
        capped = _json.load(open(log_out))
        return capped["solve_seconds"] / capped["iterations"] * max(0, need - capped["iterations"])

    contenders.append(Contender("pot_log", peer + ["--method", "sinkhorn_log", "--max-iter", str(log_cap),
                                                    "--out", str(log_out)], env=peer_env(), output=log_out,
                                extrapolate=log_extra))

    def check(cs: list[Contender]) -> str:
        t = _json.load(open(out_tf / "summary.json"))
        p = _json.load(open(pot_out))
        q = _json.load(open(log_out))
        accel = (f"Anderson depth {t['anderson_depth']}" if t.get('anderson_depth', 0) > 0
                 else f"w = {t.get('overrelaxation', 1.0):.2f}")
        return (f"iterations: tokenflow {t['iterations']} ({t.get('kernel_iterations', 0)} in kernel mode, {accel}, "
                f"{t.get('kernel_absorptions', 0)} absorptions), pot {p['iterations']}, "
                f"pot_log {q['iterations']} run + {max(0, p['iterations'] - q['iterations'])} extrapolated at "
                f"{1e3 * q['solve_seconds'] / q['iterations']:.0f} ms/iteration\n"
                f"    l1 marginal error: tokenflow {t['marginal_error']:.2e}, pot {p['l1_marginal_error']:.2e}; "
                f"cost <C, pi>: tokenflow {t['cost']:.9f}, pot {p['cost']:.9f}; solve seconds: tokenflow "
                f"{t['solve_seconds']:.2f}, pot {p['solve_seconds']:.2f}")

    return Comparison(f"Sinkhorn n = m = {n}, R^3, eps = {eps:g}, tol {tol:g} (own rules)", contenders,
                      goals={"pot": 3.0, "pot_log": 100.0}, check=check,
                      note=f"pot_log: {log_cap} iterations measured, the rest extrapolated")


def exact_comparison(work: Path, tf: Path, n: int = 1000) -> Comparison:
    """Exact OT, |x - y|^2 in R^3, uniform weights: `tokenflow ot --method exact` (LEMON's network
    simplex; plan.npy written: n^2 doubles) against ot.emd2 (POT's network simplex, cost only)."""
    import json as _json

    x, y = ot_points(work, n, seed=1)
    out_tf = work / f"exact{n}_tokenflow"
    pot_out = work / f"exact{n}_pot.json"
    contenders = [
        Contender("tokenflow", [str(tf), "ot", "--method", "exact", "--x", str(x), "--y", str(y), "--out", str(out_tf)],
                  output=out_tf / "summary.json"),
        Contender("pot", [PYTHON, str(ROOT / "bench" / "peers" / "ot_pot.py"), "--x", str(x), "--y", str(y),
                          "--method", "emd", "--out", str(pot_out)], env=peer_env(), output=pot_out),
    ]

    def check(cs: list[Contender]) -> str:
        t, p = _json.load(open(out_tf / "summary.json")), _json.load(open(pot_out))
        return f"cost: tokenflow {t['cost']:.12f}, pot {p['cost']:.12f} (difference {abs(t['cost'] - p['cost']):.1e})"

    return Comparison(f"exact OT n = m = {n}, R^3", contenders, check=check)


# The list of comparisons.
def comparisons(work: Path, tf: Path, args) -> list[Comparison]:
    return [
        sinkhorn_comparison(work, tf),
        exact_comparison(work, tf),
        attention_comparison(work, tf, 4096, 2, "f64", goal=5.0),
        attention_comparison(work, tf, 4096, 64, "f32", goal=3.0),
        # The same with K != Q: the logits are not symmetric, so tokenflow's general kernel runs.
        attention_comparison(work, tf, 4096, 64, "f32", random_keys=True),
    ]


# ---- running -------------------------------------------------------------------------------------

def run_once(c: Contender) -> float:
    start = time.perf_counter()
    r = subprocess.run(c.argv, env=c.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise RuntimeError(f"{c.name} failed ({r.returncode}): {' '.join(c.argv)}\n{r.stderr[-2000:]}")
    return elapsed


def run_comparison(cmp: Comparison, repeats: int) -> dict:
    times: dict[str, list[float]] = {c.name: [] for c in cmp.contenders}
    load_before = os.getloadavg()[0]
    for rep in range(repeats):
        k = rep % len(cmp.contenders)
        for c in cmp.contenders[k:] + cmp.contenders[:k]:  # rotate who goes first
            times[c.name].append(run_once(c))
    load_after = os.getloadavg()[0]
    for c in cmp.contenders:
        if c.extrapolate:
            extra = c.extrapolate()
            times[c.name] = [t + extra for t in times[c.name]]
    med = {name: statistics.median(ts) for name, ts in times.items()}
    base = cmp.contenders[0].name
    return {"title": cmp.title, "times": times, "median": med,
            "ratio": {name: med[name] / med[base] for name in med if name != base},
            "goals": cmp.goals, "check": cmp.check(cmp.contenders) if cmp.check else "",
            "load": [load_before, load_after]}


# ---- ceilings and achieved rates -------------------------------------------------------------------

GEMM_SCRIPT = """
import sys, time, statistics, numpy as np
n = int(sys.argv[1]); out = {}
for name, dt in (("f32", np.float32), ("f64", np.float64)):
    a = np.random.default_rng(1).standard_normal((n, n)).astype(dt); b = a.T.copy(); a @ b
    ts = []
    for _ in range(7):
        t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
    out[name] = 2.0 * n ** 3 / statistics.median(ts) / 1e9
print(out["f32"], out["f64"])
"""


def gemm_ceiling(n: int = 2048) -> dict:
    r = subprocess.run([PYTHON, "-c", GEMM_SCRIPT, str(n)], env=peer_env(), capture_output=True, text=True, check=True)
    f32, f64 = map(float, r.stdout.split())
    return {"f32": f32, "f64": f64}


def google_benchmark(binary: Path, pattern: str, repetitions: int = 3) -> list[dict]:
    # The CLI's OpenMP wait policy (src/cli/thread_policy.cpp), unless the caller set one.
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["OMP_WAIT_POLICY"] = "passive"
    r = subprocess.run([str(binary), f"--benchmark_filter={pattern}", f"--benchmark_repetitions={repetitions}",
                        "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
                       capture_output=True, text=True, check=True, env=env)
    return [b for b in json.loads(r.stdout)["benchmarks"] if b.get("aggregate_name") == "median"]


def exp_ceiling(bench: Path) -> dict:
    """Exponentials per second on all cores: the best single-core rate (CPU time, so that other
    processes' share of the core does not count) times the core count."""
    cores = os.cpu_count() or 1
    best = {"f32": 0.0, "f64": 0.0}
    source = {"f32": "", "f64": ""}
    for b in google_benchmark(bench, "BM_Exp(Polynomial|Libmvec|Sleef)"):
        prec = "f32" if ("float" in b["name"] or "f32" in b["name"]) else "f64"
        if b["items_per_second"] > best[prec]:
            best[prec] = b["items_per_second"]
            source[prec] = b["run_name"]
    return {p: best[p] * cores for p in best} | {"source": source, "cores": cores}


def achieved(bench: Path, grid: bool) -> list[dict]:
    pattern = "BM_SoftmaxStep<.*>/n:(1024|4096|16384|65536)/" if grid else "BM_SoftmaxStep<.*>/n:4096/"
    rows = []
    for b in google_benchmark(bench, pattern, repetitions=3 if not grid else 1):
        m = re.match(r"BM_SoftmaxStep<(\w+)>/n:(\d+)/d:(\d+)", b["run_name"])
        prec = "f32" if m.group(1) == "float" else "f64"
        n, d = int(m.group(2)), int(m.group(3))
        unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        seconds, cpu = b["real_time"] * unit, b["cpu_time"] * unit
        rows.append({"dtype": prec, "n": n, "d": d, "step_seconds": seconds, "cpu_seconds": cpu,
                     "pairs_per_s": n * n / seconds, "gflops": 4.0 * d * n * n / seconds / 1e9})
    return rows


def memory_check(tf: Path, work: Path, n: int = 200_000, d: int = 2) -> dict:
    """One Euler step at n tokens in R^d under /usr/bin/time -v: peak resident memory."""
    config = write_toml(work / "memory.toml", f"""[init]
kind = "gaussian"
n = {n}
mean = {[0.0] * d}
[attention]
kind = "softmax"
[run]
T = 0.01
dt = 0.01
integrator = "euler"
""")
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", str(tf), "simulate", "--config", str(config), "--out",
                        str(work / "memory_out")], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise RuntimeError(f"memory check failed:\n{r.stderr[-2000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return {"n": n, "d": d, "peak_rss_mib": kb / 1024.0, "wall_seconds": wall,
            "numpy_logits_gib": n * n * 8 / 2 ** 30}


# ---- report ----------------------------------------------------------------------------------------

def print_ceilings(gemm: dict, expc: dict, cores: int) -> None:
    print("\nceilings (measured now)")
    print(f"  GEMM, NumPy+OpenBLAS 2048^3, {cores} threads:  f32 {gemm['f32']:7.1f} GFLOP/s   f64 {gemm['f64']:7.1f} GFLOP/s")
    print(f"  exp, best SIMD implementation x {cores} cores:   f32 {expc['f32'] / 1e9:7.2f} G/s       "
          f"f64 {expc['f64'] / 1e9:7.2f} G/s   ({expc['source']['f32']}, {expc['source']['f64']})")


def print_comparison(cmp: Comparison, res: dict) -> None:
    print(f"  {res['title']}   (load average {res['load'][0]:.1f} -> {res['load'][1]:.1f})")
    base = cmp.contenders[0].name
    for name, med in res["median"].items():
        spread = f"[{min(res['times'][name]):.2f} .. {max(res['times'][name]):.2f}]"
        line = f"    {name:10s} {med:8.3f} s {spread:16s}"
        if name != base:
            goal = cmp.goals.get(name, 0.0)
            verdict = f"  goal >= {goal:g}x: {'met' if res['ratio'][name] >= goal else 'NOT met'}" if goal else ""
            line += f" ratio {res['ratio'][name]:6.2f}x{verdict}"
        print(line)
    if res["check"]:
        print(f"    {res['check']}")
    if cmp.note:
        print(f"    note: {cmp.note}")


def print_achieved(rows: list[dict], gemm: dict, expc: dict) -> None:
    print("\nattention kernel, one step (tokenflow_bench, median; process CPU time / cores = what dedicated cores give)")
    print(f"  {'dtype':5s} {'n':>6s} {'d':>3s} {'ms/step':>8s} {'cpu ms':>7s} {'Gpairs/s':>9s} {'% exp':>6s} "
          f"{'GFLOP/s':>8s} {'% GEMM':>7s}")
    for r in rows:
        print(f"  {r['dtype']:5s} {r['n']:6d} {r['d']:3d} {r['step_seconds'] * 1e3:8.2f} {r['cpu_seconds'] * 1e3:7.2f} "
              f"{r['pairs_per_s'] / 1e9:9.3f} {100 * r['pairs_per_s'] / expc[r['dtype']]:5.0f}% {r['gflops']:8.1f} "
              f"{100 * r['gflops'] / gemm[r['dtype']]:6.0f}%")
    print("  Gpairs/s and GFLOP/s from the wall time per step; % exp: pairs/s over the exp ceiling (the bound at\n"
          "  small d: one exponential per pair); % GEMM: the 4 d flops of a pair (logits and values) per second over\n"
          "  the GEMM ceiling (the bound at large d). On a loaded machine the wall time includes other processes'\n"
          "  share of the cores: compare cpu ms (all threads) / cores with ms/step.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the n = 200 000 memory check")
    ap.add_argument("--grid", action="store_true", help="achieved rates over the whole n x d grid")
    ap.add_argument("--only", help="run the comparisons whose title contains this text")
    ap.add_argument("--skip-kernels", action="store_true", help="skip the ceilings and the kernel table")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    build = Path(args.build)
    tf, bench = build / "tokenflow", build / "bench" / "tokenflow_bench"
    for p in (tf,) if args.skip_kernels else (tf, bench):
        if not p.exists():
            print(f"compare.py: {p} is missing; run `make build` first", file=sys.stderr)
            return 2

    cores = os.cpu_count() or 1
    print(f"tokenflow compare: {cores} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"NumPy with {'OpenBLAS' if openblas_in_use() else 'the default BLAS (OpenBLAS not found)'}; "
          f"{args.repeats} runs each, medians")
    import datetime

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from update_docs import cpu_model

    results: dict = {"cores": cores, "cpu": cpu_model(), "date": datetime.date.today().isoformat(),
                     "command": " ".join(["bench/compare.py", *sys.argv[1:]])}

    gemm = gemm_ceiling() if not args.skip_kernels else {}
    expc = exp_ceiling(bench) if not args.skip_kernels else {}
    results["ceilings"] = {"gemm_gflops": gemm, "exp_per_s": expc}
    if gemm:
        print_ceilings(gemm, expc, cores)

    with tempfile.TemporaryDirectory(prefix="tokenflow-compare-") as tmp:
        work = Path(tmp)
        results["comparisons"] = []
        print("\nwhole-process wall time (median), ratio = peer / tokenflow")
        for cmp in comparisons(work, tf, args):
            if args.only and args.only not in cmp.title:
                continue
            res = run_comparison(cmp, args.repeats)
            results["comparisons"].append(res)
            print_comparison(cmp, res)
        if gemm:
            rows = achieved(bench, args.grid)
            results["achieved"] = rows
            print_achieved(rows, gemm, expc)
        if not args.quick:
            mem = memory_check(tf, work)
            results["memory"] = mem
            print(f"\nmemory: one Euler step at n = {mem['n']:,} tokens, d = {mem['d']}: peak RSS "
                  f"{mem['peak_rss_mib']:.0f} MiB (goal <= 1024 MiB: {'met' if mem['peak_rss_mib'] <= 1024 else 'NOT met'}), "
                  f"{mem['wall_seconds']:.0f} s wall; NumPy's n x n float64 logits alone would take "
                  f"{mem['numpy_logits_gib']:.0f} GiB")
    results["load_end"] = os.getloadavg()[0]
    print(f"\nload average at the end: {results['load_end']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
