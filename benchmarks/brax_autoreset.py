"""The brax auto-reset: steps per second of three ways to step a batch of brax environments.

    python benchmarks/brax_autoreset.py [--env hopper] [--backend positional] [--num-envs 64]
                                        [--steps 200] [--reps 3]

- `reset_per_step`: what inner_loops.envs did before issue 16: a full `env.reset` on every
  step, selected with `where` on done (the physics pipeline's init runs every step);
- `first_state`: inner_loops.envs.BraxCore now: the first reset state kept in the env state and
  selected on done (brax's AutoResetWrapper semantics), behind metadisco's Env (episode counters);
- `brax_wrapper`: brax's own path, `brax.envs.training.wrap` (EpisodeWrapper + VmapWrapper +
  AutoResetWrapper), as PureJaxRL's BraxGymnaxWrapper uses it.

Random actions in [-1, 1], one jitted scan of `--steps` steps over `--num-envs` environments per
call; compile excluded; the calls alternate and the median of `--reps` is reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import _common

_common.ensure_repo_on_path()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="hopper")
    parser.add_argument("--backend", default="positional")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    from brax.envs import training

    from inner_loops.envs import BraxCore, BraxState, make_env

    env = make_env(f"brax/{args.env}:{args.backend}")
    n, steps = args.num_envs, args.steps

    @dataclass(frozen=True, eq=False)
    class ResetPerStep(BraxCore):
        """BraxCore as it was: a fresh reset computed at every step."""

        def step(self, key, state, action, params: Any = None):
            nxt = self.env.step(state.inner, action)
            time_ = state.time + 1
            terminated = nxt.done > 0.5
            truncated = time_ >= self.episode_length
            done = jnp.logical_or(terminated, truncated)
            obs_reset, state_reset = self.reset(key, params)
            new_state = jax.tree.map(lambda r, s: jnp.where(done, r, s), state_reset, BraxState(nxt, time_, state.first))
            return jnp.where(done, obs_reset, nxt.obs), new_state, nxt.reward, terminated, truncated, {
                "final_observation": nxt.obs}

    def ours(e):
        def run(key):
            k_reset, k_run = jax.random.split(key)
            _, state = jax.vmap(e.reset)(jax.random.split(k_reset, n))

            def body(state, key):
                k_act, k_env = jax.random.split(key)
                action = jax.random.uniform(k_act, (n, e.num_actions), minval=-1.0, maxval=1.0)
                step = jax.vmap(e.step)(jax.random.split(k_env, n), state, action)
                return step.state, step.reward.sum()

            return jax.lax.scan(body, state, jax.random.split(k_run, steps))[1].sum()

        return run

    wrapped = training.wrap(env.core.env, episode_length=env.core.episode_length)

    def brax_wrapper(key):
        k_reset, k_run = jax.random.split(key)
        state = wrapped.reset(jax.random.key_data(jax.random.split(k_reset, n)))  # brax wants raw keys

        def body(state, key):
            action = jax.random.uniform(key, (n, env.num_actions), minval=-1.0, maxval=1.0)
            state = wrapped.step(state, action)
            return state, state.reward.sum()

        return jax.lax.scan(body, state, jax.random.split(k_run, steps))[1].sum()

    old = dataclasses.replace(env, core=ResetPerStep(env.core.env, env.core.episode_length))
    key = jax.random.key(0)
    programs = {}
    for label, fn in (("reset_per_step", ours(old)), ("first_state", ours(env)), ("brax_wrapper", brax_wrapper)):
        t = time.perf_counter()
        programs[label] = jax.jit(fn).lower(key).compile()
        _common.emit({"program": label, "compile_s": time.perf_counter() - t})
    times = {label: [] for label in programs}
    for rep in range(args.reps):
        for label, program in programs.items():
            t = time.perf_counter()
            jax.block_until_ready(program(jax.random.key(rep)))
            times[label].append(time.perf_counter() - t)
    rows = []
    for label, ts in times.items():
        row = {"program": label, "env": f"brax/{args.env}:{args.backend}", "num_envs": n, "steps": steps,
               "median_s": _common.median(ts), "steps_per_s": n * steps / _common.median(ts),
               "min_steps_per_s": n * steps / max(ts), "max_steps_per_s": n * steps / min(ts)}
        rows.append(row)
        _common.emit(row)
    if args.out:
        _common.write_json(args.out, {"machine": _common.machine_info(), "rows": rows})


if __name__ == "__main__":
    main()
