"""``tuner serve`` fuzzed over real HTTP: no request, however bad, gets a 5xx.

Two generators, both bounded (a fixed number of examples, derandomised, no example database):

* schemathesis, from the service's own ``/openapi.json`` (fetched with the token): every
  operation, valid-looking (positive) and schema-violating (negative) requests, each
  answer checked with schemathesis' ``not_a_server_error``;
* a spec mutator (hypothesis): a valid spec with lines dropped, doubled, cut or spliced
  with odd text, submitted as ``POST /api/studies`` -- random strings rarely get past the
  YAML reader, mutants reach the spec models, the preflight and the storage.

The storage holds a study with feasible trials first, so summaries, pages and exports
have something to compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from service_harness import TOKEN, Service, running_service, spec_text

EXAMPLES_PER_OPERATION = 25
SPEC_MUTANTS = 100
PARAMETERLESS = ("GET /api/studies", "GET /healthz")
_SETTINGS = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    print_blob=False,
)


def _seed(service: Service) -> None:
    """A study with two feasible measured trials (and a waiting reference and baseline)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    assert service.submit("seeded").status == 201
    study = optuna.load_study(study_name="seeded", storage=service.storage_url)
    distributions = {
        "sleep_s": FloatDistribution(0.001, 0.02, step=0.001),
        "noise": IntDistribution(0, 40, step=5),
        "batch_size": CategoricalDistribution([1, 2]),
    }
    for values, sleep in (([0.01, 40.0], 0.01), ([0.02, 45.0], 0.02)):
        study.add_trial(
            optuna.trial.create_trial(
                params={"sleep_s": sleep, "noise": 0, "batch_size": 1},
                distributions=distributions,
                values=values,
                user_attrs={"measured": True, "outcome": "OK", "role": "search", "host": "h", "worker": "h:1"},
            )
        )


@pytest.fixture(scope="module")
def seeded_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    storage = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'studies.db'}"
    with running_service(storage) as service:
        _seed(service)
        yield service


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_in_any_operation(seeded_service: Service) -> None:
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

    raw = seeded_service.request("GET", "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(raw)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 7, [o.label for o in operations]
    cases: dict[str, int] = {}

    def fuzz(operation: Any, mode: Any, **fixed: Any) -> Callable[[], None]:
        @_SETTINGS
        @given(case=operation.as_strategy(generation_mode=mode, **fixed))
        def run(case: Any) -> None:
            cases[operation.label] = cases.get(operation.label, 0) + 1
            case.call_and_validate(base_url=seeded_service.url, headers=headers, checks=[not_a_server_error])

        return run

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz(operation, mode)()
            except Unsatisfiable:  # nothing to make invalid: an operation without parameters or body
                assert mode is GenerationMode.NEGATIVE and operation.label in PARAMETERLESS, operation.label
        if "{name}" in operation.path:  # random names are unknown studies: fuzz the rest on the seeded one
            fuzz(operation, GenerationMode.POSITIVE, path_parameters={"name": "seeded"})()
    print(f"schemathesis cases per operation: {cases}")
    assert sum(cases.values()) >= len(operations) * EXAMPLES_PER_OPERATION, cases
    assert seeded_service.request("GET", "/healthz").status == 200, "the service survived"


_LINES = spec_text().splitlines()
_ODD = st.sampled_from(
    [
        "",
        "~",
        "[",
        "{",
        "}",
        "&a",
        "*a",
        "!!python/object:os.system",
        "<<: *a",
        "- ",
        "? ",
        "'",
        '"',
        "\t",
        "\x00",
        "\x0c",
        "\ud800",
        "1e999",
        "-1",
        "0",
        "null",
        "yes",
        "1" * 400,
        "{noise}",
        "'{nosuch}'",
        "../..",
        "%",
        "@",
        ": :",
        "\u202e",
        "é",
    ]
)


@st.composite
def mutated_spec(draw: Any) -> str:
    """The fake spec with a few random edits (see the module docstring)."""
    lines = list(_LINES)
    for _ in range(draw(st.integers(1, 2))):
        index = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["drop", "double", "cut", "splice", "indent"]))
        line = lines[index]
        if edit == "drop":
            del lines[index]
        elif edit == "double":
            lines.insert(index, line)
        elif edit == "cut":
            lines[index] = line[: draw(st.integers(0, max(len(line) - 1, 0)))]
        elif edit == "splice":
            at = draw(st.integers(0, len(line)))
            lines[index] = line[:at] + draw(st.one_of(_ODD, st.text(max_size=12))) + line[at:]
        else:
            lines[index] = " " + line
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_mutated_specs_get_a_verdict_never_a_server_error(seeded_service: Service) -> None:
    verdicts: dict[int, int] = {}

    @settings(_SETTINGS, max_examples=SPEC_MUTANTS)
    @given(spec=mutated_spec(), name=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_.\-/]{0,20}", fullmatch=True)))
    def run(spec: str, name: str | None) -> None:
        answer = seeded_service.request("POST", "/api/studies", {"spec_yaml": spec, "name": name, "gpu_type": "cpu"})
        assert answer.status in (201, 400, 403, 409, 422), (answer, spec)
        detail = answer.json().get("detail", "")
        assert isinstance(detail, str) and "\n" not in detail, detail
        verdicts[answer.status] = verdicts.get(answer.status, 0) + 1

    run()
    print(f"spec mutants by answer status: {verdicts}")
    assert sum(verdicts.values()) >= SPEC_MUTANTS and verdicts.get(400, 0) > 0, verdicts
