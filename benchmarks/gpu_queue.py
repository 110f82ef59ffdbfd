"""The GPU queue: run the next unfinished `*_gpu` experiment within a time budget, then its
declared evaluation, and write one summary. Started by benchmarks/gpu_queue.sh (which installs
the locked wheels on a host without package access):

    OUT=DIR benchmarks/gpu_queue.sh [--budget 9m] [--state docs/results/gpu_runs] [--max-runs N]
    OUT=DIR benchmarks/gpu_queue.sh --smoke          # every entry on the CPU at a tiny size, its state in OUT/state
    OUT=DIR benchmarks/gpu_queue.sh --cache-from PREVIOUS_OUT/compile_cache.tar.gz   # a fresh machine, warm

Each entry of benchmarks/gpu_queue.toml, in order, is a run directory STATE/NAME:
    missing                 -> `metadisco train EXPERIMENT OVERRIDES --run-dir STATE/NAME --time-limit T`
    fewer rows than gens    -> `metadisco train --resume STATE/NAME --time-limit T`
    trained, not evaluated  -> `metadisco evaluate STATE/NAME EVALUATE --out STATE/NAME/evaluation/queue`
                               when the entry's eval_minutes fit in what is left; else deferred
                               to a later call, and the next entry trains meanwhile
    evaluated               -> done; the next entry
T is what is left of the budget less a reserve for the summary. Training that reaches its time
limit stops with a checkpoint (exit status 75) and the queue ends there; the next call resumes it.

OUT receives: summary.md and summary.json (device, minutes, verdicts with their intervals, search
health, held-out results, the compile cache's size), queue.log (every command's output), metrics.jsonl
(the last entry's), results.md (its held-out evaluation, when run), state.tar.gz (the run directories
this call touched, relative to STATE: `gpu_queue.py --unpack OUT/state.tar.gz` puts them back) and
compile_cache.tar.gz (see below). This process imports no jax: each command runs in its own process,
which holds the accelerator alone.

The compile cache travels with the queue. Its commands share a jax compilation cache of their own
(JAX_COMPILATION_CACHE_DIR, a fresh folder each call; every program stored, however short its
compile), restored before the first command from --cache-from (default OUT/compile_cache.tar.gz when
it is there: a later call with the same OUT) and packed into OUT/compile_cache.tar.gz at the end:
only this queue's programs, never the user's cache. Entries are keyed on the program, jax and the
device, so a resumed sitting on the same device kind and jax loads every program and compiles
nothing; on another device or jax it compiles as if there were no cache. Past --cache-limit the
programs of experiments with no unfinished entry are left out of the archive.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from metadisco.analysis.evaluation.results import read_results  # jax-free
from metadisco.analysis.runs import Run  # jax-free
from metadisco.core.errors import EXIT_TIME_LIMIT, ConfigError
from metadisco.core.records import completed, finite
from metadisco.measure.verdicts import es_mean_vs_ppo, verdict
from metadisco.time_limit import format_duration, parse_duration

ROOT = Path(__file__).resolve().parent.parent

QUEUE = ROOT / "benchmarks" / "gpu_queue.toml"
STATE = ROOT / "docs" / "results" / "gpu_runs"
RESERVE_S = 30.0  # kept from training for the summary and the packing
MIN_LEG_S = 90.0  # a leg shorter than this would spend itself compiling
CACHE_ARCHIVE = "compile_cache.tar.gz"
CACHE_LIMIT_MB = 48.0  # what the archive may hold before finished experiments' programs are left out


@dataclass(frozen=True)
class Entry:
    """One experiment of the queue, as benchmarks/gpu_queue.toml states it."""

    name: str
    experiment: str
    overrides: tuple[str, ...] = ()
    evaluate: tuple[str, ...] = ()
    device: str = ""
    minutes: float = 10.0
    eval_minutes: float = 5.0
    measured: str = ""
    smoke: tuple[str, ...] = ()  # with --smoke: after the queue's `smoke`, for an entry they do not fit
    smoke_evaluate: tuple[str, ...] = ()  # with --smoke: after the queue's `smoke_evaluate`


@dataclass(frozen=True)
class Queue:
    entries: tuple[Entry, ...]
    smoke: tuple[str, ...] = ()
    smoke_evaluate: tuple[str, ...] = ()


def load_queue(path: Path = QUEUE) -> Queue:
    data = tomllib.loads(Path(path).read_text())
    entries = tuple(Entry(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()})
                    for row in data.get("run", []))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise SystemExit(f"{path}: entry names must be unique, got {names}")
    return Queue(entries, tuple(data.get("smoke", ())), tuple(data.get("smoke_evaluate", ())))


def stage(run_dir: Path) -> str:
    """Where an entry's run directory stands: new, training (its generations or its selection unfinished),
    evaluate or done."""
    run = Run(run_dir)
    if not run.config_path.exists() or not run.checkpoints():
        return "new"
    if len(run.metrics()) < run.config().generations or run.selection_final() is False:
        return "training"  # a selection still provisional: the resume finishes it (re-scoring only)
    return "done" if (run.evaluation_dir / "queue" / "results.json").exists() else "evaluate"


@dataclass
class Step:
    """One command this call ran, for the summary."""

    entry: str
    kind: str  # train | resume | evaluate
    command: list[str]
    exit_code: int
    seconds: float
    note: str = ""
    compiled: int = 0  # programs it compiled and stored in the queue's compile cache (0: it loaded every one)


@dataclass
class Call:
    """What this call of the queue did; `steps` in order."""

    budget_s: float
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    stopped: str = ""
    deferred: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)


class CompileCache:
    """The queue's own jax compilation cache: a fresh folder its commands share
    (JAX_COMPILATION_CACHE_DIR), filled from a previous call's archive and packed for the next.
    `origin` names, for each file (its path in the folder), the experiment whose command stored it,
    so that finished experiments' programs can be left out of an archive that grew past its limit."""

    MANIFEST = "manifest.json"

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="metadisco-queue-cache-"))
        self.path = self.root / "jax"
        self.path.mkdir()
        self.origin: dict[str, str] = {}

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def env(self) -> dict[str, str]:
        """What a command's environment gets: this cache, and every program stored in it (jax stores
        only those that took 1 s to compile, the CLI those of 0.1 s: a short one left out would be
        compiled again by every call)."""
        return {"JAX_COMPILATION_CACHE_DIR": str(self.path), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def entries(self) -> set[str]:
        return {str(f.relative_to(self.path)) for f in self.path.rglob("*") if f.is_file()}

    @staticmethod
    def programs(names) -> int:
        """How many compiled programs `names` hold (jax's KEY-cache files; the rest, such as XLA's GPU
        autotuning results, serve them)."""
        return sum(1 for n in names if n.endswith("-cache"))

    def took(self, before: set[str], experiment: str) -> int:
        """After a command of `experiment`: the programs it compiled (stored since `before`)."""
        new = self.entries() - before
        self.origin |= dict.fromkeys(new, experiment)
        return self.programs(new)

    def restore(self, archive: Path) -> int:
        """Put back a call's compile_cache.tar.gz; the programs it held. A missing or unreadable archive
        is not fatal: the call compiles as if there were none (and says so)."""
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = tar.getmembers()
                if any(m.name != self.MANIFEST and Path(m.name).parts[0] != "jax" for m in members):
                    raise tarfile.TarError("not a queue compile-cache archive")
                tar.extractall(self.root, filter="data")
            manifest = self.root / self.MANIFEST
            if manifest.exists():
                self.origin = json.loads(manifest.read_text()).get("origin", {})
                manifest.unlink()
        except (OSError, tarfile.TarError, ValueError) as e:
            print(f"compile cache: {archive} not restored ({e}); this call compiles every program", file=sys.stderr)
            shutil.rmtree(self.path, ignore_errors=True)
            self.path.mkdir(parents=True, exist_ok=True)
            self.origin = {}
        return self.programs(self.entries())

    def pack(self, target: Path, unfinished: set[str], limit_bytes: float) -> dict:
        """The cache into `target` (.tar.gz, with the manifest of origins); past `limit_bytes` without
        the files of experiments not in `unfinished`. What it holds: programs, bytes, left out."""
        names = sorted(self.entries())
        left_out = []
        if sum((self.path / n).stat().st_size for n in names) > limit_bytes:
            left_out = [n for n in names if self.origin.get(n) not in unfinished]
            names = [n for n in names if self.origin.get(n) in unfinished]
        manifest = json.dumps({"origin": {n: self.origin[n] for n in names if n in self.origin}}).encode()
        partial = target.with_name(target.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            for name in names:
                tar.add(self.path / name, arcname=f"jax/{name}")
            info = tarfile.TarInfo(self.MANIFEST)
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))
        partial.replace(target)
        return {"programs": self.programs(names), "bytes": target.stat().st_size,
                "left_out": self.programs(left_out)}


