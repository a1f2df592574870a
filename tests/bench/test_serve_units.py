"""bench serve's pure parts: statistics, prompt sets, option checks (no server)."""

from __future__ import annotations

import pytest

from mxserve.bench.serve.dataset import random_prompts, text_prompts
from mxserve.bench.serve.run import ServeBenchOptions
from mxserve.bench.serve.stats import RequestRecord, percentile, summarize


def test_percentile_interpolates_like_numpy():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="outside"):
        percentile(values, 101)


def test_summary_of_a_level():
    a = RequestRecord(sent_s=0.0, chunk_s=[0.5, 0.6, 0.8], num_output_tokens=3, done_s=0.8)
    b = RequestRecord(sent_s=0.1, chunk_s=[1.1, 1.2, 1.3], num_output_tokens=3, done_s=1.3)
    bad = RequestRecord(sent_s=0.2, error="HTTP 503: queue full")
    s = summarize("text", 2, [a, b, bad], wall_s=2.0)
    assert (s.num_requests, s.num_errors, s.first_errors) == (3, 1, ("HTTP 503: queue full",))
    assert s.total_output_tokens == 6 and s.aggregate_output_tok_s == 3.0
    assert s.ttft_p50_s == pytest.approx(0.75)  # 0.5 and 1.0
    assert s.itl_p50_s == pytest.approx(0.1)  # gaps 0.1, 0.2, 0.1, 0.1
    assert s.per_stream_decode_tok_s_median == pytest.approx((2 / 0.3 + 2 / 0.2) / 2)


def test_prompt_sets_are_seeded_exact_length_and_start_with_bos():
    p1 = random_prompts(5, 17, vocab_size=50, bos_id=0, seed=3)
    assert p1 == random_prompts(5, 17, vocab_size=50, bos_id=0, seed=3)
    assert p1 != random_prompts(5, 17, vocab_size=50, bos_id=0, seed=4)
    assert all(len(p) == 17 and p[0] == 0 and 0 not in p[1:] and max(p) < 50 for p in p1)
    text = list(range(100, 110))
    t = text_prompts(4, 25, text_ids=text, bos_id=7, seed=0)
    assert all(len(p) == 25 and p[0] == 7 for p in t)
    for p in t:  # a window of the text, wrapping around
        start = text.index(p[1])
        assert p[1:] == [text[(start + i) % 10] for i in range(24)]
    with pytest.raises(ValueError, match="no tokens"):
        text_prompts(1, 4, text_ids=[], bos_id=None, seed=0)


def _opts(**changes):
    base = dict(url=None, model=None, device="cpu", concurrency=(1, 2), datasets=("text",), prompt_len=8, output_len=4,
                requests_per_client=1, seed=0, max_model_len=256, max_num_batched_tokens=64, prefill_cap=16,
                scenario_reps=1, text_file=None, api_key=None, request_timeout_s=60, server_start_timeout_s=60)
    return ServeBenchOptions(**{**base, **changes})


@pytest.mark.parametrize(("changes", "message"), [
    ({"concurrency": (0,)}, "concurrency"),
    ({"datasets": ("sharegpt",)}, "datasets"),
    ({"prompt_len": 250, "output_len": 10}, "exceeds max_model_len"),
    ({"prefill_cap": 64}, "must be below"),
    ({"max_num_batched_tokens": 254}, "needs max_model_len"),
    ({"url": "http://127.0.0.1:9", "server_args": ("--speculative-config", "{}")}, "applies to the servers bench starts"),
])
def test_bad_options_name_the_problem(changes, message):
    with pytest.raises(ValueError, match=message):
        _opts(**changes)


def test_extra_server_arguments_reach_the_started_servers_verbatim():
    from mxserve.bench.serve.server_process import ServerArgs

    spec = '{"method": "dspark", "num_speculative_tokens": 3}'
    argv = ServerArgs(None, "cpu", 256, 2, 64, 16, ("--speculative-config", spec)).argv()
    assert argv[-2:] == ["--speculative-config", spec]
    assert argv[argv.index("--long-prefill-token-threshold") + 1] == "16"
