"""Everything MLflow: the study's views, logged live and rebuilt from the storage.

* :mod:`.views` -- what each run holds, computed from stored trial records only;
* :mod:`.comparison` -- trial run names and times, the trials table, the study run's
  description and the runs-table comparison view (pure, like :mod:`.views`);
* :mod:`.writer` -- writing runs, params, metrics, tags and artifacts with ``MlflowClient``;
* :mod:`.live` -- live logging on a background thread during a study;
* :mod:`.sync` -- ``tuner sync-mlflow``: rebuild every view from the storage;
* :mod:`.ui` -- ``tuner ui``: an ``mlflow server`` on 127.0.0.1 for the configured store.

May import: :mod:`tuner.front`, :mod:`tuner.study`, :mod:`tuner.search`, :mod:`tuner.storage` and below; never :mod:`tuner.ship`
or :mod:`tuner.cli`.
"""
