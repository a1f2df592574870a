"""The engine's kernel choices live in `mxserve.model.kernel_selection` (below the distributed
layer, so every tensor-parallel rank chooses its kernels with the same code); re-exported here."""

from mxserve.model.kernel_selection import (
    ATTENTION_BACKENDS,
    MoEDispatcher,
    check_backend,
    choose_linear_per_layer,
    choose_model_attention,
    choose_model_moe,
    interpreter_allowed,
    linear_dispatch_set,
    resolve_overrides,
    with_moe_and_attention,
)

__all__ = ["ATTENTION_BACKENDS", "MoEDispatcher", "check_backend", "choose_linear_per_layer", "choose_model_attention",
           "choose_model_moe", "interpreter_allowed", "linear_dispatch_set", "resolve_overrides",
           "with_moe_and_attention"]
