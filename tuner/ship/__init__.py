"""What leaves the study for production: the exported config and its CI guard.

* :mod:`.config_schema` -- the ``tuner.config/v1`` document (pydantic);
* :mod:`.policy` -- selection policies (``minimize X subject to ...``, knee, lexicographic), profiles,
  and the preference of a stable trial over a noisy one within its spread;
* :mod:`.invocation` -- a setting's native invocation (argv / target+kwargs / url+body);
* :mod:`.export` -- ``tuner export``: the chosen trial -> config YAML with provenance;
* :mod:`.check` -- ``tuner check``: re-measure the config against its baseline, a CI gate;
* :mod:`.stats` -- its statistic: exact Mann-Whitney test and Hodges-Lehmann speed-up with interval.

May import: :mod:`tuner.tracking`, :mod:`tuner.front`, :mod:`tuner.study`, :mod:`tuner.search`, :mod:`tuner.storage` and below;
never :mod:`tuner.cli`.
"""
