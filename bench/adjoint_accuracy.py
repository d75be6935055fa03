#!/usr/bin/python3
"""The implicit gradient on near-permutation plans (docs/sinkhorn-transformer.md, "Training health"):
the cost gradient D = P o (w1 + w2^T) - G by its two routes, against the same adjoint system solved
in 200 digits (mpmath): from plan_adjoint's potentials, and as the implicit layer and
tokenflow.torch compute it (plan_cost_gradient: the potentials' D when its rows and columns sum to
0 to rounding, else the flow in a spanning tree's cut basis, which forms no potentials).

Each case: n in [6, 12] points matched to noisy partners, the Sinkhorn plan (eps 1) of their
squared distances scaled to span `spread` epsilons (a trained model's learned cost), and an
upstream gradient of one of two kinds: "target" (-T / 32 with T a permutation / n: the training
losses, whose gradient with respect to the plan is the target divided by the plan) and "general"
(W o P / 32 with W standard normal: any loss of the plan). Prints the relative error of the cost
gradient (max-norm, relative to the reference's max-norm) of each route.

    /usr/bin/python3 bench/adjoint_accuracy.py [--cases 20] [--seed S] [--summary]

--summary prints, instead of a row per case, a row per kind of upstream gradient: the cases, and
for each route its largest error and the cases above 1e-9 (the table in the docs).
"""
import argparse
import datetime
import random
import sys
import warnings
from pathlib import Path

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenflow  # noqa: E402
from tokenflow import _tokenflow  # noqa: E402
from update_docs import cpu_model  # noqa: E402


UNIT = 2.0**-53


def reference_gradient(P, G, digits=200, with_bound=False):
    """D = P o (w1 + w2^T) - G with [diag(P 1) P; P^T diag(P^T 1)] (w1, w2) = (G 1, G^T 1), w2 of the
    last column 0, solved in `digits` digits; with_bound: (D, Skeel's componentwise bound on a
    double solve's D). The bound: a solve backward stable entry by entry, |dH| <= g |H| and
    |dr| <= g |r| with g = 4 (n + m) u (the sums of n + m terms behind every entry), moves w by at
    most g |H^-1| (|H| |w| + |r|), so D_ij by P_ij times that at i and at j, plus the rounding of
    D_ij's own terms."""
    n, m = P.shape
    with mp.workdps(digits):
        size = n + m - 1
        H, r = mp.zeros(size, size), mp.zeros(size, 1)
        Pm, Gm = mp.matrix(P.tolist()), mp.matrix(G.tolist())
        for i in range(n):
            for j in range(m):
                H[i, i] += Pm[i, j]
                r[i] += Gm[i, j]
                if j < m - 1:
                    H[n + j, n + j] += Pm[i, j]
                    H[i, n + j] = H[n + j, i] = Pm[i, j]
                    r[n + j] += Gm[i, j]
        Hinv = H**-1
        z = Hinv * r
        w1 = [z[i] for i in range(n)]
        w2 = [z[n + j] for j in range(m - 1)] + [mp.mpf(0)]
        D = np.array([[float(Pm[i, j] * (w1[i] + w2[j]) - Gm[i, j]) for j in range(m)] for i in range(n)])
        if not with_bound:
            return D
        skeel = Hinv.apply(abs) * (H.apply(abs) * z.apply(abs) + r.apply(abs))
        s1 = [skeel[i] for i in range(n)]
        s2 = [skeel[n + j] for j in range(m - 1)] + [mp.mpf(0)]
        g = 4 * (n + m) * UNIT
        bound = np.array([[float(g * (Pm[i, j] * (s1[i] + s2[j]) + abs(Pm[i, j] * (w1[i] + w2[j])))) + UNIT * abs(G[i, j])
                           for j in range(m)] for i in range(n)])
    return D, bound


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="default: a fresh one (printed)")
    ap.add_argument("--summary", action="store_true", help="a row per kind of upstream gradient")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = np.random.default_rng(seed)
    print(f"seed {seed}")
    if not args.summary:
        print("| case | n | spread (eps) | min plan entry | upstream | potentials' error | plan_cost_gradient's error |\n"
              "|---|---|---|---|---|---|---|")
    errors = {"target": [], "general": []}
    for case in range(args.cases):
        n = int(rng.integers(6, 13))
        x = rng.normal(size=(n, 2))
        y = x[rng.permutation(n)] + 0.05 * rng.normal(size=(n, 2))
        C = ((x[:, None] - y[None]) ** 2).sum(-1)
        spread = float(rng.uniform(50, 400))
        C *= spread / C.max()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the plan need not be converged: both solve the system of this P
            P = np.asarray(tokenflow.sinkhorn(M=C, epsilon=1.0, tol=1e-9).plan)
        kind = "general" if case % 2 == 0 else "target"
        G = rng.normal(size=P.shape) * P / 32 if kind == "general" else -np.eye(n)[rng.permutation(n)] / n / 32
        ref = reference_gradient(P, G)
        w1, w2 = _tokenflow.plan_adjoint_batch([P], [G])[0]
        scale = np.abs(ref).max()
        with np.errstate(all="ignore"):  # the potentials may overflow
            error = np.abs(P * (w1[:, None] + w2[None]) - G - ref).max() / scale
        D = _tokenflow.plan_cost_gradient_batch([P], [G])[0]
        errors[kind].append((error, np.abs(D - ref).max() / scale))
        if not args.summary:
            print(f"| {case} | {n} | {spread:.0f} | {P.min():.1e} | {kind} | {error:.1e} | "
                  f"{np.abs(D - ref).max() / scale:.1e} |", flush=True)
    if args.summary:
        print("| upstream gradient | cases | potentials' route: largest error | above 1e-9 | "
              "plan_cost_gradient: largest error | above 1e-9 |\n|---|---|---|---|---|---|")
        for kind, label in (("target", "target / plan (the training losses)"), ("general", "W o plan (any loss)")):
            e = np.array(errors[kind])
            if len(e):
                print(f"| {label} | {len(e)} | {np.nanmax(np.where(np.isfinite(e[:, 0]), e[:, 0], np.inf)):.1e} | "
                      f"{int(np.sum(~(e[:, 0] <= 1e-9)))} | {e[:, 1].max():.1e} | {int(np.sum(~(e[:, 1] <= 1e-9)))} |")
        print(f"\n_Measured {datetime.date.today().isoformat()} on {cpu_model()} by "
              f"`bench/adjoint_accuracy.py --cases {args.cases} --seed {seed} --summary`; n from 6 to 12, plans "
              "spread over 50 to 400 epsilons, errors relative to the largest entry of the 200-digit gradient._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
