"""The meta-objective interface (the plug-in contract) and the registry of everything that evolves.

A meta-objective is a small frozen dataclass, which subclassing `MetaObjective` makes it (its
fields are static structure: sizes, feature switches, constants; they are the options an
experiment file sets), with pure functions over a separate parameter pytree (which evolution
perturbs and vmap batches), as optax's `GradientTransformation` and gymnax's `(env, env_params)`
split:

    objective.init(key) -> params        # reproduces the hand-designed baseline exactly
    objective.<plug method>(params, ...) # the function the PPO plug point calls

The three plug points of the inner PPO (see metadisco.inner_loops.ppo), their methods and signatures:

    drift(params, ratio, advantage, progress) -> D          # >= 0, == 0 and flat at ratio == 1
    value_loss(params, value, target, old_value) -> L       # per sample
    shape_reward(params, obs, reward, next_obs, terminated, gamma) -> shaped reward

Everything else asks the objective about itself through the contract, never by its name:
`title` (figures, reports), `depends_on_progress`, `drawn_when_fixed` (drawn even when not evolved),
`valid_for_every_member` (a search space that holds only valid objectives),
`closed_form(params)` (the objective as one expression, where it has one),
`reads_observations` / `for_env(obs_shape)` / `incompatibility(obs_shape, env_name)`,
`default_params()` and `options()`.

Adding an objective = one subclass that sets `plug` and `name` (and `title` where the name does
not read well in a figure) and implements `init` and its plug method, in any module of the user's
own: configs name it `module:attr` (`objectives.drift=my_drifts:ScaledSquare`), or an installed
package registers it under the entry-point group `metadisco.objectives` (metadisco.core.plugins).
`check_contract` checks all of that when the name is resolved, for a plug-in exactly as for a
built-in; `@register` (the built-ins) checks it at import and makes the class constructible by its
short name.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from typing import Any, ClassVar

import jax
import numpy as np

from metadisco.core import (
    jaxlib_guard,  # noqa: F401  (refuses a deadlocking jaxlib)
    streams,
)
from metadisco.core.plugins import (
    OBJECTIVES_GROUP,
    PluginError,
    Source,
    entry_points,
    is_import_path,
    load,
    load_entry_point,
    source,
)
from metadisco.core.plugs import PLUG_METHODS, PLUGS, pin_stored_version

Params = Any  # a pytree of float32 arrays

_REGISTRY: dict[str, dict[str, type]] = {plug: {} for plug in PLUGS}
OPTION_TYPES = (bool, int, float, str, tuple[int, ...], tuple[float, ...], tuple[str, ...])
FROM_ENV = "from_env"  # field metadata key: an option the environment sets (through `for_env`)


class MetaObjective:
    """Base of all objectives: `init` plus one plug method, and the hooks analysis asks.

    Every subclass is a frozen dataclass by itself (as flax makes its modules dataclasses in
    `Module.__init_subclass__`): its annotated class attributes with defaults are its options. A
    subclass that sets `name` and no `title` is titled by its name ("scaled_square" -> "scaled
    square"). An explicit `@dataclass(frozen=True)` above a subclass is harmless (see
    `__init_subclass__`)."""

    plug: ClassVar[str]
    name: ClassVar[str]
    title: ClassVar[str]  # for figures and reports, e.g. "learned (LPO)"; defaults to the name
    learned: ClassVar[bool] = False  # True when params are a network (not a few constants)
    reads_observations: ClassVar[bool] = False  # True when sized for one observation shape

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if isinstance(own.get("name"), str) and "title" not in own:
            cls.title = own["name"].replace("_", " ")
        declared = {k: v for k, v in own.items() if isinstance(v, dataclasses.Field)}
        dataclasses.dataclass(frozen=True)(cls)
        # So that a second pass, an explicit @dataclass(frozen=True) that runs after this hook,
        # builds the same fields and does not fail: it refuses to overwrite __setattr__ and
        # __delattr__ (MetaObjective's own keep instances frozen instead), and it reads each
        # option's default from the class attribute, which must still be the declared Field
        # where one carries more than a default (metadata such as FROM_ENV, a factory).
        del cls.__setattr__, cls.__delattr__
        for k, f in declared.items():
            setattr(cls, k, f)

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def init(self, key: jax.Array) -> Params:
        raise NotImplementedError

    def default_params(self) -> Params:
        """`start_params(0)`, where a run with seed 0 starts at this plug point: what PPO's
        programs, the evaluation targets and the constraint checks use for an objective given
        without parameters."""
        return self.start_params(0)

    def start_params(self, seed: int) -> Params:
        """The parameters a run with `seed` starts from at this plug point: `init` with the plug's
        share (`plug_key`) of the run's START stream (metadisco.core.streams), as
        `Objectives.start_params(seed)` draws every plug's."""
        return self.init(plug_key(streams.key(seed, streams.Stream.START), self.plug))

    def spec(self) -> dict:
        """JSON-able description from which `make_objective` rebuilds this object (a plug-in is
        named by its import path, which is re-imported, never executed from the file)."""
        return {"plug": self.plug, "name": objective_name(type(self)), "config": dataclasses.asdict(self)}

    @classmethod
    def options(cls) -> dict[str, tuple[Any, Any]]:
        """{option: (type, default)}: what an experiment file may set ([objectives.<plug>])."""
        hints = typing.get_type_hints(cls)
        return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(cls)
                if not f.metadata.get(FROM_ENV)}

    @property
    def depends_on_progress(self) -> bool:
        """Whether the plug method reads the training progress n / N (drifts only)."""
        return False

    @property
    def drawn_when_fixed(self) -> bool:
        """Whether analysis draws this objective even when the run did not evolve it: a learned
        network or a discovered closed form (not a hand-designed baseline)."""
        return self.learned

    @property
    def valid_for_every_member(self) -> bool:
        """Whether every parameter value is a valid objective of this plug point (a search space
        that evolution cannot leave: metadisco.meta_objectives.constraints.check_objective passes at any
        parameters; the property test draws them far from the start too)."""
        return False

    def closed_form(self, params: Params) -> str | None:
        """This objective at `params` as one expression string (a drift over r, A, p; a value loss
        over e, t; see metadisco.meta_objectives.expressions), equal to the plug method up to float rounding,
        or None where there is none (a network; a loss that reads the old value). A parametric
        family answers it for every member, so export writes what evolved without fitting."""
        return None

    def found(self, params: Params) -> str | None:
        """What this objective is at `params`, in one line for a report: its closed form where it
        has one (a family's member, a closed form), else None (a network: distillation says)."""
        return self.closed_form(params)

    def params_reproducing(self, other: MetaObjective) -> Params | None:
        """Parameters at which this objective computes what `other` computes at its default
        parameters, bit for bit (so one compiled program trains both), or None where it cannot.
        Itself: `other`'s defaults. A family that contains another objective exactly says so
        here (LPO and drift_mix contain PPO-clip), and `metadisco evaluate` trains that method
        through the family's program instead of compiling its own."""
        return other.default_params() if other == self else None

    def for_env(self, obs_shape: tuple[int, ...]) -> MetaObjective:
        """This objective sized for an environment with observations of `obs_shape`."""
        return self

    def observation_shape(self) -> tuple[int, ...] | None:
        """The observation shape this objective is built for, when its options fix one (None:
        any, through `for_env`); the constraint checks draw their states in it."""
        return None

    def incompatibility(self, obs_shape: tuple[int, ...], env_name: str = "the environment") -> str | None:
        """Why this objective cannot run on an environment with observations of `obs_shape`
        (None when it can). Drifts and value losses see only ratios, advantages and values."""
        return None


