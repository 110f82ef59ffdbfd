"""What the tests share: the one tiny meta-training config and its stand-in inner loops, and running
the `metadisco` command as a user does (in this process, or in a real one where the process is tested).

A test that builds the same program as another shares it through the suite's compile cache, so a
new end-to-end test is cheapest at these settings (docs/developing.md)."""

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from metadisco.config import ESConfig, InnerConfig, ObjectivesConfig, RunConfig, validate
from metadisco.core.ppo_config import PPOConfig
from metadisco.inner_loops.ppo import TrainResult
from metadisco.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent  # the repository

# The tiny PPO run of the objective tests (tests/test_objectives.py, tests/test_search_spaces.py).
# lr 2.5e-3: at the preset 2.5e-4 the policy moves so little in 32 updates that sampled actions
# (same keys) rarely change, and different critics give identical returns. No evaluation episodes:
# these tests read the learning curve only (the evaluation loop is ~1-2 s of compile per program).
TINY_PPO = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4096, hidden=(32,), num_minibatches=2,
                     eval_episodes=0).replace(lr=2.5e-3)

TARGET = 0.05  # the known answer of quadratic_train's meta-problem

# The engine's defaults, RunConfig(), as a named experiment: overrides without an experiment apply
# to the demo (`metadisco train eval_every=0` is the demo), so a test that means LPO on CartPole names it.
LPO = ["lpo_cartpole_cpu", "fitness=final_eval"]
# CPU-sized, seconds per run: with LPO and objectives.drift.hidden=8, tiny_config()'s programs (so a
# command-line test shares them through the compile cache)
TINY = ["inner.total_timesteps=2048", "inner.num_envs=4", "inner.num_steps=64", "inner.hidden=16,16",
        "es.population_size=4", "eval_every=0", "member_batch=2", "eval_seeds=2", "baseline_seeds=2"]


# The named rediscovery problems at test size (tests/test_search_health.py), and the quickstart notebook's
# SMOKE size of one of them (tests/test_notebook.py checks it), so that the two share their programs. On
# CartPole, fitness from the training curve and no evaluation episodes: programs without the evaluation loop,
# compiled faster; not on MountainCar, where no training episode ends in 1024 steps.
REDISCOVERY_SIZE = ["generations=2", "eval_every=2", "eval_seeds=2", "es.population_size=4", "inner.total_timesteps=1024",
                    "inner.num_steps=64", "devices=1"]
REDISCOVERY_CHEAPER = ["fitness=final", "inner.eval_episodes=0"]


# The finished runs the suite shares (FinishedRuns): `metadisco train` arguments of each kind, at TINY's
# settings (so they share its programs) unless the kind's point is other settings.
FINISHED_RUNS = {
    # LPO's drift on CartPole, 2 generations, the second compared with PPO on fresh seeds: tiny_config(generations=2)
    "lpo": [*LPO, *TINY, "objectives.drift.hidden=8", "generations=2", "eval_every=2", "checkpoint_every=1"],
    # a drift and a value loss evolved together (both distilled, exported into one file)
    "drift_value": [*LPO, *TINY, "objectives.drift.hidden=8", "objectives.value_loss=learned",
                    "objectives.evolve=drift,value_loss", "generations=1"],
    # the demo (no experiment named: MountainCar's learned potential), with its declared held-out set
    "shaping": ["objectives.shaping.hidden=8", *TINY, "generations=1"],
    # a recurrent policy on a memory task, one evolved plug: every workflow must take it
    "gru": ["lpo_cartpole_cpu", "envs=MemoryChain-bsuite", "inner.network=gru", "inner.rnn_size=16",
            "inner.total_timesteps=1024", "inner.num_envs=8", "inner.num_steps=32", "inner.num_minibatches=2",
            "inner.eval_episodes=8", "generations=2", "eval_every=0", "baseline_seeds=2", "seeds_per_member=1",
            "objectives.drift=drift_mix", "objectives.evolve=drift", "es.population_size=4", "es.sigma_init=0.1"],
}


class FinishedRuns:
    """The suite's finished runs (FINISHED_RUNS), each trained once per session under `root`, whichever
    pytest-xdist worker asks first (the others wait on its file lock), then copied for each test."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def built(self, kind: str) -> Path:
        """The shared run of `kind` (read it, never write into it: `copy` gives one of your own)."""
        import contextlib
        import fcntl
        import io

        from metadisco.cli import main

        path = self.root / kind / "run"
        with open(self.root / f"{kind}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (self.root / kind / "train.out").exists():
                if (self.root / kind).exists():  # a build that failed half way: again, from the start
                    import shutil

                    shutil.rmtree(self.root / kind)
                (self.root / kind).mkdir()
                out = io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    try:
                        main(["train", *FINISHED_RUNS[kind], "--run-dir", str(path), "--no-progress"])
                    except SystemExit as e:
                        if e.code:
                            raise AssertionError(f"the shared {kind} run failed to train:\n{out.getvalue()[-3000:]}") from None
                (self.root / kind / "train.out").write_text(out.getvalue())
        return path

    def printed(self, kind: str) -> str:
        """What `metadisco train` printed (stdout and stderr) when it made the run of `kind`."""
        self.built(kind)
        return (self.root / kind / "train.out").read_text()

    def copy(self, kind: str, dest: Path) -> Path:
        """A copy of the run of `kind` at `dest` (created), for a test to add to."""
        import shutil

        shutil.copytree(self.built(kind), dest)
        return Path(dest)


def metadisco(*args, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    """`metadisco ARGS...` to completion (in folder `cwd`, default this one), output captured as text."""
    return subprocess.run([sys.executable, "-m", "metadisco.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def metadisco_in_process(argv, capsys) -> tuple[int, str, str]:
    """`metadisco ARGV` in this process (its imports and jit caches shared; `main` is what the console
    command runs) -> (exit code, stdout, stderr); 0 where main returns. Use `metadisco` where the
    process itself is tested: signals, checks that must finish before jax is imported."""
    from metadisco.cli import main

    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def start_metadisco(*args) -> subprocess.Popen:
    """`metadisco ARGS...` started in the background (stdout and stderr piped, as text)."""
    return subprocess.Popen([sys.executable, "-m", "metadisco.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_rows(run_dir, rows: int, proc: subprocess.Popen | None = None, timeout: float = 240) -> None:
    """Block until RUN_DIR/metrics.jsonl has `rows` lines (fails if `proc` exits first, or on timeout)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"metadisco exited ({proc.returncode}) before {rows} rows: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {rows} rows in {metrics} after {timeout} s")


