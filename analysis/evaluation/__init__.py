"""Held-out evaluation: discovered objectives against PPO and DPO on environments of your choice.

    from metadisco.analysis.evaluation import render, run
    from metadisco.analysis.targets import resolve_target

    targets = [resolve_target("runs/lpo-cartpole-20261101-120000"), resolve_target("dpo")]
    results = run.evaluate(targets, envs=["Acrobot-v1", "Catch-bsuite"], seeds=8, protocol="discogen")
    out = render.save(results, render.default_out_dir(targets))   # results.json/csv/md, curves.png/pdf
    print(render.to_markdown(results))

One step a module (`metadisco.api.evaluate` and `metadisco evaluate` are the entry points):

    protocol  what is scored and how each method's learning rate is tuned (jax-free)
    plan      every check that can fail, before anything compiles -> methods x environment jobs
    programs  the compiled training programs of one evaluation (a cache object)
    run       train every method on every environment (common random numbers) -> raw returns
    summary   per-environment intervals, PPO-normalised scores, IQM, probability of improvement
    results   the records of what was found (Evaluation), and results.json written and read through them
    render    markdown, CSV, the learning-curves figure, and the output folder (written atomically)

The suites and budgets table is `metadisco.analysis.suites` (jax-free; the CLI help is made from it) and the
TARGET forms (ppo, dpo, an objectives file, RUN_DIR[:best|:mean|:init]) `metadisco.analysis.targets`.
Environments a target was meta-trained on are flagged "meta-train" and aggregated separately,
never mixed into the held-out aggregate.
"""