def jitted_method(objective: MetaObjective, method: str) -> typing.Callable:
    """`objective.<method>` (params first) as one jitted program per input shape, cached per objective
    (one that does not hash: for this call alone), or op by op where it cannot be traced (a plug-in's
    numpy). What the checks and figures evaluate on grids: op by op, an objective compiles a program
    per operation and shape, seconds on the CPU."""
    try:
        return _jitted_method(objective, method)
    except TypeError:  # an objective that does not hash
        return _traced_or_eager(getattr(objective, method))


@functools.lru_cache(maxsize=32)
def _jitted_method(objective: MetaObjective, method: str) -> typing.Callable:
    return _traced_or_eager(getattr(objective, method))


def _traced_or_eager(fn: typing.Callable) -> typing.Callable:
    jitted = jax.jit(fn)

    def call(*args):
        try:
            return jitted(*args)
        except Exception:  # not traceable: op by op, as before (its own error, if it has one)
            return fn(*args)

    return call


def plug_key(key: jax.Array, plug: str) -> jax.Array:
    """Plug point `plug`'s share of `key`, the key its objective's init gets when every plug point
    is initialised from one key (`Objectives.init`; a run's START stream, metadisco.core.streams)."""
    return jax.random.split(key, len(PLUGS))[PLUGS.index(plug)]


