"""Typed config schemas, one module per config group, registered by `store.register()`.

Each YAML option under `conf/<group>/` starts from one of these dataclasses
(`defaults: [/schema/<group>/<name>@_here_]`), so a wrong type or an unknown key fails
while Hydra composes the config. Range checks live in `__post_init__` and run when
`hetrl.validation.validate()` turns the composed config into these objects.

A value lives in one place: a field that every option YAML of its schema sets has no
default here (`MISSING`); a default here is the value of every option that does not set it,
and no option repeats it. This package imports no torch, so Hydra starts fast.
"""
