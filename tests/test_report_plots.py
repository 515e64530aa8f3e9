"""The grid figures show everything they hold: every convergence curve (in facets when there are
many) with the legend outside the axes, and audit bars that stay visible at any scale."""

import matplotlib

matplotlib.use("Agg")

import numpy as np

from fedclust import plots


def _records(n_methods=7, epsilons=("1", "4", "inf")):
    out = []
    for i in range(n_methods):
        for e in epsilons:
            for seed in (0, 1):
                acc = list(np.linspace(0.2, 0.5 + 0.05 * i, 6) + 0.01 * seed)
                out.append(
                    {
                        "tags": {"method": f"m{i}", "epsilon": e, "dataset": "d", "partition": "iid"},
                        "params": {"seed": seed},
                        "history": {"ACC": acc},
                    }
                )
    return out


def _right_edge_of_axes(fig):
    fig.canvas.draw()
    return max(ax.get_position().x1 for ax in fig.axes)


def test_every_curve_is_drawn_in_facets_with_one_legend_outside_the_axes():
    # 7 methods x 3 budgets = 21 curves: the old figure drew the first 10 and clipped its legends
    fig = plots.curves_figure(
        _records(), ("dataset", "partition", "method", "epsilon"), metrics=("ACC",), max_curves=10
    )
    drawn = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    assert len(drawn) == 21 and len(set(drawn)) == 21
    assert len(fig.axes) == 7 and all(len(ax.get_lines()) == 3 for ax in fig.axes)  # one facet per method
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 21
    fig.canvas.draw()
    box = legend.get_window_extent().transformed(fig.transFigure.inverted())
    assert box.x0 >= _right_edge_of_axes(fig) - 1e-6  # outside every panel
    few = plots.curves_figure(_records(2, ("1",)), ("method", "epsilon"), metrics=("ACC",))
    assert len(few.axes) == 1 and len(few.axes[0].get_lines()) == 2  # few curves: one panel


def test_audit_bars_are_visible_even_a_hundred_times_below_the_accounted_epsilon_or_zero():
    fig = plots.audit_bars_figure(["fkm", "fzkm"], [4.0, 4.0], [0.03, 0.0], [60.0, 80.0])
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert len(bars) == 6
    green = [b for b in bars if np.allclose(b.get_facecolor()[:3], matplotlib.colors.to_rgb("#1a9641"))]
    assert len(green) == 2
    lo = ax.get_ylim()[0]
    # on the log axis every bar spans at least a visible stretch above the bottom
    for b in green:
        top = b.get_y() + b.get_height()
        assert b.get_y() >= lo and np.log10(top) - np.log10(lo) > 0.1
    labels = [t.get_text() for t in ax.texts]
    assert "0.03" in labels and "0" in labels and "4" in labels
    assert ax.get_yscale() == "log"
