"""``--subset``: which blocks a partial verify reads, as restic's ``--read-data-subset``.

``n/t`` is the n-th of t slices: block k of the ledger (0-based, in archive order) belongs to
slice ``k mod t + 1``, so t runs with n = 1..t cover every block exactly once, each slice
has the same number of blocks (within one), spreads over the whole file, and keeps its
blocks when the ledger grows (new blocks come after the old ones). ``x%`` is a random x
percent of the blocks (at least one), drawn from a seed: given, or drawn and reported, so a
run can be repeated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_SLICES = 1 << 20
_SLICE = re.compile(r"\s*(\d{1,7})\s*/\s*(\d{1,7})\s*")
_PERCENT = re.compile(r"\s*(\d{1,3}(?:\.\d{1,6})?)\s*%\s*")


@dataclass(frozen=True, slots=True)
class Subset:
    """A part of a ledger's blocks: slice ``part`` of ``of``, or a random ``percent``."""

    part: int = 0
    of: int = 0
    percent: float = 0.0
    seed: int | None = None

    @classmethod
    def parse(cls, text: str, seed: int | None = None) -> Subset:
        """``"n/t"`` (1 <= n <= t) or ``"x%"`` (0 < x <= 100); ValueError saying what is
        wrong. ``seed`` fixes a random subset's draw (ignored for slices)."""
        m = _SLICE.fullmatch(text)
        if m:
            part, of = int(m.group(1)), int(m.group(2))
            if not 1 <= of <= MAX_SLICES:
                raise ValueError(f"subset {text!r}: the number of slices must lie in 1..{MAX_SLICES}")
            if not 1 <= part <= of:
                raise ValueError(f"subset {text!r}: the slice must lie in 1..{of}")
            return cls(part=part, of=of)
        m = _PERCENT.fullmatch(text)
        if m:
            percent = float(m.group(1))
            if not 0 < percent <= 100:
                raise ValueError(f"subset {text!r}: the percentage must be above 0 and at most 100")
            if seed is None:
                import secrets   # a drawn seed only: its import is a few ms of every check's start

                seed = secrets.randbits(63)
            return cls(percent=percent, seed=seed)
        raise ValueError(f"subset {text!r} is neither n/t (a slice, e.g. 1/4) nor x% (a random part, e.g. 10%)")

    @property
    def random(self) -> bool:
        return self.of == 0

    def select(self, blocks: int) -> npt.NDArray[np.bool_]:
        """The mask of the blocks (in archive order) this subset reads."""
        mask = np.zeros(blocks, dtype=bool)
        if blocks == 0:
            return mask
        if not self.random:
            mask[self.part - 1::self.of] = True
            return mask
        count = min(blocks, max(1, math.ceil(blocks * self.percent / 100)))
        chosen = np.random.default_rng(self.seed).choice(blocks, size=count, replace=False)
        mask[chosen] = True
        return mask

    def describe(self) -> str:
        """"slice 1 of 4" or "a random 10% drawn with seed 42"."""
        if not self.random:
            return f"slice {self.part} of {self.of}"
        return f"a random {self.percent:g}% drawn with seed {self.seed}"

    def to_json(self) -> dict[str, int | float | None]:
        if not self.random:
            return {"slice": self.part, "slices": self.of}
        return {"percent": self.percent, "seed": self.seed}


__all__ = ["MAX_SLICES", "Subset"]
