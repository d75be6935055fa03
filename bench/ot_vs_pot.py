#!/usr/bin/python3
"""`tokenflow ot` against POT (Debian's python3-pot) on the same problems, in one run.

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/ot_vs_pot.py                 # n = m = 1000 and 4000, eps 1, 0.1, 0.01
    /usr/bin/python3 bench/ot_vs_pot.py --sizes 1000 --eps 1 0.1
    /usr/bin/python3 bench/ot_vs_pot.py --large 100000  # only: online operator, memory (few iterations)
    /usr/bin/python3 bench/ot_vs_pot.py --problems-only # only POT's own test problems (seconds)
    /usr/bin/python3 bench/ot_vs_pot.py --online-rate 15000 --json build/online_rate.json
                                                        # only: the online operator's pair rate
                                                        # against the attention step, POT's lazy
                                                        # empirical_sinkhorn and a torch loop

First, POT's own test problems (pot_test_problems below) at 20 000 iterations and tol 1e-9.

Problems: x ~ N(0, I_3), y ~ N(0.5 * 1, I_3), uniform weights, cost |x - y|^2 (ot.dist), tol 1e-6.
Solvers:
  POT kernel    ot.sinkhorn (Sinkhorn-Knopp on K = exp(-C / eps); stops when the l2 norm of the
                column error is below stopThr, checked every 10 iterations; rows are exact)
  POT log       ot.bregman.sinkhorn_log (log domain; same stopping rule)
  tokenflow     `tokenflow ot` (log domain, dense operator at these sizes; epsilon-scaling from the
                cost range or none, "(auto)" marking the CLI's default choice; stops when the l1 norm of the row error is below tol, checked every
                iteration; columns exact). l1 >= l2, so at the same tol tokenflow's rule is the
                stricter one; the table shows the l1 error each solver actually reached.
Exact OT against ot.emd2: bench/exact_vs_emd2.py.
Times: the solve only, not the cost matrix (both) nor file I/O (tokenflow's summary "solve_seconds").
Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, 1 each unless set.
Iteration caps (--cap-1000, --cap-4000) keep the run short; a capped run shows ">" before its time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# One thread each by default: on a shared, loaded machine a 2-thread parallel region waits for the
# slower thread's next time slice, which measured up to 16x slower than one thread (n = 300).
THREADS = os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)  # POT's matrix products: the same cores
import numpy as np  # noqa: E402
import ot  # noqa: E402
import warnings  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))


def l1_error(P, a, b):
    return float(np.abs(P.sum(1) - a).sum() + np.abs(P.sum(0) - b).sum())


def run_cli(work, *args):
    out = os.path.join(work, "out")
    r = subprocess.run([CLI, "ot", *map(str, args), "--out", out], capture_output=True, text=True,
                       env=dict(os.environ, CI="1"))
    if r.returncode != 0:
        sys.exit(f"tokenflow failed: {r.stderr}")
    return json.load(open(os.path.join(out, "summary.json")))


def pot_sinkhorn(fn, a, b, M, eps, tol, cap):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        P, log = fn(a, b, M, eps, numItermax=cap, stopThr=tol, log=True, warn=False)
        seconds = time.perf_counter() - t
    it = int(log["niter"]) + 1
    finite = bool(np.all(np.isfinite(P))) and P.sum() > 0
    err = l1_error(P, a, b) if finite else float("nan")
    cost = float((P * M).sum()) if finite else float("nan")
    converged = finite and log["err"] and log["err"][-1] < tol
    return dict(iterations=it, seconds=seconds, error=err, cost=cost, converged=bool(converged))


def fmt_time(r):
    return ("" if r["converged"] else ">") + f"{r['seconds']:.3g}"


SINKHORN_HEADER = ["n", "epsilon", "solver", "iterations", "seconds", "ms / iteration", "l1 marginal error",
                   "<C, pi>", "time / tokenflow (auto)"]


def markdown(header, rows):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                      ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def bench(sizes, epsilons, tol, caps, seed, json_path=None, problems_budget=20000, problems_tol=1e-9):
    pot_rows = pot_test_problems(problems_budget, problems_tol, seed)
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        x, y = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)) + 0.5
        a = b = np.full(n, 1.0 / n)
        M = ot.dist(x, y)
        work = tempfile.mkdtemp(prefix="tf-bench-")
        np.save(f"{work}/x.npy", x)
        np.save(f"{work}/y.npy", y)
        cap = caps[1000] if n <= 1000 else caps[4000]
        for eps in epsilons:
            res = {}
            res["POT kernel"] = pot_sinkhorn(ot.sinkhorn, a, b, M, eps, tol, cap)
            res["POT log"] = pot_sinkhorn(ot.bregman.sinkhorn_log, a, b, M, eps, tol, cap)
            # tokenflow's default (--epsilon-start auto) scales from the cost range when eps < 1e-3 of
            # it. At n <= 1000 both variants run (the one auto picks is marked), above only auto's.
            scaling = eps < 1e-3 * (M.max() - M.min())
            variants = [(True, "range"), (False, "off")] if n <= 1000 else [(scaling, "auto")]
            for scaled, start in variants:
                label = "tokenflow " + ("scaling" if scaled else "no scaling") + (" (auto)" if scaled == scaling else "")
                s = run_cli(work, "--x", f"{work}/x.npy", "--y", f"{work}/y.npy", "--epsilon", eps, "--tol", tol,
                            "--max-iter", cap, "--epsilon-start", start)
                res[label] = dict(iterations=s["iterations"], seconds=s["solve_seconds"], error=s["marginal_error"],
                                  cost=s["cost"], converged=s["converged"])
            ours = next(r for label, r in res.items() if label.endswith("(auto)"))
            for label, r in res.items():
                per_iter = r["seconds"] / max(1, r["iterations"])
                ratio = r["seconds"] / ours["seconds"]
                rows.append((n, eps, label, r["iterations"], fmt_time(r), f"{1e3 * per_iter:.3g}", f"{r['error']:.1e}",
                             f"{r['cost']:.6g}", f"{ratio:.2f}"))
                print("  ".join(map(str, rows[-1])), flush=True)
    print(f"\nSinkhorn, sqeuclidean cost in R^3, tol {tol}, OMP/OpenBLAS threads {THREADS}, seed {seed}")
    print(markdown(SINKHORN_HEADER, rows))
    print(f"\nPOT's test problems, budget {problems_budget} iterations, tol {problems_tol}")
    print(markdown(POT_PROBLEMS_HEADER, pot_rows))
    if json_path:  # for bench/update_docs.py (block "ot-vs-pot")
        import datetime

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(json_path, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["bench/ot_vs_pot.py", *sys.argv[1:]]), "threads": THREADS,
                       "load": os.getloadavg()[0], "sinkhorn_header": SINKHORN_HEADER, "sinkhorn": rows,
                       "pot_problems_header": POT_PROBLEMS_HEADER,
                       "pot_problems": pot_rows, "pot_problems_budget": problems_budget,
                       "pot_problems_tol": problems_tol}, f, indent=1)


POT_PROBLEMS_HEADER = ["problem", "epsilon", "solver", "iterations", "l1 marginal error", "converged", "seconds"]


def pot_test_problems(budget, tol, seed):
    """POT's own test problems (its test suite, test/test_bregman.py), at a budget and tol:
      stabilization   test_sinkhorn_stabilization: 1-D Gaussian histograms on 100 bins (means 30,
                      40, sd 10; ot.datasets.make_1D_gauss) and ot.utils.dist0(100) (squared index
                      distance, range 9801)
      test_sinkhorn   test_sinkhorn: 100 points of N(0, I_2) against themselves, uniform weights,
                      ot.dist (sqeuclidean)
    Solvers: POT's sinkhorn_log (plain log domain), sinkhorn_stabilized and
    sinkhorn_epsilon_scaling; tokenflow's default (Anderson, epsilon-scaling when epsilon is below
    1e-3 of the cost range) and its plain loop (--overrelaxation 1 --epsilon-start off), which is
    POT's sinkhorn_log iteration. The error is the l1 marginal error of each returned plan,
    measured here in the same way for all."""
    rng = np.random.default_rng(seed)
    problems = [("stabilization", ot.datasets.make_1D_gauss(100, m=30, s=10), ot.datasets.make_1D_gauss(100, m=40, s=10),
                 ot.utils.dist0(100), [10.0, 1.0, 0.1, 1e-3, 1e-5])]
    pts = rng.normal(size=(100, 2))
    problems.append(("test_sinkhorn", ot.utils.unif(100), ot.utils.unif(100), ot.dist(pts, pts), [1.0, 0.1, 0.01]))
    rows = []
    for name, a, b, M, epsilons in problems:
        work = tempfile.mkdtemp(prefix="tf-pot-problems-")
        np.save(f"{work}/M.npy", M)
        np.save(f"{work}/a.npy", a)
        np.save(f"{work}/b.npy", b)
        for eps in epsilons:
            res = {}
            for label, method in [("POT sinkhorn_log", "sinkhorn_log"), ("POT sinkhorn_stabilized", "sinkhorn_stabilized"),
                                  ("POT sinkhorn_epsilon_scaling", "sinkhorn_epsilon_scaling")]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    try:
                        P, log = ot.sinkhorn(a, b, M, eps, method=method, numItermax=budget, stopThr=tol, log=True,
                                             warn=False)
                        seconds = time.perf_counter() - t
                        finite = bool(np.all(np.isfinite(P))) and P.sum() > 0
                        err = l1_error(P, a, b) if finite else float("nan")
                        it = int(log.get("niter", budget)) if isinstance(log, dict) else budget
                    except Exception as e:  # a POT method that fails on the problem is reported as such
                        seconds, err, it = time.perf_counter() - t, float("nan"), f"failed: {type(e).__name__}"
                res[label] = dict(iterations=it, error=err, converged=bool(err < tol), seconds=seconds)
            for label, extra in [("tokenflow default", []),
                                 ("tokenflow plain", ["--overrelaxation", 1, "--epsilon-start", "off"])]:
                s = run_cli(work, "--cost-matrix", f"{work}/M.npy", "--a", f"{work}/a.npy", "--b", f"{work}/b.npy",
                            "--epsilon", eps, "--tol", tol, "--max-iter", budget, "--no-plan", *extra)
                res[label] = dict(iterations=s["iterations"], error=s["marginal_error"], converged=s["converged"],
                                  seconds=s["solve_seconds"])
            for label, r in res.items():
                rows.append((name, eps, label, r["iterations"], f"{r['error']:.1e}", "yes" if r["converged"] else "no",
                             f"{r['seconds']:.3g}"))
                print("  ".join(map(str, rows[-1])), flush=True)
    return rows


def large(n, seed):
    """The online operator at n = m: one Sinkhorn iteration (plus the initial soft-min and the
    final pass for <C, pi>), peak memory from /usr/bin/time -v."""
    rng = np.random.default_rng(seed)
    work = tempfile.mkdtemp(prefix="tf-bench-large-")
    np.save(f"{work}/x.npy", rng.normal(size=(n, 3)))
    np.save(f"{work}/y.npy", rng.normal(size=(n, 3)) + 0.5)
    argv = ["/usr/bin/time", "-v", CLI, "ot", "--x", f"{work}/x.npy", "--y", f"{work}/y.npy", "--epsilon", "1",
            "--max-iter", "1", "--epsilon-start", "off", "--out", f"{work}/out"]
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CI="1"))
    if r.returncode != 0:
        sys.exit(r.stderr)
    rss = next(line for line in r.stderr.splitlines() if "Maximum resident set size" in line)
    s = json.load(open(f"{work}/out/summary.json"))
    print(f"n = m = {n}, operator {s['operator']}, iterations {s['iterations']}, solve {s['solve_seconds']:.1f} s, "
          f"wall {s['wall_seconds']:.1f} s, plan written: {s['plan_written']}, {rss.strip()}, "
          f"files: {sorted(os.listdir(f'{work}/out'))}")


ONLINE_RATE_HEADER = ["solver", "iterations", "seconds", "G pairs/s", "rate / tokenflow online"]


def timed_process(argv):
    t = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CI="1"))
    if r.returncode != 0:
        sys.exit(f"{argv[:2]} failed: {r.stderr}")
    return time.perf_counter() - t


def torch_logsumexp_loop(x, y, eps, iterations, tol, chunk=1024):
    """Plain log-domain Sinkhorn in torch (float64), the cost recomputed in chunks of rows
    (torch.cdist squared; memory O(chunk m)): per iteration g from f, then f from g, each a
    torch.logsumexp per row; stops on the l1 row error of the column-exact plan, as tokenflow."""
    import torch

    torch.set_num_threads(int(THREADS))
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    n, m = X.shape[0], Y.shape[0]
    log_a, log_b = torch.full((n,), -np.log(n), dtype=torch.float64), torch.full((m,), -np.log(m), dtype=torch.float64)

    def softmin(P, Q, h):  # out_i = -eps logsumexp_j (h_j - |P_i - Q_j|^2 / eps)
        out = torch.empty(P.shape[0], dtype=torch.float64)
        for i0 in range(0, P.shape[0], chunk):
            C = torch.cdist(P[i0:i0 + chunk], Q) ** 2
            out[i0:i0 + chunk] = -eps * torch.logsumexp(h[None, :] - C / eps, dim=1)
        return out

    t = time.perf_counter()
    f = torch.zeros(n, dtype=torch.float64)
    done = 0
    for done in range(1, iterations + 1):
        g = softmin(Y, X, log_a + f / eps)
        f_new = softmin(X, Y, log_b + g / eps)
        error = float((torch.exp(log_a) * torch.expm1((f - f_new) / eps).abs()).sum())
        f = f_new
        if error < tol:
            break
    return done, time.perf_counter() - t


RATE_REPEATS = 3


def online_rate(n, eps, tol, iterations, seed, json_path=None):
    """Pairs per second, n = m points in R^3 (x ~ N(0, I), y ~ N(0.5, I)), side by side:
      attention step   `tokenflow simulate`, dense softmax attention, d = 3, 10 Euler steps of n
                       tokens (one exp and a weighted sum per pair), float64 and float32, whole
                       process: 10 n^2 pairs over its wall time
      tokenflow online `tokenflow ot --operator online` (plain iteration, no epsilon-scaling, no
                       plan), 2 n m pairs per iteration (its two soft-mins) over solve_seconds (which
                       also holds the first soft-min and the final pass over the plan)
      POT lazy         ot.bregman.empirical_sinkhorn(isLazy=True, batchSize=1000): the same count
      torch loop       torch_logsumexp_loop: the same count
    All at the same eps, tol and iteration budget (none reaches tol in so few). The attention steps and
    tokenflow online: the fastest of RATE_REPEATS runs; POT and torch (minutes each): one run."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)) + 0.5
    work = tempfile.mkdtemp(prefix="tf-bench-rate-")
    np.save(f"{work}/x.npy", x)
    np.save(f"{work}/y.npy", y)
    rows, rates = [], {}

    def add(label, its, seconds, pairs):
        rates[label] = pairs / seconds
        rows.append([label, its, f"{seconds:.3g}", f"{pairs / seconds / 1e9:.3g}"])
        print("  ".join(map(str, rows[-1])), flush=True)

    # The short runs (seconds each) are timed RATE_REPEATS times and the fastest kept: on a shared
    # machine one run of the same command varied from 2.6 s to 3.7 s.
    for dtype in ("f64", "f32"):
        seconds = min(timed_process([CLI, "simulate", "--set", f"init.n={n}", "--set", "init.mean=[0,0,0]", "--set",
                                     f"dtype={dtype}", "--set", "attention.summation=dense", "--set", "run.T=0.1",
                                     "--set", "run.dt=0.01", "--set", "run.integrator=euler", "--out", f"{work}/sim"])
                      for _ in range(RATE_REPEATS))
        add(f"attention step {dtype} (whole process)", 10, seconds, 10.0 * n * n)
    runs = [run_cli(work, "--x", f"{work}/x.npy", "--y", f"{work}/y.npy", "--operator", "online", "--epsilon", eps,
                    "--tol", tol, "--max-iter", iterations, "--overrelaxation", 1, "--epsilon-start", "off", "--no-plan")
            for _ in range(RATE_REPEATS)]
    s = min(runs, key=lambda r: r["solve_seconds"])
    add("tokenflow online", s["iterations"], s["solve_seconds"], 2.0 * n * n * s["iterations"])
    a = np.full(n, 1.0 / n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        ot.bregman.empirical_sinkhorn(x, y, eps, a, a, numIterMax=iterations, stopThr=tol, isLazy=True,
                                      batchSize=1000, warn=False)
        add("POT lazy empirical_sinkhorn", iterations, time.perf_counter() - t, 2.0 * n * n * iterations)
    its, seconds = torch_logsumexp_loop(x, y, eps, iterations, tol)
    add("torch logsumexp loop", its, seconds, 2.0 * n * n * its)
    for r in rows:
        r.append(f"{rates[r[0]] / rates['tokenflow online']:.2f}")
    ratios = {dtype: rates["tokenflow online"] / rates[f"attention step {dtype} (whole process)"] for dtype in ("f64", "f32")}
    print(f"\nOnline Sinkhorn pair rate, n = m = {n}, d = 3, eps {eps}, tol {tol}, {iterations} iterations, "
          f"OMP/OpenBLAS/torch threads {THREADS}, seed {seed}")
    print(markdown(ONLINE_RATE_HEADER, rows))
    print(f"tokenflow online / attention step: {ratios['f64']:.2f} (float64), {ratios['f32']:.2f} (float32)")
    if json_path:
        import datetime

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(json_path, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["bench/ot_vs_pot.py", *sys.argv[1:]]), "threads": THREADS,
                       "load": os.getloadavg()[0], "n": n, "epsilon": eps, "tol": tol, "iterations": iterations,
                       "header": ONLINE_RATE_HEADER, "rows": rows, "ratio_to_attention": ratios}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000])
    p.add_argument("--eps", type=float, nargs="+", default=[1.0, 0.1, 0.01])
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--cap-1000", type=int, default=3000, help="iteration cap at n <= 1000")
    p.add_argument("--cap-4000", type=int, default=200, help="iteration cap above")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--large", type=int, default=0, help="only the online run at this n")
    p.add_argument("--json", help="also write the tables here (for bench/update_docs.py)")
    p.add_argument("--problems-only", action="store_true", help="only POT's test problems (seconds)")
    p.add_argument("--online-rate", type=int, default=0, metavar="N",
                   help="only the online operator's pair rate at n = m = N against its peers")
    p.add_argument("--rate-eps", type=float, default=0.1, help="--online-rate: epsilon")
    p.add_argument("--rate-iterations", type=int, default=5, help="--online-rate: iteration budget of each solver")
    args = p.parse_args()
    if args.problems_only:
        print(markdown(POT_PROBLEMS_HEADER, pot_test_problems(20000, 1e-9, args.seed)))
        return
    if args.large:
        large(args.large, args.seed)
        return
    if args.online_rate:
        online_rate(args.online_rate, args.rate_eps, args.tol, args.rate_iterations, args.seed, args.json)
        return
    bench(args.sizes, args.eps, args.tol, {1000: args.cap_1000, 4000: args.cap_4000}, args.seed, args.json)


if __name__ == "__main__":
    main()
