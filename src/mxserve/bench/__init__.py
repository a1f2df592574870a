"""Performance evidence (docs/benchmarks.md): `mxserve bench serve` and `mxserve bench layers`.

`bench.serve` drives a running OpenAI-compatible server (or servers it starts itself) with
concurrent streaming clients and reports throughput and latency; `bench.layers` builds
full-size DeepSeek-V4 layers with random release-format weights on one device, times prefill
and decode steps with the kernels the engine would choose, and sets each against the
bandwidth floor of the bytes that step must read. Nothing below `bench` imports it; it sits
beside `server` and `verify` in the layer contract. Plot libraries load only inside `plot.py`.
"""
