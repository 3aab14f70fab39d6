"""Request length distributions (``LengthDist``: fixed, uniform, lognormal, or resampled from a length file read by
``load_length_file``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np

from llmsched_env.common.checks import check_int, check_positive
from llmsched_env.workloads.traces import cached_load, read_length_file

if TYPE_CHECKING:
    from typing_extensions import Unpack

LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical")


def _readonly(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


def load_length_file(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Paired read-only ``(prompt_lens, output_lens)`` from a length file (``LENGTH_FILE_COLUMNS``, by its header),
    cached as traces are; ``ValueError`` naming the file, line and column on bad input."""
    trace = cached_load(path, "length-file", read_length_file)
    return trace.prompt_len, trace.output_len


class LengthLimits(TypedDict, total=False):
    """The clipping limits a ``LengthDist`` constructor takes as keywords."""

    max_prompt_len: int
    max_output_len: int


@dataclass(frozen=True, repr=False)
class LengthDist:
    """Lengths of (prompt, output) in tokens, clipped to ``[1, max_*_len]``, of ``kind`` ``fixed``, ``uniform``
    (inclusive), ``lognormal`` or ``empirical`` (pairs resampled); build one with the classmethods."""

    kind: str
    max_prompt_len: int = 8192
    max_output_len: int = 2048
    prompt_len: int = 1
    output_len: int = 1
    prompt_range: tuple[int, int] = (1, 1)
    output_range: tuple[int, int] = (1, 1)
    prompt_median: float = 1.0
    output_median: float = 1.0
    prompt_sigma: float = 0.0
    output_sigma: float = 0.0
    prompt_samples: np.ndarray | None = field(default=None, repr=False, compare=False)
    output_samples: np.ndarray | None = field(default=None, repr=False, compare=False)
    source: str = ""  # where empirical samples came from, for repr and equality

    def __post_init__(self) -> None:
        owner = "LengthDist"
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"{owner}.kind must be one of {LENGTH_KINDS}, got {self.kind!r}")
        check_int(owner, "max_prompt_len", self.max_prompt_len, 1)
        check_int(owner, "max_output_len", self.max_output_len, 1)
        for side, max_len in (("prompt", self.max_prompt_len), ("output", self.max_output_len)):
            if self.kind == "fixed":
                value = getattr(self, f"{side}_len")
                check_int(owner, f"{side}_len", value, 1)
                if value > max_len:
                    raise ValueError(f"{owner}.{side}_len must be <= max_{side}_len={max_len}, got {value}")
            elif self.kind == "uniform":
                lo_hi = getattr(self, f"{side}_range")
                ok = isinstance(lo_hi, tuple) and len(lo_hi) == 2
                ok = ok and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in lo_hi)
                if not ok or not 1 <= lo_hi[0] <= lo_hi[1] <= max_len:
                    raise ValueError(f"{owner}.{side}_range must be a tuple (lo, hi) of integers with "
                                     f"1 <= lo <= hi <= max_{side}_len={max_len}, got {lo_hi!r}")
            elif self.kind == "lognormal":
                check_positive(owner, f"{side}_median", getattr(self, f"{side}_median"))
                check_positive(owner, f"{side}_sigma", getattr(self, f"{side}_sigma"), allow_zero=True)
        if self.kind == "empirical":
            self._check_samples()

    def _check_samples(self) -> None:
        arrays = []
        for side in ("prompt", "output"):
            values = getattr(self, f"{side}_samples")
            if not isinstance(values, np.ndarray) or values.ndim != 1 or values.dtype.kind not in "iu":
                raise ValueError(f"LengthDist.{side}_samples must be a 1-D integer numpy array, got {values!r}")
            if values.size == 0 or values.min() < 1:
                raise ValueError(f"LengthDist.{side}_samples must be non-empty with every length >= 1")
            arrays.append(values)
        if arrays[0].shape != arrays[1].shape:
            sizes = f"{arrays[0].size} and {arrays[1].size}"
            raise ValueError(f"LengthDist.prompt_samples and output_samples must be paired (same length), got {sizes}")

    @classmethod
    def fixed(cls, prompt_len: int, output_len: int, **limits: Unpack[LengthLimits]) -> LengthDist:
        return cls("fixed", prompt_len=prompt_len, output_len=output_len, **limits)

    @classmethod
    def uniform(cls, prompt_range: tuple[int, int], output_range: tuple[int, int],
                **limits: Unpack[LengthLimits]) -> LengthDist:  # fmt: skip
        # a list of two too; __post_init__ checks them
        prompt, output = cast("tuple[int, int]", tuple(prompt_range)), cast("tuple[int, int]", tuple(output_range))
        return cls("uniform", prompt_range=prompt, output_range=output, **limits)

    @classmethod
    def lognormal(cls, prompt_median: float, output_median: float, prompt_sigma: float = 1.0,
                  output_sigma: float = 1.0, **limits: Unpack[LengthLimits]) -> LengthDist:  # fmt: skip
        return cls("lognormal", prompt_median=prompt_median, output_median=output_median, prompt_sigma=prompt_sigma,
                   output_sigma=output_sigma, **limits)  # fmt: skip

    @classmethod
    def empirical(cls, prompt_samples: np.ndarray, output_samples: np.ndarray, source: str = "array",
                  **limits: Unpack[LengthLimits]) -> LengthDist:  # fmt: skip
        """Resample the given paired lengths; the arrays are copied (read-only) unless already read-only."""
        arrays = []
        for values in (prompt_samples, output_samples):
            arr = np.asarray(values)
            if arr.flags.writeable:
                arr = _readonly(arr.copy())
            arrays.append(arr)
        return cls("empirical", prompt_samples=arrays[0], output_samples=arrays[1], source=source, **limits)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], max_prompt_len: int = 8192,
                  max_output_len: int = 2048) -> LengthDist:  # fmt: skip
        """An empirical distribution over the rows of a length file (see ``load_length_file``)."""
        limits: LengthLimits = {"max_prompt_len": max_prompt_len, "max_output_len": max_output_len}
        return cls.empirical(*load_length_file(path), source=str(path), **limits)

    def __repr__(self) -> str:
        params = {
            "fixed": f"prompt_len={self.prompt_len}, output_len={self.output_len}",
            "uniform": f"prompt_range={self.prompt_range}, output_range={self.output_range}",
            "lognormal": f"prompt_median={self.prompt_median}, prompt_sigma={self.prompt_sigma}, "
            f"output_median={self.output_median}, output_sigma={self.output_sigma}",
            "empirical": f"source={self.source!r}, num_samples={getattr(self.prompt_samples, 'size', 0)}",
        }[self.kind]
        limits = f"max_prompt_len={self.max_prompt_len}, max_output_len={self.max_output_len}"
        return f"LengthDist.{self.kind}({params}, {limits})"

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` paired ``(prompt_lens, output_lens)`` as int64 arrays, each clipped to ``[1, max_*_len]``."""
        check_int("LengthDist.sample", "n", n, 0)
        if self.kind == "fixed":
            prompts = np.full(n, self.prompt_len, dtype=np.int64)
            outputs = np.full(n, self.output_len, dtype=np.int64)
        elif self.kind == "uniform":
            prompts = rng.integers(self.prompt_range[0], self.prompt_range[1] + 1, size=n, dtype=np.int64)
            outputs = rng.integers(self.output_range[0], self.output_range[1] + 1, size=n, dtype=np.int64)
        elif self.kind == "lognormal":
            prompts = np.rint(rng.lognormal(math.log(self.prompt_median), self.prompt_sigma, n))
            outputs = np.rint(rng.lognormal(math.log(self.output_median), self.output_sigma, n))
            # Clip in float first: a huge sigma could overflow int64 on the cast.
            prompts = np.clip(prompts, 1, self.max_prompt_len).astype(np.int64)
            outputs = np.clip(outputs, 1, self.max_output_len).astype(np.int64)
        else:
            assert self.prompt_samples is not None and self.output_samples is not None
            idx = rng.integers(0, self.prompt_samples.size, size=n)
            prompts = self.prompt_samples[idx].astype(np.int64)
            outputs = self.output_samples[idx].astype(np.int64)
        np.clip(prompts, 1, self.max_prompt_len, out=prompts)
        np.clip(outputs, 1, self.max_output_len, out=outputs)
        return prompts, outputs
