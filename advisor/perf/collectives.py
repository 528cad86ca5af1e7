"""α–β cost of NCCL/RCCL collectives, vectorised, inside or across the NVLink/xGMI domain.

One collective over n GPUs moving a message of S bytes costs

    t = α(n) + S · k / B(n)

where k is the algorithm's traffic factor per GPU (ring all-reduce 2(n−1)/n, all-gather and
reduce-scatter (n−1)/n, all-to-all (n−1)/n, send/recv 1) and B is the bus bandwidth the library
reaches: inside the domain B(n) = η·(1 − c/n)·link bandwidth, across domains η_net·NIC
bandwidth times the group's members per domain (capped by the domain's bandwidth). A MoE
dispatcher's network leg (`EP_DISPATCH`: what one GPU sends over its NIC to other domains)
runs at its own η_dispatch of the NIC: DeepEP and HybridEP drive every NIC queue from many SMs,
where one NCCL send/recv runs on a channel or two (η_p2p).
α grows with the number of ring hops: α(n) = α₀ + α₁·(n − 1).

α₀, α₁, η and c are fitted to measured NCCL all-reduce tables (vTrain, A100 NVSwitch, 2–8 GPUs,
1 MiB–1 GiB; `fit_collectives`) and stored in `calibration.toml`; the domain bandwidth itself
comes from each platform's catalog entry. A platform whose own domain was measured (XLA's
collective tables: H100 and B200 hosts, GB200/GB300 NVL72 domains up to 72 GPUs, MI300X and
MI350 hosts; `advisor/catalog/collective_kernels.toml`, `benchmarks/collective_check.py`)
prices collectives inside its domain with its own α₀, α₁, η and c (`DomainCollectives`,
`for_platform`); across domains the vTrain constants stand, as no table measures a network.
The message sizes a training step uses (MBs to GBs) are the range those tables cover.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from advisor.core.platform import Platform

RING_ALLREDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
SEND_RECV = "send_recv"
EP_DISPATCH = "ep_dispatch"


@dataclass(frozen=True)
class DomainCollectives:
    """α–β constants of collectives inside one platform's NVLink/xGMI domain, fitted to its
    own measured tables (`advisor/perf/collective_fit.py`)."""

    alpha0_s: float
    alpha1_s: float
    """Latency per ring hop."""
    efficiency: float
    """Fraction of the link bandwidth a large collective reaches..."""
    group_penalty: float
    """...times 1 − c/n for a group of n behind a switch (NVSwitch); in a full mesh (AMD's
    xGMI: every GPU linked to each other) a group of n drives its n − 1 links of the
    domain's D − 1, so (n − 1)/(D − 1) of the bandwidth, and c is 0."""
    mesh: bool = False
    """Whether the domain is a full mesh of point-to-point links rather than a switch."""

    def bandwidth_share(self, n: np.ndarray, domain_size: int) -> np.ndarray:
        """The share of the device's domain bandwidth a group of n reaches."""
        if self.mesh:
            return self.efficiency * (np.maximum(n, 2.0) - 1.0) / max(domain_size - 1, 1)
        return self.efficiency * (1.0 - self.group_penalty / np.maximum(n, 1.0))


