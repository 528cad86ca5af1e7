"""The `--plot` figures: written as PNGs, and holding the artists a reader needs (the power
limits, labels that do not overlap, legends for the loss bars and the heat map's marks). The
figures are drawn from real recommendations and per-GPU tables; their artists are read, not
their pixels."""

from __future__ import annotations

import pytest

from advisor import catalog
from advisor.cli.plots import LOSS_COLOURS, layout_label, plot_candidates, plot_gpu_heatmap
from advisor.core.parallel import make_config, make_job
from advisor.search.recommend import recommend

pytestmark = pytest.mark.plot


@pytest.fixture(scope="module")
def capped_rec():
    """A small exhaustive recommendation at a power limit below the board's."""
    platform = catalog.with_conditions(catalog.load_platform("h100"), power_limit_w=500)
    job = make_job(catalog.load_model("llama3-8b"), platform, num_gpus=16)
    return recommend(job, top=5)


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _vertical_lines_at(ax) -> set[float]:
    return {line.get_xdata()[0] for line in ax.get_lines()
            if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2
            and line.get_linestyle() in ("--", ":")}


def test_pareto_plot_draws_the_board_limit_and_the_job_limit(capped_rec, tmp_path):
    path = tmp_path / "front.png"
    fig = plot_candidates(capped_rec, path)
    assert path.read_bytes()[:4] == b"\x89PNG"
    power_ax = fig.axes[0]
    assert _vertical_lines_at(power_ax) == {700.0, 500.0}  # H100 TDP; the limit asked for
    legend = _legend_texts(power_ax)
    assert "board power limit 700 W" in legend
    assert "power limit 500 W (--power-limit-w)" in legend


def test_pareto_labels_name_only_the_picks_and_do_not_overlap(capped_rec, tmp_path):
    from matplotlib.text import Text

    fig = plot_candidates(capped_rec, tmp_path / "front.png")
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_text().startswith("#")]
        assert [t.get_text() for t in sorted(labels, key=lambda t: int(
            t.get_text()[1:].split()[0]))] == [f"#{c.rank} {layout_label(c.config)}"
                                               for c in capped_rec.choices]
        assert all(t.arrow_patch is not None for t in labels)  # a leader line to its point
        # The text's own box (an Annotation's extent also spans its leader line).
        boxes = [Text.get_window_extent(t, renderer) for t in labels]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not a.overlaps(b), "labels overlap"


def test_pareto_legend_explains_the_loss_bars(capped_rec, tmp_path):
    fig = plot_candidates(capped_rec, tmp_path / "front.png")
    drawn = {name for name in LOSS_COLOURS
             if any(c.prediction.breakdown.power.throttle_loss > 0 for c in capped_rec.choices)}
    for ax in fig.axes:
        legend = _legend_texts(ax)
        assert {f"expected loss: {name}" for name in drawn} <= set(legend)
        assert "recommended (#rank)" in legend
    # Each bar rises from the pick to tokens/s ÷ (1 - total loss).
    c = capped_rec.choices[0]
    p = c.prediction
    top = p.tokens_per_sec_per_gpu / (1 - p.breakdown.power.throttle_loss)
    ends = [max(line.get_ydata()) for line in fig.axes[0].get_lines()
            if list(line.get_xdata()) == [p.peak_power_w] * 2]
    assert ends and max(ends) == pytest.approx(top)


def test_heat_map_explains_its_boxes(tmp_path):
    from matplotlib.patches import Rectangle

    from advisor.perf.per_gpu import per_gpu_table

    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    job = make_job(model, platform, num_gpus=64)
    gpus = per_gpu_table(model, platform, make_config(job, tp=4, pp=4, mbs=1))
    path = tmp_path / "gpus.png"
    fig = plot_gpu_heatmap(gpus, path, title="per GPU")
    assert path.read_bytes()[:4] == b"\x89PNG"
    ax = fig.axes[0]
    outlines = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert len(outlines) == int(gpus["straggler"].sum()) > 0
    legend = _legend_texts(ax)
    assert any(t.startswith("straggler:") for t in legend)
    assert any(t.startswith("sk: the GPU runs pipeline stage k") for t in legend)
    assert {t.get_text() for t in ax.texts} == {f"s{s}" for s in gpus["stage"].unique()}
