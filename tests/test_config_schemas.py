"""The schemas and the option YAMLs hold each value once, and registering them needs no torch."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest
from omegaconf import OmegaConf

from hetrl.algos.mcts import SearchConfig
from hetrl.config.algo import SearchSchema
from hetrl.config.run import RunConfig
from hetrl.config.store import SCHEMAS
from hetrl.options import group_options, option_class, option_schema, option_yaml
from hetrl.paths import CONF_DIR


def _own_values() -> list[tuple[str, type, dict[str, Any]]]:
    """(label, schema, the keys the YAML sets as written) of every option YAML of every
    group, and of conf/config.yaml with the run schema."""
    out = []
    for group, schemas in SCHEMAS.items():
        for name in group_options(group):
            own = OmegaConf.to_container(option_yaml(group, name), enum_to_str=True)
            del own["defaults"]
            schema = schemas[option_schema(group, name).removeprefix(f"schema/{group}/")]
            out.append((f"{group}={name}", schema, own))
    run = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))
    out.append(("config.yaml", RunConfig,
                {k: v for k, v in run.items() if k not in ("defaults", "hydra")}))
    return out


OPTIONS = _own_values()


def _owner(schema: type, key: str) -> type:
    """The class of `schema`'s MRO that declares `key` last (whose default it has)."""
    return next(c for c in schema.__mro__ if key in vars(c).get("__annotations__", {}))


def _default(owner: type, key: str) -> Any:
    """The default `owner` gives `key` as OmegaConf sees it ('???' for MISSING)."""
    return OmegaConf.to_container(OmegaConf.structured(owner), enum_to_str=True)[key]


def test_every_option_maps_to_a_registered_schema():
    assert {label.split("=")[0] for label, _, _ in OPTIONS} >= set(SCHEMAS)
    assert all(dataclasses.is_dataclass(schema) for _, schema, _ in OPTIONS)


def test_a_field_every_option_sets_has_no_default():
    users: dict[tuple[type, str], list[bool]] = defaultdict(list)
    for _, schema, own in OPTIONS:
        for field in dataclasses.fields(schema):
            users[_owner(schema, field.name), field.name].append(field.name in own)
    dead = [f"{owner.__name__}.{key} = {_default(owner, key)!r}"
            for (owner, key), sets in users.items()
            if all(sets) and _default(owner, key) != "???"]
    assert not dead, f"defaults that every option overrides: {dead}"


def test_no_option_repeats_its_schema_default():
    repeated = [f"{label}: {key}: {value!r}" for label, schema, own in OPTIONS
                for key, value in own.items()
                if _default(_owner(schema, key), key) == value]
    assert not repeated, f"option values equal to their schema's default: {repeated}"


def test_each_interpolation_is_written_once():
    """A key wired to another (`${...}`) is wired in one place: a schema or one option."""
    places: dict[tuple[str, str], list[str]] = defaultdict(list)
    owners = {(_owner(s, f.name), f.name) for s in {s for _, s, _ in OPTIONS}
              for f in dataclasses.fields(s)}
    for owner, key in owners:
        value = _default(owner, key)
        if isinstance(value, str) and "${" in value:
            places[key, value].append(owner.__name__)
    for label, _, own in OPTIONS:
        for key, value in own.items():
            if isinstance(value, str) and "${" in value:
                places[key, value].append(label)
    twice = {f"{key}: {value}": where for (key, value), where in places.items() if len(where) > 1}
    assert not twice, twice


@pytest.mark.parametrize("group", ["algo", "scheduler", "actors", "partitioner", "replay",
                                   "precision", "platform", "tracking"])
def test_constructors_repeat_no_default_of_their_config(group):
    """A value lives in its YAML or its schema, never also as a keyword default of the
    constructor the config builds (env's options build through a function, not a class)."""
    twins = []
    for name in group_options(group):
        schema = SCHEMAS[group][option_schema(group, name).removeprefix(f"schema/{group}/")]
        keys = {f.name for f in dataclasses.fields(schema)} | set(option_yaml(group, name))
        for owner in option_class(group, name).__mro__:
            if "__init__" not in vars(owner):
                continue
            for param in inspect.signature(owner.__init__).parameters.values():
                if param.name in keys and param.default is not param.empty:
                    twins.append(f"{group}={name}: {owner.__name__}({param.name}="
                                 f"{param.default!r})")
    assert not twins, twins


def test_the_search_has_its_defaults_once():
    """MiniGo's search parameters default in their schema alone: the search's own config
    derives from `SearchSchema` and declares no field again (no second set of defaults)."""
    assert issubclass(SearchConfig, SearchSchema)
    assert not vars(SearchConfig).get("__annotations__")
    assert [f.name for f in dataclasses.fields(SearchConfig)] == [
        f.name for f in dataclasses.fields(SearchSchema)]


@pytest.mark.parametrize("module", ["hetrl.config.store", "hetrl.__main__"])
def test_registering_the_schemas_imports_no_torch(module):
    """`python -m hetrl --help` composes with these schemas: torch stays unloaded until a
    job runs."""
    probe = (f"import sys, importlib; importlib.import_module({module!r}); "
             "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