def same_params(a: Params, b: Params) -> bool:
    """Whether two parameter pytrees have the same structure and bit-for-bit equal leaves (host values)."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves_a, leaves_b))


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) if typing.get_origin(tp) is None else str(tp).replace("typing.", "")


def _fits(value, tp) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if tp is str:
        return isinstance(value, str)
    if tp in (tuple[int, ...], tuple[float, ...], tuple[str, ...]):
        item = typing.get_args(tp)[0]
        return isinstance(value, (tuple, list)) and all(_fits(v, item) for v in value)
    return False


def check_contract(cls: type) -> type:
    """TypeError saying what to fix when `cls` breaks the objective contract: its plug point, own
    name (and a title, which the name gives by default), its plug method, `init`, options with
    types and defaults.
    Built-ins are checked at import (`register`), plug-ins when a config names them, so a class
    that breaks it fails with what to fix, not later inside a jitted PPO."""
    where = cls.__name__
    plug = getattr(cls, "plug", None)
    if plug not in PLUGS:
        raise TypeError(f"{where}.plug must be one of {PLUGS}, got {plug!r}")
    name = cls.__dict__.get("name")  # set on this class itself: a subclass must not reuse its parent's
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{where} must set its own `name` (an identifier), got {name!r}")
    if not isinstance(cls.__dict__.get("title"), str) or not cls.__dict__["title"]:
        raise TypeError(f"{where}.title must be a non-empty string (how figures and reports name it)")
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"{where} is decorated as a dataclass that is not frozen: every MetaObjective "
                        "subclass is a frozen dataclass by itself; remove the decorator")
    method = PLUG_METHODS[plug]
    if not callable(getattr(cls, method, None)):
        found = [m for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))]
        close = difflib.get_close_matches(method, found, n=1)
        hint = f" (found {close[0]!r})" if close else ""
        raise TypeError(f"{where} is a {plug} objective but has no method {method!r}{hint}; "
                        f"the {plug} plug point calls {method}(params, ...)")
    if cls.init is MetaObjective.init:
        raise TypeError(f"{where} must implement init(key) -> params")
    fields = {f.name for f in dataclasses.fields(cls)}
    reserved = fields & {"plug", "name", "title", "learned", "reads_observations"}
    if reserved:
        raise TypeError(f"{where}: {sorted(reserved)} must be class attributes without annotation, not fields")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if hints[f.name] not in OPTION_TYPES:
            raise TypeError(f"{where}.{f.name}: an option must be one of "
                            f"{', '.join(_type_name(t) for t in OPTION_TYPES)}, got {hints[f.name]}")
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{where}.{f.name} needs a default (an objective is built from its name alone)")
    return cls


def register(cls: type) -> type:
    """Class decorator: `check_contract`, then make `cls` constructible by its short name via
    `make_objective`."""
    check_contract(cls)
    plug, name = cls.plug, cls.name
    registry = _REGISTRY[plug]
    if name in registry and registry[name].__qualname__ != cls.__qualname__:
        raise TypeError(f"{plug} objective {name!r} is already registered by {registry[name].__name__}")
    registry[name] = cls
    return cls


BUILTIN_MODULES = tuple(f"metadisco.meta_objectives.{m}" for m in ("drift", "value_loss", "shaping", "closed_form", "families"))


def _load_builtins() -> None:
    """Import the modules that register the built-in objectives (the package imports lazily)."""
    import importlib

    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def listing() -> list[tuple[str, str, Source]]:
    """Every objective a config can name short, [(plug, name, Source)]: the built-ins, then the
    entry points installed packages register (one that fails to import is listed with its error)."""
    _load_builtins()
    rows = [(plug, name, Source("built-in", "metadisco", cls.__module__))
            for plug in PLUGS for name, cls in sorted(_REGISTRY[plug].items())]
    for name in sorted(entry_points(OBJECTIVES_GROUP)):
        src = source(OBJECTIVES_GROUP, name)
        try:
            plug = load_entry_point(OBJECTIVES_GROUP, name, "objective").plug
        except (PluginError, AttributeError) as e:
            plug, src = "?", src._replace(target=f"{src.target} (cannot be used: {e})")
        rows.append((plug, name, src))
    return rows


def names(plug: str, learned: bool | None = None) -> list[str]:
    """Registered objective names for a plug point (only the learned ones, or only the others)."""
    _load_builtins()
    registry = _REGISTRY[_check_plug(plug)]
    return sorted(n for n, cls in registry.items() if learned is None or cls.learned == learned)


def _check_plug(plug: str) -> str:
    if plug not in PLUGS:
        raise ValueError(f"unknown plug point {plug!r}; choose one of {', '.join(PLUGS)}")
    return plug


def objective_class(plug: str, name: str) -> type:
    """The class of objective `name` at plug point `plug`: a built-in name, an import path
    `module:attr` or an installed entry point (group metadisco.objectives). ValueError with close
    matches for an unknown name; PluginError for a plug-in that cannot be imported or breaks the
    contract (`check_contract`)."""
    _load_builtins()
    registry = _REGISTRY[_check_plug(plug)]
    if name in registry:
        return registry[name]
    what = f"{plug} objective"
    if is_import_path(name):
        return plugin_class(plug, name, load(name, what))
    installed = entry_points(OBJECTIVES_GROUP)
    if name in installed:
        return plugin_class(plug, name, load_entry_point(OBJECTIVES_GROUP, name, what))
    close = difflib.get_close_matches(name, [*registry, *installed], n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown {plug} objective {name!r}.{hint} Available: {', '.join(sorted([*registry, *installed]))}; "
                     "or your own class as module:attr (e.g. my_drifts:ScaledSquare).")


def plugin_class(plug: str, name: str, obj) -> type:
    """`obj` (what plug-in `name` resolved to) checked as an objective class for `plug`."""
    if not (isinstance(obj, type) and issubclass(obj, MetaObjective)):
        raise PluginError(f"{plug} objective {name!r} is a {type(obj).__name__}, not an objective: give a class "
                          "that subclasses meta_objectives.MetaObjective")
    if getattr(obj, "plug", None) != plug:
        raise PluginError(f"{name!r} is a {getattr(obj, 'plug', None)} objective, not a {plug} objective: "
                          f"it cannot fill the {plug} plug point")
    try:
        return check_contract(obj)
    except TypeError as e:
        raise PluginError(f"{plug} objective {name!r} breaks the objective contract: {e}") from None


def objective_name(cls: type) -> str:
    """The name that finds `cls` again in a fresh process: a built-in's short name, otherwise its
    import path module:attr (what run directories and objectives files record for a plug-in)."""
    if cls.__module__ in BUILTIN_MODULES and _REGISTRY[cls.plug].get(cls.name) is cls:
        return cls.name
    return f"{cls.__module__}:{cls.__qualname__}"


def check_options(plug: str, name: str, options: dict, settable: bool = False) -> None:
    """ValueError saying what is wrong with `options` for objective (plug, name): an unknown
    option (with close matches and the list), or a value of the wrong type (what is expected).
    settable: refuse the options the environment sets (`for_env`) too, as a config file must."""
    cls = objective_class(plug, name)
    hints = typing.get_type_hints(cls)
    declared = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    if settable:
        declared = {k: tp for k, (tp, _) in cls.options().items()}
    for key, value in options.items():
        if key not in declared:
            settable_names = sorted(cls.options())
            close = difflib.get_close_matches(key, settable_names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            why = " (the environment sets it)" if key in hints else ""
            raise ValueError(f"{plug} objective {name!r} has no option {key!r}{why}.{hint} "
                             f"Its options: {', '.join(settable_names) or '(none)'}")
        if not _fits(value, declared[key]):
            raise ValueError(f"{plug} objective {name!r}: option {key} must be {_type_name(declared[key])}, "
                             f"got {value!r} ({type(value).__name__})")


def make_objective(plug: str, name: str, **options) -> MetaObjective:
    """Build a registered objective by plug point, name and options, e.g. ('drift', 'lpo', hidden=64)."""
    check_options(plug, name, options)
    cls = objective_class(plug, name)
    hints = typing.get_type_hints(cls)
    # JSON has no tuples and writes 2.0 as 2: store each option as its declared type
    typed = {k: (float(v) if hints[k] is float else tuple(v) if isinstance(v, list) else v) for k, v in options.items()}
    return cls(**typed)


def from_spec(spec: dict) -> MetaObjective:
    """Inverse of `MetaObjective.spec()`; a versioned family that the spec does not pin was
    written by its first version (plugs.VERSIONED)."""
    config = pin_stored_version(spec["plug"], {"name": spec["name"], **spec.get("config", {})})
    return make_objective(spec["plug"], spec["name"], **{k: v for k, v in config.items() if k != "name"})
