"""Upper bounds on every size advisor accepts, each with its reason.

They sit far beyond anything that trains today, so no real job is refused, and low enough that
no product of them overflows the 64-bit integers the vectorised models use, and that no search
space grows without end. Every input path (CLI flags, `predict --input` cells, config.json,
catalog and cluster files, the Python API) meets them through `ParallelConfig`, `Job` and
`ModelSpec`, which check them on construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.core.errors import ConfigError, shown


@dataclass(frozen=True)
class Limit:
    most: int
    why: str


GPUS = Limit(2**20, "about ten times the largest training clusters announced, of order 10^5 "
                    "GPUs")
"""A job's GPUs, and each parallel size (tp, pp, dp, cp, ep, etp) and their product."""
GLOBAL_BATCH = Limit(2**24, "sequences per step; published pre-training runs use at most a few "
                            "thousand")
SEQUENCE = Limit(2**24, "tokens; the longest contexts models are trained for are about 10^7")
VIRTUAL_STAGES = Limit(4096, "virtual pipeline stages per GPU; a stage needs at least one layer")
LORA_RANK = Limit(2**16, "LoRA ranks in use are 8-256")
LAYERS = Limit(4096, "32 times the deepest catalog model, 128 layers")
WIDTH = Limit(2**20, "hidden and FFN sizes, head counts and head widths; 10 times the widest "
                     "catalog FFN, 102,400")
VOCABULARY = Limit(2**24, "65 times the largest catalog vocabulary, 256,000")
EXPERTS = Limit(2**16, "128 times the most experts in the catalog, 512")
PARAMETERS = 10**15
"""A model's total parameters: 1,000 times the largest published models (about 10^12)."""
NAME_CHARACTERS = 4096
"""Model and platform names or paths (Linux's PATH_MAX)."""


def check_most(name: str, value: int, limit: Limit, *, error: type = ConfigError) -> None:
    """`error` when `value` is beyond `limit`, saying why the limit is where it is."""
    if value > limit.most:
        given = f"{value:,}" if value < 10**18 else magnitude(value)
        raise error(f"{name} {given} is beyond advisor's limit of {limit.most:,} ({limit.why}).")


def check_name(text: str, what: str, *, error: type = ConfigError) -> None:
    """`error` for a name or path no file or catalog entry can have: a control character
    (a NUL byte among them) or more than `NAME_CHARACTERS` characters."""
    if len(text) > NAME_CHARACTERS:
        raise error(f"{what} is {len(text):,} characters long; names and paths are at most "
                    f"{NAME_CHARACTERS:,}.")
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise error(f"{what} {shown(text)} contains the control character {bad!r}.")


def magnitude(value: int) -> str:
    """A huge whole number as `1e+308`, or past float range (where float() overflows, and a
    decimal string past 4,300 digits is refused by Python) by its number of digits."""
    try:
        return f"{float(value):.3g}"
    except OverflowError:
        digits = int(value.bit_length() * 0.30102999566398120) + 1
        return f"a number of about {digits:,} digits"
