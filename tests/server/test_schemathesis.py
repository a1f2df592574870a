"""Schemathesis over the server's own OpenAPI schema: generated requests (valid and invalid)
against every operation of the live server, with zero 5xx. Bounded: a fixed number of examples
per operation, and generated bodies are trimmed so no example makes the CPU model generate for
long (at most 4 new tokens, 2 samples, short prompts, no tools block of ~550 tokens)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.server.live import API_KEY

MAX_EXAMPLES = 25


def _run_operation(operation, mode, statuses: list[int]) -> list[str]:
    problems: list[str] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate], derandomize=True, database=None)
    def run(case) -> None:
        _bound_work(case.body)
        response = case.call(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
        statuses.append(response.status_code)
        if response.status_code >= 500:
            problems.append(f"{case.method} {case.path} {case.body!r} -> {response.status_code} {response.text[:300]}")

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (GET routes without parameters)
        assert mode is GenerationMode.NEGATIVE and operation.method.upper() == "GET", operation.label
    return problems


def _bound_work(body: Any) -> None:
    """Trim what would only make the example slow; invalid values (negative, wrong type) stay."""
    if not isinstance(body, dict):
        return
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int) and not isinstance(body[key], bool) and 4 < body[key] < 10**9:
            body[key] = 4
    if "messages" in body and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = 4  # chat's default is the rest of the context
    if isinstance(body.get("n"), int) and not isinstance(body["n"], bool) and body["n"] > 2:
        body["n"] = 2
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        body["prompt"] = [p[:32] if isinstance(p, list | str) else p for p in prompt[:2]]
    elif isinstance(prompt, str):
        body["prompt"] = prompt[:200]
    if isinstance(body.get("messages"), list):
        body["messages"] = body["messages"][:3]
    body.pop("tools", None)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_server_errors(live, mode):
    api = schemathesis.openapi.from_url(live.base_url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 7  # health, metrics, models, completions, chat, tokenize, detokenize
    statuses: list[int] = []
    problems = [p for operation in operations for p in _run_operation(operation, mode, statuses)]
    assert not problems, "\n".join(problems[:5])
    assert len(statuses) >= 50, statuses  # it really ran
    print(f"schemathesis {mode.value}: {len(statuses)} requests, statuses {sorted(set(statuses))}")
    assert httpx.get(live.base_url + "/health").status_code == 200
