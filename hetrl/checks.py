"""Checks of a job's inputs that need no training, run before any store or run exists, each
failing in one line that names the key, the value and the valid choices.

`check_inputs` is the fast part: `python -m hetrl` runs it before torch, MLflow or an env
is imported, so a mistyped key fails in about the time Hydra takes to compose (≤ 2 s). What
it asks of the world (a tracking server, a Ray cluster) it asks with a plain socket, within
PROBE_S. It asks gymnasium or mpe2, never torch, whether `env.id` and `env.kwargs` name an
env and its arguments (hetrl.config.env_checks).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import re
import socket
from typing import Mapping, Sequence
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf

from hetrl.config.env_checks import check_env
from hetrl.config.errors import ConfigError, nearest
from hetrl.options import group_options

PROBE_S = 3.0  # how long a tracking server or a Ray cluster has to accept a connection
MAX_EXPERIMENT_NAME = 500  # MLflow's limit on an experiment's name


def check_inputs(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """The checks of a composed config that import nothing heavy (see the module's doc);
    `choices` names each group's chosen option (Hydra's runtime choices)."""
    check_known_keys(cfg)
    _check_nothing_missing(cfg, choices)
    _check_sampler_is_a_group(cfg)
    _check_schemas(cfg)
    _check_targets(cfg)
    _check_experiment_name(cfg)
    check_env(cfg)  # before the probes, which may wait PROBE_S
    _check_tracking_uri(cfg)
    _check_ray_address(cfg)


def check_group_choices(overrides: Sequence[str]) -> None:
    """No config group of the command line is given null (`algo=null`, or null in a sweep's
    list): Hydra would fail to compose it with a traceback ("Config group override must be a
    string or a list")."""
    for override in overrides:
        key, given, values = override.lstrip("+").partition("=")
        group = key.split("@", 1)[0]
        if given and "null" in (v.strip() for v in values.split(",")) and (
                options := group_options(group)):
            raise ConfigError(f"{group}=null is invalid: a config group takes one of its "
                              f"options: {', '.join(options)}")


def check_known_keys(node: DictConfig, prefix: str = "") -> None:
    """Every key is a field of its node's schema: a key added with `+` (`+stpes=600`) is
    named with the nearest valid one instead of being ignored or reaching a constructor."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        fields = [f.name for f in dataclasses.fields(schema)]
        for key in node:
            if key not in fields:
                valid = [f for f in fields if not f.startswith("_")]
                near = difflib.get_close_matches(str(key), valid, n=1)
                hint = (f"did you mean {prefix}{near[0]}?" if near
                        else f"the keys of {prefix.rstrip('.') or 'the run'} are {valid}")
                raise ConfigError(f"{prefix}{key} is not a config key: {hint}")
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            check_known_keys(child, f"{prefix}{key}.")


def _check_nothing_missing(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """Every key the schemas require has a value (a platform file without `devices`)."""
    if not (missing := sorted(OmegaConf.missing_keys(cfg))):
        return
    key = missing[0]
    group = key.split(".", 1)[0]
    option = f" ({group}={choices[group]})" if group in choices else ""
    raise ConfigError(
        f"{key} is missing: the option's YAML{option} or the command line must set it "
        f"({', '.join(missing)} required by {group}'s schema, hetrl/config/{group}.py); "
        f"e.g. conf/{group}/ shows the options that do")


def _check_sampler_is_a_group(cfg: DictConfig) -> None:
    """`replay.sampler` is chosen as a config group (`replay/sampler=locality`): a plain value
    would reach the replay as a string, and fail at its first sample."""
    replay = cfg.get("replay")
    if replay is None or "sampler" not in replay:
        return
    sampler = OmegaConf.select(replay, "sampler", throw_on_missing=False)
    if sampler is None or isinstance(sampler, DictConfig):
        return
    options = group_options("replay/sampler")
    raise ConfigError(
        f"replay.sampler={sampler} is invalid: a sampler is chosen as a config group, "
        f"replay/sampler=<name>, one of {options}" + nearest(str(sampler), options,
                                                                "replay/sampler="))


def _check_schemas(cfg: DictConfig) -> None:
    """Each schema's range checks (its __post_init__); a config whose options do not fit
    together may not resolve yet: that is left to hetrl.validation, which names the misfit."""
    try:
        OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - see above
        return


def _check_targets(cfg: DictConfig, key: str = "") -> None:
    """Every `_target_` names a module that exists (its class is checked where it is built)."""
    if isinstance(cfg, DictConfig):
        for name in cfg:
            path = f"{key}.{name}" if key else str(name)
            if OmegaConf.is_missing(cfg, name) or OmegaConf.is_interpolation(cfg, name):
                continue
            value = cfg[name]
            if name == "_target_" and isinstance(value, str):
                _check_target(path, value)
            elif isinstance(value, DictConfig):
                _check_targets(value, path)


def _check_target(key: str, target: str) -> None:
    module = target.rpartition(".")[0]
    try:
        found = bool(module) and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f"{key}={target} is invalid: there is no module {module or target!r}: "
                          "valid values are dotted paths of a class or function "
                          "(package.module.Name) that Python can import")


def _check_experiment_name(cfg: DictConfig) -> None:
    name = OmegaConf.select(cfg, "tracking.experiment", default=None)
    if isinstance(name, str) and not 0 < len(name) <= MAX_EXPERIMENT_NAME:
        raise ConfigError(
            f"tracking.experiment={name[:40]}{'…' if len(name) > 40 else ''} is invalid "
            f"({len(name)} characters): valid values are names of 1 to "
            f"{MAX_EXPERIMENT_NAME} characters (MLflow's limit)")


def _check_tracking_uri(cfg: DictConfig) -> None:
    """A tracking server accepts a connection within PROBE_S (MLflow's client would retry a
    refused one for minutes)."""
    uri = OmegaConf.select(cfg, "tracking.uri", default=None)
    if not isinstance(uri, str) or not uri.startswith(("http://", "https://")):
        return
    parts = urlsplit(uri)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if (why := _unreachable(parts.hostname or "", port)) is not None:
        raise ConfigError(
            f"tracking.uri={uri} is invalid: nothing answers there ({why}): start a tracking "
            "server (python -m hetrl.tracking.server up prints the tracking.uri to use) or "
            "track to a local store: tracking.uri=sqlite:///runs/mlflow.db")


def _check_ray_address(cfg: DictConfig) -> None:
    """A Ray cluster's address (`ray://host:port`, `host:port`) accepts a connection within
    PROBE_S (Ray's client waits ~40 s, then prints a traceback)."""
    address = OmegaConf.select(cfg, "actors.address", default=None)
    if not isinstance(address, str) or address in ("auto", "local", ""):
        return
    match = re.fullmatch(r"(?:ray://)?\[?([^\]]+?)\]?:(\d+)", address)
    why = "not ray://host:port" if match is None else _unreachable(match[1], int(match[2]))
    if why is not None:
        raise ConfigError(
            f"actors.address={address} is invalid: no Ray cluster answers there ({why}): valid "
            "values are null (start Ray here), auto (the cluster this machine is in) or "
            "ray://host:port of a running cluster's client server (ray start --head)")


def _unreachable(host: str, port: int) -> str | None:
    """Why nothing accepts a TCP connection at host:port within PROBE_S; None if it does."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return None
    except socket.gaierror:
        return "unknown host"
    except TimeoutError:
        return f"no answer within {PROBE_S:g} s"
    except OSError as error:
        return (error.strerror or str(error)).lower()
