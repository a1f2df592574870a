"""Decode steps timed as the engine runs them when it can: CUDA-graph replay.

The engine's `ModelRunner` replays `DecodeGraphs` (`mxserve.engine.cuda_graphs`) for a pure-decode
step whose batch fits a bucket, when the model `supports_cuda_graphs` and the first step's host-sync
probe and capture succeed; otherwise the step runs eager and the runner says why. The bench asks
the same questions through the same code (`decide`, `DecodeGraphs`), so `graph_s` is what a
served decode step costs — host-side batch building, the copy into the static buffers and the
replay — and when there is no graph, the reason is reported instead, never an eager number in
its place.

The decode path's shapes are fixed by a `DecodeGeometry` (the engine's `max_model_len`): its
candidate sets are sized by that capacity and masked per row, so a step at a short context costs
what it costs under a server configured for the longest one. The geometry used is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mxserve.bench.layers.timing import median, time_steps
from mxserve.engine.cuda_graphs import DecodeGraphs, decide
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.model.kv_state import ModelCacheState

# device-only timing of a captured step: rounds of back-to-back replays (median over rounds)
DEVICE_REPLAYS, DEVICE_ROUNDS = 20, 5


def time_graph_decode(model: Any, state: ModelCacheState, token_ids: Sequence[int], positions: Sequence[int], *,
                      device: torch.device, max_model_len: int, warmup: int, reps: int) -> dict[str, Any]:
    """{"graph_s": [seconds per rep] | None, "graph_median_s": float | None, "graph_status": words,
    "graph_bucket": int | None, "graph_max_model_len": int} for one decode step of len(token_ids)
    sequences (ids 0..n-1 in `state`), one token each at `positions`."""
    n = len(token_ids)
    out: dict[str, Any] = {"graph_s": None, "graph_median_s": None, "graph_bucket": None,
                           "graph_max_model_len": max_model_len}
    decision = decide([1] * n, enforce_eager=False, device_type=device.type,
                      model_capturable=getattr(model, "supports_cuda_graphs", False),
                      hooks_on=getattr(model, "observer", None) is not None)
    if decision.is_eager:
        out["graph_status"] = f"not captured: {decision.reason}"
        return out
    geometry = DecodeGeometry.for_positions(model.config, state.block_size, max_model_len)
    graphs = DecodeGraphs(model, state, geometry, device)
    seq_ids = list(range(n))

    def step() -> torch.Tensor | None:
        return graphs.run(list(token_ids), seq_ids, list(positions), decision.bucket)

    # The first run probes for host syncs and captures (a re-run decode step rewrites the same
    # slots with the same bytes, so every rep is the same work).
    if step() is None:
        out["graph_status"] = f"not captured: {graphs.unavailable}"
        return out
    times = time_steps(step, device, warmup=warmup, reps=reps)
    device_s = graphs.replay_device_seconds(decision.bucket, replays=DEVICE_REPLAYS, rounds=DEVICE_ROUNDS)
    out.update(graph_s=times, graph_median_s=median(times), graph_bucket=decision.bucket,
               graph_device_s=device_s, graph_device_median_s=median(device_s) if device_s else None,
               graph_status=f"replayed (bucket {decision.bucket}, {graphs.num_replays} replays)")
    return out


def time_graph_marginals(model: Any, state: ModelCacheState, token_ids: Sequence[int], positions: Sequence[int],
                         kinds: Sequence[str], base: dict[str, Any], *, device: torch.device, max_model_len: int,
                         warmup: int, reps: int) -> dict[str, Any]:
    """{"graph_marginal_s": {kind: seconds}, "graph_marginal_status": words}: what one more layer of
    each built kind adds to the replayed step.

    The step is replayed once more with the first built layer of the kind appended to the layer
    list (the same weights and caches: the same work; the values it writes into that layer's caches
    differ, and nothing in the bench reads them as data afterwards), and `base_s` (the step as
    built) is subtracted. Work done once per step (embedding, head, the step's slot maps that the
    first layer of a kind computes, the host's batch building) cancels out, so a marginal is the
    per-layer cost a deeper model pays, which the eager profile's layer split (host-bound: it
    weighs layers by their launches, not their device time) cannot give.

    `base` is `time_graph_decode`'s row for the step as built. The difference is taken between
    device-only replay times (`graph_device_median_s`: back-to-back replays, event-timed) when both
    rows have them, else between served steps (`graph_median_s`). Why (session 7): the served
    step includes the host's batch building and a sync per rep, so with 3 reps the difference of
    two ~1.4 ms steps moved a CSA layer's marginal from 279 to 512 us depending only on which
    context ran first; the replay loop takes the host out."""
    layers = list(model.layers)
    basis = "graph_device_median_s" if base.get("graph_device_median_s") is not None else "graph_median_s"
    out: dict[str, Any] = {"graph_marginal_s": {}, "graph_marginal_status": "measured",
                           "graph_marginal_basis": "device replays" if basis == "graph_device_median_s"
                           else "served steps"}
    try:
        for kind in dict.fromkeys(kinds):  # each built kind once, in build order
            model.layers = [*layers, layers[list(kinds).index(kind)]]
            row = time_graph_decode(model, state, token_ids, positions, device=device, max_model_len=max_model_len,
                                    warmup=warmup, reps=reps)
            if row.get(basis) is None:
                out["graph_marginal_status"] = f"{kind}: {row['graph_status']}"
                break
            out["graph_marginal_s"][kind] = row[basis] - base[basis]
    finally:
        model.layers = layers
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the extra graphs' pools
    return out
