"""The steps of a held-out evaluation, one module each (`analysis.evaluate` is the entry point):

    protocol  what is scored and how each method's learning rate is tuned (jax-free)
    plan      every check that can fail, before anything compiles -> methods x environment jobs
    programs  the compiled training programs of one evaluation (a cache object)
    run       train every method on every environment (common random numbers) -> raw returns
    summary   per-environment intervals, normalised scores, aggregates, notes
    render    markdown, CSV, the learning-curves figure, and the output folder (written atomically)

The suites table is `analysis.suites` (jax-free) and the TARGET forms `analysis.targets`.
"""
