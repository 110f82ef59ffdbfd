"""The scoring program: the one compiled program that trains everything a run trains.

A generation's population, the PPO baseline, the comparisons on fresh seeds, meta-validation and
the end's re-scoring of the finalists all train through `ScoringProgram.score`, at one shape:

    rows [R] (R = the population size, split over the devices), each with its own evolved
    meta-parameters and learning-rate factor, x S seeds per row (seeds_per_member),
    on one branch picked by a traced index (a `switch` over the run's problems);
    the plugs that do not evolve fixed at the run's start, constants of the program.

A generation fills the rows with its members and gives every row the same S seeds (common random
numbers); a check packs its candidates x fresh seeds into the rows (`pack`), as many calls as
they need. So a run compiles one training program however often it checks, and scores leave it
raw (RunScores): normalisation and intervals are the host's (metadisco.checks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from metadisco.core import scores


@struct.dataclass
class ScoreFields:
    """The scores of training runs (the registry metadisco.core.scores), one field each: RunScores
    holds them per run, Baseline PPO's per problem."""

    init_eval: jax.Array  # the initial policy's evaluation, sampled actions
    init_eval_greedy: jax.Array  # the same, greedy
    final_eval: jax.Array  # the final policy's evaluation, sampled
    greedy_eval: jax.Array  # the final policy's evaluation, greedy
    auc: jax.Array  # mean return over training (the learning curve)
    final: jax.Array  # mean of the last 10% of the learning curve


@struct.dataclass
class RunScores(ScoreFields):
    """Every score of training runs, each [...] (any leading axes): what the scoring program returns
    for each (row, seed), and whether the run diverged."""

    diverged: jax.Array  # bool: a loss or parameter went NaN/inf

    @classmethod
    def of(cls, result) -> RunScores:
        """The scores of a TrainResult (any leading axes)."""
        values = {kind: scores.value(result, kind) for kind in scores.SCORES}
        return cls(init_eval=result.init_eval_return, init_eval_greedy=result.init_eval_return_greedy,
                   diverged=result.diverged, **values)

    def value(self, kind: str):
        """The raw values of fitness `kind` (a `_norm` kind: its raw twin), NaN where the run diverged
        or the value is not finite: a failure, never a score."""
        raw = getattr(self, scores.score_of(kind).name)
        xp = jnp if isinstance(raw, jax.Array) else np  # on device in a generation, on the host in a check
        return xp.where(self.diverged | ~xp.isfinite(raw), xp.nan, raw)


@struct.dataclass
class Baseline(ScoreFields):
    """PPO (default objectives) on each problem (env, or env and horizon; then the validation
    problems), the normaliser of *_norm fitness.

    Each field is [num_problems], a mean over the baseline seeds ([num_problems, seeds] before `mean`).
    """

    @classmethod
    def of(cls, run: RunScores) -> Baseline:
        """The scores of RunScores (any leading axes), its divergence aside."""
        return cls(**{f.name: getattr(run, f.name) for f in dataclasses.fields(ScoreFields)})

    @classmethod
    def template(cls, n: int) -> Baseline:
        """A Baseline of `n` problems that normalises nothing: 0 for the initial policy, 1 for PPO."""
        return cls(*(np.zeros(n, np.float32) if f.startswith("init") else np.ones(n, np.float32)
                     for f in cls.__dataclass_fields__))

    def normaliser(self, kind: str):
        """(PPO's score, the initial policy's) for fitness `kind`: the 1 and the 0 of its `_norm` twin."""
        init = self.init_eval_greedy if scores.score_of(kind).greedy else self.init_eval
        return getattr(self, scores.score_of(kind).name), init

    def mean(self) -> Baseline:
        return jax.tree.map(lambda x: x.mean(-1), self)

    def as_dict(self, envs) -> dict:
        """{name: {field: value}} (baseline.json), one name per problem."""
        return {env: {k: float(v[i]) for k, v in vars(self).items()} for i, env in enumerate(envs)}


