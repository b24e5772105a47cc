"""Every option of every config group composes, validates and builds; bad input is named."""

from __future__ import annotations

import importlib
import re
import importlib.util

import gymnasium as gym
import pytest
import torch
from helpers import compose_job, hetrl_cli, run_job, track_into
from hydra.errors import ConfigCompositionException, InstantiationException
from hydra.utils import get_class, instantiate

from hetrl.actors.pool import ActorPool
from hetrl.config.enums import ActionSpace, Agents
from hetrl.config.errors import ConfigError
from hetrl.options import (GROUPS, algos_for, algos_for_loop, composed_option, group_options,
                           option_class, option_yaml)
from hetrl.paths import CONF_DIR
from hetrl.validation import validate

ALL_OPTIONS = [(group, option) for group in GROUPS for option in group_options(group)]


def _fitting_algo(env_option: str) -> str:
    node = composed_option("env", env_option)
    return algos_for(ActionSpace(node.action_space), Agents(node.agents))[0]


def _fitting_algo_for_replay(replay_option: str) -> str:
    agents = getattr(option_class("replay", replay_option), "agents", Agents.single)
    off_policy = algos_for_loop(False)
    return [a for a in algos_for(ActionSpace.discrete, agents) if a in off_policy][0]


def _fitting_algo_for_scheduler(scheduler_option: str) -> str:
    target = get_class(option_yaml("scheduler", scheduler_option)._target_)
    return next(algo for algo in algos_for_loop(target.needs.on_policy)
                if get_class(option_yaml("algo", algo)._target_).agents in target.needs.agents)


def _fitting_scheduler_for_actors(actors_option: str) -> str:
    pool = issubclass(option_class("actors", actors_option), ActorPool)
    return next(name for name in group_options("scheduler")  # an off-policy one, for dqn
                if (needs := option_class("scheduler", name).needs).actor_pool == pool
                and not needs.on_policy and Agents.single in needs.agents)


def test_the_conf_tree_has_every_group():
    assert all(group_options(group) for group in GROUPS)


