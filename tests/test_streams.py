"""metadisco.core.streams: one table says which key feeds what, and no two consumers share a key,
within a run or across neighbouring seeds."""

import ast
import itertools
from pathlib import Path

import jax
import numpy as np
import pytest

from metadisco.checks import seeds_of
from metadisco.core import streams
from metadisco.core.plugs import PLUGS
from metadisco.core.streams import Stream
from metadisco.meta_objectives.base import plug_key

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent


def data(key) -> tuple:
    return tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())


def test_every_key_of_neighbouring_runs_is_distinct():
    """Seeds 0..3, 8 generations each: generation keys, comparison keys, baseline, distillation and
    evaluation keys, and the roots, are pairwise distinct; in particular a run's comparison seeds are
    not the next seed's generation keys (key(seed + 1) once fed the comparisons)."""
    keys = {}
    for seed in range(4):
        keys[("root", seed)] = data(streams.root(seed))
        for g in range(8):
            keys[("generation", seed, g)] = data(streams.generation(seed, g))
            keys[("comparison", seed, g)] = data(streams.key(seed, Stream.COMPARISON, g))
        keys[("baseline", seed)] = data(streams.key(seed, Stream.BASELINE))
        keys[("distillation", seed)] = data(streams.key(seed, Stream.DISTILLATION))
        for use in (0, 1):
            keys[("evaluation", seed, use)] = data(streams.key(seed, Stream.EVALUATION, use))
        keys[("es_init", seed)] = data(streams.key(seed, Stream.ES_INIT))
        keys[("population", seed)] = data(streams.key(seed, Stream.POPULATION))
        for plug in PLUGS:  # where the run starts: each plug's share of its stream
            keys[("start", seed, plug)] = data(plug_key(streams.key(seed, Stream.START), plug))
    clashes = [(a, b) for (a, ka), (b, kb) in itertools.combinations(keys.items(), 2) if ka == kb]
    assert not clashes, clashes


def test_a_generation_index_never_reaches_a_stream_tag():
    assert min(Stream) >= streams.GENERATIONS
    with pytest.raises(ValueError, match="outside"):
        streams.generation(0, streams.GENERATIONS)
    assert data(streams.generation(3, 5)) == data(jax.random.fold_in(jax.random.key(3), 5))


def seed_arithmetic_in_keys(source: str) -> list[str]:
    """The calls jax.random.key(...)/PRNGKey(...) whose argument adds to or subtracts from a value:
    a key made from a neighbouring seed, which is another run's stream."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("key", "PRNGKey")
                and node.args and isinstance(node.args[0], ast.BinOp)):
            found.append(ast.unparse(node))
    return found


def test_no_library_code_makes_a_key_from_a_shifted_seed():
    assert seed_arithmetic_in_keys("import jax\nk = jax.random.key(cfg.seed + 1)\n")
    assert not seed_arithmetic_in_keys("import jax\nk = jax.random.key(cfg.seed)\n")
    library = [p for folder in ("metadisco", "analysis", "inner_loops", "meta_objectives") for p in (ROOT / folder).rglob("*.py")]
    bad = {str(p.relative_to(ROOT)): found for p in library if (found := seed_arithmetic_in_keys(p.read_text()))}
    assert not bad, bad


def test_no_library_code_draws_from_the_root_itself():
    """Every key is a stream folded from the root; the root itself feeds nothing (it once fed the
    plugs' inits, the first population and the strategy's init: a plug's share of it, split(root,
    3)[i], is fold_in(root, i), generation i's key)."""
    library = [p for folder in ("metadisco", "analysis", "inner_loops", "meta_objectives") for p in (ROOT / folder).rglob("*.py")]
    users = sorted(str(p.relative_to(ROOT)) for p in library if "streams.root(" in p.read_text())
    assert not users, users
    assert data(plug_key(streams.root(0), "drift")) == data(streams.generation(0, 0))  # why



def children(key, n: int = 3) -> list:
    """What a consumer splits a seed into (PPO: runner, network and environment keys; ask: 3)."""
    return list(jax.random.split(key, n))


def run_keys(seed: int, generations: int, seeds: int = 3, normaliser: tuple = (streams.NORMALISER,)) -> dict:
    """Every key a validated run of `generations` generations consumes, as the engine draws them (a check
    after each generation, selection at the end), each seed with the children a training splits from it.
    `normaliser`: the indices of Stream.VALIDATION the validation normaliser's seeds come from."""
    out = {}

    def add(name, key):
        out[name] = data(key)
        for j, child in enumerate(children(key)):
            out[(*name, "child", j)] = data(child)

    def add_seeds(name, key):
        for i, s in enumerate(seeds_of(key, seeds)):
            add((*name, "seed", i), jax.random.wrap_key_data(s))

    for g in range(generations):  # ask: the population, the members' common seeds, the draw; tell
        gen = streams.generation(seed, g)
        add(("generation", g), gen)
        k_ask, k_seeds, k_tell = children(gen)
        for i, s in enumerate(jax.random.split(k_seeds, seeds)):
            add(("generation", g, "seed", i), s)
        add(("draw", g), jax.random.fold_in(gen, streams.DRAW))
    add_seeds(("baseline",), streams.key(seed, Stream.BASELINE))  # PPO's normaliser on the training problems
    add_seeds(("validation normaliser",), streams.key(seed, Stream.VALIDATION, *normaliser))
    for g in range(1, generations + 1):
        for stream in (Stream.COMPARISON, Stream.VALIDATION):
            add_seeds((stream.name, g), streams.key(seed, stream, g))
    for use in (0, 1, 2):  # the end's training comparison, validation re-scoring and the winner's report
        add_seeds(("SELECTION", generations, use), streams.key(seed, Stream.SELECTION, generations, use))
    for use in (0, 1):
        add_seeds(("EVALUATION", use), streams.key(seed, Stream.EVALUATION, use))
    return out


def test_no_two_consumers_of_a_validated_run_share_a_key():
    """Generations, the baseline, the validation normaliser, comparisons, validation checks, selection and
    evaluation, and the children each training splits from its seeds: pairwise distinct over 6 generations."""
    keys = run_keys(0, 6)
    clashes = [(a, b) for (a, ka), (b, kb) in itertools.combinations(keys.items(), 2) if ka == kb]
    assert not clashes, clashes[:5]
    # the normaliser's seeds split from VALIDATION itself (as before NORMALISER): split(key, n)[g] is
    # fold_in(key, g), so its seed g was the key of the validation check after g generations, and that
    # seed's runner, network and environment keys were the check's seeds 0-2
    old = run_keys(0, 6, normaliser=())
    assert [old[("validation normaliser", "seed", 2, "child", j)] for j in range(3)] == [
        old[("VALIDATION", 2, "seed", j)] for j in range(3)]


def test_the_validation_normaliser_never_trains_on_a_validation_checks_key():
    """The review's check: normaliser seed g against validation key g, g below 64, seeds 0-3
    (tests/test_validation.py checks that the baseline trains on these seeds)."""
    for seed in range(4):
        normaliser = {tuple(s.ravel().tolist()) for s in
                      seeds_of(streams.key(seed, Stream.VALIDATION, streams.NORMALISER), 64)}
        checks = {data(streams.key(seed, Stream.VALIDATION, g)) for g in range(64)}
        assert not normaliser & checks, seed
