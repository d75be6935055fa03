"""The universal-approximation figure: test W_1 of trained Sinkhorn Transformers against their
number of parameters, from `tokenflow reproduce universal-approximation --out DIR` (DIR/sweep.csv).

    plot(out_dir)                      -> writes out_dir/sweep.png, returns its path
    /usr/bin/python3 figures_universal.py DIR
"""
import csv
import os
import sys


def read_sweep(out_dir):
    with open(os.path.join(out_dir, "sweep.csv")) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in r:
            r[k] = float(r[k])
    return sorted(rows, key=lambda r: r["parameters"])


def plot(out_dir, filename="sweep.png"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_sweep(out_dir)
    params = [r["parameters"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(params, [r["test_w1"] for r in rows], "o-", color="C0", label="trained")
    ax.plot(params, [r["test_w1_untrained"] for r in rows], "s--", color="C7", alpha=0.7, label="untrained")
    ax.axhline(rows[0]["test_w1_independent"], color="C3", ls=":", label=r"independent coupling $a b^T$")
    for r in rows:
        ax.annotate(f"{int(r['width'])}x{int(r['layers'])}", (r["parameters"], r["test_w1"]),
                    textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters (width x layers)")
    ax.set_ylabel(r"test $W_1(\pi_\theta, \pi^*)$ on $X \times Y$")
    ax.set_title("Sinkhorn Transformer on entropic OT, cost $|x - y|$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, filename)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: figures_universal.py OUT_DIR (holding sweep.csv)")
    print(plot(sys.argv[1]))
