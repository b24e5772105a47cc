"""A Go board's groups, their liberties and Tromp-Taylor area ownership, from the board alone
(+1 black, -1 white, 0 empty): numba's flood fill and scipy's region labels, no rules engine."""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
from scipy import ndimage

_NEIGHBOURS = ndimage.generate_binary_structure(2, 1)


def area_owner(board: np.ndarray) -> np.ndarray:
    """Whose each point is under Tromp-Taylor area scoring: a stone its colour's, an empty
    region the colour it alone reaches (+1 black, -1 white; 0 where it reaches both or none)."""
    owner = board.astype(np.int8).copy()
    regions, count = ndimage.label(board == 0, _NEIGHBOURS)
    for region in range(1, count + 1):
        mask = regions == region
        border = ndimage.binary_dilation(mask, _NEIGHBOURS) & ~mask
        colours = set(board[border].tolist())
        if len(colours) == 1:
            owner[mask] = colours.pop()
    return owner


class Groups(NamedTuple):
    """A board's groups (stones of one colour joined by their sides), numbered from 1."""

    labels: np.ndarray  # (N, N) int32: each stone's group, 0 on empty points
    colour: np.ndarray  # per group (index 0: no group): +1 black, -1 white
    libs: np.ndarray  # its number of liberties (0 for index 0)
    sizes: np.ndarray  # its number of stones
    liberty: np.ndarray  # one of its liberties (its only one where libs is 1)

    def per_point(self) -> np.ndarray:
        """Each stone's group's number of liberties (0 on empty points)."""
        return self.libs[self.labels]


def groups(board: np.ndarray) -> Groups:
    n = board.shape[0]
    labels, colour, libs, sizes, liberty = _kernels().groups(
        np.ascontiguousarray(board, dtype=np.int8).ravel(), n)  # rows of one array: numba
    # hands one array back faster than five
    return Groups(labels[: n * n].reshape(n, n), colour, libs, sizes, liberty)


def own_eyes(board: np.ndarray, colour: int) -> np.ndarray:
    """(N*N,) bool: the empty points whose every neighbour on the board is a `colour` stone."""
    n = board.shape[0]
    return _kernels().own_eyes(np.ascontiguousarray(board, dtype=np.int8).ravel(), n, colour)


def liberty_counts(board: np.ndarray) -> np.ndarray:
    """Each stone's group's number of liberties (0 on empty points)."""
    return groups(board).per_point()


def _groups_loop(board: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Flood fill of each group from its first stone (row-major), counting each liberty once
    (`stamp` marks the empty points a group has counted); the rows of one (5, N*N+1) array:
    labels (of the N*N points), colour, libs, sizes and liberty (of the groups)."""
    n2 = n * n
    out = np.zeros((5, n2 + 1), np.int32)
    labels, colour, libs, sizes, liberty = out[0], out[1], out[2], out[3], out[4]
    liberty[:] = -1
    stamp = np.zeros(n2, np.int32)
    stack = np.empty(n2, np.int32)
    g = 0
    for start in range(n2):
        if board[start] == 0 or labels[start] != 0:
            continue
        g += 1
        colour[g] = board[start]
        labels[start] = g
        stack[0] = start
        top = 1
        while top > 0:
            top -= 1
            p = stack[top]
            sizes[g] += 1
            r, c = p // n, p % n
            for k in range(4):
                if k == 0:
                    if r == 0:
                        continue
                    q = p - n
                elif k == 1:
                    if r == n - 1:
                        continue
                    q = p + n
                elif k == 2:
                    if c == 0:
                        continue
                    q = p - 1
                else:
                    if c == n - 1:
                        continue
                    q = p + 1
                if board[q] == 0:
                    if stamp[q] != g:
                        stamp[q] = g
                        libs[g] += 1
                        liberty[g] = q
                elif board[q] == colour[g] and labels[q] == 0:
                    labels[q] = g
                    stack[top] = q
                    top += 1
    return out


def _own_eyes_loop(board: np.ndarray, n: int, colour: int) -> np.ndarray:
    """Each empty point whose neighbours (those on the board) are all `colour` stones."""
    eyes = np.zeros(n * n, np.bool_)
    for p in range(n * n):
        if board[p] != 0:
            continue
        r, c = p // n, p % n
        eyes[p] = ((r == 0 or board[p - n] == colour) and (r == n - 1 or board[p + n] == colour)
                   and (c == 0 or board[p - 1] == colour) and (c == n - 1 or board[p + 1] == colour))
    return eyes


@cache
def _kernels() -> SimpleNamespace:
    """The jitted kernels, made on first use (`cache=True`: compiled once, then loaded from
    numba's cache by every process)."""
    import numba

    jit = numba.njit(cache=True, nogil=True)
    return SimpleNamespace(groups=jit(_groups_loop), own_eyes=jit(_own_eyes_loop))
