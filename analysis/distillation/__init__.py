"""Distillation of what a run evolved into closed forms, one module per step:

    data     fit points where training goes, the report grid, FitData; scoring a candidate and
             choosing from the Pareto front
    search   the symbolic search whose candidates are valid by construction
    methods  the fitters over a FitData: fit_dpo, fit_sparse, fit_symbolic; the term libraries
    fit      distil_drift, distil_over_progress, distil_value_loss: the fitters together on one target
    run      a run's visited points -> RUN_DIR/distil/ reports and figures (`metadisco distil`)
    report   the records of what was found (DistillationReport, Candidate), written and read through them
"""
