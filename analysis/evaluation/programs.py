"""The compiled training programs of one evaluation, cached by what fixes their shapes.

One program per environment x PPO config x objectives structure x number of seeds x grid size x
device layout: jit(train vmapped over seeds [and over a grid of hyperparameter settings]), the
seeds split over the local accelerators (one device on the CPU: `mesh`). Hyperparameters are
traced arguments, so PPO at any learning rate reuses one compile. The networks' initial parameters
come from one small program per environment and PPO config
(`metadisco.inner_loops.ppo.initial_network`), shared by every method and grid,
so that the training programs compile without the initialisers. A `Programs` belongs to the evaluation that made it (pass one to
`evaluate` to share compiles between evaluations in one process).
"""

from __future__ import annotations

import gc

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from metadisco.inner_loops import Env, PPOConfig, make_env
from metadisco.inner_loops.ppo import PPO, initial_network, make_train
from metadisco.meta_objectives import Objectives

__all__ = ["Programs", "mesh", "hparams"]


def mesh(num_seeds: int, devices=None) -> Mesh:
    """The devices the seeds are split over: of `devices` (default: on an accelerator the local
    devices, on the CPU one device), as many as divide the number of seeds.

    XLA:CPU runs host devices as concurrent executions on the same cores. While they contend, a
    loop iteration that finishes asynchronously keeps memory until its program ends, so a long
    training program on several host devices grows by gigabytes (docs/evaluate.md, "Memory"). One
    device keeps the cores busy through XLA's thread pool over the batch."""
    if devices is None:
        devices = jax.local_devices()
        devices = devices[:1] if devices[0].platform == "cpu" else devices
    n = max(d for d in range(1, min(len(devices), num_seeds) + 1) if num_seeds % d == 0)
    return Mesh(np.array(devices[:n]), ("seed",))


def hparams(config: PPOConfig, **changes):
    """The preset's traced numbers as float32 arrays (a fixed signature: no retracing)."""
    hp = config.hparams.replace(**changes) if changes else config.hparams
    return jax.tree.map(lambda x: np.asarray(x, np.float32), hp)


class Program:
    """program(keys [S], params, hparams) -> TrainResult: the networks' initial parameters from the
    shared init program, then the training program that takes them."""

    def __init__(self, train, init):
        self.train, self.init = train, init

    def __call__(self, keys, params, hp):
        return self.train(keys, params, hp, self.init(keys))

    def eval_shape(self, keys, params, hp):
        return self.train.eval_shape(keys, params, hp, self.init.eval_shape(keys))

    def clear_cache(self) -> None:
        self.train.clear_cache()


class Programs:
    """Environments and compiled programs, built on first use and kept for this object's life.
    devices: the devices to split seeds over (default: `mesh`'s choice)."""

    def __init__(self, devices=None):
        self.devices = devices
        self._envs: dict[str, Env] = {}
        self._programs: dict = {}
        self._inits: dict = {}

    def __len__(self) -> int:
        """The number of compiled programs this cache holds now."""
        return len(self._programs)

    def environments(self) -> set[str]:
        """The environments whose compiled programs this cache holds now."""
        return {key[0] for key in self._programs}

    def release(self, keep: str | None = None) -> int:
        """Drop the compiled programs of every environment but `keep` (all with None) and free
        their executables; returns how many were dropped. On the CPU each PPO program holds about
        a thousand memory mappings of JIT code, and a process may have 65,530
        (vm.max_map_count): an evaluation that kept every program of many environments x methods
        crashed ("LLVM compilation error: Cannot allocate memory"), so `evaluate` releases an
        environment's programs before it starts the next."""
        dropped = [key for key in self._programs if key[0] != keep]
        for key in dropped:
            self._programs.pop(key).clear_cache()
        for key in [key for key in self._inits if key[0] != keep]:
            self._inits.pop(key).clear_cache()
        if dropped:
            gc.collect()  # executables in reference cycles go now, not at some later collection
        return len(dropped)

    def env(self, name: str) -> Env:
        if name not in self._envs:
            self._envs[name] = make_env(name)
        return self._envs[name]

    def get(self, env: Env, config: PPOConfig, objectives: Objectives, num_seeds: int, grid: int = 0):
        """program(keys [S], params, hparams) -> TrainResult with leaves [S, ...]; with grid > 0
        program(keys [S], params, hparams with leaves [G]) -> leaves [G, S, ...]."""
        layout = mesh(num_seeds, self.devices)
        key = (env.name, config, objectives, num_seeds, grid, tuple(d.id for d in layout.devices.flat))
        try:
            if key in self._programs:
                return self._programs[key]
        except TypeError:  # unhashable objectives: no caching
            key = None
        train = make_train(env, config, objectives)

        def from_networks(k, meta_params, hp, networks):
            return train(k, meta_params, hp, network_params=networks)

        over_seeds = jax.vmap(from_networks, in_axes=(0, None, None, 0))
        fn = jax.vmap(over_seeds, in_axes=(None, None, 0, None)) if grid else over_seeds
        out_spec = P(None, "seed") if grid else P("seed")
        program = Program(jax.jit(jax.shard_map(fn, mesh=layout, in_specs=(P("seed"), P(), P(), P("seed")),
                                                out_specs=out_spec, check_vma=False)),
                          self._init(env, config, layout))
        if key is not None:
            self._programs[key] = program
        return program

    def _init(self, env: Env, config: PPOConfig, layout: Mesh):
        """jit(initial_network vmapped over seeds), one per environment, PPO config and layout."""
        key = (env.name, config, tuple(d.id for d in layout.devices.flat))
        if key not in self._inits:
            ppo = PPO.create(env, config)
            self._inits[key] = jax.jit(jax.shard_map(jax.vmap(lambda k: initial_network(ppo, k)), mesh=layout,
                                                     in_specs=P("seed"), out_specs=P("seed"), check_vma=False))
        return self._inits[key]
