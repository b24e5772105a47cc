"""AP-DRL's reward error, reproduced in kind: DQN-CartPole trained in hardware-aware mixed
precision on the modeled Versal plan against the same job in fp32, over several seeds.

Run from the repository root:

    python benchmarks/mixed_reward_error.py            # 3 seeds x 2 jobs of 60k steps
    python benchmarks/mixed_reward_error.py --quick    # 1 seed, 3k steps
    python benchmarks/mixed_reward_error.py --smoke    # 1 seed, 300 steps: seconds

Each pair is two real `hetrl.experiment.run` jobs composed as `python -m hetrl` would compose
them, tracked to a throwaway MLflow store: `precision=fp32` first, then `platform=versal
precision=mixed`, which finds that fp32 run by its numerics key and logs `reward_error_pct`
= |R_mixed - R_fp32| / |R_fp32| x 100 on the final `return_mean_100` (AP-DRL: 1.60 % for
DQN-CartPole; the issue's goal: mean <= 5 %). The paper compares *converged* moving averages
(spec A.2.7). DQN on CartPole does not stay converged: past rl-zoo3's budget (hetrl's default
60k steps) its 100-episode mean swings (seed 0 fp32: 278 at 60k, 120 at 120k), and two seeds
of the same fp32 job differ by 20-30 %, so one seed's error mostly measures that noise. So
the table also gives the error of the seed means and the fp32 seed-to-seed spread (the noise
floor). The numerics are real (each layer computes in
the dtype of the device the ILP gives it: PL fp16 on fp32 masters, AIE bf16); only the
platform's time is modeled, and no time is reported here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import run_job, table, verdict

from hetrl.tracking.reward_error import reward_error_pct

PAPER_ERROR_PCT = 1.60  # [P] AP-DRL, DQN-CartPole
GOAL_PCT = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 3k steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--smoke", action="store_true", help="1 seed, 300 steps")
    args = parser.parse_args()
    seeds = range(1 if args.quick or args.smoke else args.seeds)
    budget = (["steps=300", "algo.learning_starts=100"] if args.smoke else ["steps=3000", "algo.learning_starts=500"] if args.quick
              else [f"steps={args.steps}"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            job = ["algo=dqn", "env=cartpole", f"seed={seed}", "log_every=5000", *budget]
            fp32 = run_job(Path(tmp), *job, "precision=fp32",
                           *["platform.measure_layers=false"] * args.smoke)
            mixed = run_job(Path(tmp), *job, "platform=versal", "precision=mixed")
            rows.append((seed, fp32.get("return_mean_100", float("nan")),
                         mixed.get("return_mean_100", float("nan")),
                         mixed.get("reward_error_pct", float("nan"))))
            print(f"seed {seed}: fp32 {rows[-1][1]:.1f}  mixed {rows[-1][2]:.1f}  "
                  f"reward_error_pct {rows[-1][3]:.2f}", flush=True)
    mean = statistics.fmean(row[3] for row in rows)
    ref, value = (statistics.fmean(row[i] for row in rows) for i in (1, 2))
    table(["seed", "return_mean_100 fp32", "return_mean_100 mixed", "reward_error_pct"],
          [(seed, f"{ref_:.1f}", f"{value_:.1f}", f"{error:.2f}")
           for seed, ref_, value_, error in rows]
          + [("mean", f"{ref:.1f}", f"{value:.1f}", (f"**{mean:.2f}** (paper {PAPER_ERROR_PCT}; "
                                                      f"goal <= {GOAL_PCT}: {verdict(mean <= GOAL_PCT)})"))])
    print(f"\nerror of the seed means: {reward_error_pct(value, ref):.2f} %")
    references = [row[1] for row in rows]
    if len(references) > 1:
        spread = (max(references) - min(references)) / statistics.fmean(references) * 100
        print(f"noise floor: fp32 seeds span {spread:.1f} % of their mean")


if __name__ == "__main__":
    main()
