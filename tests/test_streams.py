"""metadisco.core.streams: one table says which key feeds what, and no two consumers share a key,
within a run or across neighbouring seeds."""

import ast
import itertools
from pathlib import Path

import jax
import numpy as np
import pytest

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
