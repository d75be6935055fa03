"""The figures of ``tokenflow reproduce NAME`` and ``tokenflow demo``, drawn from their data.

The C++ commands compute and write data; then they run

    python3 -m tokenflow.figures NAME DIR    draw NAME's figures from DIR into DIR/*.png
    python3 -m tokenflow.figures demo DIR    the same for every reproduction of a demo run
                                             (DIR/<name>/ -> DIR/*.png) and DIR/report.html

Both also write DIR/figures.json: for every figure its file, title, two-line explanation and
the numbers behind it (read from the data, as the report shows them).

FIGURES is the registry, one entry per reproduction name (the same names as the C++ registry in
src/cli/reproduce.cpp). An entry is a list of Figure specs; `draw(dir)` reads only files in dir
and returns (matplotlib Figure, {label: number}). The data layouts are documented in
docs/ARCHITECTURE-python.md.
"""
from __future__ import annotations

import json
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import plot


@dataclass
class FigureSpec:
    file: str                               # PNG name, written into the output directory
    title: str
    explanation: str                        # two lines: what is shown, what the theory predicts;
                                            # {label} fields are filled from the numbers (sizes
                                            # differ between the demo, --quick and a plain run)
    draw: Callable[[Path], tuple]           # dir -> (Figure, {label: number})

    def explain(self, numbers: dict) -> str:
        """The explanation with its {label} fields replaced by the numbers the figure shows."""
        from .report import format_number

        return self.explanation.format_map({k: format_number(v) for k, v in numbers.items()})


def _summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


# ---- sphere ----------------------------------------------------------------------------------------

def draw_sphere_snapshots(d: Path):
    run = plot.read_simulation(d / "snapshots")
    times = run["times"]
    wanted = [0.0, 1.0, 3.0, 6.0, float(times[-1])]
    frames = sorted({int(np.argmin(np.abs(times - w))) for w in wanted})
    fig = plot.particles(run["trajectory"], times, frames=frames, sphere=True)
    diag = run["diagnostics"]
    clusters = diag["clusters"]
    for ax, f in zip(fig.axes, frames):  # each snapshot's cluster count (diagnostics at the same time)
        row = np.flatnonzero(np.isclose(diag["t"], times[f]))
        if row.size:
            c = int(clusters[row[0]])
            ax.set_title(f"t = {times[f]:.3g}: {c} cluster{'s' if c != 1 else ''}")
    config = tomllib.loads((d / "snapshots" / "config.toml").read_text())
    beta = float(config.get("attention", {}).get("scale", 1.0))
    fig.suptitle(f"{run['summary']['n']} tokens on the unit sphere S^{run['summary']['d'] - 1}, "
                 f"self-attention with Q = K = V = I, beta = {beta:g}")
    plot._tidy(fig)
    fig.tight_layout()
    numbers = {"n": run["summary"]["n"], "d": run["summary"]["d"], "beta": beta, "T": run["summary"]["t_final"],
               "clusters at t = 0": int(clusters[0]), "clusters at T": int(clusters[-1]),
               "max | |x_i| - 1 | at T": float(np.max(np.abs(np.linalg.norm(run["positions"], axis=1) - 1)))}
    return fig, numbers


def draw_sphere_beta(d: Path):
    betas, times = np.load(d / "betas.npy"), np.load(d / "times.npy")
    fraction = np.load(d / "clustered_fraction.npy")
    s = _summary(d)["beta_sweep"]
    fig = plot.cluster_fraction(betas, times, fraction, pair_tol=s["pair_tol"],
                                title=f"{s['n']} tokens on the unit circle: clustered pairs against beta")
    last = fraction[:, :, -1].mean(axis=0)
    numbers = {"n": s["n"], "d": s["d"], "T": float(times[-1]), "betas": len(betas),
               "initial conditions per beta": fraction.shape[0],
               "pair distance below": s["pair_tol"],
               f"clustered pairs at T, beta = {betas[0]:.2g}": float(last[0]),
               f"clustered pairs at T, beta = {betas[-1]:.2g}": float(last[-1])}
    return fig, numbers


# ---- normalizations --------------------------------------------------------------------------------

def draw_normalizations(d: Path):
    softmax, sinkhorn = np.load(d / "softmax.npy"), np.load(d / "sinkhorn.npy")
    fig = plot.heatmaps({"softmax: rows sum to 1": softmax, "Sinkhorn: rows and columns sum to 1": sinkhorn},
                        title=f"Attention weights W_ij of the same {softmax.shape[0]} tokens and logits")
    numbers = {"n": softmax.shape[0]}
    for name, w in (("softmax", softmax), ("Sinkhorn", sinkhorn)):
        numbers[f"{name}: max |row sum - 1|"] = float(np.max(np.abs(w.sum(axis=1) - 1)))
        numbers[f"{name}: max |column sum - 1|"] = float(np.max(np.abs(w.sum(axis=0) - 1)))
    return fig, numbers


# ---- collapse --------------------------------------------------------------------------------------

def collapse_prediction(config: dict, initial: np.ndarray, times: np.ndarray, S0=None) -> np.ndarray:
    """Covariance eigenvalues of the Gaussian closure for softmax, one head, V = W = I
    (docs/design.md section 1): S(t) = (S0^{-1} - t (A + A^T))^{-1}, A = scale K^T Q, S0 the
    covariance of the initial tokens (or the one given). Returns F x d (ascending)."""
    att = config.get("attention", {})
    Q, K = np.array(att["Q"], dtype=float), np.array(att["K"], dtype=float)
    scale = att.get("scale", 1.0 / np.sqrt(Q.shape[0]))
    A = scale * K.T @ Q
    S0 = np.cov(initial.T, bias=True) if S0 is None else np.asarray(S0, dtype=float)
    inv = np.linalg.inv(S0)
    return np.array([np.linalg.eigvalsh(np.linalg.inv(inv - t * (A + A.T))) for t in times])


def draw_collapse(d: Path):
    run = plot.read_simulation(d / "simulation")
    config = tomllib.loads((d / "simulation" / "config.toml").read_text())
    diag = run["diagnostics"]
    lam = plot.diagnostics_eigenvalues(diag)
    predicted = collapse_prediction(config, run["initial"], diag["t"])
    fig = plot.new_figure(13.0, 3.8)
    traj = run["trajectory"]
    lim = float(np.max(np.abs(traj[0]))) * 1.05
    for k, f in enumerate(np.linspace(0, len(traj) - 1, 4).round().astype(int)):
        ax = fig.add_subplot(1, 5, k + 1)
        ax.scatter(traj[f][:, 0], traj[f][:, 1], s=2, alpha=0.4, linewidths=0)
        ax.set_xlim(-lim, lim), ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=7)
        ax.set_xlabel("x_1", fontsize=8), ax.set_ylabel("x_2", fontsize=8)
        ax.set_title(f"tokens at t = {run['times'][f]:.3g}", fontsize=9)
    plot.covariance_eigenvalues(diag["t"], lam, predicted=predicted, ax=fig.add_subplot(1, 5, 5),
                                title="covariance eigenvalues")
    fig.suptitle(f"{run['summary']['n']} Gaussian tokens under softmax attention, K = -Q of rank one")
    plot._tidy(fig)
    fig.tight_layout()
    rel = np.abs(lam - predicted) / np.abs(predicted)
    numbers = {"n": run["summary"]["n"], "T": run["summary"]["t_final"],
               "eigenvalues at t = 0": lam[0].tolist(), "eigenvalues at T": lam[-1].tolist(),
               "closed form at T": predicted[-1].tolist(),
               "max relative gap to the closed form": float(np.max(rel)),
               "covariance rank at T (rank_tol 1e-3)": int(diag["rank"][-1])}
    return fig, numbers


