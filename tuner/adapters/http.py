"""The ``http`` adapter: a running inference service, measured at a declared concurrency.

Built by the worker from ``workload.http`` (:class:`tuner.spec.adapters.HttpSpec`).
One measured call sends ``requests`` POST requests with at most ``concurrency``
in flight (a thread per in-flight request, stdlib ``urllib``; no new dependency),
each body rendered from the template with that request's values
(:mod:`tuner.adapters.http_request`: inputs, setting, prompt, per-request
overrides). The worker times the whole call (so ``latency_p50_s`` is the time to
serve the batch and ``throughput_items_per_s`` requests per second); the adapter
adds per-request figures from the last call: ``request_latency_p50_s`` / ``p95`` /
``p99`` / ``mean`` (seconds, from sending a request to reading its whole answer),
``requests_per_s`` and ``output_tokens_per_s`` (from the OpenAI ``usage`` block;
unavailable when the service does not report it).

A request that fails (connection error, HTTP status >= 400) fails the call:
HTTP 400/422 is INVALID (the service refused the parameters), a body or status
mentioning out-of-memory is OOM, anything else CRASH, each with the service's
answer in the reason. The answers (``choices[0].message.content``, or the
``response_text`` path) are the output's ``text``, in request order.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tuner.adapters.http_request import body_template, http_concurrency, http_request_values
from tuner.adapters.template import TemplateError, render_text, render_value
from tuner.errors import WorkloadError
from tuner.results import Metric
from tuner.spec.adapters import HTTP_METRICS
from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput


class ServiceOutOfMemory(WorkloadError, MemoryError):
    """The service reported running out of memory: outcome OOM."""


class ServiceFailed(WorkloadError, RuntimeError):
    """A request failed for another reason: outcome CRASH."""


@dataclass(frozen=True)
class _Answer:
    text: str
    latency_s: float
    output_tokens: int | None


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] of ``values`` (non-empty)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _extract(document: Any, path: str) -> Any:
    """Follow a dotted path (``choices.0.message.content``) into a JSON document."""
    current = document
    for part in path.split("."):
        if isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        elif isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            raise ServiceFailed(f"the answer has no '{path}' (stopped at '{part}')")
    return current


class HttpWorkload(Workload):
    """Measures the spec's ``http`` service (see module docs). ``options`` = the block as plain data."""

    concurrent_calls = 64  # each call sends its own requests; sustained streams add up with ``concurrency``

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.invocation: dict[str, Any] | None = None
        self._last: list[_Answer] = []
        self._last_wall_s = 0.0
        self._local = threading.local()

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        values = {**dict(context.inputs), **dict(params)}
        try:
            self._url = render_text(self.options["url"], values, "url")
            self._headers = {
                k: render_text(v, values, f"headers.{k}") for k, v in dict(self.options.get("headers", {})).items()
            }
            self._concurrency = http_concurrency(self.options.get("concurrency", 1), values)
            self._bodies = [
                render_value(
                    body_template(self.options), http_request_values(self.options, context.inputs, params, index)
                )
                for index in range(int(self.options.get("requests", 4)))
            ]
        except TemplateError as error:
            raise InvalidSetting(f"http: {error}") from None
        self.invocation = {
            "kind": "http",
            "url": self._url,
            "api": self.options.get("api", "openai_chat"),
            "body": self._bodies[0],
            "concurrency": self._concurrency,
        }

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        if self.invocation is None:
            self.setup(params, context)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=self._concurrency, thread_name_prefix="tuner-http") as pool:
            answers = list(pool.map(self._send, self._bodies))
        self._last_wall_s = time.perf_counter() - started
        self._last = answers
        tokens = [a.output_tokens for a in answers]
        counters = {"requests": float(len(answers)), "concurrency": float(self._concurrency)}
        if all(t is not None for t in tokens):
            counters["output_tokens"] = float(sum(t for t in tokens if t is not None))
        return WorkloadOutput(text=[a.text for a in answers], items=len(answers), counters=counters)

    def measured_metrics(self) -> list[Metric]:
        """Per-request figures of the last call (see module docs)."""

        def metric(name: str, value: float | None, reason: str = "") -> Metric:
            unit, direction = HTTP_METRICS[name]
            if value is None:
                return Metric.unavailable(name, unit, direction, reason)
            return Metric(name, value, unit, direction)

        if not self._last:
            return [metric(name, None, "no call completed") for name in HTTP_METRICS]
        latencies = [a.latency_s for a in self._last]
        tokens = [a.output_tokens for a in self._last]
        wall = max(self._last_wall_s, 1e-9)
        token_total = sum(t for t in tokens if t is not None) if all(t is not None for t in tokens) else None
        return [
            metric("request_latency_p50_s", _percentile(latencies, 50)),
            metric("request_latency_p95_s", _percentile(latencies, 95)),
            metric("request_latency_p99_s", _percentile(latencies, 99)),
            metric("request_latency_mean_s", statistics.fmean(latencies)),
            metric("requests_per_s", len(latencies) / wall),
            metric(
                "output_tokens_per_s",
                token_total / wall if token_total is not None else None,
                "the service's answers carry no usage.completion_tokens",
            ),
        ]

    # ---------------------------------------------------------------- requests
    def _send(self, body: Any) -> _Answer:
        data = json.dumps(body).encode()
        request = urllib.request.Request(
            self._url, data=data, method="POST", headers={"Content-Type": "application/json", **self._headers}
        )
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=float(self.options.get("request_timeout_s", 120))) as reply:
                payload = reply.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:1000]
            self._raise_for_status(error.code, detail)
            raise  # unreachable: _raise_for_status always raises
        except (urllib.error.URLError, OSError) as error:
            raise ServiceFailed(f"{self._url}: {getattr(error, 'reason', error)}") from None
        latency = time.perf_counter() - started
        try:
            document = json.loads(payload)
        except json.JSONDecodeError:
            raise ServiceFailed(f"{self._url} answered non-JSON: {payload[:200]!r}") from None
        return _Answer(self._text_of(document), latency, self._tokens_of(document))

    def _raise_for_status(self, status: int, detail: str) -> None:
        lowered = detail.lower()
        if "out of memory" in lowered or "outofmemoryerror" in lowered:
            raise ServiceOutOfMemory(f"{self._url}: HTTP {status}: {detail}")
        if status in (400, 422):
            raise InvalidSetting(f"{self._url} refused the request: HTTP {status}: {detail}")
        raise ServiceFailed(f"{self._url}: HTTP {status}: {detail}")

    def _text_of(self, document: Any) -> str:
        if self.options.get("response_text"):
            return str(_extract(document, str(self.options["response_text"])))
        if self.options.get("api", "openai_chat") == "openai_chat":
            return str(_extract(document, "choices.0.message.content"))
        return json.dumps(document, sort_keys=True)

    @staticmethod
    def _tokens_of(document: Any) -> int | None:
        usage = document.get("usage") if isinstance(document, Mapping) else None
        value = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
        return int(value) if isinstance(value, (int, float)) else None
