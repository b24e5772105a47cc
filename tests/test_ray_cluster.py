"""ActorQ's Ray actors across machines (issue 14 item 3), on a 3-node Ray cluster started on
this box with `ray.cluster_utils.Cluster`: one CPU per node, so three one-CPU actors land on
three nodes, and the run learns as the one-node ActorQ test does; PEARL's actors land so too."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from helpers import NOT_MEASURED, build_job, metric_history, run_job
from test_actorq import LEARNS, POOL

from hetrl.actors.pool import ActorLost

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    """The 3-node cluster, started once for the module's tests, with token authentication as
    `ray start` and `ray.init()` start theirs: a process that started a Ray of its own (a test
    before, in this pytest worker) keeps token mode and its token, and a cluster without
    them then cancels every actor it is asked for (Ray 2.60)."""
    from ray._private.authentication.authentication_token_setup import (
        _get_default_token_path,
        generate_and_save_token,
    )
    from ray._raylet import Config
    from ray.cluster_utils import Cluster

    os.environ["RAY_AUTH_MODE"] = "token"
    Config.initialize("")  # Ray reads its mode into its config once, at import
    if not _get_default_token_path().is_file():
        generate_and_save_token()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_actors_spread_over_a_three_node_cluster_and_the_run_learns(tmp_path, cluster):
    try:
        result = run_job(tmp_path, *LEARNS, "scheduler=actorq", "actors=ray", "actors.n=3",
                         f"actors.address={cluster.address}", "actors.pull_every=100")
    finally:
        ray.shutdown()
    (nodes,) = metric_history(tmp_path, result["run_id"], "actors/nodes")
    assert nodes[1] == 3
    assert result["return_mean_100"] > 60  # test_actorq's one-node bar (random: about 22)


@pytest.mark.slow
def test_pearls_actors_spread_over_the_three_node_cluster(tmp_path, cluster):
    """PEARL's protocol with Ray actors on the same cluster: its three one-CPU actors land on
    three nodes, as ActorQ's do, each sends the host its chunks and loads the weights the
    host publishes (tiny: a few hundred steps, the cluster is shared)."""
    try:
        result = run_job(tmp_path, "algo=dqn", "env=cartpole", "algo.hidden=[16]",
                         "scheduler=pearl", "actors=ray", "actors.n=3", "steps=600",
                         "algo.learning_starts=200", "log_every=600",
                         f"actors.address={cluster.address}", *NOT_MEASURED)
    finally:
        ray.shutdown()
    (nodes,) = metric_history(tmp_path, result["run_id"], "actors/nodes")
    assert nodes[1] == 3
    assert result["pearl/actors"] == 3.0 and result["updates"] > 0
    for rank in range(3):  # each node's actor sent chunks and got the learner's weights
        assert result[f"actor/{rank}/steps"] > 0 and result[f"actor/{rank}/pulls"] >= 1


def test_with_no_address_hetrl_starts_its_own_ray_beside_a_running_cluster(cluster):
    """A cluster started on this machine (the module's, or one a test in another pytest
    worker started) is found by a plain `ray.init()`, which then refuses `num_cpus`: CI saw
    that."""
    from hetrl.actors.ray import init_ray

    try:
        assert init_ray(None, num_cpus=2)
        assert ray.cluster_resources()["CPU"] == 2  # ours, not the cluster's three CPUs
    finally:
        ray.shutdown()


@pytest.mark.usefixtures("job_log")
def test_a_ray_actor_that_hangs_or_dies_is_named_with_its_last_log_line(tmp_path: Path, cluster):
    """As a process actor is: its Ray actor id, pid and node, how it ended (Ray's words),
    the last line of its own log in the job's workers/ folder, the key of the timeout."""
    from hetrl.actors.ray import RayActors

    c = build_job("algo=dqn", "algo.hidden=[16]", "env=cartpole")
    # a process actor's keys out: Ray starts its actors, at its own niceness (15)
    config = {key: value for key, value in POOL.items() if key not in ("start_method", "nice")}
    pool = RayActors(address=cluster.address, **{**config, "timeout_s": 2.0})
    try:
        pool.start(c.learner, c.make_envs, seed=0)
        pool.submit(0, None, 5, 0)
        assert len(pool.results()) == 1
        pid = int(re.search(r"pid (\d+)", pool.placed.names[0])[1])
        actor_log = tmp_path / "workers" / "actor-0.log"
        said = (rf"actor 0 \(Ray actor [0-9a-f]{{12}}, pid {pid} on [\d.]+/[0-9a-f]{{12}}; its "
                rf"last log line: '.*chunk of 5 steps at step 0' \({re.escape(str(actor_log))}\)\)")
        os.kill(pid, signal.SIGSTOP)
        pool.submit(0, None, 5, 5)
        with pytest.raises(ActorLost, match=said + r" has not answered its chunk in 2 s "
                                                   r"\(actors.timeout_s=2\)"):
            pool.results()
        os.kill(pid, signal.SIGKILL)
        ray.wait(list(pool.pending), timeout=60)  # Ray has seen it die
        with pytest.raises(ActorLost, match=said + " died, its worker process has died.*: the "
                                                   "run stops, its last checkpoint is where"):
            pool.results()
    finally:
        pool.close()