# ---- the Gaussian closure: cone, ranks, blowup, meanfield ----------------------------------------

def _gaussian_run(d: Path) -> dict:
    """A `tokenflow gaussian` output directory: times, means, covs and summary."""
    return {"times": np.load(d / "times.npy"), "means": np.load(d / "means.npy"), "covs": np.load(d / "covs.npy"),
            "summary": json.loads((d / "summary.json").read_text())}


OUTCOME_COLORS = {"to 0": "C0", "to a line": "C2", "blow-up": "C3", "grows": "C1", "stays": "0.5"}


def draw_cone(d: Path):
    table = plot.read_csv(d / "cone.csv")  # kind, run, regime, ..., status, outcome, ...
    kinds = [k for k in ("softmax", "l2", "multihead", "sinkhorn") if k in set(table["kind"])]
    fig = plot.new_figure(4.0 * len(kinds), 7.6)
    numbers = {}
    for col, kind in enumerate(kinds):
        rows = [i for i, k in enumerate(table["kind"]) if k == kind]
        runs = [_gaussian_run(d / kind / str(int(table["run"][i]))) for i in rows]
        outcomes = [table["outcome"][i] for i in rows]
        colors = [OUTCOME_COLORS.get(o, "k") for o in outcomes]
        start = max(float(np.trace(r["covs"][0])) / 2 for r in runs)
        ax = fig.add_subplot(2, len(kinds), col + 1, projection="3d")
        plot.psd_cone([r["covs"] for r in runs], colors=colors, ax=ax, title=f"{kind}: S(t) in the PSD cone",
                      height=1.3 * start)
        ax.view_init(elev=18, azim=-60)
        legend = ax.get_legend()  # the surface and the markers: in the figure's legend below
        cone_handles = getattr(legend, "legend_handles", None) or legend.legendHandles
        legend.remove()
        # Below: trace S against t (log-log): 1/t for convergence to 0, flat for a line, a wall at
        # the blow-up time, exponential growth otherwise.
        ax2 = fig.add_subplot(2, len(kinds), len(kinds) + col + 1)
        for r, color in zip(runs, colors):
            t, tr = r["times"], np.trace(r["covs"], axis1=1, axis2=2)
            keep = t > 0
            ax2.plot(t[keep], tr[keep], color=color, linewidth=2, alpha=0.6)
        # The theory on top: the 1/t rate of the contractions (through the slowest one's last
        # point), and the closed-form blow-up times t* (triangles at the top).
        to_zero = [r for r, o in zip(runs, outcomes) if o == "to 0"]
        if to_zero:
            r = max(to_zero, key=lambda r: float(np.trace(r["covs"][-1])))
            t_end, tr_end = float(r["times"][-1]), float(np.trace(r["covs"][-1]))
            tt = np.geomspace(t_end / 100, t_end, 20)
            ax2.plot(tt, tr_end * t_end / tt, "k--", linewidth=1.1, zorder=3, label="1/t rate (theory)")
        tstars = [float(table["predicted_blowup_time"][i]) for i in rows
                  if np.isfinite(table["predicted_blowup_time"][i])]
        if tstars:
            ax2.plot(tstars, np.full(len(tstars), 3e3), "kv", markersize=5, zorder=3, label="closed-form t*")
        ax2.set_xscale("log"), ax2.set_yscale("log")
        ax2.set_ylim(1e-3, 1e4)
        ax2.set_xlabel("t"), ax2.set_ylabel("trace S(t)")
        ax2.set_title(f"{kind}: trace S(t)")
        for o in sorted(set(outcomes)):
            numbers[f"{kind}: {o}"] = outcomes.count(o)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color, linewidth=2, label=f"outcome: {label}")
               for label, color in OUTCOME_COLORS.items() if label in set(table["outcome"])]
    handles += [Line2D([], [], color="k", linestyle="--", linewidth=1.1, label="1/t rate (theory)"),
                Line2D([], [], color="k", marker="v", linestyle="none", markersize=5,
                       label="closed-form blow-up time t*")]
    handles += cone_handles
    fig.legend(handles=handles, loc="lower center", ncol=(len(handles) + 1) // 2, fontsize=8, frameon=False)
    plot._tidy(fig)
    fig.tight_layout(rect=(0, 0.07, 0.98, 1))  # room on the right for the last z label
    s = _summary(d)
    numbers["starts per regime"] = s["starts"]
    numbers["regimes per kind"] = len({table["regime"][i] for i in range(len(table["kind"]))
                                       if table["kind"][i] == kinds[0]})
    numbers["max |t_blowup - t*| / t* (closed forms)"] = s["blowup_time_max_relative_gap"]
    return fig, numbers


def draw_ranks(d: Path):
    table = plot.read_csv(d / "ranks.csv")  # columns d, trial, identity (1: V = I, 0: V random PSD), status, rank
    dims = sorted({int(v) for v in table["d"]})
    ranks, expected, numbers = {}, {}, {}
    status = np.array(table["status"])
    for dim in dims:
        sel = table["d"] == dim
        ident = table["rank"][sel & (table["identity"] == 1)].astype(int)
        psd = table["rank"][sel & (table["identity"] == 0)].astype(int)
        ranks[dim] = {"V = I": ident, "V random PSD": psd}
        expected[dim] = (dim + 1) // 2
        numbers[f"d = {dim}, V = I: runs with rank (d + 1) // 2 = {expected[dim]}"] = (
            f"{int(np.sum(ident == expected[dim]))} of {len(ident)}")
        numbers[f"d = {dim}, V = I: converged"] = (
            f"{int(np.sum(status[sel & (table['identity'] == 1)] == 'converged'))} of {len(ident)}")
        numbers[f"d = {dim}, V random PSD: runs per rank"] = {int(r): int(np.sum(psd == r)) for r in np.unique(psd)}
        numbers[f"d = {dim}, V random PSD: converged"] = (
            f"{int(np.sum(status[sel & (table['identity'] == 0)] == 'converged'))} of {len(psd)}")
    numbers = {"runs per d and V": len(ranks[dims[0]]["V = I"]), "d": ", ".join(str(v) for v in dims), **numbers}
    fig = plot.rank_histograms(ranks, expected=expected,
                               title="Rank of the limiting covariance (moment ODE), random Q of rank d // 2, K = -Q")
    return fig, numbers


def draw_blowup(d: Path):
    s = _summary(d)
    tstar = s["predicted_blowup_time"]
    fig = plot.new_figure(11.0, 4.2)
    numbers = {"predicted t*": tstar, "softmax: blow-up time of the ODE": s["softmax_blowup_time"],
               "relative error": s["blowup_time_relative_error"], "l2: status": s["l2_status"],
               "l2: trace S at T = %g" % s["l2_t_final"]: s["l2_final_trace"]}
    for k, kind in enumerate(("softmax", "l2")):
        run = _gaussian_run(d / kind)
        ax = fig.add_subplot(1, 2, k + 1)
        status = run["summary"]["status"]
        what = {"blowup": f"the moment ODE blows up at t = {run['summary'].get('blowup_time') or float('nan'):.4g}",
                "horizon": f"finite up to T = {run['times'][-1]:.3g}"}.get(status, status)
        plot.covariance_eigenvalues(run["times"], plot.eigenvalues_of(run["covs"]),
                                    blowup_time=tstar if kind == "softmax" else None, ax=ax,
                                    title=f"{kind} attention: {what}")
        particles = d / "particles" / kind
        if (particles / "diagnostics.csv").exists():
            diag = plot.read_csv(particles / "diagnostics.csv")
            lam = plot.diagnostics_eigenvalues(diag)[:, ::-1]
            n = _summary(particles)["n"]
            for c in range(lam.shape[1]):
                ax.plot(diag["t"], lam[:, c], "o", color=f"C{c}", markersize=4, markerfacecolor="none",
                        label=f"lambda_{c + 1}, {n} particles")
            ax.legend(fontsize=8, title="lines: moment ODE", title_fontsize=8)
            numbers[f"{kind}: n particles"] = n
            if kind == "softmax":
                # Against the closed form from the particles' own initial covariance (no sampling
                # error at t = 0): the gap the dynamics add, half-way to t* and at the last frame.
                config = tomllib.loads((particles / "config.toml").read_text())
                initial = np.load(particles / "initial.npy")
                half = int(np.argmin(np.abs(diag["t"] - tstar / 2)))
                for f in (half, len(diag["t"]) - 1):
                    closed = collapse_prediction(config, initial, diag["t"][f:f + 1])[0][::-1]
                    numbers[f"softmax particles vs closed form (own S0), t = {diag['t'][f] / tstar:.2f} t*"] = (
                        float(np.max(np.abs(lam[f] - closed) / closed)))
            else:
                numbers[f"l2 particles vs ODE, largest relative gap at t = {diag['t'][-1]:.3g}"] = (
                    s["particles_l2_relative_gap_at_T"])
        if kind == "softmax":
            ax.set_xlim(0, 1.1 * tstar)
    fig.suptitle("Covariance eigenvalues from the same start, Q = K = I: moment ODE (lines) and particles (circles)")
    plot._tidy(fig)
    fig.tight_layout()
    return fig, numbers


def draw_meanfield(d: Path):
    table = plot.read_csv(d / "meanfield.csv")  # n, sample, seed, status, errors..., seconds
    s = _summary(d)
    ns = np.unique(table["n"])
    fig = plot.new_figure(11.0, 4.2)
    columns = [("bures_wasserstein", "ODE from N(m0, S0), the law sampled"),
               ("bures_wasserstein_from_sample", "ODE from the sample's own moments")]
    for k, (column, start) in enumerate(columns):
        errors = np.array([table[column][table["n"] == n] for n in ns])
        plot.meanfield_errors(ns, errors, reference_slope=-0.5, ylabel=f"W_2(Gaussian fit of particles, ODE) at T = {s['T']:g}",
                              center="rms", ax=fig.add_subplot(1, 2, k + 1), label="RMS over samples",
                              title=start)
    weights = ", random Q, K ~ N(0, 1/2)" if s.get("random_weights") else ""
    fig.suptitle(f"Mean-field limit: particles against the moment ODE (Gaussian closure{weights}), log-log")
    plot._tidy(fig)
    fig.tight_layout()
    return fig, {"n from": int(ns[0]), "n to": int(ns[-1]), "samples per n": s["seeds"], "T": s["T"],
                 "fitted slope (from N(m0, S0))": s["slopes"]["bures_wasserstein"],
                 "fitted slope (from the sample's moments)": s["slopes"]["bures_wasserstein_from_sample"],
                 "predicted slope": s["theory_slope"]}


def draw_clustering(d: Path):
    s = _summary(d)
    run = d / "run"
    trajectory, times = np.load(run / "trajectory.npy"), np.load(run / "times.npy")
    clusters = np.load(d / "clusters.npy")
    fig = plot.new_figure(11.0, 4.2)
    ax = fig.add_subplot(1, 2, 1)
    picks = sorted({0, len(times) // 4, len(times) // 2, len(times) - 1})
    bins = np.linspace(-np.pi, np.pi, 181)
    for k, f in enumerate(picks):
        angle = np.arctan2(trajectory[f, :, 1], trajectory[f, :, 0])
        density, _ = np.histogram(angle, bins=bins, density=True)
        ax.step(bins[:-1], density, where="post", color=f"C{k}", label=f"t = {times[f]:g}")
    ax.set_yscale("log")
    ax.set_xlabel("angle of the token (rad)"), ax.set_ylabel("density of tokens (1/rad, log)")
    ax.set_title(f"n = {s['n']:,} tokens on the circle, beta = {s['beta']:g}", fontsize=10)
    ax.legend(fontsize=8, title="angle histograms (180 bins)")
    ax2 = fig.add_subplot(1, 2, 2)
    ax2.plot(times, clusters, "o-", color="C0", label=f"groups separated by empty arcs > {s['gap_radians']:g} rad")
    ax2.set_xlabel("t"), ax2.set_ylabel("number of clusters")
    ax2.set_title("clusters over time", fontsize=10)
    ax2.legend(fontsize=8)
    weights = "random Q, K ~ N(0, 1/2), V = I" if s.get("random_weights") else "Q = K = V = I"
    fig.suptitle(f"Clustering of self-attention on the circle at large n (softmax, {weights})")
    plot._tidy(fig)
    fig.tight_layout()
    summation = s.get("summation", {})
    return fig, {"n": s["n"], "beta": s["beta"], "T": s["T"], "clusters at T": int(s["final_clusters"]),
                 "velocity evaluations by the fast summation": summation.get("fast_evaluations", 0),
                 "densely": summation.get("dense_evaluations", 0),
                 "simulate seconds": s["simulate_seconds"]}


def draw_universal_approximation(d: Path):
    rows = plot.read_csv(d / "sweep.csv")  # width, layers, k, parameters, test_w1, ...
    order = np.argsort(rows["parameters"])
    params = rows["parameters"][order]
    fig = plot.new_figure(6.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(params, rows["test_w1"][order], "o-", color="C0", label="trained (labels: width x layers)")
    ax.plot(params, rows["test_w1_untrained"][order], "s:", color="0.5", label="untrained")
    ax.axhline(float(np.mean(rows["test_w1_independent"])), color="C3", linestyle="--",
               label="independent coupling a b^T")
    for p, w, width, layers in zip(params, rows["test_w1"][order], rows["width"][order], rows["layers"][order]):
        ax.annotate(f"{int(width)}x{int(layers)}", (p, w), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("parameters"), ax.set_ylabel("test W_1 to the target coupling")
    ax.set_title(f"Sinkhorn Transformers of {len(params)} sizes: test error against parameters")
    ax.legend(fontsize=8)
    plot._tidy(fig)
    fig.tight_layout()
    s = json.loads((d / "summary.json").read_text())
    independent = float(np.mean(rows["test_w1_independent"]))
    return fig, {"models": len(params), "W_1 smallest model": s["w1_smallest_model"],
                 "W_1 largest model": s["w1_largest_model"], "falls with capacity": s["w1_falls_with_capacity"],
                 "W_1 independent coupling": independent,
                 "largest model / independent coupling": s["w1_largest_model"] / independent}


# ---- the gradient-flow structure: energy-dissipation, nonconvexity, sinkhorn-bures ---------------

def _cumulative_trapezoid(t, f):
    return np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(t))])


def draw_energy_dissipation(d: Path):
    s = _summary(d)
    fig = plot.new_figure(14.0, 4.2)
    ax1, ax2, ax3 = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    for name, run, color in (("inside: V = A", d / "inside" / "dopri5", "C0"),
                             ("outside: V = R A", d / "outside" / "rk4", "C3")):
        t, E = np.load(run / "times.npy"), np.load(run / "energy.npy")
        rate, slope2 = np.load(run / "rate.npy"), np.load(run / "slope_squared.npy")
        ax1.plot(t, E - E[0], color=color, linewidth=4, alpha=0.4, label=f"{name}: E(t) - E(0)")
        ax1.plot(t, _cumulative_trapezoid(t, slope2), "k--", linewidth=1)
        ax2.plot(t, rate, color=color, linewidth=4, alpha=0.4, label=f"{name}: dE/dt (chain rule)")
        ax2.plot(t, slope2, "k--", linewidth=1)
    ax1.plot([], [], "k--", label="int_0^t |dE|^2 (metric slope squared)")
    ax1.set_xlabel("t"), ax1.set_ylabel("energy change"), ax1.set_title("energy-dissipation identity", fontsize=10)
    ax1.legend(fontsize=7)
    ax2.plot([], [], "k--", label="|dE|^2")
    ax2.set_xlabel("t"), ax2.set_ylabel("rate (energy per unit time)")
    ax2.set_title("rates at every frame", fontsize=10)
    ax2.legend(fontsize=7)
    for name, marker, order in (("rk4", "o-", 4), ("euler", "s-", 1)):
        entry = s["integrators"][name]
        dt, gap = np.array(entry["dt"]), np.array(entry["gap"])
        ax3.loglog(dt, gap, marker, label=f"{name} (observed order {entry['observed_order'][-1]:.2f})")
        ax3.loglog(dt, gap[-1] * (dt / dt[-1]) ** order, "k:", linewidth=1)
    ax3.axhline(s["dopri5"]["gap"], color="C2", linestyle="--", label="dopri5, tol 1e-10")
    from matplotlib import ticker

    # dt spans about one decade: label the ticks 1, 2 and 5 times the powers of ten.
    ax3.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax3.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax3.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax3.plot([], [], "k:", label="slopes 4 and 1")
    ax3.set_xlabel("dt"), ax3.set_ylabel("max_k |E_k - E_0 - int |dE|^2| / int |dE|^2")
    ax3.set_title("the gap converges at the integrator's order", fontsize=10)
    ax3.legend(fontsize=7)
    plot._tidy(fig)
    fig.tight_layout()
    rk4 = s["integrators"]["rk4"]
    numbers = {"n": s["n"], "T": s["T"], "A": s["A"], "V outside": s["V_outside"],
               f"max relative gap inside (rk4, dt = {s['max_relative_gap_dt']:g})": s["max_relative_gap"],
               "gap outside": s["gap_outside"], "rk4 gaps": rk4["gap"], "rk4 observed orders": rk4["observed_order"],
               "euler observed orders": s["integrators"]["euler"]["observed_order"],
               "dopri5 gap (tol 1e-10)": s["dopri5"]["gap"],
               f"two time-dependent layers: gap (rk4, dt = {s['layers_dt']:g})": s["layers_gap"],
               "outside: E(T) - E(0)": s["outside_energy_change"], "outside: int |dE|^2": s["outside_dissipation"]}
    return fig, numbers


def draw_nonconvexity(d: Path):
    s = _summary(d)
    grid = np.load(d / "s.npy")
    fig = plot.new_figure(12.0, 4.2)
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for pair, color in (("through_origin", "C3"), ("away_from_origin", "C0")):
        for kind, style in (("particles", "-"), ("gaussian", "--")):
            E = np.load(d / f"{pair}_{kind}_energy.npy")
            label = f"{pair.replace('_', ' ')}, {kind}"
            ax1.plot(grid, E, style, color=color, label=label)
            second = E[:-2] - 2 * E[1:-1] + E[2:]
            ax2.plot(grid[1:-1], second, style, color=color, label=label)
    bound = s["second_difference_bound"]
    ax2.axhline(0.0, color="k", linewidth=0.8)
    ax2.axhline(-bound, color="k", linestyle=":", linewidth=1, label=f"-bound ({bound:.1e})")
    ax1.set_xlabel("s (geodesic time)"), ax1.set_ylabel("E(mu_s)"), ax1.set_yscale("log")
    ax1.set_title("energy along Wasserstein geodesics (A = -I)", fontsize=10)
    ax2.set_xlabel("s"), ax2.set_ylabel("E(s - h) - 2 E(s) + E(s + h)"), ax2.set_yscale("symlog", linthresh=1e-6)
    ax2.set_title("second differences: negative = not convex", fontsize=10)
    ax1.legend(fontsize=7), ax2.legend(fontsize=7)
    plot._tidy(fig)
    fig.tight_layout()
    g = s["through_origin"]["gaussian"]
    numbers = {"n": s["n"], "grid": s["grid"], "min second difference (particles, through the origin)":
               s["min_second_difference"], "its rounding bound": bound, "certified witness": s["certified"],
               "min second difference away from the origin": s["convex_min_second_difference"],
               "its rounding bound (away)": s["convex_second_difference_bound"],
               "Gaussians through the origin: min second difference": g["min_second_difference"],
               "Gaussians: its bound": g["second_difference_bound"]}
    return fig, numbers


def draw_sinkhorn_bures(d: Path):
    s = _summary(d)
    table = plot.read_csv(d / "cases.csv")  # epsilon, d, c, gap, allowance
    fig = plot.new_figure(12.0, 4.2)
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    ax1.loglog(table["epsilon"], table["gap"], "o", markerfacecolor="none", label="closure vs finite-difference BW gradient")
    ax1.loglog(table["epsilon"], table["allowance"], "k_", markersize=12, label="finite-difference error bound")
    ax1.set_xlabel("epsilon"), ax1.set_ylabel("relative gap")
    ax1.set_title("Sinkhorn closure = -grad_BW of c/2 OT_eps(mu, mu)", fontsize=10)
    ax1.legend(fontsize=7)
    run = d / "descent"
    t, F = np.load(run / "times.npy"), np.load(run / "functional.npy")
    ax2.plot(t, F, color="C0", linewidth=2)
    ax2.set_xlabel("t"), ax2.set_ylabel("F(m(t), S(t)) = c/2 OT_eps")
    ax2.set_title("one trajectory of the closure: a descent curve", fontsize=10)
    plot._tidy(fig)
    fig.tight_layout()
    numbers = {"cases": s["cases"], "epsilons": s["epsilons"], "max relative gap": s["max_relative_gap"],
               "max gap / its bound": s["max_gap_over_allowance"], "F at t = 0": s["descent_functional_start"],
               "F at T": s["descent_functional_end"], "largest increase of F between frames": s["descent_largest_increase"]}
    return fig, numbers


# ---- the equiangular reduction and the long-context transition (Rigollet 2025) -------------------

def draw_equiangular(d: Path):
    s = _summary(d)
    ode = np.load(d / "ode.npy")  # cases x 400 x (t, rho, 1 - rho)
    fig = plot.new_figure(14.0, 4.2)
    ax_rho, ax_gap, ax_err = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    for k, case in enumerate(s["cases"]):
        table = np.load(d / "runs" / case["dir"] / "reduction.npy")  # t, rho, 1 - rho, particles' gap, deviation
        label = f"n = {case['n']}, beta = {case['beta']:g}"
        ax_rho.plot(ode[k, :, 0], ode[k, :, 1], color=f"C{k}", label=label)
        ax_rho.plot(table[:, 0], 1.0 - table[:, 3], "o", color=f"C{k}", markersize=3, markerfacecolor="none")
        ax_gap.semilogy(ode[k, :, 0], ode[k, :, 2], color=f"C{k}", label=label)
        ax_gap.semilogy(table[:, 0], table[:, 3], "o", color=f"C{k}", markersize=3, markerfacecolor="none")
        ax_err.semilogy(table[:, 0], np.maximum(table[:, 4], 1e-18), color=f"C{k}", label=label)
    t_end = float(ode[0, -1, 0])
    ref = np.linspace(0.6 * t_end, t_end, 10)
    ax_gap.semilogy(ref, 1e-6 * np.exp(-2.0 * (ref - ref[0])), "k--", label="slope e^{-2t}")
    ax_err.axhline(s["target_gap"], color="k", linestyle="--", label="1e-8")
    ax_rho.set_xlabel("t"), ax_rho.set_ylabel("rho(t)")
    ax_rho.set_title("rho: ODE (lines), simulate (circles)", fontsize=10)
    ax_gap.set_xlabel("t"), ax_gap.set_ylabel("1 - rho(t)")
    ax_gap.set_title(f"the gap: fitted rate {s['rate_fitted']:.6g}, theory {s['rate_theory']:g}", fontsize=10)
    ax_err.set_xlabel("t"), ax_err.set_ylabel("max_ij |<x_i, x_j> - rho(t)|")
    ax_err.set_title("particles against the ODE", fontsize=10)
    for ax in (ax_rho, ax_gap, ax_err):
        ax.legend(fontsize=8)
    fig.suptitle(f"Equiangular tokens (rho0 = {s['rho0']:g}) under softmax attention on the sphere, Q = K = V = I")
    plot._tidy(fig)
    fig.tight_layout()
    numbers = {"max |particles - ODE|": s["max_abs_gap"], "rate fitted": s["rate_fitted"],
               "rate theory": s["rate_theory"], "cases": len(s["cases"]),
               "n": ", ".join(str(c["n"]) for c in s["cases"]),
               "beta": ", ".join(f"{c['beta']:g}" for c in s["cases"])}
    return fig, numbers


def draw_long_context(d: Path):
    s = _summary(d)
    ns, gammas = np.load(d / "ns.npy"), np.load(d / "gammas.npy")
    times = np.load(d / "times.npy")
    particles = np.load(d / "particles.npy")  # n, gamma, T, rho, t particles, deviation
    fig = plot.new_figure(12.0, 4.4)
    ax = fig.add_subplot(1, 2, 1)
    for k, g in enumerate(gammas):
        ax.loglog(ns, times[k], color=plot_color(k), label=f"gamma = {g:g}")
        rows = particles[np.isclose(particles[:, 1], g)]
        if len(rows):
            ax.loglog(rows[:, 0], rows[:, 4], "o", color=plot_color(k), markersize=5, markerfacecolor="none")
    ax.set_xlabel("n (tokens)"), ax.set_ylabel("time to rho = %g" % s["target_rho"])
    ax.set_title("rho0 = 0: reduction (lines), particles (circles)", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax2 = fig.add_subplot(1, 2, 2)
    grid = np.linspace(0, float(gammas[-1]), 200)
    for block, color, name in ((s, "C0", "rho0 = 0"), (s["rho0_half"], "C1", "rho0 = 1/2")):
        fitted = [block["growth_exponents"][f"{g:g}"] for g in gammas]
        ax2.plot(gammas, fitted, "o", color=color, label=f"{name}: fitted (gamma_c = {block['critical_gamma']:.4g})")
        ax2.plot(grid, np.maximum(0.0, grid * (1.0 - block["rho0"]) - 1.0), "--", color=color,
                 label=f"{name}: theory max(0, gamma (1 - rho0) - 1)")
    ax2.set_xlabel("gamma (beta = gamma log n)"), ax2.set_ylabel("growth exponent of the clustering time")
    ax2.set_title(f"exponents fitted over n = 1e4 .. {ns[-1]:.0e}", fontsize=10)
    ax2.legend(fontsize=7)
    fig.suptitle("The long-context phase transition: equiangular tokens, beta = gamma log n")
    plot._tidy(fig)
    fig.tight_layout()
    numbers = {"critical gamma (rho0 = 0)": s["critical_gamma"], "theory": s["critical_gamma_theory"],
               "critical gamma (rho0 = 1/2)": s["rho0_half"]["critical_gamma"],
               "theory (rho0 = 1/2)": s["rho0_half"]["critical_gamma_theory"],
               "n max (reduction)": float(ns[-1]), "n max (particles)": int(max(s["particles"]["sizes"])),
               "particles: largest relative gap to the reduction's time": s["particles"]["max_relative_time_gap"]}
    for g in gammas:
        numbers[f"exponent at gamma = {g:g} (theory {s['growth_exponents_theory'][f'{g:g}']:g})"] = (
            s["growth_exponents"][f"{g:g}"])
    return fig, numbers


# ---- dynamic metastability (Geshkovski, Koubbi, Polyanskiy, Rigollet 2024) -------------------------

def draw_metastability(d: Path):
    s = _summary(d)
    long_runs = s.get("long_runs")  # --long: a fifth panel
    columns = 3 if long_runs else 2
    fig = plot.new_figure(6.5 * columns, 8.4)
    ax_s, ax_t, ax_esc, ax_sph = (fig.add_subplot(2, columns, k) for k in (1, 2, columns + 1, columns + 2))
    if long_runs:
        _draw_long_runs(fig.add_subplot(2, columns, 3), d, long_runs, s.get("long_runs_unmerged", []))
    for k, run in enumerate(s["staircase"]):
        beta = run["beta"]
        table = np.load(d / f"staircase_beta{beta:g}.npy")  # t, s, E, clusters per step
        label = f"beta = {beta:g}"
        ax_s.plot(table[:, 1], table[:, 2], color=plot_color(k), label=label)
        ax_t.plot(np.log10(np.maximum(table[1:, 0], 1e-3)), table[1:, 2], color=plot_color(k), label=label)
    for level in (5, 7, 9, 11, 13, 17, 25):
        ax_s.axhline(level / 25, color="0.8", linewidth=0.6, zorder=0,
                     label="levels sum m_c^2 / n^2" if level == 5 else "_nolegend_")
    ax_s.set_xlabel("rescaled time s (arclength / log beta)"), ax_s.set_ylabel("energy E")
    ax_s.set_title("n = 5, angles {0, 1/4, 1, 2, 7/2} log(beta)/sqrt(beta): levels sum m_c^2 / 25", fontsize=9)
    ax_t.set_xlabel("log10 physical time"), ax_t.set_ylabel("energy E")
    ax_t.set_title("the same against physical time: plateaus exponentially long in beta", fontsize=9)
    ax_s.legend(fontsize=7), ax_t.legend(fontsize=7)
    esc = np.load(d / "escape.npy")  # beta, measured, closed form, asymptotic
    fit = s["log_escape_time_fit"]
    ax_esc.plot(esc[:, 0], np.log(esc[:, 1]), "o", markerfacecolor="none", label="flow (two clusters 2 + 3)")
    ax_esc.plot(esc[:, 0], np.log(esc[:, 2]), "-", label="closed form (Eq. M4 quadrature)")
    ax_esc.plot(esc[:, 0], np.log(esc[:, 3]), ":", label="Laplace asymptotics")
    ax_esc.set_xlabel("beta"), ax_esc.set_ylabel("log escape time")
    ax_esc.set_title(f"slope {fit['slope']:.6g} (closed form {fit['slope_closed_form']:.6g}, "
                     f"beta -> inf: 1 - cos {fit['delta0']:g} = {fit['slope_asymptotic']:.6g})", fontsize=9)
    ax_esc.legend(fontsize=7)
    sphere = np.load(d / "sphere" / "sphere.npy")  # t, E, clusters per frame
    ax_sph.plot(np.log10(np.maximum(sphere[1:, 0], 1e-3)), sphere[1:, 1], color="C3")
    ax_sph.set_xlabel("log10 t"), ax_sph.set_ylabel("energy E")
    ax_sph.set_title(f"S^2 through `simulate` (beta = {s['sphere']['beta']:g}, {s['sphere']['steps']} dopri5 steps)",
                     fontsize=9)
    fig.suptitle("Dynamic metastability of softmax attention: a staircase of plateaus")
    plot._tidy(fig)
    fig.tight_layout()
    numbers = {"beta": ", ".join(f"{r['beta']:g}" for r in s["staircase"]),
               "plateaus at the largest beta": len(s["staircase"][-1]["plateaus"]),
               "log escape time slope": s["log_escape_time_slope"],
               "closed-form slope": fit["slope_closed_form"], "asymptotic slope": fit["slope_asymptotic"],
               "largest relative gap to the closed form": fit["max_relative_gap_to_closed_form"],
               "sphere steps": s["sphere"]["steps"]}
    for run in long_runs or []:
        numbers[f"long run at beta = {run['beta']:g}: steps"] = run["steps"]
        numbers[f"long run at beta = {run['beta']:g}: levels as the exact flow"] = run["levels_match_exact_flow"]
    return fig, numbers


def _draw_long_runs(ax, d: Path, runs, unmerged):
    """The authors' protocol through the engine (long_beta<B>.npy: s, E, clusters, t, engine): E against
    the rescaled time, solid where the engine's velocity made the steps, dotted past its float64 floor;
    with --long, the 10^6 steps without merging (long_unmerged_beta<B>.npy) in an inset."""
    for k, run in enumerate(runs):
        table = np.load(d / f"long_beta{run['beta']:g}.npy")
        engine = table[:, 4] > 0.5
        last = int(np.count_nonzero(engine))  # the engine's records come first
        ax.plot(table[:last, 0], table[:last, 1], color=plot_color(k), label=f"beta = {run['beta']:g}")
        ax.plot(table[max(last - 1, 0):, 0], table[max(last - 1, 0):, 1], ":", color=plot_color(k))
    for level in (5, 7, 9, 11, 13, 17, 25):
        ax.axhline(level / 25, color="0.8", linewidth=0.6, zorder=0)
    ax.set_xlabel("rescaled time s = steps h / log beta"), ax.set_ylabel("energy E")
    ax.set_title("the authors' steps (h = 1e-5 log beta) through the engine, merging < 1e-3\n"
                 "solid: the engine's velocity; dotted: Eq. (M1) past the engine's float64 floor", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    if unmerged:
        inset = ax.inset_axes([0.5, 0.42, 0.47, 0.3])
        for k, run in enumerate(unmerged):
            table = np.load(d / f"long_unmerged_beta{run['beta']:g}.npy")
            inset.plot(table[:, 0], table[:, 1], color=plot_color(k), linewidth=0.8)
        inset.set_title(f"no merging: {unmerged[0]['steps']:,} engine steps", fontsize=7)
        inset.tick_params(labelsize=6)


SCHEMES = ("sphere", "pre", "peri", "ngpt", "mix")  # the order of reproduce normalization-schemes
SCHEME_NAMES = {"sphere": "Post-LN", "pre": "Pre-LN", "peri": "Peri-LN", "ngpt": "nGPT", "mix": "Mix-LN"}


def draw_normalization_schemes(d: Path):
    s = _summary(d)
    grid = np.load(d / "reduction.npy")  # cases x schemes x 400 x (t, 1 - rho, r)
    random = np.load(d / "random.npy")  # schemes x frames x (t, mean gap)
    fig = plot.new_figure(14.0, 4.4)
    ax_t, ax_r, ax_rand = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    case = s["cases"][0]
    for k, name in enumerate(SCHEMES):
        entry = case["schemes"][name]
        table = np.load(d / "runs" / entry["dir"] / "reduction.npy")  # t, rho, 1-rho, r, gap, radius, dev
        label = SCHEME_NAMES[name] + (f" (Post-LN to t = {entry['mix_until']:.3g})" if name == "mix" else "")
        ax_t.loglog(grid[0, k, 1:, 0], grid[0, k, 1:, 1], color=f"C{k}", label=label)
        ax_t.loglog(table[1:, 0], table[1:, 4], "o", color=f"C{k}", markersize=3, markerfacecolor="none")
        if name in ("pre", "peri"):
            ax_r.loglog(grid[0, k, :, 2], grid[0, k, :, 1], color=f"C{k}", label=label,
                        linestyle="-" if name == "pre" else "--")
        rows = random[k][np.isfinite(random[k, :, 0]) & (random[k, :, 0] > 0) & (random[k, :, 1] > 0)]
        ax_rand.loglog(rows[:, 0], rows[:, 1], color=f"C{k}", label=SCHEME_NAMES[name])
    ax_t.axhline(s["target_gap"], color="k", linestyle=":", linewidth=0.8)
    ax_t.set_xlabel("t (depth)"), ax_t.set_ylabel("1 - rho (mean gap)")
    ax_t.set_title(f"orthogonal tokens, n = {s['n']}, beta = {s['beta']:g}: reduction (lines), simulate (circles)",
                   fontsize=9)
    r_end = float(grid[0, 1, -1, 2])
    ref = np.geomspace(r_end / 100.0, r_end, 10)
    ax_r.loglog(ref, 3.0 * float(grid[0, 1, -1, 1]) * (ref / r_end) ** -2.0, "k:", label="slope r^-2")
    ax_r.set_xlabel("r = |x|"), ax_r.set_ylabel("1 - rho")
    ax_r.set_title("Pre-LN, Peri-LN: the same radius along rho, 1 - rho ~ r^-2", fontsize=9)
    ax_rand.set_xlabel("t"), ax_rand.set_ylabel("mean gap 1 - cos(x_i, x_j)")
    rs = s["random_start"]
    ax_rand.set_title(f"{rs['n']} random tokens on S^{rs['d'] - 1}, beta = {rs['beta']:g}", fontsize=9)
    for ax in (ax_t, ax_r, ax_rand):
        ax.legend(fontsize=8)
    fig.suptitle("Normalization as speed regulation: Post-LN, Pre-LN, Peri-LN, nGPT, Mix-LN on the same tokens")
    plot._tidy(fig)
    fig.tight_layout()
    sc = s["schemes"]
    numbers = {"n": s["n"], "beta": s["beta"], "max |particles - reduction|": s["max_abs_gap"],
               "target gap": s["target_gap"]}
    for name in SCHEMES:
        numbers[f"t {SCHEME_NAMES[name]}"] = sc[name]["clustering_time"]
        numbers[f"t {SCHEME_NAMES[name]} (theory)"] = sc[name]["clustering_time_theory"]
    numbers["rate Post-LN"] = sc["sphere"]["rate_fitted"]
    numbers["rate nGPT"] = sc["ngpt"]["rate_fitted"]
    numbers["exponent Pre-LN"] = sc["pre"]["exponent_fitted"]
    numbers["exponent Peri-LN"] = sc["peri"]["exponent_fitted"]
    numbers["exponent Mix-LN"] = sc["mix"]["exponent_fitted"]
    numbers["t Mix-LN switch"] = sc["mix"]["mix_until"]
    return fig, numbers


def plot_color(k: int) -> str:
    return f"C{k % 10}"


# ---- the registry ----------------------------------------------------------------------------------

FIGURES: dict[str, list[FigureSpec]] = {
    "sphere": [
        FigureSpec("sphere.png", "Clustering on the sphere",
                   "{n} tokens on the sphere S^2 moved by self-attention with Q = K = V = I and beta = {beta}.\n"
                   "The theory (Geshkovski et al.) predicts that they gather into clusters, then a single one.",
                   draw_sphere_snapshots),
        FigureSpec("sphere-beta.png", "Clustered pairs against beta",
                   "Fraction of pairs of tokens (n = {n} on the circle, {initial conditions per beta} starts per beta) "
                   "closer than {pair distance below}, against beta and time.\n"
                   "Small beta: one cluster quickly; large beta: several clusters that last (metastability).",
                   draw_sphere_beta),
    ],
    "clustering": [
        FigureSpec("clustering.png", "Clustering on the circle at large n",
                   "{n} tokens uniform on the circle moved by self-attention (Q = K = V = I, beta = {beta}) to T = {T}: "
                   "angle histograms at four times (left) and the number of clusters (right).\n"
                   "The uniform measure is stationary but unstable: the sampling's n^-1/2 fluctuations grow into "
                   "{clusters at T} clusters, as the theory of metastable clusters predicts.",
                   draw_clustering),
    ],
    "normalizations": [
        FigureSpec("normalizations.png", "Softmax against Sinkhorn attention",
                   "The same tokens and logits, normalized by softmax (rows only) and by Sinkhorn (rows and columns).\n"
                   "Softmax is row-stochastic, some tokens receive much more attention; Sinkhorn is doubly stochastic.",
                   draw_normalizations),
    ],
    "collapse": [
        FigureSpec("collapse.png", "Rank collapse of a Gaussian cloud",
                   "Gaussian tokens under softmax attention with K = -Q of rank one: snapshots, then covariance eigenvalues.\n"
                   "The closed form S(t) = (S0^-1 - t (A + A^T))^-1 (black dashed) predicts that the variance along q "
                   "decays like 1/t while the other stays: the cloud flattens toward a line, its rank still 2 at any "
                   "finite t.",
                   draw_collapse),
    ],
    "cone": [
        FigureSpec("cone.png", "Covariance trajectories in the PSD cone",
                   "2 x 2 covariances of the Gaussian closure (above: in the PSD cone; below: trace over time), "
                   "{regimes per kind} regimes per attention kind, {starts per regime} starts each.\n"
                   "Contractions reach the apex like 1/t, rank-one ones the cone's surface (a line); softmax and "
                   "the expanding head blow up at t*, l2 and Sinkhorn only grow.",
                   draw_cone),
    ],
    "ranks": [
        FigureSpec("ranks.png", "Rank of the limiting covariance",
                   "Rank of the limiting covariance for {runs per d and V} random Q of rank d // 2, K = -Q, in d = {d} "
                   "(moment ODE until it converges; the table counts the runs that did).\n"
                   "With V = I the theory predicts rank (d + 1) // 2 (dashed); V random PSD is shown beside it.",
                   draw_ranks),
    ],
    "blowup": [
        FigureSpec("blowup.png", "Finite-time blow-up of softmax, global existence of l2",
                   "Covariance eigenvalues for softmax and l2 attention (Q = K = I) from the same start: moment ODE "
                   "(lines) and particles (circles).\n"
                   "Softmax blows up at the closed-form time t* (dashed), l2 grows exponentially and stays finite; "
                   "the particles follow the ODE and lag near t* (n particles cannot blow up).",
                   draw_blowup),
    ],
    "meanfield": [
        FigureSpec("meanfield.png", "Mean-field limit",
                   "W_2 between the Gaussian fit of n particles and the moment ODE at time T = {T}, against n "
                   "(log-log, n = {n from} .. {n to}, {samples per n} samples each), "
                   "from the same start and from the sample's own moments.\n"
                   "The theory predicts the rate n^-1/2.",
                   draw_meanfield),
    ],
    "universal-approximation": [
        FigureSpec("universal-approximation.png", "Sinkhorn Transformers approximate a coupling system",
                   "Test W_1 between predicted and target (entropic OT, cost |x - y|) couplings, against model size.\n"
                   "Universal approximation predicts that the error falls as capacity grows, far below the independent "
                   "coupling's; here the largest model's is {largest model / independent coupling} of it (falls with "
                   "capacity: {falls with capacity}).",
                   draw_universal_approximation),
    ],
    "energy-dissipation": [
        FigureSpec("energy-dissipation.png", "Softmax attention as a gradient flow: the energy-dissipation identity",
                   "Interaction energy E of softmax tokens (A symmetric): E(t) - E(0) against the integral of the squared "
                   "metric slope |dE|^2, with V = A and with V = R A (rotated).\n"
                   "With V = A the flow is a gradient flow and the two agree to the integrator's order (right); with "
                   "V = R A the energy stays flat while |dE|^2 > 0.",
                   draw_energy_dissipation),
    ],
    "nonconvexity": [
        FigureSpec("nonconvexity.png", "The energy is not convex along Wasserstein geodesics",
                   "E(mu) = 1/2 int int exp(-<x, y>) (A = -I, V = I, whose flow descends E) along McCann interpolations "
                   "(exact OT plans) and Bures-Wasserstein geodesics.\n"
                   "Through the origin the second differences fall below minus their rounding bound: a certified "
                   "non-convexity; away from the origin they stay positive.",
                   draw_nonconvexity),
    ],
    "sinkhorn-bures": [
        FigureSpec("sinkhorn-bures.png", "The Sinkhorn Gaussian closure is a Bures-Wasserstein gradient flow",
                   "Relative gap between the closure's (dm/dt, dS/dt) and the Bures-Wasserstein gradient of "
                   "F = c/2 OT_eps(mu, mu) by finite differences, random cases across epsilon; F along one trajectory.\n"
                   "Theory: they coincide (gaps at the finite-difference error), and F only decreases.",
                   draw_sinkhorn_bures),
    ],
    "equiangular": [
        FigureSpec("equiangular.png", "The equiangular reduction",
                   "Equiangular tokens (n = {n}, beta = {beta}) through `simulate` (circles) against the scalar ODE of "
                   "rho(t) (lines); right: the largest gap over pairs and frames, {max |particles - ODE|} at most.\n"
                   "The reduction is exact: the gap stays at the integrators' error, and 1 - rho decays at rate "
                   "{rate fitted} (theory 2).",
                   draw_equiangular),
    ],
    "long-context": [
        FigureSpec("long-context.png", "The long-context phase transition",
                   "Time for equiangular tokens to cluster (rho = 0.99) with beta = gamma log n, against n up to "
                   "{n max (reduction)} (scalar reduction) and {n max (particles)} (particles).\n"
                   "Below gamma_c = 1/(1 - rho0) it grows like log n at most, above like n^(gamma (1 - rho0) - 1): "
                   "fitted gamma_c = {critical gamma (rho0 = 0)} (theory 1).",
                   draw_long_context),
    ],
    "metastability": [
        FigureSpec("metastability.png", "Dynamic metastability: a staircase of plateaus",
                   "Energy of n = 5 tokens on the circle (beta = {beta}) against the authors' rescaled time and the "
                   "physical time; escape times of two clusters against beta; 5 tokens on S^2 through `simulate`.\n"
                   "Theory: plateaus at sum m_c^2 / n^2, escape times ~ exp(beta (1 - cos delta)): fitted slope "
                   "{log escape time slope} (closed form {closed-form slope}).",
                   draw_metastability),
    ],
    "normalization-schemes": [
        FigureSpec("normalization-schemes.png", "Normalization schemes as speed regulation",
                   "Orthogonal tokens (n = {n}, beta = {beta}) under Post-LN, Pre-LN, Peri-LN, nGPT and Mix-LN "
                   "(Post-LN until t = {t Mix-LN switch}, then Pre-LN): times to a mean gap of {target gap}: "
                   "{t Post-LN}, {t Pre-LN}, {t Peri-LN}, {t nGPT}, {t Mix-LN} (reduction: {t Post-LN (theory)}, "
                   "{t Pre-LN (theory)}, {t Peri-LN (theory)}, {t nGPT (theory)}, {t Mix-LN (theory)}).\n"
                   "Theory: nGPT and Peri-LN move fastest early (speed / |A|); Post-LN and nGPT close the gap like "
                   "e^(-2t) (fitted {rate Post-LN}, {rate nGPT}), Pre-LN, Peri-LN and Mix-LN like r^-2 (fitted "
                   "{exponent Pre-LN}, {exponent Peri-LN}, {exponent Mix-LN}).",
                   draw_normalization_schemes),
    ],
}


def _tty_note(message: str) -> None:
    if sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)


QUICK_STAMP = "quick sizes (--quick): a check that the code runs, not the result at full size"
QUICK_NOTE = ("Quick sizes (--quick): fewer tokens, runs and steps than the published experiment, so the"
              " effect can be weak or absent here; rerun without --quick for the real figure.")


def draw(name: str, data_dir, out_dir=None) -> list[dict]:
    """Draws the figures of reproduction `name` from data_dir into out_dir (default: data_dir).
    Returns, per figure: name, file, title, explanation, numbers."""
    if name not in FIGURES:
        raise ValueError(f"unknown reproduction '{name}'; one of: {', '.join(FIGURES)}")
    data_dir = Path(data_dir)
    out_dir = Path(out_dir) if out_dir is not None else data_dir
    summary_path = data_dir / "summary.json"
    quick = summary_path.exists() and bool(_summary(data_dir).get("quick"))
    entries = []
    for spec in FIGURES[name]:
        _tty_note(f"tokenflow figures: drawing {spec.file}")
        fig, numbers = spec.draw(data_dir)
        explanation = spec.explain(numbers)
        if quick:  # a figure at test sizes says so, on the picture and beside it
            fig.text(0.005, 0.005, QUICK_STAMP, ha="left", va="bottom", fontsize=8, color="#b00020")
            explanation = QUICK_NOTE + " " + explanation
        fig.savefig(out_dir / spec.file, dpi=100)
        entries.append({"name": name, "file": spec.file, "title": spec.title, "explanation": explanation,
                        "numbers": numbers, "quick": quick})
    return entries


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, default=float) + "\n")


def draw_demo(demo_dir) -> Path:
    """Draws every reproduction of a `tokenflow demo` directory and writes report.html."""
    from . import report

    demo_dir = Path(demo_dir)
    summary = _summary(demo_dir)
    entries = []
    for item in summary["reproductions"]:
        drawn = draw(item["name"], demo_dir / item["name"], demo_dir)
        # The command that recomputes exactly this figure: the demo's sizes (--tour; --quick too
        # for a quick demo), which are smaller than a plain `reproduce NAME`'s for some.
        sizes = " --quick" if summary.get("quick") else ""
        for e in drawn:
            e["wall_seconds"] = item.get("wall_seconds")
            e["command"] = f"tokenflow reproduce {item['name']}{sizes} --tour --out DIR"
        entries += drawn
    _write_json(demo_dir / "figures.json", entries)
    path = demo_dir / "report.html"
    report.write_report(path, entries, summary, images_dir=demo_dir)
    return path


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] != "--list" and len(argv) != 2):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    if argv[0] == "--list":
        for name, specs in FIGURES.items():
            print(f"{name:<24}{', '.join(s.file for s in specs)}")
        return 0
    name, directory = argv
    start = time.monotonic()
    if name == "demo":
        path = draw_demo(directory)
        _tty_note(f"tokenflow figures: {path} ({time.monotonic() - start:.1f} s)")
    else:
        _write_json(Path(directory) / "figures.json", draw(name, directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
