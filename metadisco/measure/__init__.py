"""What a run measures while it runs, below the engine that runs it and the analysis that reads it after.

    run_files   a run directory's own files: their names, their readers, RunDirError and RunWriteError,
                `writing`, `completed` (jax-free); the base of the writer (metadisco.rundir.RunDir)
                and of the finished-run reader (metadisco.analysis.runs.Run)
    health      search health: the split-half agreement of a generation's ES gradient (jax inside
                the functions that trace; the readings of stored figures are jax-free)
    stats       intervals and aggregates (IQM, stratified bootstrap, probability of improvement,
                t intervals), in numpy and scipy
    verdicts    a run's comparisons on fresh seeds and its verdict, in words (jax-free)

The engine (metadisco.engine, metadisco.train, metadisco.rundir) imports these and nothing of
metadisco.analysis; analysis imports them to read what a run wrote. Import a module from here
(`from metadisco.measure import health`): this package imports none of them itself.
"""
