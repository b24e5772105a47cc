"""ILP partitioner scaling: solve time and quality against HEFT on random layered DAGs.

Run from the repository root:

    python benchmarks/partition_scaling.py                     # 15 ... 500 nodes, ilp's limit
    python benchmarks/partition_scaling.py --sizes 15 30 --disjunctive --time-limit 30
    python benchmarks/partition_scaling.py --smoke             # 15 and 30 nodes, 2 s limit

Each size gets one random layered DAG (`hetrl.partition.synthetic.random_costs`, width 3,
t ∈ [1, 100] µs, comm ∈ [0, 30] µs, two resources at `--tightness` × total use) on 3 devices.
Columns:

- seconds: wall time of `IlpPartitioner.partition` (HEFT warm start, model build, CBC).
- status: CBC's ("Optimal" is proven optimal; "Feasible (time limit)" is the incumbent).
- ILP T: the ILP objective (eqs. 2-7 + comm; a lower bound on any serialized schedule of that
  assignment). ILP makespan: the list-scheduled makespan of the ILP assignment.
- HEFT T: HEFT's assignment evaluated the ILP way; HEFT makespan: HEFT's own schedule.
- gap: 1 − ILP T / HEFT makespan (what the ILP claims over the heuristic; not a MIP gap).

Issue goal: optimal at 100 nodes in ≤ 5 s. This is a benchmark on a shared 2-core host, not
a test: times move with the load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import parse_args, table, write_results

from hetrl.config.store import register
from hetrl.options import made_option, option_yaml
from hetrl.partition.heft import HeftPartitioner
from hetrl.partition.objective import objective
from hetrl.partition.synthetic import US, random_costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[15, 30, 60, 100, 200, 500])
    parser.add_argument("--time-limit", type=float,
                        default=option_yaml("partitioner", "ilp").time_limit_s,
                        help="CBC's seconds (default: partitioner=ilp's)")
    parser.add_argument("--tightness", type=float, default=0.4)
    parser.add_argument("--disjunctive", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="15 and 30 nodes, 2 s limit")
    args = parse_args(parser)
    if args.smoke:
        args.sizes, args.time_limit = [15, 30], 2.0
    register()
    ilp = made_option("partitioner", "ilp", time_limit_s=args.time_limit,
                      disjunctive=args.disjunctive)
    print(f"method {ilp.method}, time limit {args.time_limit} s, tightness {args.tightness}\n")
    rows = []
    for n in args.sizes:
        costs = random_costs(np.random.default_rng(args.seed + n), n, tightness=args.tightness)
        began = time.perf_counter()
        plan = ilp.partition(costs)
        seconds = time.perf_counter() - began
        heft = HeftPartitioner().partition(costs)
        rows.append((n, len(costs.graph.edges), f"{seconds:.2f}", plan.status,
                     f"{plan.objective / US:.1f}", f"{plan.makespan / US:.1f}",
                     f"{objective(costs, heft.assignment) / US:.1f}", f"{heft.makespan / US:.1f}",
                     f"{1 - plan.objective / heft.makespan:.1%}"))
        print(f"{n} nodes: {seconds:.2f} s, {plan.status}", flush=True)
    table(["nodes", "edges", "seconds", "status", "ILP T µs", "ILP makespan µs", "HEFT T µs",
           "HEFT makespan µs", "gap"], rows)

if __name__ == "__main__":
    main()
    write_results()
