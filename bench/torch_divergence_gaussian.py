"""tokenflow.torch.sinkhorn_divergence with its defaults on ordinary data: Gaussian clouds of 200 and
300 points in 2-D (the second shifted by 1), epsilon 0.1 and 0.05, float32 and float64, seeds 0 to
5: the time of one call (forward only, the three solves in one batch), the value and the number of
ConvergenceWarnings.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_divergence_gaussian.py
"""
import time
import warnings

import torch

import tokenflow.torch as tt


def main():
    for dtype in (torch.float32, torch.float64):
        for eps in (0.1, 0.05):
            for seed in range(6):
                gen = torch.Generator().manual_seed(seed)
                x = torch.randn(200, 2, generator=gen, dtype=torch.float64).to(dtype)
                y = (torch.randn(300, 2, generator=gen, dtype=torch.float64) + 1.0).to(dtype)
                start = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    value = tt.sinkhorn_divergence(x, y, epsilon=eps)
                seconds = time.perf_counter() - start
                print(f"{str(dtype):14s} eps {eps:<5g} seed {seed}  {seconds:6.2f} s  S_eps {value.item():.6g}  "
                      f"warnings {len(caught)}", flush=True)


if __name__ == "__main__":
    main()