def gpu_queue_smoke(out: Path, *args: str) -> dict:
    """`OUT=out benchmarks/gpu_queue.sh --smoke ARGS`, as documented (no --state, no --budget): its summary.json."""
    import json
    import os

    env = os.environ | {"OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([str(ROOT / "benchmarks" / "gpu_queue.sh"), "--smoke", *args], capture_output=True, text=True,
                          env=env, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def tiny_config(**changes) -> RunConfig:
    base = dict(generations=4, inner=InnerConfig(total_timesteps=2048, num_envs=4, num_steps=64, hidden=(16, 16)),
                objectives=ObjectivesConfig(drift={"name": "lpo", "hidden": 8}), es=ESConfig(population_size=4),
                eval_every=2, eval_seeds=2, baseline_seeds=2, checkpoint_every=1, member_batch=2)
    base.update(changes)
    return validate(RunConfig(**base))


def stand_in_result(returns, eval_return, init_eval_return) -> TrainResult:
    """A TrainResult of a stand-in inner loop: a learning curve [U] and the two evaluations (the
    same value for sampled and greedy actions)."""
    return TrainResult(returns=returns, final_return=returns[-1], diverged=jnp.bool_(False),
                       visited=jnp.zeros(returns.shape + (0, 4)), eval_return=eval_return,
                       eval_return_greedy=eval_return, init_eval_return=init_eval_return,
                       init_eval_return_greedy=init_eval_return)


def quadratic_train(key, meta_params):
    """A stand-in inner loop with a known optimum: return = -|w2 - TARGET|^2 (+ seed noise).

    Members whose first output weight is above 0.02 'diverge' (NaN) when DIVERGE is set.
    """
    w = meta_params["drift"]["w2"]
    noise = 0.01 * jax.random.normal(key)
    ret = -100.0 * jnp.mean(jnp.square(w - TARGET)) + noise
    return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(-1.0))


def constant_train(init_return, final_return, noise=0.0):
    """A stand-in PPO whose learning curve rises linearly from init_return to final_return (its
    evaluations: init_return before, final_return + noise * N(0, 1) after training)."""

    def train(key, meta_params):
        returns = jnp.linspace(init_return, final_return, 8)
        final = final_return + noise * jax.random.normal(key)
        return stand_in_result(returns, final, jnp.float32(init_return))

    return train


def untimed(run_dir):
    """A run's records with their timing cleared: what two runs that compute the same write alike."""
    return [dataclasses.replace(r, wall_time_s=None, env_steps_per_s=None) for r in RunDir(run_dir).metrics()]


def metric_rows(run_dir):
    """A run's metrics rows as stored, timing aside (NaN as null, so that equal runs compare equal)."""
    return [r.to_row() for r in untimed(run_dir)]


# what each verb adds to a printed or documented command to stay tiny (it changes the size, never what runs)
SMALL = {"evaluate": ["--seeds", "2", "--timesteps", "512", "--no-progress"], "plot": ["--formats", "png"],
         "distil": ["--no-symbolic"], "export": []}


def full_record(**changes):
    """A generation with every part: draws, health, a comparison over two problems, violations."""
    from metadisco.core.records import Comparison, GenerationRecord, Health, Interval, ProblemScores, Violation, Violations

    comparison = Comparison(
        problems=(ProblemScores("CartPole-v1@0.5", 1.0, 0.5, 2.0, diff=Interval(-1.0, -1.5, -0.5)),
                  ProblemScores("Acrobot-v1@1", -3.0, -4.0, -2.5, diff=Interval(-0.5, -1.0, 0.0),
                                vs_start=Interval(1.0, 0.5, 1.5))),
        mean=-1.0, start=-1.75, ppo=-0.25, diff=Interval(-0.75, -1.5, 0.0), vs_start=Interval(0.75, 0.25, 1.25),
        gap_closed=Interval(0.5, 0.125, 0.875))
    record = GenerationRecord(
        generation=7, fitness_mean=0.25, fitness_max=0.5, fitness_min=0.0, fitness_std=0.125, best_fitness=0.75,
        sigma=0.01, num_diverged=1, draw={"Acrobot-v1": 1.0, "CartPole-v1": 0.0, "horizon": 0.5, "lr_factor": 1.25},
        health=Health(0.5, 0.25, 0), game_health={"Acrobot-v1": Health(0.75, 0.5, 0)},
        wall_time_s=2.0, env_steps_per_s=1e5, comparison=comparison,
        violations=Violations(mean=(Violation("value_loss", "trains_the_critic", "0 everywhere"),), best=()))
    return dataclasses.replace(record, **changes)
