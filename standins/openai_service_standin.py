"""STAND-IN OpenAI-compatible chat/completions service (SIMULATED, FastAPI): no model behind it.

``POST /v1/chat/completions`` answers with a deterministic text made from the
last user message (its words reversed, cut to ``max_tokens`` words) after a
simulated decode time of ``STANDIN_SECONDS_PER_TOKEN`` (default 0.005 s) per
output token plus ``STANDIN_PREFILL_S`` (default 0.02 s), and an OpenAI ``usage``
block. Behaves like a real server where the adapter can tell: concurrent requests
overlap (async sleep), a bad parameter is HTTP 422 / 400, and ``max_tokens``
above ``STANDIN_MAX_TOKENS`` (default 512) answers HTTP 500 with a ``CUDA out of
memory`` error body, the way vLLM-style servers report it. ``POST /v1/generate``
is a generic JSON endpoint (``{"prompt", "steps"}`` -> ``{"output": ...}``).
``GET /stats`` reports the requests served and the most in flight at once;
``GET /health`` answers ``ok``.

Run: ``python standins/openai_service_standin.py --port 8000`` (uvicorn).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

app = FastAPI(title="STAND-IN OpenAI-compatible service (simulated)")
_state: dict[str, int] = {"in_flight": 0, "max_in_flight": 0, "served": 0}


def _answer(prompt: str, max_tokens: int) -> list[str]:
    words = prompt.split()[::-1] or ["(empty)"]
    return words[:max_tokens]


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/stats")
async def stats() -> dict[str, int]:
    return dict(_state)


@app.post("/stats/reset")
async def reset() -> dict[str, int]:
    _state.update(in_flight=0, max_in_flight=0, served=0)
    return dict(_state)


@app.post("/v1/chat/completions")
async def chat(body: dict[str, Any]) -> JSONResponse:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return JSONResponse({"error": {"message": "messages must be a non-empty list"}}, status_code=422)
    max_tokens = body.get("max_tokens", 16)
    temperature = body.get("temperature", 1.0)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return JSONResponse(
            {"error": {"message": f"max_tokens must be a positive integer, not {max_tokens!r}"}}, status_code=400
        )
    if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        return JSONResponse(
            {"error": {"message": f"temperature must be within [0, 2], not {temperature!r}"}}, status_code=400
        )
    if max_tokens > int(os.environ.get("STANDIN_MAX_TOKENS", "512")):
        return JSONResponse(
            {
                "error": {
                    "message": "CUDA out of memory. Tried to allocate 2.00 GiB (stand-in: "
                    "simulated KV cache for max_tokens)"
                }
            },
            status_code=500,
        )
    prompt = str(messages[-1].get("content", ""))
    words = _answer(prompt, max_tokens)
    _state["in_flight"] += 1
    _state["max_in_flight"] = max(_state["max_in_flight"], _state["in_flight"])
    try:
        seconds = float(os.environ.get("STANDIN_PREFILL_S", "0.02")) + len(words) * float(
            os.environ.get("STANDIN_SECONDS_PER_TOKEN", "0.005")
        )
        await asyncio.sleep(seconds)
    finally:
        _state["in_flight"] -= 1
        _state["served"] += 1
    return JSONResponse(
        {
            "id": f"standin-{_state['served']}",
            "object": "chat.completion",
            "model": body.get("model", "standin"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length" if len(words) == max_tokens else "stop",
                    "message": {"role": "assistant", "content": " ".join(words)},
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt.split()),
                "completion_tokens": len(words),
                "total_tokens": len(prompt.split()) + len(words),
            },
        }
    )


@app.post("/v1/generate")
async def generate(body: dict[str, Any]) -> JSONResponse:
    steps = body.get("steps", 1)
    if not isinstance(steps, int) or steps < 1:
        return JSONResponse({"detail": f"steps must be a positive integer, not {steps!r}"}, status_code=422)
    await asyncio.sleep(0.01 * steps)
    return JSONResponse({"output": str(body.get("prompt", "")).upper(), "steps": steps})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
