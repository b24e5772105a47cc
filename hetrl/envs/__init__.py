"""Environment factories: gymnasium vector envs here, PettingZoo MPE in `hetrl.envs.mpe`, Go
(OpenSpiel's rules, batched games for self-play) in `hetrl.envs.go`."""

from hetrl.envs.gym import make_vector_env

__all__ = ["make_vector_env"]
