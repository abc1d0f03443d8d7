"""The http adapter against a real local server (the FastAPI stand-in under uvicorn) at concurrency 1 and 4."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Slot, TrialRequest
from tuner.spec.adapters import HttpSpec
from tuner.testing.inline_runner import InlineRunner

PROMPTS = [
    "what colour is the circle",
    "how many beeps are there",
    {"prompt": "which way does the square move", "max_tokens": 2},
]


def stats(base: str, reset: bool = False) -> dict[str, int]:
    request = urllib.request.Request(base + ("/stats/reset" if reset else "/stats"), method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())  # type: ignore[no-any-return]


def http_request(tmp_path: Path, base: str, settings: dict[str, Any], **block: Any) -> TrialRequest:
    spec = HttpSpec(
        url=base + "/v1/chat/completions",
        prompts="prompts",
        requests=8,
        body={"model": "standin", "max_tokens": "{max_tokens}", "temperature": "{temperature}"},
        concurrency="{concurrency}",
        **block,
    )
    return TrialRequest(
        study_name="http",
        trial_number=0,
        workload_class="tuner.adapters.http:HttpWorkload",
        settings=settings,
        inputs={"prompts": PROMPTS},
        seed=0,
        device="cpu",
        measurement={"warmup": 1, "min_repeats": 2, "max_repeats": 3},
        timeout_s=120,
        workdir=str(tmp_path),
        workload_options={"adapter": "http", **spec.model_dump(mode="json")},
    )


def run(request: TrialRequest) -> TrialResult:
    return InlineRunner().run(request, Slot(0, None, 1))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_http_adapter_measures_a_real_server(server: str, tmp_path: Path, concurrency: int) -> None:
    stats(server, reset=True)
    result = run(http_request(tmp_path, server, {"max_tokens": 8, "temperature": 0.0, "concurrency": concurrency}))
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    seen = stats(server)
    assert seen["max_in_flight"] == concurrency
    assert seen["served"] % 8 == 0 and seen["served"] >= 8 * 3  # warmup + >= 2 repeats, 8 requests each
    for name in (
        "request_latency_p50_s",
        "request_latency_p95_s",
        "request_latency_p99_s",
        "requests_per_s",
        "output_tokens_per_s",
    ):
        assert result.metrics[name].available, result.metrics[name]
    p50, p95 = result.metrics["request_latency_p50_s"].value, result.metrics["request_latency_p95_s"].value
    assert p50 is not None and p95 is not None and 0 < p50 <= p95
    assert result.metrics["count_requests"].value == 8
    assert result.invocation == {
        "kind": "http",
        "url": server + "/v1/chat/completions",
        "api": "openai_chat",
        "concurrency": concurrency,
        "body": {
            "model": "standin",
            "max_tokens": 8,
            "temperature": 0.0,
            "messages": [{"role": "user", "content": PROMPTS[0]}],
        },
    }


def test_concurrency_raises_throughput_and_per_request_overrides_apply(server: str, tmp_path: Path) -> None:
    rates = {}
    for concurrency in (1, 4):
        result = run(
            http_request(
                tmp_path / str(concurrency), server, {"max_tokens": 8, "temperature": 0.0, "concurrency": concurrency}
            )
        )
        assert result.outcome is Outcome.OK, result.reason
        rates[concurrency] = result.metrics["requests_per_s"].value
    assert rates[4] is not None and rates[1] is not None and rates[4] > 1.5 * rates[1], rates
    from tuner.adapters.http import HttpWorkload
    from tuner.workloads.base import RunContext

    request = http_request(tmp_path, server, {"max_tokens": 8, "temperature": 0.0, "concurrency": 2})
    workload = HttpWorkload(request.workload_options)
    context = RunContext(device="cpu", seed=0, inputs=request.inputs, workdir=tmp_path)
    workload.setup(request.settings, context)
    answers = workload.run(request.settings, context).text
    assert answers is not None and answers[0] == "circle the is colour what"
    assert answers[2] == "move square", "the third prompt's own max_tokens (2) overrides the setting's"


def test_refused_parameters_are_invalid_and_service_oom_is_oom(server: str, tmp_path: Path) -> None:
    refused = run(http_request(tmp_path / "a", server, {"max_tokens": 8, "temperature": 5.0, "concurrency": 1}))
    assert refused.outcome is Outcome.INVALID and "temperature" in str(refused.reason)
    oom = run(http_request(tmp_path / "b", server, {"max_tokens": 4096, "temperature": 0.0, "concurrency": 1}))
    assert oom.outcome is Outcome.OOM and "CUDA out of memory" in str(oom.reason)


def test_generic_json_endpoint_with_a_response_path(server: str, tmp_path: Path) -> None:
    spec = HttpSpec(
        url=server + "/v1/generate",
        api="json",
        body={"prompt": "{prompt}", "steps": "{steps}"},
        prompts="prompts",
        requests=3,
        response_text="output",
    )
    request = TrialRequest(
        study_name="http",
        trial_number=0,
        workload_class="tuner.adapters.http:HttpWorkload",
        settings={"steps": 2},
        inputs={"prompts": ["abc", "def"]},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path),
        workload_options={"adapter": "http", **spec.model_dump(mode="json")},
    )
    result = run(request)
    assert result.outcome is Outcome.OK, result.reason
    assert not result.metrics["output_tokens_per_s"].available  # no usage block: unavailable, with a reason
    assert result.metrics["output_tokens_per_s"].reason