def metadisco_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "metadisco.cli", *args]


def run_logged(command: list[str], log, env: dict[str, str] | None = None) -> int:
    """Run `command` (with `env` added to the environment), its output to stdout and to `log` line by
    line; its exit status."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    env = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          cwd=ROOT) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        log.flush()
        return proc.wait()


def next_step(entry: Entry, state: Path, left_s: float, smoke: Queue | None = None) -> tuple[str, list[str] | str]:
    """What to do next for `entry` with `left_s` seconds of the budget left:
        ("train" | "resume" | "evaluate", command)
        ("stop", reason)    too little time for a training leg: the queue ends here
        ("defer", reason)   trained, but its evaluation does not fit: the queue goes on to train the next
        ("done", "")        trained and evaluated
    An evaluation is never started without its stated minutes (it has no checkpoint to stop at)."""
    run_dir = state / entry.name
    where = stage(run_dir)
    if where in ("new", "training"):
        limit = left_s - RESERVE_S
        if limit < MIN_LEG_S:
            return "stop", f"{format_duration(left_s)} left: too little for a training leg of {entry.name}"
        if where == "new":
            args = ["train", entry.experiment, *entry.overrides, *((*smoke.smoke, *entry.smoke) if smoke else ()),
                    "--run-dir", str(run_dir), *(["--overwrite"] if run_dir.exists() else [])]
        else:
            args = ["train", "--resume", str(run_dir)]
        return ("train" if where == "new" else "resume",
                metadisco_command(*args, "--time-limit", f"{limit:.0f}", "--no-progress"))
    if where == "evaluate":
        if left_s < 60 * entry.eval_minutes and not smoke:
            return "defer", (f"{entry.name} trained; its evaluation ({entry.eval_minutes:g} min) did not fit in the "
                             f"{format_duration(left_s)} left: a later call runs it")
        flags = (*smoke.smoke_evaluate, *entry.smoke_evaluate) if smoke else entry.evaluate
        out = Run(run_dir).evaluation_dir / "queue"
        return "evaluate", metadisco_command("evaluate", str(run_dir), *flags, "--out", str(out), "--no-progress")
    return "done", ""


def advance(entry: Entry, state: Path, call: Call, log, smoke: Queue | None, cache: CompileCache | None = None) -> bool:
    """Train (or resume) and evaluate one entry as far as the budget allows; True when the queue
    may go on to the next entry (this one done, or only its evaluation left for a later call)."""
    while True:
        kind, command = next_step(entry, state, call.left(), smoke)
        if kind in ("done", "defer", "stop"):
            if kind == "defer":
                call.deferred.append(command)
            if kind == "stop":
                call.stopped = command
            return kind != "stop"
        before = stage(state / entry.name), len(Run(state / entry.name).metrics())
        if entry.name not in call.touched:
            call.touched.append(entry.name)
        if kind == "evaluate":
            shutil.rmtree(Run(state / entry.name).evaluation_dir / "queue", ignore_errors=True)  # a cut-off one
        t, stored = time.monotonic(), cache.entries() if cache else set()
        code = run_logged(command, log, cache.env() if cache else None)
        compiled = cache.took(stored, entry.experiment) if cache else 0
        call.steps.append(Step(entry.name, kind, command, code, time.monotonic() - t, compiled=compiled))
        if code == EXIT_TIME_LIMIT:
            call.stopped = f"{entry.name} stopped on time with a checkpoint: the next call resumes it"
            return False
        if code != 0:
            call.stopped = f"{entry.name}: `metadisco {command[3]}` failed (exit status {code}); see queue.log"
            return False
        if (stage(state / entry.name), len(Run(state / entry.name).metrics())) == before:
            call.stopped = f"{entry.name}: `metadisco {command[3]}` exited 0 but the run did not move on; see queue.log"
            return False


def entry_summary(entry: Entry, state: Path) -> dict:
    """An entry's standing from its run directory: generations, minutes, verdict, health, held out."""
    run_dir = state / entry.name
    where = stage(run_dir)
    row = {"name": entry.name, "experiment": entry.experiment, "overrides": list(entry.overrides),
           "stage": where, "stated": {"device": entry.device, "minutes": entry.minutes,
                                      "eval_minutes": entry.eval_minutes, "measured": entry.measured}}
    if where == "new":
        return row
    run = Run(run_dir)
    cfg, metrics = run.config(), run.metrics()
    healths = [m.health.grad_cos for m in metrics if m.health is not None and finite(m.health.grad_cos)]
    evals = [m for m in metrics if m.comparison is not None]
    row |= {"generations": [len(metrics), cfg.generations],
            "generation_seconds": sum(0.0 if m.wall_time_s is None else m.wall_time_s for m in metrics),
            "health_mean": sum(healths) / len(healths) if healths else None}
    if evals:
        row["comparison"] = f"after generation {completed(evals[-1])}: {es_mean_vs_ppo(evals[-1].comparison)}"
        if len(metrics) == cfg.generations:
            row["verdict"] = verdict(evals[-1], cfg.expect)
            selected = run.objectives_path("selected")
            if selected.is_file():  # a validated run returns its selected objective: its own verdict beside
                extra = json.loads(selected.read_text()).get("extra", {})
                if extra.get("verdict"):
                    row["verdict"] = f"{extra['verdict']} [the selected objective]; {row['verdict']} [the last ES mean]"
    results = run.evaluation_dir / "queue" / "results.json"
    if results.exists():
        data = read_results(results)
        aggregate = data.aggregate["held_out"]
        held = aggregate.methods or {}
        mine = held.get(run_dir.name) or next(iter(held.values()), None)
        row["heldout"] = {"envs": list(aggregate.envs) or sorted(data.envs), "tuned": data.settings.tune_lr,
                          "iqm": mine.iqm.to_json() if mine else None,
                          "p_better_than_ppo": mine.poi_vs["ppo"].to_json() if mine and "ppo" in mine.poi_vs else None}
        if not mine:  # every environment left out: PPO did not beat its initial policy there (results.md says why)
            row["heldout"]["not_aggregated"] = "no environment with a usable normaliser"
        row["heldout_seconds"] = data.time_s
    return row


