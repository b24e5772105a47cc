"""Driven by the registry (the options in `conf/`), not by hand lists.

Every pair of options that validation accepts trains: a pair is accepted when
`python -m hetrl g1=o1 g2=o2` composes and validates (the rest of the config at its
defaults); the accepted pairs are then covered by few jobs (pairwise testing: a job grows by
the option that covers the most pairs not yet covered while every pair inside it is accepted,
and the job itself validates), each of which trains a few steps. So every algorithm trains
on the env it brings, and every option of every group trains beside every option of every
other group that it fits. Every env trains with the first algorithm of the registry that fits
it.
"""

from __future__ import annotations

import copy
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest
from helpers import compose_job, track_into
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict

from hetrl import experiment
from hetrl.config.errors import ConfigError
from hetrl.options import GROUPS, group_options, option_yaml
from hetrl.validation import validate

Choice = tuple[str, str]  # (group, option)

PAIRED = [group for group in GROUPS if group != "env"] + ["replay/sampler"]
"""The groups whose options are paired (each algo brings an env it fits)."""
TINY = {"steps": 64, "log_every": 32, "algo.learning_starts": 16, "algo.batch_size": 16,
        "algo.buffer_size": 512, "algo.train_freq": 4, "algo.gradient_steps": 1,
        "algo.n_steps": 16, "algo.hidden": [16], "algo.policy_hidden": None,
        "replay.sampler.refs": 4, "replay.sampler.neighbors": 4, "actors.pull_every": 16,
        "actors.eval_episodes": 1, "algo.width": 8, "algo.blocks": 1, "algo.search.readouts": 8,
        "algo.search.fast_readouts": 4, "selfplay.games_per_generation": 2,
        "selfplay.concurrent_games": 2, "selfplay.generations": 1, "selfplay.train_steps": 2,
        "selfplay.eval_games": 2, "selfplay.eval_readouts": 4, "selfplay.gating_games": 0}
"""A few steps of any job: each key that the composed config has is set to this."""


def _composed(*overrides: str) -> tuple[DictConfig, dict[str, str]] | None:
    """The job these overrides compose to, as composed (None: Hydra refuses them)."""
    try:
        return compose_job(*overrides)
    except ConfigCompositionException:
        return None


def _accepted_job(job: tuple[DictConfig, dict[str, str]] | None
                  ) -> tuple[DictConfig, dict[str, str]] | None:
    """The composed job made tiny (a copy), if validation accepts it."""
    if job is None:
        return None
    cfg, choices = copy.deepcopy(job[0]), job[1]
    for key, value in TINY.items():
        if OmegaConf.select(cfg, key, default="absent") != "absent":
            OmegaConf.update(cfg, key, value)
    try:
        validate(cfg, choices)
    except ConfigError:
        return None
    return cfg, choices


def _accepted(*overrides: str) -> tuple[DictConfig, dict[str, str]] | None:
    """The job these overrides compose to, tiny, if composition and validation accept it."""
    return _accepted_job(_composed(*overrides))


def _swappable(option: Choice) -> bool:
    """Whether the option sets its group's node and nothing else: a top-level group other
    than `algo` (whose options bring an env and a tuned file), and a defaults list of its
    schema alone (no other group chosen, no nested group)."""
    group, name = option
    entries = [entry for entry in option_yaml(group, name).defaults if entry != "_self_"]
    return (group != "algo" and "/" not in group and len(entries) == 1
            and isinstance(entries[0], str) and entries[0].endswith("@_here_"))


class Composer:
    """Jobs of options as Hydra composes them, Hydra run once for each set of the options that
    are not swappable: a job is that set's config with each swappable option's node swapped
    in, which is what Hydra composes (test_a_job_with_swapped_options_is_the_job_hydra_composes)
    without Hydra's 0.15 s a job (most options are swappable, and most sets recur)."""

    def __init__(self) -> None:
        self.composed: dict[frozenset[Choice], tuple | None] = {}

    def _hydra(self, options: frozenset[Choice]) -> tuple[DictConfig, dict[str, str]] | None:
        if options not in self.composed:
            self.composed[options] = _composed(*(f"{g}={o}" for g, o in sorted(options)))
        return self.composed[options]

    def job(self, *options: Choice) -> tuple[DictConfig, dict[str, str]] | None:
        """`g1=o1 g2=o2 ...` composed (None: Hydra refuses it)."""
        if len(options) == 1:
            return self._hydra(frozenset(options))
        fixed = frozenset(option for option in options if not _swappable(option))
        job = self._hydra(fixed)
        swaps = sorted(set(options) - fixed)
        nodes = [self._hydra(frozenset([option])) for option in swaps]
        if job is None or None in nodes:
            return None
        cfg, choices = copy.deepcopy(job[0]), job[1]
        for (group, option), node in zip(swaps, nodes):
            with open_dict(cfg):
                cfg[group] = node[0][group]
            # the groups nested in the base's option of that group go with it
            choices = {key: value for key, value in choices.items()
                       if not key.startswith(f"{group}/")}
            choices[group] = option
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


