"""Power at the wall: a GPU's board power plus its share of the node around it, times the data
centre's overhead.

A node draws for its CPUs, memory, fans, NICs, switches and power-supply losses besides its
GPUs (`Platform.host_power_w`, measured at the wall on MLPerf H100 and B200 nodes:
`advisor/perf/node_energy.py`); each GPU carries `host_power_w / num_gpus_per_node` of it.
The facility adds cooling and distribution on top (`Platform.pue`, 1 unless a cluster file
sets it). A lower power limit stretches the step, so the host's share is paid for longer: the
energy per token at the wall has its minimum at a higher limit than the boards' alone.
"""

from __future__ import annotations

import numpy as np

from advisor.core.platform import Platform


def host_share_w(platform: Platform) -> float:
    """Watts of the node besides its GPUs, per GPU (0 where the catalog has no measurement of
    the host: the wall figure is then the boards', times the PUE)."""
    if platform.host_power_w is None:
        return 0.0
    return float(platform.host_power_w) / max(int(platform.num_gpus_per_node), 1)


def wall_power_w(platform: Platform, board_w: np.ndarray | float) -> np.ndarray | float:
    """Per GPU: the board's average power, plus its share of the host, times the PUE."""
    return (board_w + host_share_w(platform)) * float(platform.pue or 1.0)
