"""Checks of `env.id` and `env.kwargs`, each failing in one line that names the key, the
value and the valid choices.

`check_env` runs with the other checks before a store or run exists and before torch is
imported: it asks gymnasium's registry (importing the module an id names: `ale_py:`,
`shimmy:`) or mpe2's scenarios, and imports an env's class only when `env.kwargs` names
arguments to check against it. An unknown id so fails in the time gymnasium takes to import,
not in that of torch and of making the env. `env_errors` names what only making the env
shows (a resumed job, an env whose constructor takes **kwargs).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from omegaconf import DictConfig, OmegaConf

from hetrl.config.errors import ConfigError, nearest

GYMNASIUM_FACTORIES = ("hetrl.envs.make_vector_env", "hetrl.envs.gym.make_vector_env")
MPE_FACTORY = "hetrl.envs.mpe.MpeVectorEnv"
MAKE_ARGUMENTS = ("max_episode_steps", "disable_env_checker")  # gymnasium.make's own
UNKNOWN_ID = ("NameNotFound", "NamespaceNotFound", "VersionNotFound", "DeprecatedEnv")


def check_env(cfg: DictConfig) -> None:
    """The env a gymnasium or mpe2 factory would make exists and takes `env.kwargs` (an env
    of another `_target_` is checked where it is made)."""
    env = cfg.get("env")
    if not isinstance(env, DictConfig) or OmegaConf.is_missing(env, "id"):
        return
    target, env_id = env.get("_target_"), str(env.id)
    kwargs = OmegaConf.to_container(env.kwargs) if env.get("kwargs") else {}
    if target in GYMNASIUM_FACTORIES:
        vectorization = str(env.get("vectorization", "sync"))
        entry = _gymnasium_entry(env_id, vectorization)
        if kwargs and entry is not None:
            own = () if vectorization == "vector_entry_point" else MAKE_ARGUMENTS
            _check_kwargs(env_id, kwargs, lambda: _load(entry), own)
    elif target == MPE_FACTORY:
        _check_mpe_id(env_id)
        if kwargs:
            _check_kwargs(env_id, kwargs,
                          lambda: importlib.import_module(f"mpe2.{env_id}").raw_env, ())


def _gymnasium_entry(env_id: str, vectorization: str) -> Any:
    """The entry point gymnasium would make `env_id` with: raises a ConfigError if no env is
    registered under that id."""
    import gymnasium
    from gymnasium.envs.registration import find_highest_version, get_env_id, parse_env_id

    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            raise ConfigError(
                f"env.id={env_id} is invalid: {error} (the module before ':' registers the env): "
                "valid values are gymnasium ids, after the module that registers them where "
                "gymnasium does not (ale_py:ALE/Breakout-v5)") from None
    try:
        spec = gymnasium.envs.registry.get(name)
        namespace, base, version = parse_env_id(name)
        latest = find_highest_version(namespace, base)
        if spec is None and version is None and latest is not None:  # make takes the latest
            spec = gymnasium.envs.registry[get_env_id(namespace, base, latest)]
        if spec is None:
            spec = gymnasium.spec(name)  # raises what is wrong with the id
    except gymnasium.error.Error as error:
        raise unknown_id(env_id, error) from None
    return spec.vector_entry_point if vectorization == "vector_entry_point" else spec.entry_point


def unknown_id(env_id: str, error: BaseException) -> ConfigError:
    """What gymnasium said of an id it does not know, with its nearest registered id."""
    import gymnasium

    module, colon, name = env_id.rpartition(":")
    ids = sorted(gymnasium.envs.registry)
    return ConfigError(f"env.id={env_id} is invalid: {error}"
                       + nearest(name, ids, f"env.id={module}{colon}")
                       + " (gymnasium.pprint_registry() lists every id)")


def _check_mpe_id(env_id: str) -> None:
    try:
        found = importlib.util.find_spec(f"mpe2.{env_id}") is not None
    except ImportError:  # no mpe2: its install error is the job's, where the env is made
        return
    if not found:
        import mpe2

        names = sorted(m.name for m in pkgutil.iter_modules(mpe2.__path__)
                       if re.fullmatch(r"simple\w*_v\d+", m.name))
        raise ConfigError(f"env.id={env_id} is invalid: mpe2 has no scenario {env_id!r}: valid "
                          f"values are {names}" + nearest(env_id, names, "env.id="))


def _check_kwargs(env_id: str, kwargs: dict, creator: Callable[[], Any],
                  own: tuple[str, ...]) -> None:
    """Each of `kwargs` is an argument of the env's constructor (`creator()` loads it) or one
    of the factory's `own`; a constructor that takes **kwargs takes them all."""
    names = _arguments(creator)
    if names is None:
        return
    for name, value in kwargs.items():
        if name not in names and name not in own:
            raise ConfigError(no_argument(env_id, str(name), value, [*names, *own]))


def no_argument(env_id: str, name: str, value: Any, names: list[str] | None) -> str:
    valid = f"; valid names are {names}" if names is not None else ""
    return (f"env.kwargs.{name}={value} is invalid: {env_id} takes no argument {name!r}: remove "
            f"it (~env.kwargs.{name})" + valid)


def _arguments(creator: Callable[[], Any]) -> list[str] | None:
    """The named arguments of what `creator()` returns; None if it takes **kwargs or cannot
    be loaded here (making the env says why, in the job)."""
    try:
        parameters = inspect.signature(creator()).parameters.values()
    except Exception:  # noqa: BLE001 - see above
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return [p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_POSITIONAL]


def _load(entry: Any) -> Any:
    from gymnasium.envs.registration import load_env_creator

    return load_env_creator(entry) if isinstance(entry, str) else entry


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
    env_id = str(cfg.env.get("id"))
    if type(error).__name__ in UNKNOWN_ID:
        return unknown_id(env_id, error)
    found = re.search(r"unexpected keyword argument '(\w+)'", str(error))
    if not isinstance(error, TypeError) or found is None:
        return None
    name = found[1]
    value = OmegaConf.select(cfg, f"env.kwargs.{name}", default="?")
    names = None
    if cfg.env.get("_target_") in GYMNASIUM_FACTORIES:
        try:
            names = _arguments(lambda: _load(_gymnasium_entry(env_id, "sync")))
        except ConfigError:
            names = None
    return ConfigError(no_argument(env_id, name, value, names))
