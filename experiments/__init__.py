"""The named experiments (package data, installed as metadisco.experiments); read by
metadisco.resources. A regular package, so that every install, editable included, maps it beneath
metadisco."""
