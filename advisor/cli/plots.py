"""PNG plots behind `--plot` (matplotlib is the optional `plot` extra).

Each function saves its figure and returns it (tests read its artists, not its pixels). Labels
are placed so they cannot overlap: only the recommended layouts are named, in a column beside
the points, each joined to its point by a leader line; the Pareto front is drawn, not labelled.
"""

from __future__ import annotations

from pathlib import Path

from advisor.core.errors import AdvisorError, first_line
from advisor.core.files import check_output, shown_path

MAX_LABELS = 8
"""Recommended layouts named on the Pareto plot (more would crowd the label column)."""

LOSS_COLOURS = {"power cap": "tab:orange", "slowest GPU and heat": "tab:purple"}
"""Colours of the two parts of a pick's expected loss (see `_loss_segments`)."""


def pyplot():
    """matplotlib.pyplot with a file-only backend, or a clear error naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AdvisorError("--plot needs matplotlib: pip install 'advisor[plot]'.") from None
    return plt


def save(fig, path: Path) -> None:
    check_output(path, what="PNG")
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise AdvisorError(f"{shown_path(path)}: cannot write the plot ({first_line(e)}).") \
            from None


def layout_label(config) -> str:
    """`TP4 PP2/VP5 DP8 CP2 MBS1`: how the layout splits the GPUs, as the tables write it."""
    parts = [f"TP{config.tp}", f"PP{config.pp}" + (f"/VP{config.vp}" if config.vp > 1 else ""),
             f"DP{config.dp}"]
    parts += [f"{name}{value}" for name, value in (("CP", config.cp), ("EP", config.ep))
              if value > 1]
    return " ".join([*parts, f"MBS{config.mbs}"])


def plot_candidates(rec, path: Path):
    """Every feasible candidate's throughput against peak power and against energy per token,
    the Pareto front of each, the power limits, and the recommended layouts numbered beside
    the points with leader lines, each with its expected loss drawn above it."""
    plt = pyplot()
    ranked, picks = rec.ranked, rec.choices[:MAX_LABELS]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    # Energy on a log axis: a few slow layouts at many J/token would squeeze the rest.
    panels = (("pred_peak_power_w", "peak power per GPU (W)", rec.pareto_power),
              ("pred_energy_j_per_token", "energy per token (J, log scale)", rec.pareto_energy))
    for ax, (cost, label, front) in zip(axes, panels, strict=True):
        ax.scatter(ranked[cost], ranked["pred_tokens_per_sec_per_gpu"], s=6, alpha=0.25,
                   color="grey", label=f"{len(ranked):,} feasible layouts")
        ax.plot(front[cost], front["pred_tokens_per_sec_per_gpu"], ".-", color="tab:blue",
                markersize=5, label="Pareto front")
        points = [(getattr(c.prediction, cost.removeprefix("pred_")),
                   c.prediction.tokens_per_sec_per_gpu) for c in picks]
        _loss_segments(ax, picks, points)
        ax.scatter([x for x, _ in points], [y for _, y in points], s=40, color="tab:red",
                   edgecolor="black", linewidth=0.6, zorder=4, label="recommended (#rank)")
        if cost == "pred_peak_power_w":
            _power_limits(ax, rec.job.platform)
        else:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("tokens/s per GPU")
        _label_column(ax, picks, points)
        ax.legend(loc="lower left" if cost == "pred_energy_j_per_token" else "lower right",
                  fontsize=7, framealpha=0.9)
    j = rec.job
    fig.suptitle(f"{j.model.name} on {j.num_gpus} × {j.platform.name} ({rec.objective}): "
                 f"throughput against peak power and energy")
    fig.text(0.5, -0.01, "Peak power is the highest short sample and may exceed the limit; "
             "average power never does. Bars above a pick: throughput its expected losses "
             "take (power cap; slowest of the GPUs and thermal slowdown).", ha="center",
             fontsize=8, wrap=True)
    fig.tight_layout()
    save(fig, path)
    return fig


def _power_limits(ax, platform) -> None:
    """The board's power limit (TDP) and, where set below it, the limit the job runs at."""
    ax.axvline(platform.tdp_w, color="black", linestyle="--", linewidth=1,
               label=f"board power limit {platform.tdp_w:.0f} W")
    limit = platform.power_limit_w
    if limit is not None and limit != platform.tdp_w:
        ax.axvline(limit, color="tab:red", linestyle=":", linewidth=1.5,
                   label=f"power limit {limit:.0f} W (--power-limit-w)")


