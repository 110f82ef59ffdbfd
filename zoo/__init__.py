"""The zoo's entries (package data, installed as metadisco.meta_objectives.zoo); read by
metadisco.meta_objectives.discovered. A regular package, so that every install, editable included,
maps it beneath meta_objectives."""
