"""`python -m hetrl.evaluate <run> [episodes=N] [seed=S] [video=true] [tracking_uri=URI]`:
the greedy evaluation of a run's policy on its env, printed with a 95 % interval.

`<run>` is what `hetrl.load` takes: a job folder, a policy or checkpoint file, or
`runs:/<run id>`. With `video=true` one greedy episode is written as an MP4 (the env's
`rgb_array` frames through imageio's ffmpeg) into the job folder (or `evaluation/` here) and
logged to the run's artifacts (`videos/`), where the MLflow UI plays it. A Go run plays games
against a uniformly random player (colours alternating) and writes the first one as an SGF
and its final board as a PNG (`games/`), as self-play does.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hetrl.agent import Agent
from hetrl.loading import load, one_env
from hetrl.config.errors import ConfigError
from hetrl.evaluation import FINAL_SEED_OFFSET
from hetrl.policy_outputs import ci95
from hetrl.tracking.base import VIDEOS

log = logging.getLogger("hetrl")

OPTIONS = {"episodes": int, "seed": int, "video": lambda v: _flag("video", v), "tracking_uri": str}
"""The command's options (key=value) and how each value is read."""


def _flag(key: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"{key}={value!r} is invalid: valid values are true, false")
    return value.lower() == "true"


def parse(args: list[str]) -> tuple[str, dict[str, Any]]:
    """The run and the options of the command line (`key=value` after the run)."""
    if not args or "=" in args[0]:
        raise ConfigError("usage: python -m hetrl.evaluate <run folder | policy.pt | runs:/<id>>"
                          " [episodes=N] [seed=S] [video=true] [tracking_uri=URI]")
    options: dict[str, Any] = {"episodes": 10, "seed": None, "video": False,
                               "tracking_uri": None}
    for arg in args[1:]:
        key, _, value = arg.partition("=")
        if key not in OPTIONS or not value:
            raise ConfigError(f"{arg!r} is invalid: valid options are "
                              f"{', '.join(f'{k}=...' for k in OPTIONS)}")
        try:
            options[key] = OPTIONS[key](value)
        except ValueError:
            raise ConfigError(f"{key}={value!r} is invalid: valid values are integers") from None
    return args[0], options


def out_folder(source: str) -> Path:
    """Where the files of an evaluation go: the job folder, else `evaluation/` here."""
    path = Path(source)
    folder = path if path.is_dir() else path.parent if path.is_file() else Path("evaluation")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def record_video(agent: Agent, path: Path, seed: int) -> tuple[Path, float]:
    """One greedy episode (from `reset(seed=seed)`) as an MP4; the file and the return."""
    import imageio.v2 as imageio

    # pygame, which draws the frames off-screen, starts SDL's video too: with no display it
    # prints "error: XDG_RUNTIME_DIR is invalid" on a headless machine; rgb_array needs no window
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = one_env(agent.config, render_mode="rgb_array")()
    try:
        obs, _ = env.reset(seed=seed)
        frames, total, done = [env.render()[0]], 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
            total += float(np.sum(reward[0]))
            done = bool(np.any(terminated[0]) or np.any(truncated[0]))
            if not done:  # the frame after the last step is the next episode's (autoreset)
                frames.append(env.render()[0])
        fps = env.metadata.get("render_fps") or 30
    finally:
        env.close()
    imageio.mimwrite(path, frames, fps=fps, codec="libx264", macro_block_size=2)
    return path, total


def go_game_files(agent: Agent, folder: Path, seed: int) -> list[Path]:
    """The first game of the evaluation as an SGF and its final board as a PNG."""
    from hetrl.algos.go_games import result, to_sgf
    from hetrl.envs.go_groups import area_owner
    from hetrl.tracking.plots import go_board

    black, game = agent.games(1, seed)[0]
    name = "hetrl" if black else "random"
    sgf = folder / "game_0.sgf"
    sgf.write_text(to_sgf(game, agent.game, name).replace(f"PW[{name}]", "PW[random]" if black
                                                          else "PW[hetrl]"))
    final = agent.game.position_from(game.moves)
    last = (divmod(final.last, agent.game.n)
            if final.last is not None and final.last != agent.game.pass_action else None)
    png = go_board(final.board, folder / "game_0.png",
                   f"hetrl ({'black' if black else 'white'}) vs random: {result(game)}",
                   last=last, owner=area_owner(final.board))
    return [sgf, png]


def main(args: list[str]) -> None:
    source, options = parse(args)
    agent = load(source, tracking_uri=options["tracking_uri"])
    if options["tracking_uri"]:
        agent.tracking_uri = options["tracking_uri"]
    seed = agent.config.seed + FINAL_SEED_OFFSET if options["seed"] is None else options["seed"]
    returns = agent.evaluate(options["episodes"], seed)
    mean, half = float(returns.mean()), ci95(returns)
    what = "win rate vs random" if hasattr(agent, "games") else "greedy return"
    value = (f"{(mean + 1) / 2:.1%} ± {half / 2:.1%}" if hasattr(agent, "games")
             else f"{mean:.4g} ± {half:.2g}")
    print(f"{source}: {what} {value} (95 % interval, {len(returns)} episodes from seed {seed})")
    if options["video"]:
        folder = out_folder(source)
        if hasattr(agent, "games"):
            files, into = go_game_files(agent, folder, seed), "games"
        else:
            files, into = [record_video(agent, folder / "episode_0.mp4", seed)[0]], VIDEOS
        where = agent.log_to_run(files, into)
        print("wrote " + ", ".join(map(str, files)) + (f"; logged to {where}" if where else ""))


def cli() -> None:
    try:
        main(sys.argv[1:])
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