def _loss_segments(ax, picks, points) -> None:
    """Above each pick, the throughput its expected losses take, split into the power cap and
    the rest (slowest of N GPUs, thermal slowdown, degraded nodes): the losses are shares of
    the step, so the loss-free throughput is tokens/s ÷ (1 - total loss)."""
    labelled = set()
    for c, (x, y) in zip(picks, points, strict=True):
        p = c.prediction.breakdown.power
        total = min(max(p.throttle_loss, 0.0), 0.99)
        if total <= 0:
            continue
        top = y / (1.0 - total)
        cap_share = min(max(p.power_cap_loss, 0.0) / total, 1.0)
        split = y + (top - y) * cap_share
        for (name, colour), (low, high) in zip(LOSS_COLOURS.items(), ((y, split), (split, top)),
                                               strict=True):
            if high > low:
                ax.plot([x, x], [low, high], color=colour, linewidth=2.5, alpha=0.8, zorder=3,
                        solid_capstyle="butt",
                        label=None if name in labelled else f"expected loss: {name}")
                labelled.add(name)


def _label_column(ax, picks, points) -> None:
    """`#k layout` labels stacked in the emptier upper side of the axes, each with a leader
    line to its point: labels at fixed, separate heights cannot overlap."""
    if not points:
        return
    x_low, x_high = ax.get_xlim()
    mean_x = sum(x for x, _ in points) / len(points)
    right = mean_x < (x_low + x_high) / 2  # the picks sit left: the labels go right
    order = sorted(range(len(points)), key=lambda i: -points[i][1])
    for slot, i in enumerate(order):
        c = picks[i]
        ax.annotate(f"#{c.rank} {layout_label(c.config)}", xy=points[i],
                    xytext=(0.97 if right else 0.03, 0.93 - 0.065 * slot),
                    textcoords="axes fraction", ha="right" if right else "left", va="center",
                    fontsize=7, color="tab:red",
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                          "alpha": 0.85},
                    arrowprops={"arrowstyle": "-", "color": "tab:red", "linewidth": 0.6,
                                "alpha": 0.7, "shrinkB": 3})


def plot_gpu_heatmap(gpus, path: Path, *, title: str):
    """Nodes × slots, coloured by each GPU's peak temperature, its pipeline stage written in
    the cell and the straggler's cells outlined, like the per-GPU figure of Go et al.,
    MICRO'25; a legend under the map says what the text and the outlines mean."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = pyplot()
    nodes, slots = int(gpus["node"].max()) + 1, int(gpus["slot"].max()) + 1
    grid = np.full((nodes, slots), np.nan)
    grid[gpus["node"], gpus["slot"]] = gpus["peak_temp_c"]
    fig, ax = plt.subplots(figsize=(2.0 + 0.7 * slots, 2.2 + 0.35 * min(nodes, 64)))
    image = ax.imshow(grid[:64], cmap="inferno", aspect="auto")
    fig.colorbar(image, ax=ax, label="peak temperature (°C)")
    handles = []
    if nodes * slots <= 512:
        for g in gpus[gpus["node"] < 64].itertuples():
            ax.text(g.slot, g.node, f"s{g.stage}", ha="center", va="center", fontsize=7,
                    color="white" if g.peak_temp_c < np.nanmean(grid) else "black")
        handles.append(Line2D([], [], linestyle="none", marker=r"$\mathrm{s}k$", markersize=14,
                              color="black", label="sk: the GPU runs pipeline stage k"))
    stragglers = gpus[gpus["straggler"] & (gpus["node"] < 64)]
    for g in stragglers.itertuples():
        ax.add_patch(plt.Rectangle((g.slot - 0.5, g.node - 0.5), 1, 1, fill=False,
                                   edgecolor="cyan", linewidth=2))
    if len(stragglers):
        handles.append(Patch(fill=False, edgecolor="cyan", linewidth=2,
                             label="straggler: the slowest GPUs, which set every "
                                   "step's pace"))
    rows = gpus.drop_duplicates("slot").set_index("slot")["row"] if "row" in gpus else None
    ax.set_xticks(range(slots))
    if rows is not None:
        ax.set_xticklabels([f"{s}\n{rows.get(s, '')}" for s in range(slots)], fontsize=7)
    ax.set_xlabel("slot (row of the chassis: front GPUs breathe the inlet air, rear ones "
                  "the front's exhaust)", fontsize=8)
    ax.set_ylabel("node" + (" (first 64)" if nodes > 64 else ""))
    ax.set_title(title, fontsize=9)
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1,
                  fontsize=7, frameon=False)
    fig.tight_layout()
    save(fig, path)
    return fig
