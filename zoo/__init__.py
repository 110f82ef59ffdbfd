"""The zoo's entries (package data, installed as metadisco.meta_objectives.zoo); read by
metadisco.meta_objectives.discovered. A regular package, so that every install, editable included,
maps it beneath meta_objectives.

The zoo's rule, the one every entry is held to (metadisco.meta_objectives.discovered.problems checks
it; reading an entry that breaks it fails):

An entry carries its held-out result, `provenance.heldout.result`: P(> PPO), its probability of
improvement over PPO on environments none of it was meta-trained on, read from one row of its
held-out record (`row`), with the record's 95% interval (`ci`, null where the record has none);
`against` says which PPO ("tuned PPO": every method at its own tuned learning rate; "PPO": one
shared learning rate), and `declared` whether the experiment's config named the held-out set before
its run. Where an entry was scored again under the current yardstick, the result is that score.
Its kind follows from that result alone (discovered.kind), and `metadisco zoo` lists the kinds apart:

    beats     against tuned PPO, on a held-out set declared before the run, interval above 0.5
    negative  interval below 0.5, or, with no interval, P(> PPO) below 0.5
    lead      anything else: the interval contains 0.5, or it beat only untuned PPO, or beat on a
              set not declared before the run, or has no interval and P(> PPO) of at least 0.5

An experiment that pre-registered a stricter rule keeps it: PREREGISTERED names the kind its entries
must have, and one of a lower kind does not enter.
"""

# experiment -> the kind an entry from it must have, as the experiment stated before its run
PREREGISTERED = {
    # docs/experiments.md at a2e8cc9: "Anything enters the zoo only if it beats its start held out"
    "drift_mix_minatar_cpu": "beats",
    # docs/results/minatar_drift.md: "enters the zoo only if P(> PPO) held out has a 95% interval above 0.5"
    "drift_mix_minatar_gpu": "beats",
}