@pytest.mark.parametrize(("group", "option"), ALL_OPTIONS, ids=[f"{g}={o}" for g, o in ALL_OPTIONS])
def test_every_option_composes_validates_and_builds(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if group == "env":
        overrides.append(f"algo={_fitting_algo(option)}")
    if group == "scheduler":
        overrides.append(f"algo={_fitting_algo_for_scheduler(option)}")
    if group == "replay":
        overrides.append(f"algo={_fitting_algo_for_replay(option)}")
    if group == "actors":
        overrides.append(f"scheduler={_fitting_scheduler_for_actors(option)}")
    if group == "precision" and option_class(group, option).needs.plan:
        overrides.append("platform=versal")
    cfg, choices = compose_job(*overrides)
    assert choices[group] == option
    validate(cfg, choices)
    track_into(cfg, tmp_path)

    envs = instantiate(cfg.env)
    spaces = {"obs_space": envs.single_observation_space, "act_space": envs.single_action_space}
    built = {
        "env": lambda: envs,
        "algo": lambda: instantiate(cfg.algo, **spaces, device=torch.device("cpu")),
        "replay": lambda: instantiate(cfg.replay, **spaces, device=torch.device("cpu")),
    }.get(group, lambda: instantiate(cfg[group]))()

    if group == "env":
        obs, _ = built.reset(seed=0)
        assert obs.shape == (cfg.env.n_envs, *built.single_observation_space.shape)
    elif group == "algo":
        obs, _ = envs.reset(seed=0)
        actions = built.act(obs, step=0)
        assert all(built_action in envs.single_action_space for built_action in actions)
    elif group == "replay":
        obs, _ = envs.reset(seed=0)
        actions = envs.action_space.sample()
        next_obs, rewards, terminated, _, _ = envs.step(actions)
        built.add(obs, actions, rewards, next_obs, terminated)
        assert len(built) == len(obs) and built.sample(4).obs.shape[0] == 4
    elif group == "platform":
        assert isinstance(built.device, torch.device)
    elif group == "precision":
        with built.autocast(torch.device("cpu")):
            torch.ones(2) @ torch.ones(2)
    elif group == "scheduler":
        assert callable(built.run)
    elif group == "tracking":
        built.start("probe", tags={})
        built.end("FINISHED")
    envs.close()


def test_each_algo_brings_an_env_that_fits_and_env_wins():
    for algo in group_options("algo"):
        cfg, choices = compose_job(f"algo={algo}")
        validate(cfg, choices)
    cfg, choices = compose_job("algo=td3", "env=inverted_pendulum")
    assert choices["env"] == "inverted_pendulum" and cfg.env.id == "InvertedPendulum-v5"


def test_tuned_hyperparameters_apply_and_command_line_wins():
    cfg, _ = compose_job("algo=dqn", "env=cartpole")
    assert cfg.algo.train_freq == 256 and cfg.algo.hidden == [256, 256]
    cfg, _ = compose_job("algo=dqn", "env=cartpole", "algo.train_freq=4", "steps=123")
    assert cfg.algo.train_freq == 4 and cfg.steps == 123


@pytest.mark.parametrize("tuned", group_options("tuned"))
def test_every_tuned_file_composes_validates_and_is_tagged(tuned):
    """conf/tuned/<algo>_<env>.yaml applies to its pair: the algo and env it is named for."""
    algo, env = next((a, tuned.removeprefix(f"{a}_")) for a in group_options("algo")
                     if tuned.startswith(f"{a}_") and tuned.removeprefix(f"{a}_") in
                     group_options("env"))
    cfg, choices = compose_job(f"algo={algo}", f"env={env}")
    validate(cfg, choices)
    assert choices["tuned"] == tuned
    for node in ("algo", "selfplay"):
        for key, value in option_yaml("tuned", tuned).get(node, {}).items():
            assert cfg[node][key] == value


@pytest.mark.parametrize(("overrides", "source"), [
    (("algo=a2c", "algo.n_envs=16"), "env.n_envs=16"),
    (("algo.total_steps=5000",), "steps=5000"),
])
def test_a_key_that_follows_another_names_the_one_to_set(overrides, source):
    """algo.n_envs=16 alone once sized A2C's rollouts for 16 envs while 1 env stepped."""
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError, match="valid values are") as err:
        validate(cfg, choices)
    assert overrides[-1] in str(err.value) and f"set {source}" in str(err.value)
    validate(*compose_job(*overrides, source))


def test_unknown_option_names_it_and_the_choices():
    with pytest.raises(ConfigCompositionException) as err:
        compose_job("algo=foo")
    message = str(err.value)
    assert "algo/foo" in message and all(name in message for name in ("dqn", "ddpg", "td3"))


def test_wrong_type_names_the_key_and_value():
    with pytest.raises(ConfigCompositionException) as err:
        compose_job("algo.batch_size=abc")
    message = str(err.value) + str(err.value.__cause__)
    assert "abc" in message and "algo.batch_size" in message and "Integer" in message


@pytest.mark.parametrize(("override", "named"), [
    ("steps=-5", "steps=-5"),
    ("algo.lr=0", "algo.lr=0.0"),
    ("algo.gamma=1.5", "algo.gamma=1.5"),
    ("env.n_envs=0", "env.n_envs=0"),
    ("env.vectorization=threads", "env.vectorization='threads'"),
])
def test_out_of_range_values_are_named_with_the_valid_range(override, named):
    cfg, choices = compose_job(override)
    with pytest.raises(ConfigError, match="valid values are") as err:
        validate(cfg, choices)
    assert named in str(err.value)


