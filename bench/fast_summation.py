#!/usr/bin/python3
"""attention.summation = "fast" against "dense" against NumPy, side by side in one run.

Run by hand from the repository root after `make build` (not part of the tests):
    /usr/bin/python3 bench/fast_summation.py                      # n = 1e3 .. 1e6, d = 2; 2e5 in d = 3
    /usr/bin/python3 bench/fast_summation.py --quick --json build/fast_summation.json

Each tokenflow time is a whole `tokenflow simulate` process with one Euler step (dt = 0.1) from
N(0, I) tokens (f64, scale 1/sqrt(k), W = I): the step's field evaluation, the two frames'
diagnostics (softmax with Q = K: their interaction energy, by the same summation) and the files.
--weights random (the default) draws Q, K, V with entries N(0, 1/d), once per d from a fixed seed
(the matrices go to the JSON); --weights identity takes Q = K = V = I. "exponent" is the slope of
log(fast time) against log(n), fitted over n >= 10^4 where the grid summed most rows (goal: <= 1.1). The dense process is measured up to --dense-max tokens and extrapolated as n^2
beyond (marked "~"). NumPy is one field evaluation, chunked over 2048 queries at a time (float64,
max-shifted exp, this process, OpenBLAS), measured up to --numpy-max and extrapolated as n^2.
"error / bound" is, over 256 random tokens, the largest |Gamma_fast(x_i) - Gamma(x_i)| divided by
the fast summation's bound summation_tol * sum_j P_ij |V x_j| (1e-6 here), Gamma(x_i) and P summed
exactly by NumPy in float64 for those tokens against all n (the fast velocity from the process's
positions: (x_1 - x_0) / dt); "vs dense" is max_i |Gamma_fast - Gamma_dense| / max_i |Gamma_dense|
over all tokens where the dense process ran.
--draws K adds K more draws of random Q, K, V (seeds 1 .. K) at the target sizes, n = 10^6 in d = 2
and 2 10^5 in d = 3, fast only: the whole process's time, the error / bound on 256 random tokens
and the share of rows summed exactly, so the targets are seen on weights the table did not choose.

--clustered measures instead the clouds the dynamics make in d = 3 (tables of their own): three
clusters about 4 apart (centres spanning a plane, 3% stragglers between them) all of spread 0.05
("tight"), of spreads 0.02, 0.1 and 0.3 ("widths"), stretched 0.4 along one axis and 0.02 across
("anisotropic"), beside one Gaussian cloud N(0, I), with 1, 2 and 4 heads of k = kv = 3 (Q, K, V
with entries N(0, 1/d), W averaging the heads), at n = 2 10^5 (and 10^6 with --large, softmax, 1
and 2 heads): the whole process, its time per head against the Gaussian cloud's with one head at
the same n (goal: at most 3x), error / bound on 256 random tokens (the bound summed over the heads)
and the share of rows summed exactly.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))
DT = 0.1


def toml_matrix(M):
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in M) + "]"


def simulate(kind, n, d, summation, work, weights, tokens=None, name=None):
    """One `tokenflow simulate` process, one Euler step. weights: Q, K, V (and W for several heads:
    Q, K, V of heads * k rows); tokens: the path of an n x d .npy (default: N(0, I))."""
    out = os.path.join(work, name or f"{kind}-{d}-{n}-{summation}")
    mean = "[" + ", ".join(["0.0"] * d) + "]"
    matrices = "".join(f"{key} = {toml_matrix(M)}\n" for key, M in zip("QKVW", weights))
    heads = f"heads = {weights[0].shape[0] // d}\n" if len(weights) > 3 else ""
    init = f'kind = "file"\npath = "{tokens}"\n' if tokens else f'kind = "gaussian"\nn = {n}\nmean = {mean}\n'
    toml = (f'seed = 1\n[init]\n{init}'
            f'[attention]\nkind = "{kind}"\nsummation = "{summation}"\n{heads}{matrices}'
            f'[run]\nT = {DT}\ndt = {DT}\nintegrator = "euler"\n')
    config = out + ".toml"
    with open(config, "w") as f:
        f.write(toml)
    start = time.perf_counter()
    r = subprocess.run([CLI, "simulate", "--config", config, "--out", out], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"tokenflow simulate failed ({kind}, n = {n}, {summation}): {r.stderr}")
    x0 = np.load(os.path.join(out, "initial.npy"))
    x1 = np.load(os.path.join(out, "positions.npy"))
    summary = json.load(open(os.path.join(out, "summary.json")))
    return seconds, (x1 - x0) / DT, summary


def numpy_field(kind, x, weights, chunk=2048):
    """One evaluation of the attention (Q, K, V = weights, W = I) in float64, chunked over queries."""
    n, d = x.shape
    Q, K, V = weights
    scale = 1.0 / np.sqrt(d)
    keys, values = x @ K.T, x @ V.T
    out = np.empty_like(values)
    sq = (keys * keys).sum(1)
    for i0 in range(0, n, chunk):
        q = x[i0:i0 + chunk] @ Q.T
        if kind == "softmax":
            logits = scale * (q @ keys.T)
        else:
            logits = -scale * ((q * q).sum(1)[:, None] - 2.0 * (q @ keys.T) + sq[None, :])
        logits -= logits.max(1, keepdims=True)
        w = np.exp(logits)
        out[i0:i0 + chunk] = (w @ values) / w.sum(1, keepdims=True)
    return out


def exact_rows(kind, x, rows, weights, chunk=32):
    """Gamma(x_i) and sum_j P_ij |V x_j| for the tokens `rows` (W = I, float64)."""
    n, d = x.shape
    Q, K, V = weights
    scale = 1.0 / np.sqrt(d)
    keys, values = x @ K.T, x @ V.T
    norms = np.linalg.norm(values, axis=1)
    field, allowed = np.empty((len(rows), d)), np.empty(len(rows))
    for r0 in range(0, len(rows), chunk):
        q = x[rows[r0:r0 + chunk]] @ Q.T
        if kind == "softmax":
            logits = scale * (q @ keys.T)
        else:
            logits = -scale * (((q[:, None, :] - keys[None, :, :]) ** 2).sum(2))
        logits -= logits.max(1, keepdims=True)
        w = np.exp(logits)
        w /= w.sum(1, keepdims=True)
        field[r0:r0 + chunk] = w @ values
        allowed[r0:r0 + chunk] = w @ norms
    return field, allowed


def timed_numpy(kind, n, d, rng, weights):
    x = rng.standard_normal((n, d))
    start = time.perf_counter()
    numpy_field(kind, x, weights)
    return time.perf_counter() - start


def rows_exact_share(summary):
    """The share of the rows the fast summation summed exactly, from a simulate summary.json."""
    s = summary.get("summation", {})
    return s.get("rows_exact", 0) / max(1, s.get("rows_expanded", 0) + s.get("rows_exact", 0))


def seconds_text(t, measured):
    text = f"{t:.3g} s" if t < 100 else f"{t / 60:.3g} min" if t < 6000 else f"{t / 3600:.3g} h"
    return text if measured else "~" + text


SHAPES = ("gaussian", "tight", "widths", "anisotropic")
CLUSTER_CENTRES = np.array([[0.0, 0.0, 0.0], [4.0, 0.0, 0.0], [1.5, 3.5, 0.5]])


def cloud(shape, n, rng):
    """n tokens in d = 3: "gaussian" N(0, I), or three clusters (CLUSTER_CENTRES) with 3% stragglers
    on the segments between them, "tight" (spread 0.05), "widths" (0.02, 0.1, 0.3) or
    "anisotropic" (0.4 along the cluster's own axis, 0.02 across)."""
    if shape == "gaussian":
        return rng.standard_normal((n, 3))
    label = rng.integers(0, 3, size=n)
    spread = {"tight": np.full((3, 3), 0.05), "widths": np.repeat([[0.02], [0.1], [0.3]], 3, axis=1),
              "anisotropic": np.where(np.eye(3) > 0, 0.4, 0.02)}[shape]
    x = CLUSTER_CENTRES[label] + spread[label] * rng.standard_normal((n, 3))
    straggler = rng.random(n) < 0.03
    t = rng.random((n, 1))
    between = (1 - t) * CLUSTER_CENTRES[label] + t * CLUSTER_CENTRES[(label + 1) % 3]
    x[straggler] = between[straggler] + 0.3 * rng.standard_normal((int(straggler.sum()), 3))
    return x


def clustered_run(args):
    """The --clustered tables: clouds the dynamics make in d = 3, 1 to 4 heads (module docstring)."""
    d, k = 3, 3
    work = tempfile.mkdtemp(prefix="tf-fast-clusters-")
    rng = np.random.default_rng(0)
    cases = [(kind, shape, heads, n) for kind in ("softmax", "l2")
             for shape in SHAPES for heads in (1, 2, 4) for n in args.n]
    if args.large:
        cases += [("softmax", shape, heads, 1_000_000) for shape in ("gaussian", "tight") for heads in (1, 2)]
    header = ["attention", "cloud", "heads", "n", "fast", "per head", "per head / Gaussian's", "error / bound",
              "rows summed exactly"]
    table, gaussian, clouds = [], {}, {}
    for kind, shape, heads, n in cases:
        head_rng = np.random.default_rng([41, heads])
        Q, K, V = (head_rng.normal(size=(heads * k, d)) / np.sqrt(d) for _ in range(3))
        W = np.hstack([np.eye(d)] * heads) / heads
        tokens = os.path.join(work, f"{shape}-{n}.npy")
        if (shape, n) not in clouds:  # one cloud per shape and size, for every kind and head count
            clouds[(shape, n)] = cloud(shape, n, np.random.default_rng([7, n, SHAPES.index(shape)]))
            np.save(tokens, clouds[(shape, n)])
        x = clouds[(shape, n)]
        name = f"{kind}-{shape}-{heads}-{n}"
        fast_s, fast_v, summary = simulate(kind, n, d, "fast", work, [Q, K, V, W], tokens, name)
        rows = rng.choice(n, size=256, replace=False)
        field, allowed = np.zeros((256, d)), np.zeros(256)
        for h in range(heads):  # Gamma = sum_h W_h Gamma_h with W_h = I / heads; the bounds add alike
            block = slice(h * k, (h + 1) * k)
            f_h, a_h = exact_rows(kind, x, rows, (Q[block], K[block], V[block]))
            field += f_h / heads
            allowed += a_h / heads
        over_bound = np.max(np.linalg.norm(fast_v[rows] - field, axis=1) / (1e-6 * allowed))
        exact_share = rows_exact_share(summary)
        if shape == "gaussian" and heads == 1:
            gaussian[(kind, n)] = fast_s
        per_head = fast_s / heads
        ratio = f"{per_head / gaussian[(kind, n)]:.2f}" if (kind, n) in gaussian else "n/a"
        table.append([kind, shape, heads, f"{n:,}", seconds_text(fast_s, True), seconds_text(per_head, True),
                      ratio, f"{over_bound:.1e}", f"{100 * exact_share:.2g}%"])
        print("  ".join(map(str, table[-1])), flush=True)
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in table:
        print("| " + " | ".join(map(str, r)) + " |")
    if args.json:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["bench/fast_summation.py", *sys.argv[1:]]), "header": header,
                       "rows": table, "matrices_seed": 41, "load_average": os.getloadavg()[0]}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="n up to 1e5 (a minute)")
    p.add_argument("--dense-max", type=int, default=100_000)
    p.add_argument("--numpy-max", type=int, default=30_000)
    p.add_argument("--json", help="also write the tables here (for bench/update_docs.py --fast-summation)")
    p.add_argument("--weights", choices=("random", "identity"), default="random")
    p.add_argument("--draws", type=int, default=0, help="more random draws at the target sizes (fast only)")
    p.add_argument("--clustered", action="store_true",
                   help="instead: clustered clouds in d = 3 with 1 to 4 heads (bench/update_docs.py --fast-clusters)")
    p.add_argument("--n", type=int, nargs="+", default=[200_000], help="with --clustered: the sizes")
    p.add_argument("--large", action="store_true", help="with --clustered: also n = 10^6")
    args = p.parse_args()
    if args.clustered:
        return clustered_run(args)
    ns = [1000, 3000, 10_000, 30_000, 100_000] + ([] if args.quick else [300_000, 1_000_000])
    weights = {}
    for d in (2, 3):
        w_rng = np.random.default_rng(29 + d)
        weights[d] = [np.eye(d) if args.weights == "identity" else w_rng.normal(size=(d, d)) / np.sqrt(d)
                      for _ in range(3)]
    cases = [(kind, 2, n) for kind in ("softmax", "l2") for n in ns]
    cases += [(kind, 3, n) for kind in ("softmax", "l2") for n in ([20_000] if args.quick else [20_000, 60_000, 200_000])]
    work = tempfile.mkdtemp(prefix="tf-fast-summation-")
    rng = np.random.default_rng(0)
    header = ["attention", "d", "n", "fast", "dense", "NumPy (chunked)", "dense / fast", "NumPy / fast",
              "error / bound", "vs dense", "rows summed exactly"]
    table, crossover, fast_times = [], {}, {}
    dense_ref, numpy_ref = {}, {}
    for kind, d, n in cases:
        fast_s, fast_v, summary = simulate(kind, n, d, "fast", work, weights[d])
        x0 = np.load(os.path.join(work, f"{kind}-{d}-{n}-fast", "initial.npy"))
        rows = rng.choice(n, size=min(n, 256), replace=False)
        exact, allowed = exact_rows(kind, x0, rows, weights[d])
        over_bound = np.max(np.linalg.norm(fast_v[rows] - exact, axis=1) / (1e-6 * allowed))
        key = (kind, d)
        if n <= args.dense_max:
            dense_s, dense_v, _ = simulate(kind, n, d, "dense", work, weights[d])
            dense_ref[key] = (n, dense_s)
            error = np.abs(fast_v - dense_v).max() / np.abs(dense_v).max()
            dense_text, error_text = seconds_text(dense_s, True), f"{error:.1e}"
        else:
            n0, t0 = dense_ref[key]
            dense_s = t0 * (n / n0) ** 2
            dense_text, error_text = seconds_text(dense_s, False), "n/a"
        if n <= args.numpy_max:
            numpy_s = timed_numpy(kind, n, d, rng, weights[d])
            numpy_ref[key] = (n, numpy_s)
            numpy_text = seconds_text(numpy_s, True)
        else:
            n0, t0 = numpy_ref[key]
            numpy_s = t0 * (n / n0) ** 2
            numpy_text = seconds_text(numpy_s, False)
        # The crossover: the first n from which the fast process stays ahead.
        if dense_s > fast_s:
            crossover.setdefault(key, n)
        else:
            crossover.pop(key, None)
        exact_share = rows_exact_share(summary)
        fast_times.setdefault((kind, d), []).append((n, fast_s, exact_share))
        table.append([kind, d, f"{n:,}", seconds_text(fast_s, True), dense_text, numpy_text,
                      f"{dense_s / fast_s:.3g}", f"{numpy_s / fast_s:.3g}", f"{over_bound:.1e}", error_text,
                      f"{100 * exact_share:.2g}%"])
        print("  ".join(map(str, table[-1])), flush=True)
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in table:
        print("| " + " | ".join(map(str, r)) + " |")
    crossover_text = {f"{k[0]}, d = {k[1]}": v for k, v in crossover.items()}
    print("crossover (the first n from which fast stays ahead of dense):", crossover_text)
    exponents = {}
    for (kind, d), times in fast_times.items():
        # The grid's scaling: sizes where it summed most rows (below, the cost rule may send every
        # row to exact sums, which are faster there and O(n^2)).
        fit = [(n, t) for n, t, exact in times if n >= 10_000 and exact < 0.5]
        if len(fit) >= 2:
            slope = np.polyfit(np.log([n for n, _ in fit]), np.log([t for _, t in fit]), 1)[0]
            exponents[f"{kind}, d = {d}"] = round(float(slope), 3)
    print("exponent of the fast time in n (n >= 1e4, the grid summing most rows):", exponents)
    draws = []
    for draw in range(1, args.draws + 1):
        for kind, d, n in [(kind, 2, 1_000_000) for kind in ("softmax", "l2")] + \
                          [(kind, 3, 200_000) for kind in ("softmax", "l2")]:
            w_rng = np.random.default_rng([draw, d])
            drawn = [w_rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3)]
            fast_s, fast_v, summary = simulate(kind, n, d, "fast", work, drawn)
            x0 = np.load(os.path.join(work, f"{kind}-{d}-{n}-fast", "initial.npy"))
            rows = rng.choice(n, size=256, replace=False)
            exact, allowed = exact_rows(kind, x0, rows, drawn)
            over_bound = np.max(np.linalg.norm(fast_v[rows] - exact, axis=1) / (1e-6 * allowed))
            exact_share = rows_exact_share(summary)
            draws.append([draw, kind, d, f"{n:,}", seconds_text(fast_s, True), f"{over_bound:.1e}",
                          f"{100 * exact_share:.2g}%"])
            print("draw", "  ".join(map(str, draws[-1])), flush=True)
    if args.json:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from update_docs import cpu_model

        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
                       "command": " ".join(["bench/fast_summation.py", *sys.argv[1:]]), "header": header,
                       "rows": table, "crossover": crossover_text, "exponents": exponents,
                       "weights": args.weights, "matrices": {str(d): [M.tolist() for M in w] for d, w in weights.items()},
                       "draws": {"header": ["draw", "attention", "d", "n", "fast", "error / bound",
                                            "rows summed exactly"], "rows": draws},
                       "load_average": os.getloadavg()[0]}, f, indent=1)


if __name__ == "__main__":
    main()
