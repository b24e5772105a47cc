"""Hydra imports every module of the `hydra_plugins` namespace on the path when it starts
(that is how its own launcher plugins register their configs): with `examples/extending` on
PYTHONPATH, `python -m hetrl` gets the examples' schemas in its ConfigStore this way, before
it composes. No `__init__.py` here: `hydra_plugins` is a namespace package."""

from hetrl_examples.schemas import register

register()
