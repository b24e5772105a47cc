"""Checks of a job's inputs that need no training, run before any store or run exists, each
failing in one line that names the key, the value and the valid choices.

`check_inputs` is the fast part: `python -m hetrl` runs it before torch, MLflow or an env
is imported, so a mistyped key fails in about the time Hydra takes to compose (≤ 2 s). What
it asks of the world (a tracking server, a Ray cluster) it asks with a plain socket, within
PROBE_S. `env_errors` names a bad env id or kwarg where the env is first made (the job's
preflight, still before its run opens).
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import socket
from contextlib import contextmanager
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf

from hetrl.config.errors import ConfigError
from hetrl.options import group_options

PROBE_S = 3.0  # how long a tracking server or a Ray cluster has to accept a connection
MAX_EXPERIMENT_NAME = 500  # MLflow's limit on an experiment's name


def check_inputs(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """The checks of a composed config that import nothing heavy (see the module's doc);
    `choices` names each group's chosen option (Hydra's runtime choices)."""
    from hetrl.validation import _check_known_keys

    _check_known_keys(cfg)
    _check_nothing_missing(cfg, choices)
    _check_sampler_is_a_group(cfg)
    _check_schemas(cfg)
    _check_targets(cfg)
    _check_experiment_name(cfg)
    _check_tracking_uri(cfg)
    _check_ray_address(cfg)


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
        f"replay/sampler=<name>, one of {options}" + _nearest(str(sampler), options,
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


@contextmanager
def env_errors(cfg: DictConfig) -> Iterator[None]:
    """Raise, as a ConfigError naming `env.id` or `env.kwargs.<name>`, what making the env
    says of an unknown id or an argument the env does not take."""
    from hydra.errors import InstantiationException

    try:
        yield
    except Exception as error:  # noqa: BLE001 - only the two cases below are the config's
        cause = error.__cause__ if isinstance(error, InstantiationException) else error
        if (config_error := _env_error(cfg, cause)) is None:
            raise
        raise config_error from None


def _env_error(cfg: DictConfig, error: BaseException | None) -> ConfigError | None:
    env_id = cfg.env.get("id")
    kind = type(error).__name__
    if kind in ("NameNotFound", "NamespaceNotFound", "VersionNotFound", "DeprecatedEnv"):
        import gymnasium

        ids = sorted(gymnasium.envs.registry)
        return ConfigError(f"env.id={env_id} is invalid: {error}" + _nearest(env_id, ids, "env.id=")
                           + " (gymnasium.pprint_registry() lists every id)")
    text = str(error)
    if isinstance(error, TypeError) and (found := re.search(r"unexpected keyword argument "
                                                            r"'(\w+)'", text)):
        name = found[1]
        value = OmegaConf.select(cfg, f"env.kwargs.{name}", default="?")
        return ConfigError(f"env.kwargs.{name}={value} is invalid: {env_id} takes no argument "
                           f"{name!r}: remove it (~env.kwargs.{name})" + _env_arguments(env_id))
    return None


def _env_arguments(env_id: str) -> str:
    """`: valid names are [...]`, the keyword arguments of a gymnasium env's constructor."""
    import inspect

    try:
        import gymnasium

        entry = gymnasium.spec(env_id).entry_point
        made = gymnasium.envs.registration.load_env_creator(entry) if isinstance(entry, str) \
            else entry
        names = [p for p in inspect.signature(made).parameters if p not in ("self", "kwargs")]
    except Exception:  # noqa: BLE001 - not a gymnasium env: the message stands without them
        return ""
    return f"; valid names are {names}"


def _nearest(value: str, options: list[Any], prefix: str) -> str:
    close = difflib.get_close_matches(value, [str(o) for o in options], n=1)
    return f": did you mean {prefix}{close[0]}?" if close else ""
