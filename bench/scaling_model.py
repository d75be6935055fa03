#!/usr/bin/python3
"""The scaling model of docs/scaling.md: time of one softmax velocity evaluation on P ranks,

    t_P(n) = c_pair n^2 / P              (the fused kernel on the rank's n / P queries)
           + s_token n                   (every rank projects all n keys and runs the integrator
                                          on all n tokens: not divided by P)
           + (P - 1) alpha + (P - 1) / P * 8 n d / beta    (ring all-gather of n d doubles)

and the parallel efficiency E = c_pair n^2 / (P t_P). Prints, per network, the smallest n at which
E >= 1/2 (the cluster "pays off": at least half the ideal speed-up) and E at a few (n, P).
c_pair is measured here (bench/run_scaling.sh, 1 rank x 1 thread, the fastest of three runs at
n = 16384); alpha and beta of shared memory are measured here (allgather mode); the cluster figures
are typical published ones (see docs/scaling.md); s_token is an estimate, not a measurement."""

C_PAIR = {4: 1.47e-9, 12: 2.11e-9}  # s per (query, key) pair, f64, one AVX-512 core
S_TOKEN = {4: 15e-9, 12: 100e-9}     # s per token per evaluation, serial part (estimate)
NETWORKS = {
    "shared memory, 2 ranks (measured here)": (0.4e-6, 7.6e9),
    "InfiniBand HDR 100 Gb/s (typical)": (2e-6, 12.5e9),
    "10 GbE, TCP (typical)": (30e-6, 1.0e9),
}


def t_parallel(n, d, p, alpha, beta):
    return C_PAIR[d] * n * n / p + S_TOKEN[d] * n + (p - 1) * alpha + (p - 1) / p * 8 * n * d / beta


def efficiency(n, d, p, alpha, beta):
    return C_PAIR[d] * n * n / (p * t_parallel(n, d, p, alpha, beta))


def break_even(d, p, alpha, beta):
    n = 8
    while efficiency(n, d, p, alpha, beta) < 0.5:
        n = int(n * 1.02) + 1
    return n


if __name__ == "__main__":
    for name, (alpha, beta) in NETWORKS.items():
        print(f"{name}: alpha = {alpha * 1e6:g} us, beta = {beta / 1e9:g} GB/s")
        for d in (4, 12):
            cells = ", ".join(f"P={p}: n >= {break_even(d, p, alpha, beta)}" for p in (2, 8, 64, 512))
            print(f"  d={d}: efficiency >= 1/2 when {cells}")
            cells = ", ".join(f"n={n}, P={p}: {efficiency(n, d, p, alpha, beta):.2f}"
                              for n, p in ((16384, 2), (16384, 64), (65536, 64), (65536, 512)))
            print(f"  d={d}: efficiency {cells}")
