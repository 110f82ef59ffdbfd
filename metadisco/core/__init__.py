"""The vocabulary every metadisco layer reads: the lowest layer, importing none of the others.

What a run is and the values it may hold:

    run_config.py    the run config's schema (RunConfig and its sections), read and migrated here
    run_checks.py    the checks of a run config's values that need no compute (check_run_config)
    ppo_config.py    PPO's settings and presets (a run's `inner` section)
    catalog.py       every environment's name and preset family
    plugs.py         the plug points (drift, value loss, shaping) and their config section
    strategies.py    the evolution strategies a run may name, and what each needs
    scores.py        the score registry over a TrainResult's arrays (meta-training's fitness and
                     evaluation's scores), the normaliser's guard and the rank of a diverged run
    streams.py       named random streams: which key feeds what (jax imported only when a key is made)
    records.py       what a generation's metrics row is (GenerationRecord, its Comparison on fresh
                     seeds): the one place metrics.jsonl's keys are written and read

What every layer uses:

    errors.py        MetadiscoError (the one error a user can fix), ConfigError, RunInterrupted and
                     the command line's exit codes
    fileio.py        atomic, umask-respecting writes; strict JSON; figures saved in several formats
    plugins.py       a user's code by `module:attr` or an installed entry point (objectives, envs)
    jaxlib_guard.py  refuses a jaxlib < 0.11 (it deadlocks), reachable only around pyproject's bounds
                     (the source tree on PYTHONPATH, --no-deps); imported by metadisco.meta_objectives.base

Every module but jaxlib_guard is jax-free, so the command line can check a config and read a run
directory before jax starts.
"""