def device_name() -> str:
    """The accelerator's name from nvidia-smi, else the CPU's (no jax in this process)."""
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True)
        if query.returncode == 0 and query.stdout.strip():
            return query.stdout.strip().splitlines()[0]
    return f"CPU ({os.cpu_count()} cores, no GPU)"


def _interval(x: dict | None) -> str:
    return "-" if not x else f"{x['point']:.2f} [{x['low']:.2f}, {x['high']:.2f}]"


def cache_line(c: dict) -> str:
    restored = f"{c['restored']} programs restored from {c['from']}" if c["from"] else "nothing to restore"
    left_out = (f", {c['left_out']} programs of finished experiments left out (past {c['limit_mb']:g} MB)"
                if c["left_out"] else "")
    return (f"Compile cache: {restored}; this call compiled {c['compiled']}; {CACHE_ARCHIVE} holds {c['programs']} "
            f"programs, {c['bytes'] / 2**20:.1f} MB{left_out}.")


def render(summary: dict) -> str:
    lines = [f"# GPU queue: {summary['device']}", "",
             f"Commit {summary['commit']}, {summary['date']}; budget {summary['budget']}, used "
             f"{summary['used']}{' (smoke: tiny sizes on the CPU)' if summary['smoke'] else ''}. "
             f"Stopped: {summary['stopped'] or 'the queue is done'}."
             + "".join(f" Deferred: {d}." for d in summary["deferred"]), "", cache_line(summary["compile_cache"]), "",
             "## This call", "", "| entry | step | exit | minutes | programs compiled | command |",
             "|---|---|---:|---:|---:|---|"]
    lines += [f"| {s['entry']} | {s['kind']} | {s['exit_code']} | {s['seconds'] / 60:.1f} | {s['compiled']} | "
              f"`{' '.join(s['command'][2:])}` |" for s in summary["steps"]]
    lines += ["", "## Every entry", "",
              "| entry | stage | generations | generation minutes | verdict on fresh seeds | health (mean) | "
              "held out: IQM / P(> PPO) [95% CI] | stated minutes (device) |", "|---|---|---|---:|---|---:|---|---|"]
    for e in summary["entries"]:
        gens = "{}/{}".format(*e["generations"]) if "generations" in e else "-"
        minutes = f"{e['generation_seconds'] / 60:.1f}" if "generation_seconds" in e else "-"
        health = f"{e['health_mean']:+.2f}" if e.get("health_mean") is not None else "-"
        held = e.get("heldout")
        held_text = (f"{_interval(held['iqm'])} / {_interval(held['p_better_than_ppo'])}"
                     f"{' (tuned)' if held['tuned'] else ''}") if held else "-"
        stated = e["stated"]
        lines.append(f"| {e['name']} | {e['stage']} | {gens} | {minutes} | {e.get('verdict') or e.get('comparison') or '-'} "
                     f"| {health} | {held_text} | {stated['minutes']:g} + {stated['eval_minutes']:g} "
                     f"({stated['device']}; {stated['measured']}) |")
    return "\n".join(lines) + "\n"


