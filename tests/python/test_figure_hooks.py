"""The figure functions on synthetic data in the documented layouts (docs/ARCHITECTURE-python.md):
numbers that can be checked exactly, independent of a CLI run. The figures of the real data are
tested in test_reproduce.py."""
import json

import numpy as np
import pytest

from tokenflow import figures


def test_meanfield_slope_is_the_rms_fit(tmp_path):
    ns = [100, 200, 400, 800]
    header = ("n,sample,seed,status,mean_error,cov_error,bures_wasserstein,mean_error_from_sample,"
              "cov_error_from_sample,bures_wasserstein_from_sample,seconds")
    rows = [header] + [f"{n},{k},{k},finished,0,0,{2.0 * n ** -0.5 * (1 + 0.01 * k)},0,0,{n ** -1.0},0"
                       for n in ns for k in range(3)]
    (tmp_path / "meanfield.csv").write_text("\n".join(rows) + "\n")
    summary = {"seeds": 3, "T": 1.0, "theory_slope": -0.5,
               "slopes": {"bures_wasserstein": -0.5, "bures_wasserstein_from_sample": -1.0}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    fig, numbers = figures.draw_meanfield(tmp_path)
    assert numbers["samples per n"] == 3 and numbers["n from"] == 100 and numbers["n to"] == 800
    # One panel per error; the same factor at every n, so the RMS fits are exactly -1/2 and -1.
    labels = [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    assert "fit: slope -0.500" in labels[0] and "fit: slope -1.000" in labels[1]
    rms = fig.axes[0].get_lines()[0].get_ydata()
    assert np.allclose(rms, [np.sqrt(np.mean([(2.0 * n ** -0.5 * (1 + 0.01 * k)) ** 2 for k in range(3)]))
                             for n in ns], rtol=1e-14)


def test_universal_approximation(tmp_path):
    rows = ["width,layers,k,parameters,test_w1,test_w1_untrained,test_w1_independent,test_loss,seconds",
            "4,1,2,544,0.12,0.4,0.52,1.0,10", "16,1,8,6976,0.05,0.4,0.52,0.5,20", "64,2,32,204672,0.02,0.4,0.52,0.2,60"]
    (tmp_path / "sweep.csv").write_text("\n".join(rows) + "\n")
    summary = {"w1_smallest_model": 0.12, "w1_largest_model": 0.02, "w1_falls_with_capacity": True}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    entry = figures.draw("universal-approximation", tmp_path)[0]
    assert entry["numbers"] == {"models": 3, "W_1 smallest model": 0.12, "W_1 largest model": 0.02,
                                "falls with capacity": True, "W_1 independent coupling": 0.52,
                                "largest model / independent coupling": 0.02 / 0.52}
    # The explanation states the prediction and what this run measured (not a fixed claim).
    assert "here the largest model's is 0.03846 of it (falls with capacity: yes)" in entry["explanation"]


def test_every_cpp_reproduction_has_figures(cli):
    names = [line.split()[0] for line in cli("reproduce", "--list").stdout.splitlines()]
    assert names and set(names) == set(figures.FIGURES)


# ---- every figure of the demo explains itself ----------------------------------------------------

def _rgb_set(colors):
    from matplotlib.colors import to_rgba_array

    out = set()
    for c in colors:
        try:
            out |= {tuple(round(float(v), 3) for v in row[:3]) for row in to_rgba_array(c)}
        except (ValueError, TypeError):
            pass
    return out


def _artist_colors(artist):
    if hasattr(artist, "get_color") and not hasattr(artist, "get_facecolor"):  # Line2D
        return _rgb_set([artist.get_color()])
    return _rgb_set([artist.get_facecolor(), artist.get_edgecolor()])


def _legend_handles(legend):
    return getattr(legend, "legend_handles", None) or legend.legendHandles


def _shown_tick_labels(axis, renderer):
    """The major tick labels drawn inside the axis's view interval, with their text."""
    locs = axis.get_majorticklocs()
    lo, hi = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    shown = []
    for tick, loc in zip(axis.get_major_ticks(len(locs)), locs):
        label = tick.label1
        if lo - slack <= loc <= hi + slack and label.get_visible() and label.get_text().strip():
            shown.append(label)
    return shown


def figure_problems(fig):
    """What a reader could not work out from the figure alone: a missing axis label, title or
    colour-bar label, an unexplained line / marker / band, a log or linear axis with a single tick
    label, overlapping tick labels, a black dashed (theory) line under the data."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    legend_texts, legend_colors = set(), set()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    for legend in legends:
        legend_texts |= {t.get_text() for t in legend.get_texts()}
        for h in _legend_handles(legend):
            legend_colors |= _artist_colors(h)
    for k, ax in enumerate(fig.axes):
        where = f"axes {k} ({ax.get_title()!r})"
        if hasattr(ax, "_colorbar"):
            if not (ax.get_ylabel() or ax.get_xlabel()).strip():
                problems.append(f"{where}: colour bar without a label")
            continue
        three_d = hasattr(ax, "zaxis")
        if not ax.get_xlabel().strip() or not ax.get_ylabel().strip() or (three_d and not ax.get_zlabel().strip()):
            problems.append(f"{where}: an axis without a label")
        if not ax.get_title().strip():
            problems.append(f"{where}: no title")
        artists = [a for a in list(ax.lines) + list(ax.collections) if a.get_visible()]
        artists += list(ax.containers)  # bar groups: one label each
        if len(artists) > 1:
            for a in artists:
                label = a.get_label()
                if label in legend_texts:
                    continue
                colors = set()
                for part in (a.patches if hasattr(a, "patches") else [a]):
                    colors |= _artist_colors(part)
                if not colors or not colors <= legend_colors:
                    problems.append(f"{where}: {type(a).__name__} {label!r} neither in a legend nor of a legend's colour")
        if not three_d:
            for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                shown = _shown_tick_labels(axis, renderer)
                if len(shown) == 1:
                    problems.append(f"{where}: {name} axis has a single tick label {shown[0].get_text()!r}")
                boxes = [t.get_window_extent(renderer) for t in shown]
                for i in range(len(boxes)):
                    for j in range(i + 1, len(boxes)):
                        a, b = boxes[i], boxes[j]
                        if min(a.x1, b.x1) - max(a.x0, b.x0) > 0.5 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5:
                            problems.append(f"{where}: {name} tick labels {shown[i].get_text()!r} and "
                                            f"{shown[j].get_text()!r} overlap")
        theory = [l for l in ax.lines if l.get_linestyle() == "--" and _artist_colors(l) == {(0.0, 0.0, 0.0)}]
        data = [l for l in ax.lines if l not in theory]
        for l in theory:
            if data and l.get_zorder() < max(d.get_zorder() for d in data):
                problems.append(f"{where}: the black dashed line {l.get_label()!r} is drawn under the data")
    return problems


def test_the_check_finds_what_a_reader_would_miss():
    """figure_problems itself, on a figure with each fault."""
    from tokenflow import plot

    fig = plot.new_figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([1, 2], [1, 2], color="C0", zorder=4)
    ax.plot([1, 2], [2, 1], color="k", linestyle="--", label="closed form")
    ax.legend()
    ax.set_yscale("log")
    ax.set_ylim(0.5, 9)  # one power of ten inside: a single major label with the default ticks
    image = ax.imshow([[0, 1], [1, 0]], extent=(1, 2, 1, 2), aspect="auto")
    fig.colorbar(image, ax=ax)
    found = "\n".join(figure_problems(fig))
    assert "an axis without a label" in found and "no title" in found and "colour bar without a label" in found
    assert "neither in a legend" in found and "is drawn under the data" in found
    assert "y axis has a single tick label" in found and "10^{0}" in found
    ax.set_xlabel("x"), ax.set_ylabel("y"), ax.set_title("t")
    fig.axes[1].set_ylabel("value")
    plot._tidy(fig)  # 1, 2, 5 x 10^k on a short log axis
    found = "\n".join(figure_problems(fig))
    assert "without a label" not in found and "no title" not in found and "single tick" not in found


def test_every_demo_figure_explains_itself(demo_dir):
    """Every figure of a (quick) demo: labelled axes, titles and colour bars, every line, marker and
    band in a legend or of a legend's colour, no single or overlapping tick labels, the theory on top;
    its explanation's {fields} filled from the numbers beside it."""
    drawn = 0
    for name, specs in figures.FIGURES.items():
        for spec in specs:
            fig, numbers = spec.draw(demo_dir / name)
            assert figure_problems(fig) == [], spec.file
            text = spec.explain(numbers)
            assert "{" not in text and "}" not in text and len(text.split("\n")) == 2, (spec.file, text)
            drawn += 1
    assert drawn == sum(len(s) for s in figures.FIGURES.values()) >= 9
    explained = {e["file"]: e["explanation"] for e in json.loads((demo_dir / "figures.json").read_text())}
    ranks = next(e for e in json.loads((demo_dir / "figures.json").read_text()) if e["file"] == "ranks.png")
    # The ranks text names the number of runs the table counts (12 with --quick, 100 otherwise).
    runs = ranks["numbers"]["runs per d and V"]
    assert f"for {runs} random Q" in explained["ranks.png"]
