"""Environment factories: gymnasium vector envs here, PettingZoo MPE in `hetrl.envs.mpe`."""

from hetrl.envs.gym import make_vector_env

__all__ = ["make_vector_env"]
