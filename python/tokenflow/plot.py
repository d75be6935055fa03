"""Figures of tokenflow's results (matplotlib, drawn off-screen with the Agg renderer).

Every function takes plain numpy arrays (or, for the ``*_dir`` readers, an output directory of
the CLI) and returns a :class:`matplotlib.figure.Figure`; save it with ``fig.savefig("x.png")``.
No pyplot state is touched, so the functions work in scripts, tests and notebooks alike.

Examples
--------
>>> import numpy as np, tokenflow.plot as tp
>>> t = np.linspace(0, 1, 11)
>>> fig = tp.covariance_eigenvalues(t, np.stack([1 + t, 1 / (1 + t)], axis=1), blowup_time=0.8)
>>> [line.get_label() for line in fig.axes[0].get_lines()][:3]
['lambda_1', 'lambda_2', 't* = 0.8']
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["particles", "trajectories", "covariance_eigenvalues", "psd_cone", "cone_coordinates", "heatmap", "heatmaps",
           "meanfield_errors", "fit_slope", "rank_histograms", "cluster_fraction", "read_simulation",
           "read_csv", "simulation_dir", "gaussian_dir", "eigenvalues_of", "diagnostics_eigenvalues", "new_figure"]


def new_figure(width: float = 6.4, height: float = 4.8) -> Figure:
    """A Figure with an Agg canvas (savefig and tostring work without pyplot).

    Parameters
    ----------
    width : float, default 6.4
        The width in inches.
    height : float, default 4.8
        The height in inches.

    Returns
    -------
    matplotlib.figure.Figure
        An empty figure at 100 dpi, attached to no pyplot state.

    Examples
    --------
    >>> import tokenflow.plot as tp
    >>> tp.new_figure(4, 3).get_size_inches().tolist()
    [4.0, 3.0]
    """
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


# One style for every figure: these font sizes (points), applied by _tidy before the layout.
TICK_SIZE, LABEL_SIZE, TITLE_SIZE, LEGEND_SIZE, SUPTITLE_SIZE = 8, 9, 10, 8, 11


def _log_ticks_in(lo: float, hi: float, subs) -> list[float]:
    lo, hi = min(lo, hi), max(lo, hi)
    powers = range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
    return [s * 10.0 ** k for k in powers for s in subs if lo <= s * 10.0 ** k <= hi]


def _readable_log_axis(axis, lo: float, hi: float) -> None:
    """A log axis spanning less than two decades gets its ticks at 1, 2 and 5 times the powers of
    ten (or every integer multiple, or three points, whatever gives at least two ticks), written
    plainly (0.2, 0.5, 1); the minor ticks stay unlabelled."""
    from matplotlib import ticker

    if not (np.isfinite(lo) and np.isfinite(hi)) or min(lo, hi) <= 0 or max(lo, hi) / min(lo, hi) >= 100:
        return
    all_subs = tuple(float(k) for k in range(1, 10))
    if len(_log_ticks_in(lo, hi, (1.0, 2.0, 5.0))) >= 2:
        axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    elif len(_log_ticks_in(lo, hi, all_subs)) >= 2:
        axis.set_major_locator(ticker.LogLocator(base=10, subs=all_subs))
    else:
        points = np.geomspace(min(lo, hi), max(lo, hi), 4)[1:3]
        axis.set_major_locator(ticker.FixedLocator([float(f"{v:.2g}") for v in points]))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _tidy(fig: Figure) -> Figure:
    """The common style: font sizes of ticks, axis labels, titles and legends; log axes spanning
    less than two decades labelled at 1, 2, 5 x 10^k. Call it once the data are drawn (the limits
    are read), before the layout."""
    for ax in fig.axes:
        ax.tick_params(labelsize=TICK_SIZE)
        axes = [ax.xaxis, ax.yaxis] + ([ax.zaxis] if hasattr(ax, "zaxis") else [])
        for axis in axes:
            axis.label.set_fontsize(LABEL_SIZE)
        ax.title.set_fontsize(TITLE_SIZE)
        if ax.get_legend() is not None:
            for text in ax.get_legend().get_texts():
                text.set_fontsize(LEGEND_SIZE)
        if ax.get_xscale() == "log":
            _readable_log_axis(ax.xaxis, *ax.get_xlim())
        if ax.get_yscale() == "log":
            _readable_log_axis(ax.yaxis, *ax.get_ylim())
    for legend in fig.legends:
        for text in legend.get_texts():
            text.set_fontsize(LEGEND_SIZE)
    if fig._suptitle is not None:
        fig._suptitle.set_fontsize(SUPTITLE_SIZE)
    return fig


# ---- particles -----------------------------------------------------------------------------------

def _frame_indices(count: int, frames) -> list[int]:
    if frames is None:
        k = min(count, 5)
        return sorted({int(round(i * (count - 1) / max(k - 1, 1))) for i in range(k)})
    return [int(f) % count for f in frames]


def _shared_limits(points: np.ndarray, dims: int, sphere: bool) -> list[tuple[float, float]]:
    # One box for every panel: the range of all shown points (and of the unit sphere), padded 5 %.
    lo, hi = points[..., :dims].reshape(-1, dims).min(0), points[..., :dims].reshape(-1, dims).max(0)
    if sphere:
        lo, hi = np.minimum(lo, -1.0), np.maximum(hi, 1.0)
    pad = 0.05 * np.maximum(hi - lo, 1e-12)
    return [(float(a - p), float(b + p)) for a, b, p in zip(lo, hi, pad)]


def particles(trajectory, times=None, frames: Optional[Sequence[int]] = None, sphere: bool = False,
              title: Optional[str] = None, shared_axes: bool = True) -> Figure:
    """Snapshots of the tokens at a few times, one panel each (2-D scatter, or 3-D for d >= 3).

    For d > 3 the first three coordinates are shown. Each panel's title gives its time; the axes are
    labelled x_1, x_2 (x_3).

    Parameters
    ----------
    trajectory : array_like of shape (F, n, d) or (n, d)
        The frames (simulate's trajectory), or one frame.
    times : array_like of shape (F,), optional
        The frame times, for the panels' titles; the frame indices when None.
    frames : sequence of int, optional
        Which frames to show (negative indices count from the end); None: up to 5, evenly spaced,
        first and last included.
    sphere : bool, default False
        Draw the unit circle (d = 2) or the unit sphere (d = 3) the tokens live on.
    title : str, optional
        The figure's title.
    shared_axes : bool, default True
        Every panel on the same axis limits, so that the panels compare; False: each panel fitted to
        its own frame.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per frame shown.

    Raises
    ------
    ValueError
        A trajectory that is neither (F, n, d) nor (n, d).

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> traj = np.random.default_rng(0).normal(size=(3, 10, 2))
    >>> fig = tp.particles(traj, times=[0.0, 0.5, 1.0])
    >>> [ax.get_title() for ax in fig.axes]
    ['t = 0', 't = 0.5', 't = 1']
    """
    traj = np.asarray(trajectory, dtype=float)
    if traj.ndim == 2:
        traj = traj[None]
    if traj.ndim != 3:
        raise ValueError(f"trajectory: expected F x n x d, got shape {traj.shape}")
    count, _, d = traj.shape
    idx = _frame_indices(count, frames)
    t = np.arange(count, dtype=float) if times is None else np.asarray(times, dtype=float)
    three_d = d >= 3
    limits = _shared_limits(traj[idx], min(d, 3), sphere) if shared_axes and d > 1 else None
    fig = new_figure(3.2 * len(idx), 3.4)
    for k, f in enumerate(idx):
        x = traj[f]
        if three_d:
            ax = fig.add_subplot(1, len(idx), k + 1, projection="3d")
            if sphere:
                u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
                ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.8",
                                  linewidth=0.4, label="unit sphere")
            ax.scatter(x[:, 0], x[:, 1], x[:, 2], s=10, c="C0", depthshade=True, label=f"tokens ({len(x)})")
            ax.set_box_aspect((1, 1, 1))
            ax.set_xticks([]), ax.set_yticks([]), ax.set_zticks([])
            ax.set_xlabel("x_1", fontsize=8, labelpad=-8), ax.set_ylabel("x_2", fontsize=8, labelpad=-8)
            ax.set_zlabel("x_3", fontsize=8, labelpad=-8)
            if limits:
                ax.set_xlim(*limits[0]), ax.set_ylim(*limits[1]), ax.set_zlim(*limits[2])
        else:
            ax = fig.add_subplot(1, len(idx), k + 1)
            if sphere:
                a = np.linspace(0, 2 * np.pi, 200)
                ax.plot(np.cos(a), np.sin(a), color="0.8", linewidth=0.8, label="unit circle")
            ax.scatter(x[:, 0], x[:, 1] if d > 1 else np.zeros(len(x)), s=6, c="C0", alpha=0.6, linewidths=0,
                       label=f"tokens ({len(x)})")
            ax.set_aspect("equal", adjustable="box" if limits else "datalim")
            if limits:
                ax.set_xlim(*limits[0]), ax.set_ylim(*limits[1])
            ax.tick_params(labelsize=7)
            ax.set_xlabel("x_1", fontsize=8)
            if d > 1:
                ax.set_ylabel("x_2", fontsize=8)
        ax.set_title(f"t = {t[f]:.3g}", fontsize=9)
        if sphere and k == 0:
            ax.legend(fontsize=7, loc="upper left")  # what the grey circle / sphere and the dots are
    if title:
        fig.suptitle(title, fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


def trajectories(trajectory, times=None, tokens: Optional[Sequence[int]] = None, max_tokens: int = 64,
                 sphere: bool = False, title: Optional[str] = None, ax=None) -> Figure:
    """The paths of the tokens through the saved frames, in one panel (the first two coordinates).

    Each path is a line from its start (open circle) to its end (filled dot); the legend says which
    marker is which time; the axes are labelled x_1, x_2.

    Parameters
    ----------
    trajectory : array_like of shape (F, n, d)
        The frames (simulate's trajectory), d >= 2.
    times : array_like of shape (F,), optional
        The frame times (the legend gives the first and last); the frame indices when None.
    tokens : sequence of int, optional
        Which tokens to draw; None: up to max_tokens, evenly spaced over the n.
    max_tokens : int, default 64
        The most tokens drawn when tokens is None.
    sphere : bool, default False
        Draw the unit circle.
    title : str, optional
        The panel's title; None: "K of n tokens, F frames".
    ax : matplotlib.axes.Axes, optional
        Draw into these axes (of another figure) instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (that of ax when given).

    Raises
    ------
    ValueError
        A trajectory that is not (F, n, d) with d >= 2.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> traj = np.cumsum(np.random.default_rng(0).normal(size=(4, 10, 2)), axis=0)
    >>> fig = tp.trajectories(traj, times=[0.0, 0.5, 1.0, 1.5])
    >>> len(fig.axes[0].lines), [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    (10, ['start, t = 0', 'end, t = 1.5'])
    """
    traj = np.asarray(trajectory, dtype=float)
    if traj.ndim != 3 or traj.shape[2] < 2:
        raise ValueError(f"trajectory: expected F x n x d with d >= 2, got shape {traj.shape}")
    count, n, _ = traj.shape
    if tokens is None:
        tokens = np.unique(np.linspace(0, n - 1, min(n, max_tokens)).round().astype(int))
    t = np.arange(count, dtype=float) if times is None else np.asarray(times, dtype=float)
    if ax is None:
        fig = new_figure(5.0, 4.6)
        ax = fig.add_subplot(1, 1, 1)
    else:
        fig = ax.figure
    if sphere:
        a = np.linspace(0, 2 * np.pi, 200)
        ax.plot(np.cos(a), np.sin(a), color="0.8", linewidth=0.8, label="_unit circle")
    ax.set_prop_cycle(None)
    for i in tokens:
        ax.plot(traj[:, i, 0], traj[:, i, 1], linewidth=0.8, alpha=0.7, label="_path")
    ax.scatter(traj[0, tokens, 0], traj[0, tokens, 1], s=14, facecolors="none", edgecolors="0.3",
               linewidths=0.6, label=f"start, t = {t[0]:.3g}", zorder=3)
    ax.scatter(traj[-1, tokens, 0], traj[-1, tokens, 1], s=10, c="k", label=f"end, t = {t[-1]:.3g}", zorder=3)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x_1")
    ax.set_ylabel("x_2")
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or f"{len(tokens)} of {n} tokens, {count} frames", fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


# ---- covariances ---------------------------------------------------------------------------------

def eigenvalues_of(covs) -> np.ndarray:
    """The eigenvalues of each symmetric matrix of a stack, in ascending order.

    Each matrix is symmetrized, ``(S + S^T) / 2``, before its eigenvalues are computed.

    Parameters
    ----------
    covs : array_like of shape (F, d, d)
        The matrices (covs.npy of ``tokenflow gaussian``).

    Returns
    -------
    numpy.ndarray of shape (F, d)
        The eigenvalues of each matrix, ascending.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> tp.eigenvalues_of(np.array([[[2.0, 0.0], [0.0, 1.0]]])).tolist()
    [[1.0, 2.0]]
    """
    covs = np.asarray(covs, dtype=float)
    return np.linalg.eigvalsh(0.5 * (covs + np.swapaxes(covs, -1, -2)))


def covariance_eigenvalues(times, eigenvalues, blowup_time: Optional[float] = None, log: bool = True,
                           predicted=None, predicted_times=None, title: Optional[str] = None, ax=None) -> Figure:
    """Covariance eigenvalues over time, one line each, with the blow-up time t* marked.

    Lines are labelled lambda_1 (the largest) ... lambda_d; a finite blowup_time adds a dashed
    vertical line labelled "t* = ...".

    Parameters
    ----------
    times : array_like of shape (F,)
        The frame times.
    eigenvalues : array_like of shape (F, d) or (F,)
        The eigenvalues at each time, ascending (the eig_c columns of diagnostics.csv, or
        :func:`eigenvalues_of` of the covariances).
    blowup_time : float, optional
        The blow-up time t*, marked when finite.
    log : bool, default True
        A logarithmic y axis, when every finite eigenvalue is positive.
    predicted : array_like of shape (F', d), optional
        A theory curve, drawn black dashed on top of the wide data lines.
    predicted_times : array_like of shape (F',), optional
        The times of predicted; times when None.
    title : str, optional
        The panel's title; None: "covariance eigenvalues over time".
    ax : matplotlib.axes.Axes, optional
        Draw into these axes instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> fig = tp.covariance_eigenvalues([0.0, 0.5], [[0.5, 1.0], [0.2, 3.0]], blowup_time=0.9)
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()  # lambda_1, the largest
    [1.0, 3.0]
    """
    t = np.asarray(times, dtype=float)
    lam = np.asarray(eigenvalues, dtype=float)
    lam = lam[:, ::-1] if lam.ndim == 2 else lam[:, None]
    fig = ax.figure if ax is not None else new_figure(6.0, 4.0)
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    for c in range(lam.shape[1]):
        # Wide and translucent, so that a closed form drawn on top stays visible where they agree.
        ax.plot(t, lam[:, c], color=f"C{c}", linewidth=3 if predicted is not None else 1.5,
                alpha=0.55 if predicted is not None else 1.0, label=f"lambda_{c + 1}")
    if blowup_time is not None and np.isfinite(blowup_time):
        ax.axvline(blowup_time, color="k", linestyle="--", linewidth=1, zorder=3, label=f"t* = {blowup_time:.4g}")
    if predicted is not None:
        p = np.asarray(predicted, dtype=float)
        p = p[:, ::-1] if p.ndim == 2 else p[:, None]
        pt = t if predicted_times is None else np.asarray(predicted_times, dtype=float)
        for c in range(p.shape[1]):
            ax.plot(pt, p[:, c], color="k", linestyle="--", linewidth=1.1, zorder=3,
                    label="closed form" if c == 0 else None)
    if log and np.all(lam[np.isfinite(lam)] > 0):
        ax.set_yscale("log")  # less than two decades: labelled at 1, 2, 5 x 10^k (_tidy)
    ax.set_xlabel("t")
    ax.set_ylabel("covariance eigenvalues")
    ax.legend(fontsize=8)
    ax.set_title(title or "covariance eigenvalues over time", fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


def cone_coordinates(covs) -> np.ndarray:
    """2 x 2 covariances in the coordinates where the cone of PSD matrices is round.

    For ``S = [[s11, s12], [s12, s22]]``, ``(v, w, u) = ((s11 - s22) / 2, s12, (s11 + s22) / 2)``:
    S is positive semidefinite exactly when ``u >= sqrt(v^2 + w^2)``, of rank one on that surface,
    and 0 at the apex. s12 is taken as the mean of the two off-diagonal entries.

    Parameters
    ----------
    covs : array_like of shape (F, 2, 2) or (2, 2)
        The covariances.

    Returns
    -------
    numpy.ndarray of shape (F, 3)
        The columns (v, w, u), one row per covariance.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> tp.cone_coordinates(np.array([[2.0, 1.0], [1.0, 0.5]])).tolist()  # rank one: u = |(v, w)|
    [[0.75, 1.0, 1.25]]
    """
    s = np.asarray(covs, dtype=float).reshape(-1, 2, 2)
    return np.stack([(s[:, 0, 0] - s[:, 1, 1]) / 2, (s[:, 0, 1] + s[:, 1, 0]) / 2,
                     (s[:, 0, 0] + s[:, 1, 1]) / 2], axis=1)


def psd_cone(trajectories, labels: Optional[Sequence[str]] = None, colors: Optional[Sequence[str]] = None,
             title: Optional[str] = None, ax=None, height: Optional[float] = None) -> Figure:
    """2 x 2 covariance trajectories drawn inside the cone of positive semidefinite matrices.

    The coordinates are those of :func:`cone_coordinates` (the axis of the cone is the trace / 2).
    Each trajectory starts with a dot and ends with a cross (a triangle where it leaves the top of
    the picture); the cone surface (rank-one matrices, in the legend) is drawn up to height.
    Convergence to 0 goes to the apex, to a line to the surface; a blow-up leaves the picture
    upwards. The legend explains the markers (black: any path). Frames with non-finite entries are
    left out.

    Parameters
    ----------
    trajectories : array_like of shape (F, 2, 2), or a list of them
        The covariance trajectories (covs.npy of ``tokenflow gaussian``).
    labels : sequence of str, optional
        One legend label per trajectory.
    colors : sequence of str, optional
        One matplotlib colour per trajectory; C0, C1, ... when None.
    title : str, optional
        The panel's title; None: "2 x 2 covariances in the PSD cone".
    ax : matplotlib.axes.Axes, optional
        3-D axes to draw into instead of a new figure.
    height : float, optional
        The top of the picture (in trace / 2); None: the largest trace / 2 shown (at least 1).
        When given, the frames above 1.05 times it are left out (the path then ends with a
        triangle).

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> to_zero = np.array([np.eye(2) * s for s in (1.0, 0.5, 0.1)])
    >>> fig = tp.psd_cone([to_zero], labels=["to 0"])
    >>> fig.axes[0].get_lines()[0].get_data_3d()[2].tolist()  # (s11 + s22) / 2 along the path
    [1.0, 0.5, 0.1]
    """
    if isinstance(trajectories, np.ndarray) and trajectories.ndim == 3:
        trajectories = [trajectories]
    coords = [cone_coordinates(c) for c in trajectories]
    fig = ax.figure if ax is not None else new_figure(5.0, 5.0)
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1, projection="3d")
    finite = [c[np.all(np.isfinite(c), axis=1)] for c in coords]
    top = height if height is not None else max([float(np.max(c[:, 2])) for c in finite if len(c)] + [1.0])
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    a, r = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, top, 12))
    ax.plot_surface(r * np.cos(a), r * np.sin(a), r, color="0.6", alpha=0.15, linewidth=0, shade=False)
    left_top = False
    for k, c in enumerate(finite):
        whole = len(c)
        c = c[c[:, 2] <= top * 1.05] if height is not None else c
        if len(c) == 0:
            continue
        color = colors[k] if colors is not None else f"C{k % 10}"
        ax.plot(c[:, 0], c[:, 1], c[:, 2], color=color, linewidth=1.2,
                label=labels[k] if labels is not None else None)
        ax.scatter([c[0, 0]], [c[0, 1]], [c[0, 2]], color=color, s=12, marker="o")
        cut = len(c) < whole
        left_top |= cut
        ax.scatter([c[-1, 0]], [c[-1, 1]], [c[-1, 2]], color=color, s=20, marker="^" if cut else "x")
    ax.set_xlabel("(s11 - s22)/2", fontsize=8)
    ax.set_ylabel("s12", fontsize=8)
    ax.set_zlabel("(s11 + s22)/2", fontsize=8)
    ax.set_zlim(0, top)
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):  # few ticks: the projected labels must not overlap
        axis.set_major_locator(MaxNLocator(4))
    if finite and any(len(c) for c in finite):
        # The paths (when labelled), the surface, and what the markers are (black: any path's colour).
        handles, _ = ax.get_legend_handles_labels()
        handles += [Patch(facecolor="0.6", alpha=0.3, label="cone surface: rank one"),
                    Line2D([], [], color="k", marker="o", linestyle="none", markersize=4, label="start (t = 0)"),
                    Line2D([], [], color="k", marker="x", linestyle="none", markersize=5, label="end (last frame)")]
        if left_top:
            handles.append(Line2D([], [], color="k", marker="^", linestyle="none", markersize=4,
                                  label="leaves the top (grows on)"))
        ax.legend(handles=handles, fontsize=7)
    ax.set_title(title or "2 x 2 covariances in the PSD cone", fontsize=10)
    _tidy(fig)
    return fig


# ---- couplings and attention matrices --------------------------------------------------------------

def heatmap(matrix, title: Optional[str] = None, ax=None, vmax: Optional[float] = None,
            row_label: str = "query i", col_label: str = "key j") -> Figure:
    """A coupling or attention matrix as an image, with its row and column sums in the axis labels.

    Parameters
    ----------
    matrix : array_like of shape (n, m)
        The weights ``W_ij`` (dimensionless).
    title : str, optional
        The panel's title.
    ax : matplotlib.axes.Axes, optional
        Draw into these axes instead of a new figure.
    vmax : float, optional
        The top of the colour scale (its bottom is 0); the matrix's largest entry when None.
    row_label : str, default "query i"
        The y axis's label, before the row sums.
    col_label : str, default "key j"
        The x axis's label, before the column sums.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into, with a colour bar.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> fig = tp.heatmap(np.array([[0.5, 0.5], [0.0, 1.0]]))
    >>> fig.axes[0].get_xlabel()
    'key j   (column sums 0.5 .. 1.5)'
    """
    w = np.asarray(matrix, dtype=float)
    fig = ax.figure if ax is not None else new_figure(4.6, 4.0)
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=vmax if vmax is not None else float(np.max(w)),
                      interpolation="nearest")
    rows, cols = w.sum(axis=1), w.sum(axis=0)
    ax.set_xlabel(f"{col_label}   (column sums {cols.min():.3g} .. {cols.max():.3g})", fontsize=8)
    ax.set_ylabel(f"{row_label}   (row sums {rows.min():.3g} .. {rows.max():.3g})", fontsize=8)
    ax.tick_params(labelsize=7)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label("weight W_ij (dimensionless)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    _tidy(fig)
    return fig


def heatmaps(matrices: Mapping[str, np.ndarray], title: Optional[str] = None) -> Figure:
    """Several matrices side by side on one colour scale (e.g. softmax against Sinkhorn attention).

    Parameters
    ----------
    matrices : mapping of str to array_like
        The matrices, by panel title, in order.
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        One :func:`heatmap` panel per matrix, on the colour scale 0 .. the largest entry of all.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> fig = tp.heatmaps({"a": np.eye(3), "b": np.ones((3, 3)) / 3})
    >>> [ax.get_title() for ax in fig.axes if ax.get_title()]
    ['a', 'b']
    """
    vmax = max(float(np.max(m)) for m in matrices.values())
    fig = new_figure(4.6 * len(matrices), 4.2)
    for k, (name, m) in enumerate(matrices.items()):
        heatmap(m, title=name, ax=fig.add_subplot(1, len(matrices), k + 1), vmax=vmax)
    if title:
        fig.suptitle(title, fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


# ---- rates and histograms --------------------------------------------------------------------------

def _center(e: np.ndarray, center: str) -> np.ndarray:
    if e.ndim != 2:
        return e
    if center == "rms":
        return np.sqrt(np.mean(e ** 2, axis=1))
    if center == "mean":
        return e.mean(axis=1)
    raise ValueError(f"center must be 'mean' or 'rms', not {center!r}")


def fit_slope(ns, errors, center: str = "mean") -> tuple[float, float]:
    """The least-squares fit of ``log(error) = slope log(n) + intercept``.

    Parameters
    ----------
    ns : array_like of shape (k,)
        The numbers of tokens.
    errors : array_like of shape (k,) or (k, trials)
        The errors, one per n, or one row of trials per n.
    center : {"mean", "rms"}, default "mean"
        With trials: fit the mean over the trials, or their root mean square (as ``tokenflow
        meanfield`` does).

    Returns
    -------
    tuple of float
        (slope, intercept), in natural logarithms.

    Raises
    ------
    ValueError
        Another center, with trials.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> round(tp.fit_slope([10, 100, 1000], [1.0, 0.1, 0.01])[0], 12)
    -1.0
    >>> round(tp.fit_slope([10, 1000], [[3.0, 4.0], [0.3, 0.4]], center="rms")[0], 12)
    -0.5
    """
    ns = np.asarray(ns, dtype=float)
    slope, intercept = np.polyfit(np.log(ns), np.log(_center(np.asarray(errors, dtype=float), center)), 1)
    return float(slope), float(intercept)


def meanfield_errors(ns, errors, reference_slope: Optional[float] = -0.5, title: Optional[str] = None,
                     ylabel: str = "error", center: str = "mean", ax=None, color: str = "C0",
                     label: str = "measured") -> Figure:
    """Errors against the number of tokens on log-log axes, with the fitted slope and a reference.

    The legend gives the fitted slope ("fit: slope -0.49", :func:`fit_slope`) and the reference
    rate ("n^-0.5", drawn black dashed through the first point). With trials, the min .. max band
    over them is shaded.

    Parameters
    ----------
    ns : array_like of shape (k,)
        The numbers of tokens.
    errors : array_like of shape (k,) or (k, trials)
        The errors, one per n, or one row of trials per n.
    reference_slope : float or None, default -0.5
        The predicted rate's exponent; None: no reference line.
    title : str, optional
        The panel's title.
    ylabel : str, default "error"
        The y axis's label.
    center : {"mean", "rms"}, default "mean"
        With trials: the mean over the trials, or their root mean square, is drawn and fitted.
    ax : matplotlib.axes.Axes, optional
        Draw into these axes (several series in one panel).
    color : str, default "C0"
        The colour of the series.
    label : str, default "measured"
        The legend label of the points.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ValueError
        Another center, with trials.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> ns = np.array([100, 400, 1600])
    >>> fig = tp.meanfield_errors(ns, 2 / np.sqrt(ns))
    >>> [line.get_label() for line in fig.axes[0].get_lines()]
    ['measured', 'fit: slope -0.500', 'n^-0.5']
    """
    ns = np.asarray(ns, dtype=float)
    e = np.asarray(errors, dtype=float)
    middle = _center(e, center)
    slope, intercept = fit_slope(ns, e, center)
    fig = ax.figure if ax is not None else new_figure(5.5, 4.2)
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    if e.ndim == 2:
        ax.fill_between(ns, e.min(axis=1), e.max(axis=1), color=color, alpha=0.2, linewidth=0,
                        label=f"min .. max over the {e.shape[1]} samples")
    ax.plot(ns, middle, "o", color=color, label=label)
    ax.plot(ns, np.exp(intercept) * ns ** slope, "-", color=color, label=f"fit: slope {slope:.3f}")
    if reference_slope is not None:
        # The predicted rate, through the first point: black dashed, on top of the data.
        ax.plot(ns, middle[0] * (ns / ns[0]) ** reference_slope, "--", color="k", linewidth=1.1, zorder=3,
                label=f"n^{reference_slope:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (tokens)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


def rank_histograms(ranks: Mapping[int, Mapping[str, Sequence[int]]], expected: Optional[Mapping] = None,
                    title: Optional[str] = None) -> Figure:
    """Histograms of ranks, one panel per dimension d.

    The bars of the labels stand side by side at each integer 0 .. d.

    Parameters
    ----------
    ranks : mapping of int to mapping of str to sequence of int
        ``ranks[d][label]``: the ranks (integers 0 .. d) of the runs of that label in dimension d.
    expected : mapping of int to int, optional
        ``expected[d]``: the predicted rank, drawn as a dashed vertical line labelled
        "predicted: (d + 1) // 2 = r".
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per d, in increasing order.

    Examples
    --------
    >>> import tokenflow.plot as tp
    >>> fig = tp.rank_histograms({3: {"V = I": [2, 2, 2, 1]}}, expected={3: 2})
    >>> [p.get_height() for p in fig.axes[0].patches]  # counts of rank 0, 1, 2, 3
    [0, 1, 3, 0]
    """
    dims = sorted(ranks)
    fig = new_figure(4.0 * len(dims), 3.6)
    for k, d in enumerate(dims):
        ax = fig.add_subplot(1, len(dims), k + 1)
        groups = ranks[d]
        width = 0.8 / max(len(groups), 1)
        for g, (label, values) in enumerate(groups.items()):
            counts = np.bincount(np.asarray(values, dtype=int), minlength=d + 1)[: d + 1]
            ax.bar(np.arange(d + 1) - 0.4 + width * (g + 0.5), counts, width=width, color=f"C{g}", label=label)
        if expected is not None and d in expected:
            ax.axvline(expected[d], color="k", linestyle="--", linewidth=1, zorder=3,
                       label=f"predicted: (d + 1) // 2 = {expected[d]}")
        ax.set_xticks(range(d + 1))
        ax.set_xlabel("rank of the limiting covariance")
        ax.set_ylabel("count (runs)")
        sizes = {len(v) for v in groups.values()}
        ax.set_title(f"d = {d}" + (f" ({sizes.pop()} runs each)" if len(sizes) == 1 else ""), fontsize=10)
        top = max([int(np.max(np.bincount(np.asarray(v, dtype=int)))) for v in groups.values() if len(v)] + [1])
        ax.set_ylim(0, 1.45 * top)  # room for the legend above the bars
        ax.legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


def cluster_fraction(betas, times, fraction, title: Optional[str] = None,
                     pair_tol: Optional[float] = None) -> Figure:
    """The fraction of clustered pairs against beta and time: a heatmap and its last time.

    The mean over the seeds is shown, against beta and time on the left and at the last time on the
    right, with the min .. max band over the seeds.

    Parameters
    ----------
    betas : array_like of shape (B,)
        The inverse temperatures.
    times : array_like of shape (F,)
        The frame times.
    fraction : array_like of shape (seeds, B, F) or (B, F)
        The fraction of clustered pairs, in [0, 1].
    title : str, optional
        The figure's title.
    pair_tol : float, optional
        The distance below which a pair counts as clustered, written in the colour bar's and the y
        axis's labels when given.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels and a colour bar.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> fig = tp.cluster_fraction([0.1, 9.0], [0.0, 30.0], np.array([[0.0, 1.0], [0.0, 0.4]]))
    >>> fig.axes[2].get_lines()[0].get_ydata().tolist()  # at the last time, per beta
    [1.0, 0.4]
    """
    betas = np.asarray(betas, dtype=float)
    t = np.asarray(times, dtype=float)
    f = np.asarray(fraction, dtype=float)
    f = f[None] if f.ndim == 2 else f
    mean = f.mean(axis=0)
    fig = new_figure(10.0, 4.0)
    ax = fig.add_subplot(1, 2, 1)

    def half_cell(v):  # each cell centred on its beta / time
        step = (v[-1] - v[0]) / max(len(v) - 1, 1) / 2 if len(v) > 1 else 0.5
        return v[0] - step, v[-1] + step

    image = ax.imshow(mean.T, origin="lower", aspect="auto", cmap="magma", vmin=0, vmax=1,
                      extent=(*half_cell(betas), *half_cell(t)), interpolation="nearest")
    ax.set_xlabel("beta (inverse temperature)")
    ax.set_ylabel("t")
    ax.set_title(f"against beta and time (mean over {len(f)} seeds)", fontsize=10)
    quantity = "clustered pairs" + (f" (|x_i - x_j| < {pair_tol:g})" if pair_tol is not None else "")
    fig.colorbar(image, ax=ax).set_label(f"fraction of {quantity}", fontsize=8)
    ax = fig.add_subplot(1, 2, 2)
    ax.fill_between(betas, f[:, :, -1].min(axis=0), f[:, :, -1].max(axis=0), color="C1", alpha=0.25, linewidth=0,
                    label=f"min .. max over {len(f)} seeds")
    ax.plot(betas, mean[:, -1], "o-", color="C1", label=f"mean over {len(f)} seeds")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("beta (inverse temperature)")
    ax.set_ylabel(f"fraction of {quantity}")
    ax.set_title(f"at the last time, t = {t[-1]:.3g}", fontsize=10)
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    _tidy(fig)
    fig.tight_layout()
    return fig


# ---- output directories of the CLI ----------------------------------------------------------------

def read_csv(path) -> dict:
    """A CSV file with a header line as a dict of columns.

    Parameters
    ----------
    path : str or os.PathLike
        The file (diagnostics.csv, metrics.csv, meanfield.csv, ...).

    Returns
    -------
    dict of str to numpy.ndarray or list of str
        ``{column: values}``: float arrays (empty fields are NaN), except columns holding text (such
        as meanfield.csv's status), which stay lists of strings.

    Raises
    ------
    OSError
        The file cannot be read (FileNotFoundError when it does not exist).

    Examples
    --------
    >>> import tempfile, os, tokenflow.plot as tp
    >>> path = os.path.join(tempfile.mkdtemp(), "m.csv")
    >>> _ = open(path, "w").write("step,loss,status\\n0,1.5,finished\\n10,0.25,blowup\\n")
    >>> table = tp.read_csv(path)
    >>> table["loss"].tolist(), table["status"]
    ([1.5, 0.25], ['finished', 'blowup'])
    """
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]

    def number(v):
        return float(v) if v != "" else float("nan")

    table = {}
    for k, name in enumerate(header):
        values = [r[k] for r in body]
        try:
            table[name] = np.array([number(v) for v in values], dtype=float)
        except ValueError:
            table[name] = values
    return table


def read_simulation(directory) -> dict:
    """The outputs of ``tokenflow simulate --out DIR``, read back.

    Parameters
    ----------
    directory : str or os.PathLike
        The output directory DIR.

    Returns
    -------
    dict
        ``summary`` (summary.json, a dict), ``diagnostics`` (the columns of diagnostics.csv,
        :func:`read_csv`), ``initial`` and ``positions`` (n x d arrays), ``trajectory`` (F x n x d)
        and ``times`` (F) when frames were saved, else None.

    Raises
    ------
    OSError
        A file the command always writes is missing (FileNotFoundError) or unreadable.

    Examples
    --------
    After ``tokenflow simulate --set run.save_every=10 --out DIR``,
    ``tokenflow.plot.read_simulation("DIR")["trajectory"].shape`` is (F, n, d) (tested in
    tests/python/test_plot.py on a directory written by the CLI).
    """
    d = Path(directory)
    out = {"summary": json.loads((d / "summary.json").read_text()), "diagnostics": read_csv(d / "diagnostics.csv"),
           "initial": np.load(d / "initial.npy"), "positions": np.load(d / "positions.npy")}
    out["trajectory"] = np.load(d / "trajectory.npy") if (d / "trajectory.npy").exists() else None
    out["times"] = np.load(d / "times.npy") if (d / "times.npy").exists() else None
    return out


def diagnostics_eigenvalues(diagnostics: Mapping[str, np.ndarray]) -> np.ndarray:
    """The eig_c columns of diagnostics.csv as one array (ascending, as written).

    Parameters
    ----------
    diagnostics : mapping of str to numpy.ndarray
        The columns of diagnostics.csv (:func:`read_csv`, or SimulationResult.diagnostics).

    Returns
    -------
    numpy.ndarray of shape (F, d)
        Column c holds eig_c (the c-th smallest covariance eigenvalue) over the F frames.

    Examples
    --------
    >>> import numpy as np, tokenflow.plot as tp
    >>> tp.diagnostics_eigenvalues({"t": np.zeros(1), "eig_1": np.array([2.0]), "eig_0": np.array([1.0])}).tolist()
    [[1.0, 2.0]]
    """
    names = sorted((k for k in diagnostics if k.startswith("eig_")), key=lambda k: int(k[4:]))
    return np.stack([diagnostics[k] for k in names], axis=1)


def simulation_dir(directory, sphere: Optional[bool] = None, frames=None) -> Figure:
    """Snapshots of the tokens of a ``tokenflow simulate`` output directory (:func:`particles`).

    The saved frames when there are some, else the initial and final positions (at t = 0 and
    summary["t_final"]).

    Parameters
    ----------
    directory : str or os.PathLike
        The output directory (:func:`read_simulation`).
    sphere : bool, optional
        Draw the unit circle or sphere; None: when every initial token has norm 1 (to 1e-6).
    frames : sequence of int, optional
        Which frames to show, as :func:`particles`.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per frame shown.

    Raises
    ------
    OSError
        A file the command always writes is missing or unreadable.

    Examples
    --------
    ``tokenflow.plot.simulation_dir("out/demo/collapse/simulation").savefig("x.png")`` (tested in
    tests/python/test_plot.py on a directory written by the CLI).
    """
    run = read_simulation(directory)
    traj = run["trajectory"] if run["trajectory"] is not None else np.stack([run["initial"], run["positions"]])
    times = run["times"] if run["times"] is not None else [0.0, run["summary"]["t_final"]]
    if sphere is None:
        sphere = bool(np.allclose(np.linalg.norm(traj[0], axis=1), 1.0, atol=1e-6))
    return particles(traj, times, frames=frames, sphere=sphere)


def gaussian_dir(directory, title: Optional[str] = None) -> Figure:
    """Covariance eigenvalues of a ``tokenflow gaussian`` output directory.

    :func:`covariance_eigenvalues` of times.npy and covs.npy; summary.json's blowup_time is marked
    when it is a number.

    Parameters
    ----------
    directory : str or os.PathLike
        The output directory.
    title : str, optional
        The panel's title.

    Returns
    -------
    matplotlib.figure.Figure
        The eigenvalues over time.

    Raises
    ------
    OSError
        A file the command always writes is missing or unreadable.

    Examples
    --------
    ``tokenflow.plot.gaussian_dir("out/g").savefig("eig.png")`` after ``tokenflow gaussian --out
    out/g`` (tested on the contract's layout in tests/python/test_plot.py).
    """
    d = Path(directory)
    summary = json.loads((d / "summary.json").read_text())
    return covariance_eigenvalues(np.load(d / "times.npy"), eigenvalues_of(np.load(d / "covs.npy")),
                                  blowup_time=summary.get("blowup_time"), title=title)
