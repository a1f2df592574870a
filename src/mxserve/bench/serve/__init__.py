"""`mxserve bench serve`: a concurrency sweep of streaming clients plus the chunked-prefill scenario.

Files, one idea each: `stats` (percentiles and per-level summaries, pure Python), `dataset`
(seeded prompt sets: random token ids and real text), `client` (one streaming request, timed),
`server_process` (an `mxserve serve` subprocess), `sweep` (closed-loop clients per concurrency
level), `prefill_cap` (a short request behind a long prefill, with and without the cap), `run`
(the whole benchmark, JSON out).
"""
