"""tokenflow.plot: each figure is drawn, non-empty, and holds the data it claims to show."""
import io
import json

import numpy as np
import pytest

import tokenflow.plot as tp


def png_pixels(fig):
    """The figure rendered to PNG and decoded (height x width x channels)."""
    import matplotlib.image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.tell() > 5000
    buffer.seek(0)
    pixels = matplotlib.image.imread(buffer)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0.01
    return pixels


def random_psd(rng, d, rank=None):
    B = rng.normal(size=(d, rank or d))
    return B @ B.T


def test_particles_2d_and_3d_show_the_frames():
    rng = np.random.default_rng()
    traj = rng.normal(size=(7, 25, 2))
    fig = tp.particles(traj, times=np.linspace(0, 3, 7), sphere=True)
    png_pixels(fig)
    assert len(fig.axes) == 5  # default: 5 evenly spaced frames, first and last included
    assert fig.axes[0].get_title() == "t = 0" and fig.axes[-1].get_title() == "t = 3"
    assert np.array_equal(fig.axes[-1].collections[0].get_offsets(), traj[-1])
    x = rng.normal(size=(3, 12, 3))
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    fig = tp.particles(x, frames=[0, 2], sphere=True)
    png_pixels(fig)
    xs, ys, zs = fig.axes[1].collections[-1]._offsets3d
    assert np.allclose(np.stack([xs, ys, zs], axis=1), x[2])


def test_particles_share_axes_and_label_them():
    rng = np.random.default_rng()
    traj = rng.normal(size=(3, 30, 2)) * np.array([1.0, 5.0, 0.2])[:, None, None]  # spreads differ
    fig = tp.particles(traj)
    limits = {(ax.get_xlim(), ax.get_ylim()) for ax in fig.axes}
    assert len(limits) == 1  # one box for every panel, holding every point shown
    (x0, x1), (y0, y1) = limits.pop()
    assert x0 <= traj[..., 0].min() and x1 >= traj[..., 0].max() and y0 <= traj[..., 1].min()
    assert all(ax.get_xlabel() == "x_1" and ax.get_ylabel() == "x_2" for ax in fig.axes)
    own = tp.particles(traj, shared_axes=False)
    assert len({ax.get_xlim() for ax in own.axes}) == 3


def test_trajectories_draw_each_path_with_its_ends_explained():
    rng = np.random.default_rng()
    traj = np.cumsum(rng.normal(size=(6, 100, 3)), axis=0)
    fig = tp.trajectories(traj, times=np.linspace(0, 1, 6), max_tokens=20)
    png_pixels(fig)
    ax = fig.axes[0]
    assert len(ax.lines) == 20
    paths = {tuple(line.get_xydata()[0]) for line in ax.lines}
    assert paths <= {tuple(p) for p in traj[0, :, :2]}  # each path starts at a token's start
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["start, t = 0", "end, t = 1"]
    assert ax.get_xlabel() == "x_1" and ax.get_ylabel() == "x_2"


def test_covariance_eigenvalues_marks_the_blowup_time():
    # Softmax, one head, V = W = I: S(t) = (S0^-1 - t (A + A^T))^-1 blows up at
    # t* = 1 / lambda_max(S0^1/2 (A + A^T) S0^1/2) (docs/design.md section 1).
    rng = np.random.default_rng()
    S0, A = random_psd(rng, 2) + 0.5 * np.eye(2), rng.normal(size=(2, 2))
    B = A + A.T
    w, U = np.linalg.eigh(S0)
    root = U @ np.diag(np.sqrt(w)) @ U.T
    lam = np.linalg.eigvalsh(root @ B @ root).max()
    if lam <= 0:
        B, lam = -B, np.linalg.eigvalsh(root @ -B @ root).max()
    t_star = 1 / lam
    t = np.linspace(0, 0.95 * t_star, 40)
    covs = np.array([np.linalg.inv(np.linalg.inv(S0) - s * B) for s in t])
    fig = tp.covariance_eigenvalues(t, tp.eigenvalues_of(covs), blowup_time=t_star)
    png_pixels(fig)
    lines = fig.axes[0].get_lines()
    assert np.allclose(lines[0].get_ydata(), tp.eigenvalues_of(covs)[:, -1])  # lambda_1: the largest
    assert lines[2].get_label() == f"t* = {t_star:.4g}" and lines[2].get_xdata()[0] == t_star
    # It grows towards t*: with e the top unit eigenvector of M = S0^1/2 B S0^1/2 and v = S0^-1/2 e,
    # v^T S(t) v = e^T (I - t M)^-1 e = 1 / (1 - t lambda), so lambda_max(S(t)) >= that / |v|^2.
    e = np.linalg.eigh(root @ B @ root)[1][:, -1]
    bound = 1 / (1 - t[-1] * lam) / (e @ np.linalg.inv(S0) @ e)
    assert lines[0].get_ydata()[-1] >= bound * (1 - 1e-9)