@dataclass(frozen=True)
class CollectiveModel:
    """Fitted α–β constants (see module docstring)."""

    alpha0_s: float
    alpha1_s: float
    domain_efficiency: float
    domain_group_penalty: float
    network_efficiency: float
    p2p_efficiency: float
    """Fraction of link bandwidth a point-to-point send/recv reaches (one NCCL channel)."""
    dispatch_network_efficiency: float
    """Fraction of NIC line rate a MoE dispatcher's inter-domain traffic reaches (DeepEP)."""
    domain: DomainCollectives | None = None
    """The platform's own in-domain constants (`for_platform`); None: the fields above."""

    def for_platform(self, platform: Platform) -> CollectiveModel:
        """This model with `platform`'s measured in-domain constants, where its
        `collective_kernels` names a measured table."""
        name = platform.collective_kernels
        if name is None:
            return self
        table = load_domain_table()
        if name not in table:
            from advisor.core.errors import CatalogError

            raise CatalogError(f"{platform.path or platform.name}: collective_kernels = "
                               f"{name!r} is not in advisor/catalog/collective_kernels.toml; "
                               f"use one of {', '.join(sorted(table))}, or leave it out.")
        return replace(self, domain=table[name])

    def latency(self, kind: str, n: np.ndarray | float, in_domain: np.ndarray | bool,
                platform: Platform) -> np.ndarray:
        """The α of one more collective of `kind` over groups of `n` (what each extra bucket of
        a bucketed gradient sync pays beyond its bytes); 0 for groups of one."""
        n = np.asarray(n, dtype=float)
        d = self.domain or DomainCollectives(self.alpha0_s, self.alpha1_s,
                                             self.domain_efficiency, self.domain_group_penalty)
        hops = (np.ones_like(n) if kind in (SEND_RECV, EP_DISPATCH)
                else np.maximum(n - 1.0, 0.0))
        alpha = np.where(in_domain,
                         d.alpha0_s + d.alpha1_s * hops + platform.intra_domain_latency_s,
                         self.alpha0_s + self.alpha1_s * hops + platform.inter_node_latency_s)
        return np.where(n > 1, alpha, 0.0)

    def time(self, kind: str, message_bytes: np.ndarray | float, n: np.ndarray | float,
             in_domain: np.ndarray | bool, platform: Platform,
             members_per_domain: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds for one collective of `kind` over groups of `n` GPUs.

        `message_bytes` is the full tensor (the all-reduce buffer, the gathered output, what one
        GPU sends in all-to-all or send/recv). Groups of one GPU cost nothing. A group that
        crosses domains with `members_per_domain` of its GPUs in each domain drives that many
        NICs at once: NCCL's rings cross the network once per domain boundary, one channel per
        NIC, so the bus bandwidth is min(members × NIC, domain bandwidth).
        """
        n = np.asarray(n, dtype=float)
        size = np.asarray(message_bytes, dtype=float)
        factor = traffic_factor(kind, n)
        d = self.domain or DomainCollectives(self.alpha0_s, self.alpha1_s,
                                             self.domain_efficiency, self.domain_group_penalty)
        if kind == SEND_RECV:
            domain_bw = platform.intra_domain_bandwidth_bytes_per_s * self.p2p_efficiency
            network_bw = platform.inter_node_bandwidth_bytes_per_s * self.p2p_efficiency
        elif kind == EP_DISPATCH:
            domain_bw = platform.intra_domain_bandwidth_bytes_per_s * d.efficiency
            network_bw = (platform.inter_node_bandwidth_bytes_per_s
                          * self.dispatch_network_efficiency)
        else:
            domain_bw = (platform.intra_domain_bandwidth_bytes_per_s
                         * d.bandwidth_share(n, platform.nvlink_domain_size))
            network_bw = np.minimum(
                platform.inter_node_bandwidth_bytes_per_s * self.network_efficiency
                * np.maximum(members_per_domain, 1.0), domain_bw)
        bandwidth = np.where(in_domain, domain_bw, network_bw)
        return np.where(n > 1, self.latency(kind, n, in_domain, platform)
                        + size * factor / bandwidth, 0.0)


@functools.cache
def load_domain_table() -> dict[str, DomainCollectives]:
    """The shipped in-domain constants per measured platform (`collective_kernels.toml`)."""
    import tomllib

    from advisor.core.errors import CatalogError

    text = resources.files("advisor.catalog").joinpath("collective_kernels.toml").read_text(
        encoding="utf-8")
    data = tomllib.loads(text)
    names = list(DomainCollectives.__dataclass_fields__)
    out = {}
    for name, table in data.get("domains", {}).items():
        missing = [k for k in names if k not in table]
        if missing:
            raise CatalogError(f"collective_kernels.toml [domains.{name}]: missing "
                               f"{', '.join(missing)}; regenerate it with "
                               f"`python benchmarks/collective_check.py --write`.")
        out[name] = DomainCollectives(**{k: (bool(table[k]) if k == "mesh" else
                                             float(table[k])) for k in names})
    return out


def traffic_factor(kind: str, n: np.ndarray) -> np.ndarray:
    """Bytes each GPU sends per byte of message, for the bandwidth-optimal (ring) algorithm."""
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    if kind == RING_ALLREDUCE:
        return 2.0 * (n - 1.0) / n
    if kind in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1.0) / n
    if kind in (SEND_RECV, EP_DISPATCH):
        return np.ones_like(n)
    raise ValueError(f"unknown collective {kind!r}")


def read_nccl_tests_table(path: Path) -> tuple[int, np.ndarray, np.ndarray]:
    """(GPUs, message bytes, seconds) from an nccl-tests style CSV named `AR_GPU<n>_...csv`;
    the out-of-place time column is used."""
    import pandas as pd

    n = int(path.name.split("GPU")[1].split("_")[0])
    frame = pd.read_csv(path)
    return n, frame.iloc[:, 0].to_numpy(float), frame.iloc[:, 3].to_numpy(float) * 1e-9


def fit_collectives(tables: list[tuple[int, np.ndarray, np.ndarray]],
                    platform: Platform) -> dict[str, float]:
    """Fit α₀, α₁, η, c of the in-domain all-reduce model to tables measured on `platform` by
    least squares on relative error. Returns the constants and the fit's mean and median
    absolute % error."""
    from scipy.optimize import least_squares

    n = np.concatenate([np.full(len(s), g, float) for g, s, _ in tables])
    size = np.concatenate([s for _, s, _ in tables])
    seconds = np.concatenate([t for _, _, t in tables])

    def model(x: np.ndarray) -> np.ndarray:
        a0, a1, eta, c = x
        bw = platform.intra_domain_bandwidth_bytes_per_s * eta * (1.0 - c / n)
        alpha = platform.intra_domain_latency_s + a0 + a1 * (n - 1)
        return alpha + size * 2 * (n - 1) / n / bw

    fit = least_squares(lambda x: model(x) / seconds - 1.0, x0=[3e-5, 5e-6, 0.8, 0.3],
                        bounds=([0, 0, 0.1, 0], [1e-3, 1e-4, 1.0, 0.9]))
    ape = np.abs(model(fit.x) / seconds - 1.0) * 100
    a0, a1, eta, c = (float(v) for v in fit.x)
    return {"alpha0_s": a0, "alpha1_s": a1, "domain_efficiency": eta,
            "domain_group_penalty": c, "fit_mape_pct": float(ape.mean()),
            "fit_median_ape_pct": float(np.median(ape)), "fit_points": int(len(size))}
