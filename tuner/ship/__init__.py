"""What leaves the study for production: the exported config and its CI guard.

* :mod:`.config_schema` -- the ``tuner.config/v1`` document (pydantic);
* :mod:`.provenance_block` -- an export's ``provenance`` and ``env``, from the trial's records or the study's
  (the selection policies and profiles an export applies are :mod:`tuner.front.choice`'s);
* :mod:`.invocation` -- a setting's native invocation (argv / target+kwargs / url+body);
* :mod:`.export` -- ``tuner export``: the chosen trial -> config YAML with provenance;
* :mod:`.export_warnings` -- the export's ``warnings``: a noisy or cut-short trial, random weights;
* :mod:`.check` -- ``tuner check``: re-measure the config against its baseline, a CI gate;
* :mod:`.check_sides` -- the check's baseline and chosen runs, and its quality verdict;
* :mod:`.stats` -- its statistic: exact Mann-Whitney test and Hodges-Lehmann speed-up with interval.

May import: :mod:`tuner.tracking`, :mod:`tuner.front`, :mod:`tuner.study`, :mod:`tuner.search`, :mod:`tuner.storage` and below;
never :mod:`tuner.cli`.
"""
