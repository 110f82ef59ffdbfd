"""Optional mirrors of metrics.jsonl to TensorBoard and MLflow (never the only copy)."""

from __future__ import annotations

from pathlib import Path

from metadisco.core.records import GenerationRecord


class Mirrors:
    def __init__(self, cfg, run_path: Path, start_step: int = 0):
        self.tb = self.mlflow = None
        if cfg.tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise RuntimeError("tensorboard=true needs tensorboardX: pip install 'metadisco[tensorboard]'") from e
            self.tb = SummaryWriter(str(run_path / "tensorboard"), purge_step=start_step or None)
        if cfg.mlflow:
            try:
                import mlflow
            except ImportError as e:
                raise RuntimeError("mlflow=true needs mlflow: pip install 'metadisco[mlflow]'") from e
            # default: a local SQLite store in the run directory (MLflow 3 retired the file store)
            uri = cfg.mlflow_uri or f"sqlite:///{(run_path / 'mlflow.db').resolve()}"
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(cfg.name)
            self.mlflow = mlflow
            self.mlflow.start_run(run_name=run_path.name)
            self.mlflow.log_params({"envs": ",".join(cfg.envs), "strategy": cfg.es.strategy,
                                    "population_size": cfg.es.population_size, "fitness": cfg.fitness,
                                    "evolve": ",".join(cfg.objectives.evolve), "run_dir": str(run_path)})

    def log(self, record: GenerationRecord) -> None:
        """A generation's finite numbers under their metrics.jsonl keys, at step = its generation index."""
        step = record.generation
        scalars = {k.replace("/", "."): v for k, v in record.scalars().items()}
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k.replace(".", "/"), v, step)
            self.tb.flush()
        if self.mlflow is not None:
            self.mlflow.log_metrics(scalars, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.mlflow is not None:
            self.mlflow.end_run()
