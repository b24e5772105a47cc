"""The whole MiniGo machine as a model (spec C.1.2, C.1.3, C.1.8, C.4 Tables 2, 6, 7; E.3).

N_train data-parallel trainers (ring all-reduce) and N_sp task-parallel self-play nodes; as in
Algorithm 1 and Table 6's arithmetic, an iteration is self-play then training, serial:

    T_selfplay = ⌈games / N_sp⌉ · t_game                (Table 2: ≈350 node-seconds a game)
    T_allreduce(k, S) = 2(k−1)·α + 2(k−1)/k · S / BW       (reduce-scatter + all-gather)
    T_train = steps · (t_step + T_allreduce(N_train, S))
    T = I(N_sp) · (T_selfplay + T_train),   I(N_sp) = 43 + 2·log2(N_sp / 1024)   (E.3; an input,
                                                                     not a prediction)
    E(P) = (T_base / T_P) / (P / P_base),   P = N_train + N_sp        (C.1.8: plain, as Table 7)

`scaling_eff_iter_norm` divides each time by its iteration count first (the text's wording,
which Table 7's numbers do not follow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def ring_allreduce_s(k: int, size_bytes: float, alpha_s: float = 5e-6,
                     bandwidth: float = 12.5e9) -> float:
    """Seconds of one ring all-reduce of `size_bytes` over `k` workers (0 for one worker)."""
    if k <= 1:
        return 0.0
    return 2 * (k - 1) * alpha_s + 2 * (k - 1) / k * size_bytes / bandwidth


def ring_allreduce_bytes(k: int, size_bytes: float) -> float:
    """Bytes each worker sends (and receives) in one ring all-reduce."""
    return 2 * (k - 1) / k * size_bytes if k > 1 else 0.0


def iterations(n_sp: int, base: int = 43, per_doubling: int = 2, base_sp: int = 1024) -> float:
    """E.3's iteration count I(N_sp) = 43 + 2·log2(N_sp / 1024) (Table 6's 43/45/47/49)."""
    return base + per_doubling * math.log2(n_sp / base_sp)


@dataclass
class MiniGoCluster:
    """Defaults: the paper's setup (C.3) with Table 2's ≈350 s a game and Table 6's ≈530–600 s
    of training an iteration (241 steps)."""

    n_train: int = 43
    games: int = 8192  # per iteration
    t_game_s: float = 350.0  # node-seconds per self-play game
    steps: int = 241  # training steps per iteration
    t_step_s: float = 2.3  # compute per step (≈ 555 s / 241 less all-reduce) [S]
    model_bytes: float = 2.9e6  # MLPerf v0.7 network in fp32 (C.1.3)
    alpha_s: float = 5e-6
    bandwidth: float = 12.5e9  # 100 Gbit/s

    def selfplay_s(self, n_sp: int) -> float:
        return math.ceil(self.games / n_sp) * self.t_game_s

    def train_s(self) -> float:
        return self.steps * (self.t_step_s + ring_allreduce_s(self.n_train, self.model_bytes,
                                                              self.alpha_s, self.bandwidth))

    def iteration_s(self, n_sp: int) -> float:
        return self.selfplay_s(n_sp) + self.train_s()

    def time_s(self, n_sp: int, iters: float | None = None) -> float:
        return (iterations(n_sp) if iters is None else iters) * self.iteration_s(n_sp)

    def nodes(self, n_sp: int) -> int:
        return self.n_train + n_sp


def scaling_efficiency(times: list[float], nodes: list[int]) -> list[float]:
    """E(P) = (T_base/T_P)/(P/P_base), the first entry the base (Table 7)."""
    return [(times[0] / t) / (p / nodes[0]) for t, p in zip(times, nodes)]


def scaling_efficiency_iter_norm(times: list[float], nodes: list[int],
                                 iters: list[float]) -> list[float]:
    """The text's iteration-normalized variant: time per iteration in place of time."""
    return scaling_efficiency([t / i for t, i in zip(times, iters)], nodes)


TABLE_6 = {  # N_sp: (iterations, seconds) [P]; 8192 is the paper's estimate
    1024: (43, 154_886.0), 2048: (45, 88_535.0), 4096: (47, 57_780.0), 8192: (49, 43_120.0),
}
TABLE_7_EFFICIENCY = {1067: 1.0, 2091: 0.892, 4139: 0.691, 8235: 0.465}  # [P]
