"""The replay methods of ``bench/search_efficiency.py``: the standard catalogue every run compares, the methods that
need coordinator features (the memory model off, a warm start from another hardware type), ``--variants`` parsed
into methods, and which two methods would replay identically. A method is a :class:`tuner.replay.methods.Method`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from search_efficiency_report import DEFAULT_V1_NAME

from tuner.replay.methods import DEFAULT_SKIP, Method, Target, replay_once
from tuner.replay.table import HardwareType, load_table
from tuner.spec.models import DEFAULT_SAMPLER

STANDARD = ("sweep", "random", "hillclimb", "tpe", "nsga2", "gp", "default", "default-v1")
# the default before issue 26 (TPE, multivariate, 5 start-up trials: make_sampler's options then), pinned
# so it stays the same method when the default changes; the last line compares the default with it
DEFAULT_V1 = Method(  # the old default exactly: proposals run in the order asked
    DEFAULT_V1_NAME, "tpe", options={"multivariate": True, "n_startup_trials": 5}, reload_lookahead=1
)


def standard_methods(gp_seeds: int) -> dict[str, Method]:
    """The methods every run compares (see the module docstring)."""
    return {
        "sweep": Method("sweep", "sweep", deterministic=True, whole_space=True),
        "random": Method("random", "random"),
        "hillclimb": Method("hillclimb", "hillclimb"),
        "tpe": Method("tpe", "tpe"),
        "nsga2": Method("nsga2", "nsga2"),
        "gp": Method("gp", "gp", seeds=gp_seeds),
        "default": Method("default", DEFAULT_SAMPLER, skip_dominated=DEFAULT_SKIP),  # the spec's default
        "default-v1": DEFAULT_V1,
    }


def extra_methods(declared: Mapping[str, HardwareType], budget: int) -> dict[str, Method]:
    """Methods that need coordinator features: ``default-no-memory-model`` (the memory model off) and,
    per table measured on two hardware types, ``default+warm:<other>`` — a warm start from a replayed
    default study of the same seed on the other hardware type (its front enqueued, its memory
    evidence the prior: what ``tuner run --warm-start`` does). The source study's own trials are
    not counted: they ran on the other hardware, before."""
    methods = {
        "default-no-memory-model": Method(
            "default-no-memory-model",
            DEFAULT_SAMPLER,
            coordinator_options={"memory_model": False},
            skip_dominated=DEFAULT_SKIP,
        )
    }
    for label, hardware in declared.items():
        methods[f"default+warm:{label}"] = Method(
            f"default+warm:{label}",
            DEFAULT_SAMPLER,
            setup=_warm_start_from(hardware, budget),
            skip_dominated=DEFAULT_SKIP,
        )
    return methods


def _warm_start_from(source: HardwareType, budget: int) -> Any:
    def setup(opened: Any, context: Any) -> dict[str, Any]:
        from tuner.search.warm_start import enqueue_front, load_prior, open_source

        target = Target.of(load_table(source))
        replay_once(
            target,
            Method("default", DEFAULT_SAMPLER, skip_dominated=DEFAULT_SKIP),
            context.seed,
            budget,
            context.workdir / "source",
            storage_url=opened.storage_url,
            study_name="warm-source",
        )
        warm = open_source(opened.storage_url, "warm-source", opened.spec)
        enqueue_front(opened.study, opened.spec, opened.storage_url, warm)
        prior, _ = load_prior(opened.study, opened.spec, opened.storage_url, None)
        return {"memory_prior": prior}

    return setup


def parse_variant(text: str) -> Method:
    """``tpe:n_startup_trials=10,multivariate=false`` -> a Method named so, options parsed as YAML scalars."""
    sampler, _, rest = text.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise SystemExit(f"--variants {text!r}: {item!r} is not key=value")
        options[key.strip()] = yaml.safe_load(value)
    return Method(text, sampler.strip(), options=options)


def same_replay(a: Method, b: Method) -> bool:
    """Two methods that would replay identically (so one is run and reported under both names)."""
    return (a.sampler, dict(a.options), dict(a.coordinator_options), a.setup, a.whole_space, a.deterministic) == (
        b.sampler,
        dict(b.options),
        dict(b.coordinator_options),
        b.setup,
        b.whole_space,
        b.deterministic,
    )