def pack(state: Path, names: list[str], target: Path) -> None:
    """The run directories `names` (under `state`) as one .tar.gz, paths relative to `state`."""
    with tarfile.open(target, "w:gz") as tar:
        for name in names:
            if (state / name).exists():
                tar.add(state / name, arcname=name, filter=lambda t: None if t.name.endswith(".lock") else t)


def project_commit() -> str:
    """The commit of this project's checkout: git's where ROOT is the top of a repository (never that of a
    repository a copy of it sits in), else METADISCO_COMMIT (what the caller that copied it says), else
    unknown."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, cwd=ROOT)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == ROOT.resolve():
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        return head.stdout.strip() or "unknown"
    return os.environ.get("METADISCO_COMMIT") or "unknown (not a git checkout of its own; set METADISCO_COMMIT)"


def unpack(archive: Path, state: Path) -> list[str]:
    """Put back the run directories of a call's state.tar.gz under `state`, each replacing its old
    copy whole (a plain `tar x` would leave the old copy's pruned checkpoints beside the new ones).
    Returns their names."""
    with tarfile.open(archive, "r:gz") as tar:
        names = sorted({Path(m.name).parts[0] for m in tar.getmembers()})
        bad = [n for n in names if n in ("..", ".") or Path(n).is_absolute()]
        if bad:
            raise SystemExit(f"{archive}: not a queue state archive (paths {bad}); nothing unpacked")
        with tempfile.TemporaryDirectory(dir=state) as staging:
            tar.extractall(staging, filter="data")
            for name in names:
                shutil.rmtree(state / name, ignore_errors=True)
                shutil.move(Path(staging) / name, state / name)
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", default=None,
                   help="wall time for this call (600, 9m, 1h30m; default 9m, with --smoke 1h: every entry runs)")
    p.add_argument("--state", type=Path, default=None,
                   help=f"the queue's run directories (default {STATE.relative_to(ROOT)}; with --smoke, OUT/state: a "
                        "smoke never touches the committed runs)")
    p.add_argument("--queue", type=Path, default=QUEUE)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_out")))
    p.add_argument("--max-runs", type=int, default=None, help="stop after this many entries were advanced")
    p.add_argument("--smoke", action="store_true", help="the same path on the CPU at a tiny size (`smoke` overrides)")
    p.add_argument("--cache-from", type=Path, metavar="COMPILE_CACHE_TAR_GZ",
                   help=f"a previous call's {CACHE_ARCHIVE}, restored before the first command (default "
                        f"OUT/{CACHE_ARCHIVE} when it is there)")
    p.add_argument("--cache-limit", type=float, default=CACHE_LIMIT_MB, metavar="MB",
                   help="past this size the archive leaves out the programs of experiments with no unfinished "
                        f"entry (default {CACHE_LIMIT_MB:g})")
    p.add_argument("--unpack", type=Path, metavar="STATE_TAR_GZ",
                   help="only put back a call's state.tar.gz under --state, each run directory replaced whole")
    args = p.parse_args(argv)
    if args.state is None:
        args.state = args.out / "state" if args.smoke else STATE
    if args.budget is None:
        args.budget = "1h" if args.smoke else "9m"
    if args.unpack:
        args.state.mkdir(parents=True, exist_ok=True)
        print("unpacked:", ", ".join(unpack(args.unpack, args.state)), "into", args.state)
        return 0
    try:
        call = Call(parse_duration(args.budget))
    except ConfigError as e:
        p.error(str(e).replace("--time-limit", "--budget"))
    queue = load_queue(args.queue)
    args.out.mkdir(parents=True, exist_ok=True)
    args.state.mkdir(parents=True, exist_ok=True)
    cache_source = args.cache_from or (args.out / CACHE_ARCHIVE if (args.out / CACHE_ARCHIVE).exists() else None)
    cache = CompileCache()
    try:
        restored = cache.restore(cache_source) if cache_source else 0
        with open(args.out / "queue.log", "a") as log:
            for entry in queue.entries:
                if args.max_runs is not None and len(call.touched) >= args.max_runs:
                    call.stopped = call.stopped or f"--max-runs {args.max_runs}"
                    break
                if stage(args.state / entry.name) == "done":
                    continue
                if not advance(entry, args.state, call, log, queue if args.smoke else None, cache):
                    break
        unfinished = {e.experiment for e in queue.entries if stage(args.state / e.name) != "done"}
        cached = cache.pack(args.out / CACHE_ARCHIVE, unfinished, args.cache_limit * 2**20)
    finally:
        cache.close()
    cached |= {"restored": restored, "from": str(cache_source) if cache_source else None,
               "compiled": sum(s.compiled for s in call.steps), "limit_mb": args.cache_limit}
    summary = {"device": device_name(), "commit": project_commit(),
               "date": time.strftime("%Y-%m-%d %H:%M"), "smoke": args.smoke,
               "budget": format_duration(call.budget_s), "used": format_duration(call.budget_s - call.left()),
               "stopped": call.stopped, "deferred": call.deferred, "steps": [vars(s) for s in call.steps],
               "entries": [entry_summary(e, args.state) for e in queue.entries], "compile_cache": cached}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "summary.md").write_text(render(summary))
    if call.touched:
        last = Run(args.state / call.touched[-1])
        for source, name in [(last.metrics_path, "metrics.jsonl"), (last.evaluation_dir / "queue" / "results.md",
                                                                     "results.md")]:
            if source.exists():
                shutil.copy(source, args.out / name)
        pack(args.state, call.touched, args.out / "state.tar.gz")
    print(render(summary))
    failed = [s for s in call.steps if s.exit_code not in (0, EXIT_TIME_LIMIT)]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
