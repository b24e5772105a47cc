"""Driven by the registry (the options in `conf/`), not by hand lists.

Every pair of options that validation accepts trains: a pair is accepted when
`python -m hetrl g1=o1 g2=o2` composes and validates (the rest of the config at its
defaults); the accepted pairs are then covered by few jobs (pairwise testing: a job grows by
the option that covers the most pairs not yet covered while the job validates), each of which
trains a few steps. So every algorithm trains on the env it brings, and every option of every
group trains beside every option of every other group that it fits. Every env trains with the
first algorithm of the registry that fits it.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from itertools import combinations, cycle
from pathlib import Path

import pytest
from helpers import compose_job, local_ray, track_into
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict

from hetrl import experiment
from hetrl.config.enums import ActionSpace, Agents
from hetrl.config.errors import ConfigError
from hetrl.options import GROUPS, algos_for, composed_option, group_options, option_yaml
from hetrl.validation import validate

Choice = tuple[str, str]  # (group, option)
Job = tuple[tuple[str, ...], DictConfig, dict[str, str]]  # its overrides, config, choices

PAIRED = [group for group in GROUPS if group != "env"] + ["replay/sampler"]
"""The groups whose options are paired (each algo brings an env it fits)."""
TINY = {"steps": 64, "log_every": 32, "algo.learning_starts": 16, "algo.batch_size": 16,
        "algo.buffer_size": 512, "algo.train_freq": 4, "algo.gradient_steps": 1,
        "algo.n_steps": 16, "algo.hidden": [16], "algo.policy_hidden": None,
        "replay.sampler.refs": 4, "replay.sampler.neighbors": 4, "actors.pull_every": 16,
        "actors.eval_episodes": 1, "algo.width": 8, "algo.blocks": 1, "algo.search.readouts": 8,
        "algo.search.fast_readouts": 4, "selfplay.games_per_generation": 2,
        "selfplay.concurrent_games": 2, "selfplay.generations": 1, "selfplay.train_steps": 2,
        "selfplay.eval_games": 2, "selfplay.eval_readouts": 4, "selfplay.gating_games": 0,
        "eval.final": 1, "reference": "find"}
"""A few steps of any job: each key that the composed config has is set to this. One greedy
episode at the end (the final evaluation still runs), and no fp32 reference run trained after
a job of another precision: that twin would be a job of precision=fp32 with the same options,
and every pair of precision=fp32 trains in a job of its own here (the twin itself is
test_reward_error's)."""


def _composed(*overrides: str) -> tuple[DictConfig, dict[str, str]] | None:
    """The job these overrides compose to, as composed (None: Hydra refuses them)."""
    try:
        return compose_job(*overrides)
    except ConfigCompositionException:
        return None


def _made_tiny(node: DictConfig, at: str = "") -> DictConfig:
    """`node`, the job's config or its node at `at` (`replay.sampler`), with each key of TINY
    under it that it has set to TINY's value, in place."""
    prefix = f"{at}." if at else ""
    for key, value in TINY.items():
        if key.startswith(prefix):
            key = key.removeprefix(prefix)
            if OmegaConf.select(node, key, default="absent") != "absent":
                OmegaConf.update(node, key, value)
    return node


def _accepted_job(job: tuple[DictConfig, dict[str, str]] | None
                  ) -> tuple[DictConfig, dict[str, str]] | None:
    """The job, tiny already, if validation accepts it."""
    if job is None:
        return None
    try:
        validate(*job)
    except ConfigError:
        return None
    return job


def _accepted(*overrides: str) -> tuple[DictConfig, dict[str, str]] | None:
    """The job these overrides compose to, tiny, if composition and validation accept it."""
    job = _composed(*overrides)
    return job and _accepted_job((_made_tiny(job[0]), job[1]))


def _nested(option: Choice) -> list[Choice] | None:
    """The options of the groups nested in the option that its defaults list chooses (a
    multi-agent replay's `sampler: uniform`: replay/sampler=uniform); None where the option
    chooses anything else (another group's option, as an algo's env), or its schema is not
    its own node."""
    group, name = option
    schema, *rest = [entry for entry in option_yaml(group, name).defaults if entry != "_self_"]
    if not (isinstance(schema, str) and schema.endswith("@_here_")):
        return None
    nested = []
    for entry in rest:
        (key, choice), = entry.items()
        if not key.isidentifier():  # `override /actors@_global_.actors`, `/path`, `x@pkg`
            return None
        nested.append((f"{group}/{key}", choice))
    return nested


def _swappable(option: Choice) -> bool:
    """Whether the option sets its group's node and the groups nested in it, and nothing
    else: not an algo (whose options bring an env and a tuned file), and a defaults list of
    its schema and at most the options of its nested groups."""
    return option[0] != "algo" and _nested(option) is not None


def _swapped_in(option: Choice) -> tuple[DictConfig, dict[str, str]]:
    """A swappable option's node as Hydra composes it (its schema under its own values, each
    nested group's option at its key) and the choices it makes."""
    group, name = option
    node, choices = composed_option(group, name), {group: name}
    for nested in _nested(option):
        node[nested[0].rpartition("/")[2]], made = _swapped_in(nested)
        choices.update(made)
    return node, choices


class Composer:
    """Jobs of options as Hydra composes them, Hydra run once for each set of the options that
    are not swappable: a job is that set's config with each swappable option's node swapped
    in, which is what Hydra composes (test_a_job_with_swapped_options_is_the_job_hydra_composes)
    without Hydra's 0.15-0.4 s a job (most options are swappable, and most sets recur). An
    option of a nested group (replay/sampler) is swapped in where the job's own option of its
    parent group has that group, and refused elsewhere, as Hydra refuses it. A `tiny` composer's
    jobs are tiny: each config and node is made tiny once, as it is composed."""

    def __init__(self, tiny: bool = False) -> None:
        self.tiny = tiny
        self.composed: dict[frozenset[Choice], tuple | None] = {}
        self.nodes: dict[Choice, tuple[DictConfig, dict[str, str]]] = {}

    def _hydra(self, options: frozenset[Choice]) -> tuple[DictConfig, dict[str, str]] | None:
        if options not in self.composed:
            job = _composed(*(f"{g}={o}" for g, o in sorted(options)))
            if job is not None and self.tiny:
                _made_tiny(job[0])
            self.composed[options] = job
        return self.composed[options]

    def job(self, *options: Choice) -> tuple[DictConfig, dict[str, str]] | None:
        """`g1=o1 g2=o2 ...` composed (None: Hydra refuses it), a fresh copy."""
        fixed = frozenset(option for option in options if not _swappable(option))
        job = self._hydra(fixed)
        if job is None:
            return None
        cfg, choices = copy.deepcopy(job[0]), dict(job[1])
        for group, option in sorted(set(options) - fixed):  # a group before those nested in it
            parent, _, key = group.rpartition("/")
            if parent and group not in choices:  # the parent's option has no such group
                return None
            if (group, option) not in self.nodes:
                node, made = _swapped_in((group, option))
                if self.tiny:
                    _made_tiny(node, group.replace("/", "."))
                self.nodes[group, option] = node, made
            node, made = self.nodes[group, option]
            at = OmegaConf.select(cfg, parent.replace("/", ".")) if parent else cfg
            with open_dict(at):
                at[key] = copy.deepcopy(node)
            # the groups nested in the job's option of that group go with it
            choices = {name: value for name, value in choices.items()
                       if not name.startswith(f"{group}/")}
            choices.update(made)
        return cfg, choices


def _pair_accepted(a: Choice, b: Choice, composer: Composer,
                   alone: dict[Choice, tuple | None]) -> bool:
    """Whether `g1=o1 g2=o2` is accepted; where one option alone already brings the other
    (a default, or what it chooses for that group), the pair is that option alone."""
    for one, other in ((a, b), (b, a)):
        job = alone[one]
        if job is not None and job[1].get(other[0]) == other[1]:
            return True
    return _accepted_job(composer.job(a, b)) is not None


def _pairs(choices: dict[str, str]) -> set[tuple[Choice, Choice]]:
    chosen = sorted((group, choices[group]) for group in PAIRED if choices.get(group))
    return set(combinations(chosen, 2))


def _covering_jobs() -> list[Job]:
    """Jobs that together hold every accepted pair of options of different groups, few of
    them (AETG's greedy way): each grows from the uncovered pair whose options have the most
    uncovered pairs left, by the option that makes the most uncovered pairs with the chosen
    ones while the job still validates."""
    options = sorted((group, option) for group in PAIRED for option in group_options(group))
    composer = Composer(tiny=True)
    alone = {a: _accepted_job(composer.job(a)) for a in options}
    pairs = [(a, b) for a, b in combinations(options, 2) if a[0] != b[0]]
    accepted = {pair for pair in pairs if _pair_accepted(*pair, composer, alone)}

    def fits(chosen: dict[str, str]) -> bool:
        return _accepted_job(composer.job(*chosen.items())) is not None

    uncovered, jobs = set(accepted), []
    while uncovered:
        left = Counter(option for pair in uncovered for option in pair)
        chosen = dict(max(sorted(uncovered), key=lambda pair: left[pair[0]] + left[pair[1]]))
        while (option := _best_addition(chosen, options, accepted, uncovered, left,
                                        fits)) is not None:
            chosen[option[0]] = option[1]
        overrides = tuple(f"{g}={o}" for g, o in sorted(chosen.items()))
        job = _accepted_job(composer.job(*chosen.items()))
        assert job is not None, f"{overrides}: each option fits the ones before it, not all"
        uncovered -= _pairs(job[1])
        jobs.append((overrides, *job))
    return jobs


def _best_addition(chosen: dict[str, str], options: list[Choice], accepted: set,
                   uncovered: set, left: Counter,
                   fits: Callable[[dict[str, str]], bool]) -> Choice | None:
    """The option of a group not chosen yet that makes the most uncovered pairs with the
    chosen ones (ties: the option with more uncovered pairs left) and fits them: each pair it
    makes is accepted, or else the job with it `fits` (validates). A pair refused on its own
    may fit a job: a multi-agent replay beside a platform refuses the default algo, not the
    job's multi-agent one, so the multi-agent options join the jobs of the other groups'
    options rather than jobs of two options each."""
    ranked = []
    for option in options:
        if option[0] in chosen:
            continue
        made = [tuple(sorted((option, other))) for other in chosen.items()]
        if gain := sum(pair in uncovered for pair in made):
            ranked.append(((gain, left[option]), all(pair in accepted for pair in made), option))
    for _, every_pair_accepted, option in sorted(ranked, key=lambda r: r[0], reverse=True):
        if every_pair_accepted or fits({**chosen, option[0]: option[1]}):
            return option
    return None


def test_a_job_with_swapped_options_is_the_job_hydra_composes():
    """Every swappable option, swapped into the job of an option that is not (in turn: an
    algo that brings its own env and scheduler, one whose replay has a nested sampler, a
    scheduler that chooses the actors and replay; an option of a nested group into the algo
    whose replay has that group), one option of every swappable group swapped in at once, and
    a sampler swapped into a job whose replay has none: the config and choices Hydra composes,
    or Hydra's refusal."""
    options = [(group, option) for group in PAIRED for option in group_options(group)]
    swapped = [option for option in options if _swappable(option)]
    assert {g for g, _ in swapped} >= {"platform", "precision", "partitioner", "actors",
                                       "tracking", "replay", "replay/sampler"}, \
        "the swap would save nothing"
    bases = cycle([("algo", "ppo"), ("algo", "maddpg"), ("scheduler", "pearl")])
    jobs = [(option, ("algo", "maddpg") if "/" in option[0]
             else next(base for base in bases if base[0] != option[0])) for option in swapped]
    several = tuple(dict(reversed(swapped)).items())  # the first option of each group
    refused = (("replay/sampler", "locality"), ("algo", "ppo"))  # ppo's replay: no sampler
    composer = Composer()
    for job in [*jobs, (*several, ("algo", "maddpg")), refused]:
        got = composer.job(*job)
        want = _composed(*(f"{g}={o}" for g, o in job))
        assert (got is None) == (want is None) == (job == refused), job
        if want is not None:
            assert got[1] == want[1], job
            assert OmegaConf.to_container(got[0]) == OmegaConf.to_container(want[0]), job


@pytest.mark.slow
def test_every_accepted_pair_of_options_trains(tmp_path: Path):
    jobs = _covering_jobs()
    failures = _failures([job for job in jobs if job[2]["actors"] != "ray"], tmp_path)
    with local_ray():  # the jobs on Ray share one, started once
        failures += _failures([job for job in jobs if job[2]["actors"] == "ray"], tmp_path)
    assert not failures, "\n".join(failures)


def _failures(jobs: list[Job], tmp_path: Path) -> list[str]:
    """Each job trained in a folder of its own under tmp_path: what every failing one raised
    (all of them are reported, not just the first)."""
    failures = []
    for overrides, cfg, choices in jobs:
        track_into(cfg, tmp_path)
        out = tmp_path / f"job{len(list(tmp_path.glob('job*')))}"
        out.mkdir()
        try:
            assert experiment.run(cfg, choices, out)["updates"] > 0, "no update"
        except Exception as error:
            failures.append(f"{' '.join(overrides)}: {type(error).__name__}: {error}")
    return failures


def _acting_in(env: str) -> list[str]:
    """The algos whose learner can act in the env, in the registry's order: validation refuses
    every other one (test_config: an algo that cannot act in the env is named), so the first
    of these that validation accepts is the registry's first algo that fits."""
    node = composed_option("env", env)
    return algos_for(ActionSpace(node.action_space), Agents(node.agents))


@pytest.mark.slow
def test_every_env_trains_with_an_algo_that_fits(tmp_path: Path):
    failures = []
    for n, env in enumerate(group_options("env")):
        job = next(filter(None, (_accepted(f"algo={algo}", f"env={env}", "tracking=none")
                                 for algo in _acting_in(env))))
        out = tmp_path / f"job{n}"
        out.mkdir()
        try:
            assert experiment.run(*job, out)["updates"] > 0, "no update"
        except Exception as error:
            failures.append(f"env={env}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