def test_cone_coordinates_put_psd_matrices_inside_the_round_cone():
    rng = np.random.default_rng()
    full = np.array([random_psd(rng, 2) for _ in range(50)])
    rank_one = np.array([random_psd(rng, 2, rank=1) for _ in range(50)])
    v, w, u = tp.cone_coordinates(full).T
    assert np.all(u > np.hypot(v, w))  # interior: positive definite
    v, w, u = tp.cone_coordinates(rank_one).T
    assert np.allclose(u, np.hypot(v, w), rtol=1e-12)  # surface: rank one
    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])
    v, w, u = tp.cone_coordinates(indefinite)[0]
    assert u < np.hypot(v, w)
    traj = np.array([np.eye(2) * s for s in np.linspace(1, 0.01, 20)])  # to the apex
    fig = tp.psd_cone([traj, full[:5]], labels=["to 0", "random"])
    png_pixels(fig)
    xs, ys, zs = fig.axes[0].get_lines()[0].get_data_3d()
    assert np.allclose(np.stack([xs, ys, zs], axis=1), tp.cone_coordinates(traj))


def test_heatmaps_show_the_matrices_and_their_sums():
    rng = np.random.default_rng()
    w = rng.uniform(size=(6, 6))
    w /= w.sum(axis=1, keepdims=True)
    fig = tp.heatmaps({"rows": w, "copy": w.T})
    png_pixels(fig)
    assert np.array_equal(fig.axes[0].images[0].get_array(), w)
    assert f"row sums {1:.3g} .. {1:.3g}" in fig.axes[0].get_ylabel()
    assert f"column sums {w.sum(0).min():.3g} .. {w.sum(0).max():.3g}" in fig.axes[0].get_xlabel()


def test_meanfield_errors_fit_the_slope():
    ns = np.array([64, 128, 256, 512, 1024, 2048])
    exact = 3.0 * ns ** -0.5
    assert tp.fit_slope(ns, exact)[0] == pytest.approx(-0.5, abs=1e-12)
    rng = np.random.default_rng()
    trials = exact[:, None] * np.exp(rng.normal(scale=0.05, size=(len(ns), 8)))
    slope, _ = tp.fit_slope(ns, trials)
    # log-mean noise per n is about 0.05 / sqrt(8); over log n spanning 3.47 the slope's standard
    # error is below 0.02: 5 sigma = 0.1.
    assert slope == pytest.approx(-0.5, abs=0.1)
    fig = tp.meanfield_errors(ns, trials)
    png_pixels(fig)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert f"fit: slope {slope:.3f}" in labels and "n^-0.5" in labels


def test_rank_histograms_count_the_ranks():
    rng = np.random.default_rng()
    ranks = {d: {"V = I": np.full(20, (d + 1) // 2), "V random PSD": rng.integers(0, d + 1, 20)} for d in (3, 4, 5)}
    fig = tp.rank_histograms(ranks, expected={d: (d + 1) // 2 for d in ranks})
    png_pixels(fig)
    for ax, d in zip(fig.axes, (3, 4, 5)):
        heights = [p.get_height() for p in ax.patches]
        assert heights[: d + 1] == np.bincount(ranks[d]["V = I"], minlength=d + 1).tolist()
        assert heights[d + 1:] == np.bincount(ranks[d]["V random PSD"], minlength=d + 1).tolist()


def test_cluster_fraction_shows_the_mean_over_seeds():
    rng = np.random.default_rng()
    f = rng.uniform(size=(3, 5, 7))
    fig = tp.cluster_fraction(np.linspace(0.1, 9, 5), np.linspace(0, 30, 7), f)
    png_pixels(fig)
    assert np.allclose(fig.axes[0].images[0].get_array(), f.mean(axis=0).T)
    assert np.allclose(fig.axes[2].get_lines()[0].get_ydata(), f.mean(axis=0)[:, -1])


def test_gaussian_dir_reads_the_contract_layout(tmp_path):
    t = np.linspace(0, 0.45, 10)
    covs = np.array([np.linalg.inv(np.eye(2) - s * np.diag([2.0, -1.0])) for s in t])  # blows up at t = 1/2
    np.save(tmp_path / "times.npy", t)
    np.save(tmp_path / "covs.npy", covs)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "blowup", "blowup_time": 0.5}))
    fig = tp.gaussian_dir(tmp_path)
    lines = fig.axes[0].get_lines()
    assert lines[2].get_xdata()[0] == 0.5
    (tmp_path / "summary.json").write_text(json.dumps({"status": "converged", "blowup_time": None}))
    assert len(tp.gaussian_dir(tmp_path).axes[0].get_lines()) == 2  # no t* line


def test_readers_and_simulation_dir_on_a_cli_output(tmp_path, cli):
    out = tmp_path / "run"
    cli("simulate", "--set", "init.n=40", "--set", "run.T=0.5", "--set", "run.save_every=10", "--out", out)
    run = tp.read_simulation(out)
    assert run["trajectory"].shape == (6, 40, 2) and run["summary"]["n"] == 40
    assert np.array_equal(run["trajectory"][-1], run["positions"])
    eig = tp.diagnostics_eigenvalues(run["diagnostics"])
    cov = np.cov(run["positions"].T, bias=True)
    assert np.allclose(eig[-1], np.linalg.eigvalsh(cov), rtol=1e-10)
    fig = tp.simulation_dir(out)
    png_pixels(fig)
    assert np.array_equal(fig.axes[-1].collections[0].get_offsets(), run["positions"])
