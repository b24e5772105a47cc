"""Worked examples of extending hetrl from outside its tree (docs/extending.md): an
algorithm, a sampler and a scheduler as Python modules, their options in `../conf/`."""
