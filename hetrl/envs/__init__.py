"""Environment factories: gymnasium vector envs (PettingZoo comes with the MARL work)."""

from hetrl.envs.gym import make_vector_env

__all__ = ["make_vector_env"]