@pytest.mark.parametrize("algo", ["ddpg", "maddpg"])
def test_a_budget_that_ends_before_learning_starts_is_rejected(algo):
    cfg, choices = compose_job(f"algo={algo}", "steps=1500")
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    message, starts = str(err.value), cfg.algo.learning_starts
    assert "steps=1500" in message and f"algo.learning_starts={starts}" in message
    assert "no update" in message and f"steps={2 * starts}" in message  # the override


@pytest.mark.parametrize(("override", "named"), [
    ("+stpes=600", "stpes is not a config key: did you mean steps?"),
    ("+algo.nonexistent=1", "algo.nonexistent is not a config key"),
    ("+algo.learnig_starts=5", "did you mean algo.learning_starts?"),
    ("algo.lr=inf", "algo.lr=inf is invalid: valid values are finite numbers"),
    ("algo.gamma=nan", "algo.gamma=nan is invalid: valid values are finite numbers"),
    ("replay.capacity=0", "replay.capacity=0 is invalid"),
    ("replay.capacity=10", ("replay.capacity=10 is invalid: valid values are integers >= "
                            "algo.batch_size (64)")),
])
def test_keys_added_non_finite_values_and_small_replays_are_named(override, named):
    cfg, choices = compose_job(override)
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    assert named in str(err.value)


@pytest.mark.parametrize(("overrides", "named"), [
    (("algo=td3", "algo.target_noise=-1"), "algo.target_noise=-1.0 is invalid"),
    (("algo=maddpg", "env.n_agents=1000"), ("env.n_agents=1000 is invalid: valid values are "
                                            "integers in [1, 64]")),
])
def test_target_noise_and_agent_counts_are_bounded(overrides, named):
    cfg, choices = compose_job(*overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    assert named in str(err.value)


def test_incompatible_algo_and_env_name_both_and_the_choices():
    cfg, choices = compose_job("algo=dqn", "env=pendulum")
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    message = str(err.value)
    assert "algo=dqn" in message and "env=pendulum" in message
    assert "['acrobot', 'breakout', 'cartpole', 'mountaincar', 'mspacman', 'pong']" in message
    assert "['a2c', 'd4pg', 'ddpg', 'ppo', 'td3']" in message


def test_a_precision_no_device_of_the_platform_computes_names_both_and_the_choices():
    """The issue's own case: bf16 on versal died in the partitioner naming internal node ids."""
    cfg, choices = compose_job("precision=bf16", "platform=versal")
    with pytest.raises(ConfigError) as err:
        validate(cfg, choices)
    message = str(err.value)
    assert "precision=bf16" in message and "platform=versal" in message
    assert "runs ['elementwise', 'loss'] nodes in it" in message
    assert "choose precision from ['fp16', 'fp32', 'mixed', 'qat'] or platform from ['host']" \
        in message


def test_declared_action_space_is_checked_against_the_real_env():
    cfg, _ = compose_job("env=cartpole", "env.action_space=continuous", "algo=ddpg")
    with pytest.raises(InstantiationException, match="does not match CartPole-v1"):
        instantiate(cfg.env)


def test_cli_rejects_bad_input_with_a_message_and_nonzero_exit(tmp_path):
    """An option that does not exist, as Hydra refuses it (a value out of range: the CLI
    cases of the next test)."""
    unknown = hetrl_cli(tmp_path, "precision=int3")
    assert unknown.returncode != 0
    assert "precision/int3" in unknown.stderr and "fp32" in unknown.stderr
    for args in (("algo=null",), ("-m", "algo=dqn,null")):  # Hydra composed these to a traceback
        refused = hetrl_cli(tmp_path, *args)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "error: algo=null is invalid: a config group takes one of its options: a2c, " \
            "alphazero" in refused.stderr
    assert not list(tmp_path.glob("**/mlflow.db"))


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")

CONFIG_ERRORS = [
    (("algo.lr=-1",), "algo.lr=-1.0 is invalid: valid values are floats > 0"),
    # found by making the parts (build.preflight), before the run opens
    (("algo.buffer_size=10000000000",), "algo.buffer_size=10000000000 is invalid"),
    (("algo=ddpg", "env=cartpole", "env.action_space=continuous"),
     "env.action_space='continuous' does not match CartPole-v1's"),
    pytest.param(("platform.device=cuda",), "platform.device='cuda' is invalid: valid values "
                 "are auto, cpu", marks=NO_CUDA),
    # MLflow 3 refuses a folder as its store
    (("tracking.uri=file:{tmp}/mlruns",),
     "tracking.uri='file:{tmp}/mlruns' is invalid: MLflow 3 keeps runs in a database, not in a "
     "folder: use tracking.uri=sqlite:///{tmp}/mlruns/mlflow.db"),
]
CONFIG_ERROR_IDS = ["range", "replay-memory", "action-space", "cuda", "file-store"]


@pytest.mark.parametrize(("overrides", "named"), CONFIG_ERRORS, ids=CONFIG_ERROR_IDS)
def test_a_config_error_is_one_message_and_the_job_creates_nothing(tmp_path, overrides, named):
    """Each kind of config error, from the checks before torch to those that make the parts,
    is one ConfigError of one line, raised before a store or a run exists (the command line
    prints it: the next test)."""
    named = named.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as error:
        run_job(tmp_path, *(o.format(tmp=tmp_path) for o in overrides), ready_store=False)
    message = str(error.value)
    assert message.startswith(named) and "\n" not in message
    assert "Error in call to target" not in message  # Hydra's wrapper
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize(("overrides", "named"), CONFIG_ERRORS[:3:2],
                         ids=CONFIG_ERROR_IDS[:3:2])
def test_a_config_error_is_one_message_without_a_traceback_and_creates_nothing(tmp_path, overrides,
                                                                               named):
    """`python -m hetrl` prints a config error as one line, creates nothing and keeps the
    traceback in the job's log: one found before torch is imported, one found by making the
    parts (every kind: the previous test)."""
    named = named.format(tmp=tmp_path)
    out = hetrl_cli(tmp_path, *(o.format(tmp=tmp_path) for o in overrides))
    assert out.returncode != 0
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"error: {named}")
    assert "Traceback" not in out.stderr + out.stdout
    assert "Error in call to target" not in out.stderr  # Hydra's wrapper
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    (log,) = tmp_path.glob("runs/*/*/__main__.log")  # the job's log keeps the traceback
    assert "Traceback" in log.read_text() and named in log.read_text()


