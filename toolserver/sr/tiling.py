"""Tiles: how an image is cut into equal windows with context (`spans`), and the units of work the engine's
workers take from its queue (`_Job`, one image; `_Tile`, one window of it). A worker hands each tile's output to
its job (`parts`); the thread waiting for the job puts them together (`assemble`), so that the copies are made
by the waiting threads, side by side, not by the one GPU worker between its batches."""

from __future__ import annotations

import math
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Span:
    """One tile along one axis: the input window it reads and the core of it whose output is kept."""

    core0: int
    core1: int
    win0: int
    win1: int


def spans(length: int, tile: int, pad: int) -> list[Span]:
    """Cover [0, length) with as few equal cores as windows of at most `tile` allow, each read with `pad` context.

    Every window has the same size (cores are spread evenly and edge windows shift inwards rather than
    shrink), so tiles can share a batch, and the extra work is only the context: about 2 * pad per tile.
    """
    if length <= tile:
        return [Span(0, length, 0, length)]
    if tile <= 2 * pad:
        raise ValueError(f"tile {tile} must be larger than twice the padding {pad}")
    count = math.ceil(length / (tile - 2 * pad))
    step = math.ceil(length / count)
    window = min(length, step + 2 * pad)
    out = []
    for core0 in range(0, length, step):
        core1 = min(core0 + step, length)
        win0 = min(max(core0 - pad, 0), length - window)
        out.append(Span(core0, core1, win0, win0 + window))
    return out


@dataclass(eq=False)  # identity, not array comparison
class _Job:
    pixels: np.ndarray  # H x W x 3, uint8
    scale: int
    deadline: float | None
    future: Future = field(default_factory=Future)
    parts: list[tuple[_Tile, np.ndarray]] = field(default_factory=list)  # each tile's output, as it is done
    tiles: int = 0
    pending: int = 0
    failed: bool = False


@dataclass(eq=False)
class _Tile:
    job: _Job
    ys: Span
    xs: Span

    @property
    def batch_key(self) -> tuple[int, int, int]:
        return (self.job.scale, self.ys.win1 - self.ys.win0, self.xs.win1 - self.xs.win0)

    def window(self) -> np.ndarray:
        return self.job.pixels[self.ys.win0:self.ys.win1, self.xs.win0:self.xs.win1]

    def paste(self, out: np.ndarray, result: np.ndarray) -> None:
        """This tile's core of `result` (its window's output) into the job's output `out`."""
        s, ys, xs = self.job.scale, self.ys, self.xs
        out[ys.core0 * s:ys.core1 * s, xs.core0 * s:xs.core1 * s] = result[
            (ys.core0 - ys.win0) * s:(ys.core1 - ys.win0) * s,
            (xs.core0 - xs.win0) * s:(xs.core1 - xs.win0) * s,
        ]


def assemble(job: _Job) -> np.ndarray:
    """The job's output from its tiles' outputs: a one-tile job's is its tile's (the window is the whole image)."""
    if job.tiles == 1:
        return job.parts[0][1]
    h, w = job.pixels.shape[:2]
    out = np.empty((h * job.scale, w * job.scale, 3), dtype=np.uint8)
    for tile, result in job.parts:
        tile.paste(out, result)
    return out