@dataclasses.dataclass(frozen=True)
class Branch:
    """One branch of the program's switch: a problem trained with the run's objectives (each row at
    its own parameters and learning-rate factor), or with PPO's own where the run's family cannot
    reproduce PPO (every row the same PPO)."""

    name: str  # the problem's name, with " (PPO)" for a reference branch
    train: Callable  # train(key, full_meta_params, lr_factor) -> TrainResult


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of the program in a check: which candidate each row trains and which of the check's
    seeds each of its S slots takes; `keep` marks the slots that are not padding."""

    candidate: np.ndarray  # [R] int, into the check's candidates
    seed: np.ndarray  # [R, S] int, into the check's seeds
    keep: np.ndarray  # [R, S] bool


def pack(candidates: int, seeds: int, rows: int, per_row: int) -> list[Call]:
    """`candidates` x `seeds` trainings laid out on calls of `rows` rows x `per_row` seeds: each
    candidate on ceil(seeds / per_row) whole rows, seed j of a candidate at its row j // per_row,
    slot j % per_row; the last call padded by repeating its last row (its results dropped)."""
    per_candidate = math.ceil(seeds / per_row)
    layout = [(c, q) for c in range(candidates) for q in range(per_candidate)]
    calls = []
    for start in range(0, len(layout), rows):
        chunk = layout[start: start + rows]
        pad = rows - len(chunk)
        chunk = chunk + [chunk[-1]] * pad
        seed = np.array([[q * per_row + s for s in range(per_row)] for _, q in chunk])
        keep = seed < seeds
        keep[rows - pad:] = False
        calls.append(Call(np.array([c for c, _ in chunk]), np.minimum(seed, seeds - 1), keep))
    return calls


class ScoringProgram:
    """The run's one training program over `branches`, on `mesh` (its "pop" axis splits the rows).

    full(evolved) -> every plug's parameters, the plugs that do not evolve at the run's start
    (constants: XLA folds what they make trivial, e.g. a learned drift's zero output layer, as the
    generation always had them); rows: R, the population size; per_row: S, seeds_per_member;
    batch: members trained at once on a device (RunConfig.members_per_batch; 0: the whole shard at once).
    """

    def __init__(self, branches: Sequence[Branch], full: Callable, mesh: Mesh, rows: int, per_row: int,
                 batch: int = 0):
        self.branches, self.full, self.mesh = tuple(branches), full, mesh
        self.rows, self.per_row, self.batch = rows, per_row, batch
        replicated = NamedSharding(mesh, P())
        # Pinned shardings: every call takes and gives the same layout, so nothing recompiles.
        self._score = jax.jit(self._score_impl, in_shardings=replicated, out_shardings=replicated)

    def replicate(self, tree):
        """Host values -> arrays replicated over the mesh (global arrays in a multi-host job)."""
        sharding = NamedSharding(self.mesh, P())
        if jax.process_count() == 1:
            return jax.device_put(tree, sharding)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)

    def score(self, branch, params, lr_factor, seeds) -> RunScores:
        """Train every (row, slot): branch [] int (replicated), params leaves [R, ...] (each row's
        evolved meta-parameters), lr_factor [R], seeds [R, S, key data] -> RunScores [R, S] (on device)."""
        return self._score(branch, params, lr_factor, seeds)

    def score_candidates(self, branch: int, candidates: Sequence[Any], seeds) -> RunScores:
        """Each of `candidates` (evolved meta-parameters, host values) trained on every seed of
        `seeds` ([E, key data], host) on `branch`, at the problem's own learning rate, paired by seed
        (candidate c's seed j is everyone's seed j): RunScores [C, E] (numpy)."""
        seeds = np.asarray(seeds)
        stacked = jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]), *candidates)
        out = None
        for call in pack(len(candidates), seeds.shape[0], self.rows, self.per_row):
            params = jax.tree.map(lambda x: x[call.candidate], stacked)
            got = fetch(self.score(*self.replicate((np.int32(branch), params, np.ones(self.rows, np.float32),
                                                     seeds[call.seed]))))
            if out is None:
                out = jax.tree.map(lambda x: np.full((len(candidates), seeds.shape[0]), np.nan, x.dtype)
                                   if x.dtype != bool else np.zeros((len(candidates), seeds.shape[0]), bool), got)
            rows, slots = np.nonzero(call.keep)
            target = (call.candidate[rows], call.seed[rows, slots])
            for dest, src in zip(jax.tree.leaves(out), jax.tree.leaves(got)):
                dest[target] = src[rows, slots]
        return out

    # ---------------------------------------------------------------- the program
    def _score_impl(self, branch, params, lr_factor, seeds):
        rows = jax.shard_map(
            self._local, mesh=self.mesh, in_specs=(P(), P("pop"), P("pop"), P("pop")), out_specs=P("pop"),
            check_vma=False,
        )
        # Replicated on both sides: otherwise the partitioner carries the split into what computes
        # the rows and reads their scores (the ES's sums over members), whose order of summation
        # then depends on the device count
        replicated = NamedSharding(self.mesh, P())
        params = jax.lax.with_sharding_constraint(params, replicated)
        return jax.lax.with_sharding_constraint(rows(branch, params, lr_factor, seeds), replicated)

    def _local(self, branch, params, lr_factor, seeds):
        """A device's shard of the rows, `batch` rows at a time (a lax.map): every batch is the same
        program whatever the shard's size, so that a row's bits do not depend on how many devices
        split the rows (a vmap of one row is compiled otherwise than one of several)."""
        branches = [self._rows_of(b) for b in self.branches]

        def run(p, f, s):
            return jax.lax.switch(branch, branches, p, f, s) if len(branches) > 1 else branches[0](p, f, s)

        local = lr_factor.shape[0]
        if not self.batch:
            return run(params, lr_factor, seeds)

        def batched(x):
            return x.reshape(local // self.batch, self.batch, *x.shape[1:])

        out = jax.lax.map(lambda b: run(*b), jax.tree.map(batched, (params, lr_factor, seeds)))
        return jax.tree.map(lambda x: x.reshape(local, *x.shape[2:]), out)

    def _rows_of(self, branch: Branch):
        def rows(params, lr_factor, seeds):  # [r, ...], [r], [r, S, key data] -> RunScores [r, S]
            def one(p, f, keys):
                full = self.full(p)
                return jax.vmap(lambda k: _typed(RunScores.of(branch.train(jax.random.wrap_key_data(k), full, f))))(keys)
            return jax.vmap(one)(params, lr_factor, seeds)
        return rows


def _typed(run: RunScores) -> RunScores:
    """One dtype whatever an inner loop returns: the branches of the program's switch must agree."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), run).replace(diverged=jnp.asarray(run.diverged, bool))


def _local(tree):
    """Fully replicated global arrays -> this process's copy (works single- and multi-host)."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x.addressable_data(0)
        return x

    return jax.tree.map(one, tree)


def fetch(tree) -> Any:
    """Device (possibly global) arrays -> numpy on this host."""
    return jax.device_get(_local(tree))


def fitness_from(run: RunScores, kind: str, baseline, index):
    """RunScores (any leading axes) -> fitness of the same shape: the score of `kind`
    (core.scores), NaN where a run diverged, normalised for `*_norm` kinds so that the initial
    policy scores 0 and PPO 1 on problem `index` (its row in `baseline`, a `Baseline`, or None
    for a raw kind; `index` may be traced)."""
    raw = run.value(kind)
    if scores.fitness_of(kind).normalised:
        ppo, init = baseline.normaliser(kind)
        raw = scores.normalise(raw, ppo[index], init[index])
    return raw