def test_help_lists_groups_and_options(tmp_path):
    out = hetrl_cli(tmp_path, "--help")
    assert out.returncode == 0
    for group in GROUPS:
        assert f"{group}: " in out.stdout
    assert "a2c, alphazero, d4pg, ddpg, dqn, maddpg, matd3, ppo, td3" in out.stdout


def test_the_readme_table_names_every_option_of_every_group():
    """README's "Config groups" table lists each group's options as conf/ has them."""
    readme = (CONF_DIR.parent / "README.md").read_text()
    for group in GROUPS:
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{group}` |")]
        listed = set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[2]))
        assert listed == set(group_options(group)), group


def test_gymnasium_and_mpe_envs_are_real():
    for option in group_options("env"):
        env = option_yaml("env", option)
        if env._target_ == "hetrl.envs.go.GoVectorEnv":  # OpenSpiel's Go at that size
            import pyspiel

            assert pyspiel.load_game("go", {"board_size": env.board_size}).num_distinct_actions() \
                == env.board_size ** 2 + 1
        elif env._target_ == "hetrl.envs.make_vector_env":
            module, _, env_id = env.id.rpartition(":")
            if module:  # "ale_py:ALE/Breakout-v5": the module registers the env
                importlib.import_module(module)
            assert env_id in gym.registry
        else:
            assert importlib.util.find_spec(f"mpe2.{env.id}") is not None
