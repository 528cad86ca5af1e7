"""Dollars per million tokens: the GPU-hours a job takes and the energy it draws at the wall.

    $ / 1M tokens = GPU-hour price / (tokens/s per GPU × 3,600) × 10^6
                  + energy per token at the wall (J) × 10^6 / 3.6·10^6 J/kWh × electricity price

The GPU-hour price is what one GPU costs per hour besides its power (a rental rate, or the
purchase amortised; `Platform.gpu_hour_usd`, `--gpu-hour-price`): where a rental rate already
includes the power, price the electricity at 0. The electricity price is the cluster file's
`electricity_usd_per_kwh` (`--electricity-price`), else `DEFAULT_ELECTRICITY_USD_PER_KWH`.
A lower power limit saves energy and costs GPU-hours; the cost objective weighs the two.
"""

from __future__ import annotations

import numpy as np

from advisor.core.platform import Platform

DEFAULT_ELECTRICITY_USD_PER_KWH = 0.0861
"""US average retail price of electricity to the industrial sector, 2025: the mean of the twelve
monthly values of EIA's Electric Power Monthly series (0.0821-0.0933 $/kWh; via
ycharts.com/indicators/us_average_retail_price_of_electricity_industrial_sector), unweighted."""
J_PER_KWH = 3.6e6


def electricity_usd_per_kwh(platform: Platform) -> float:
    """The platform's (cluster file's) electricity price, else the stated default."""
    price = platform.electricity_usd_per_kwh
    return DEFAULT_ELECTRICITY_USD_PER_KWH if price is None else float(price)


def gpu_usd_per_million_tokens(platform: Platform, tokens_per_sec_per_gpu):
    """The GPU-hours' share of the cost (NaN where the platform has no GPU-hour price)."""
    price = np.nan if platform.gpu_hour_usd is None else float(platform.gpu_hour_usd)
    return price / (np.asarray(tokens_per_sec_per_gpu, float) * 3600.0) * 1e6


def energy_usd_per_million_tokens(platform: Platform, energy_j_per_token):
    """The electricity's share: the energy per token at the wall, priced."""
    return (np.asarray(energy_j_per_token, float) * 1e6 / J_PER_KWH
            * electricity_usd_per_kwh(platform))
