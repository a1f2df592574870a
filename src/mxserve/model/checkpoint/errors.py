"""The one exception checkpoint I/O raises.

Every problem with a checkpoint on disk (a missing or truncated file, a tensor the config does
not expect, a wrong dtype or shape, a NaN scale byte, a manifest mismatch) is a
`CheckpointError` whose message is one line that names the file or tensor. The CLI prints that
line and exits with code 2; nothing else needs to know which case it was.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that mxserve cannot use; the one-line message names the file or tensor."""

    def __init__(self, message: str) -> None:
        # One line by contract: a multi-line reason from a library is folded into one.
        super().__init__(" ".join(str(message).split()))