def _covering_jobs() -> list[tuple[tuple[str, ...], DictConfig, dict[str, str]]]:
    """Jobs that together hold every accepted pair of options of different groups, few of
    them (AETG's greedy way): each grows from the uncovered pair whose options have the most
    uncovered pairs left, by the option that makes the most uncovered pairs with the chosen
    ones while every pair it makes is accepted."""
    options = sorted((group, option) for group in PAIRED for option in group_options(group))
    composer = Composer()
    alone = {a: _accepted_job(composer.job(a)) for a in options}
    pairs = [(a, b) for a, b in combinations(options, 2) if a[0] != b[0]]
    accepted = {pair for pair in pairs if _pair_accepted(*pair, composer, alone)}
    uncovered, jobs = set(accepted), []
    while uncovered:
        left = Counter(option for pair in uncovered for option in pair)
        chosen = dict(max(sorted(uncovered), key=lambda pair: left[pair[0]] + left[pair[1]]))
        while (option := _best_addition(chosen, options, accepted, uncovered, left)) is not None:
            chosen[option[0]] = option[1]
        overrides = tuple(f"{g}={o}" for g, o in sorted(chosen.items()))
        job = _accepted_job(composer.job(*chosen.items()))
        assert job is not None, f"every pair of {overrides} is accepted, but not all of them"
        uncovered -= _pairs(job[1])
        jobs.append((overrides, *job))
    return jobs


def _best_addition(chosen: dict[str, str], options: list[Choice], accepted: set,
                   uncovered: set, left: Counter) -> Choice | None:
    """The option of a group not chosen yet whose pairs with the chosen ones are all accepted
    and hold the most uncovered ones (ties: the option with more uncovered pairs left)."""
    best, best_key = None, (0, 0)
    for option in options:
        if option[0] in chosen:
            continue
        made = [tuple(sorted((option, other))) for other in chosen.items()]
        if all(pair in accepted for pair in made):
            key = (sum(pair in uncovered for pair in made), left[option])
            if key[0] and key > best_key:
                best, best_key = option, key
    return best


def test_a_job_with_swapped_options_is_the_job_hydra_composes():
    """Every swappable option, swapped into the job of an option that is not (in turn: an
    algo that brings its own env and scheduler, one whose replay has a nested sampler, a
    scheduler that chooses the actors and replay), and one option of every swappable group
    swapped in at once: the config and choices Hydra composes."""
    options = [(group, option) for group in PAIRED for option in group_options(group)]
    swapped = [option for option in options if _swappable(option)]
    assert {g for g, _ in swapped} >= {"platform", "precision", "partitioner", "actors",
                                       "tracking"}, "the swap would save nothing"
    bases = [("algo", "ppo"), ("algo", "maddpg"), ("scheduler", "pearl")]
    several = tuple(dict(reversed(swapped)).items())  # the first option of each group
    composer = Composer()
    jobs = [(a, base) for a, base in zip(swapped, bases * len(swapped)) if a[0] != base[0]]
    for job in [*jobs, (*several, ("algo", "maddpg"))]:
        cfg, choices = composer.job(*job)
        want_cfg, want_choices = compose_job(*(f"{g}={o}" for g, o in job))
        assert choices == want_choices, job
        assert OmegaConf.to_container(cfg) == OmegaConf.to_container(want_cfg), job


@pytest.mark.slow
def test_every_accepted_pair_of_options_trains(tmp_path: Path):
    failures = []
    for n, (overrides, cfg, choices) in enumerate(_covering_jobs()):
        track_into(cfg, tmp_path)
        out = tmp_path / f"job{n}"
        out.mkdir()
        try:
            assert experiment.run(cfg, choices, out)["updates"] > 0, "no update"
        except Exception as error:  # every failing job is reported, not just the first
            failures.append(f"{' '.join(overrides)}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_every_env_trains_with_an_algo_that_fits(tmp_path: Path):
    failures = []
    for n, env in enumerate(group_options("env")):
        job = next(filter(None, (_accepted(f"algo={algo}", f"env={env}", "tracking=none")
                                 for algo in group_options("algo"))))
        out = tmp_path / f"job{n}"
        out.mkdir()
        try:
            assert experiment.run(*job, out)["updates"] > 0, "no update"
        except Exception as error:
            failures.append(f"env={env}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
