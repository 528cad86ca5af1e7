"""PNG plots behind `--plot` (matplotlib is the optional `plot` extra)."""

from __future__ import annotations

from pathlib import Path

from advisor.core.errors import AdvisorError


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
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise AdvisorError(f"{path}: cannot write the plot ({e.strerror}).") from None


def plot_candidates(rec, path: Path) -> None:
    """Every feasible candidate's throughput against peak power and against energy per token,
    the Pareto front of each, and the recommended ones numbered."""
    plt = pyplot()
    ranked = rec.ranked
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    panels = (("pred_peak_power_w", "peak power per GPU (W)", rec.pareto_power),
              ("pred_energy_j_per_token", "energy per token (J)", rec.pareto_energy))
    for ax, (cost, label, front) in zip(axes, panels, strict=True):
        ax.scatter(ranked[cost], ranked["pred_tokens_per_sec_per_gpu"], s=6, alpha=0.25,
                   color="grey", label=f"{len(ranked):,} feasible")
        ax.plot(front[cost], front["pred_tokens_per_sec_per_gpu"], "o-", color="tab:blue",
                label="Pareto front")
        for c in rec.choices:
            point = (getattr(c.prediction, cost.removeprefix("pred_")),
                     c.prediction.tokens_per_sec_per_gpu)
            ax.annotate(f"#{c.rank}", point, color="tab:red", fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("tokens/s per GPU")
        ax.legend(loc="lower right", fontsize=8)
    j = rec.job
    fig.suptitle(f"{j.model.name} on {j.num_gpus} × {j.platform.name} ({rec.objective})")
    save(fig, path)


def plot_gpu_heatmap(gpus, path: Path, *, title: str) -> None:
    """Nodes × slots, coloured by each GPU's peak temperature, its stage written in the cell
    (the straggler's cell outlined), like the per-GPU figure of Go et al., MICRO'25."""
    import numpy as np

    plt = pyplot()
    nodes, slots = int(gpus["node"].max()) + 1, int(gpus["slot"].max()) + 1
    grid = np.full((nodes, slots), np.nan)
    grid[gpus["node"], gpus["slot"]] = gpus["peak_temp_c"]
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * slots, 1.2 + 0.35 * min(nodes, 64)))
    image = ax.imshow(grid[:64], cmap="inferno", aspect="auto")
    fig.colorbar(image, ax=ax, label="peak temperature (°C)")
    if nodes * slots <= 512:
        for g in gpus[gpus["node"] < 64].itertuples():
            ax.text(g.slot, g.node, f"s{g.stage}", ha="center", va="center", fontsize=7,
                    color="white" if g.peak_temp_c < np.nanmean(grid) else "black")
    for g in gpus[gpus["straggler"] & (gpus["node"] < 64)].itertuples():
        ax.add_patch(plt.Rectangle((g.slot - 0.5, g.node - 0.5), 1, 1, fill=False,
                                   edgecolor="cyan", linewidth=2))
    ax.set_xlabel("slot (0-3 front row, 4-7 rear on HGX air)")
    ax.set_ylabel("node" + (" (first 64)" if nodes > 64 else ""))
    ax.set_title(title, fontsize=9)
    save(fig, path)
