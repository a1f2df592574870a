"""Incremental detokenization: token ids in, printable text deltas out, one request at a time.

Two promises:

* **Never split a UTF-8 character.** A byte-level BPE token can end in the middle of a multi-byte
  character (CJK is 3 bytes, most emoji 4, and they are often cut across tokens). Decoding such a
  prefix gives U+FFFD; the detokenizer holds the text back until a later token completes the
  character (a real, complete U+FFFD followed by more text is passed on; one at the very end is
  released by `finish()`).
* **Stop strings across token boundaries.** Text that could be the start of a stop string is held
  back until the next tokens decide it. When a stop string appears, the delta holds the text up to
  it (plus the stop string if `include_stop_str_in_output`) and `stop` names the string; the
  detokenizer then refuses more tokens. Only generated text is searched, never the prompt.

Method (as vLLM's detokenizer): decode a short window of ids twice -- the window up to the last
emitted token, and the window with the new tokens -- and emit the difference. That works for any
tokenizer whose decode is prefix-stable, and needs no byte tables. No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

REPLACEMENT_CHAR = "\ufffd"


class Decoder(Protocol):
    """What the detokenizer needs from a tokenizer (`mxserve.engine.tokenizer.Tokenizer` fits)."""

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...


@dataclass(frozen=True)
class DetokenizerDelta:
    """What one call produced."""

    text: str  # new text, safe to show (complete characters, no possible stop-string prefix)
    stop: str | None = None  # the stop string that ended generation, if one matched in this call


class IncrementalDetokenizer:
    """Stream text for one request's generated tokens.

    tokenizer: anything with `decode(ids, skip_special_tokens=...)`.
    skip_special_tokens: drop special tokens from the text (as `decode` defines them).
    stop: stop strings; the earliest occurrence wins (the longer string on a tie).
    include_stop_str_in_output: keep the matched stop string in the text.
    context_ids: the last few prompt ids, decoded only as context for tokenizers whose decode of a
        token depends on its left neighbour (e.g. SentencePiece leading spaces); never emitted.
    """

    def __init__(
        self,
        tokenizer: Decoder,
        *,
        skip_special_tokens: bool = True,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        context_ids: Sequence[int] = (),
    ) -> None:
        if isinstance(stop, str):
            stop = (stop,)
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop strings must be non-empty strings, got {list(stop)!r}")
        self._tok = tokenizer
        self._skip_special = skip_special_tokens
        self._stop = tuple(stop)
        self._max_hold = max((len(s) for s in self._stop), default=1) - 1
        self._include_stop = include_stop_str_in_output
        self._ids: list[int] = [int(i) for i in context_ids]
        self._num_context_ids = len(self._ids)
        self._prefix_offset = 0  # window start: ids before it are never decoded again
        self._read_offset = len(self._ids)  # ids before it have been turned into text
        self._held = ""  # decoded text held back as a possible stop-string prefix
        self._output: list[str] = []
        self.stopped: str | None = None  # the stop string that matched, once one did
        self.finished = False

    @property
    def output_text(self) -> str:
        """All text emitted so far."""
        return "".join(self._output)

    @property
    def num_generated_tokens(self) -> int:
        return len(self._ids) - self._num_context_ids

    def add_token(self, token_id: int) -> DetokenizerDelta:
        return self.add_tokens((token_id,))

    def add_tokens(self, token_ids: Iterable[int]) -> DetokenizerDelta:
        """Feed generated ids; return the text they make printable and any stop string matched."""
        if self.finished:
            raise RuntimeError("detokenizer already finished (stop string matched or finish() called)")
        pieces = []
        for token_id in token_ids:
            self._ids.append(int(token_id))
            text = self._decode_new(final=False)
            out, stop = self._scan(text)
            pieces.append(out)
            if stop is not None:
                return self._done(pieces, stop)
        return self._emit(pieces, None)

    def finish(self) -> DetokenizerDelta:
        """End of generation: release everything held back (an unfinished character as U+FFFD)."""
        if self.finished:
            return DetokenizerDelta("")
        text = self._decode_new(final=True)
        out, stop = self._scan(text)
        if stop is not None:
            return self._done([out], stop)
        out += self._held
        self._held = ""
        return self._done([out], None)

    # ------------------------------------------------------------------ internals
    def _decode_new(self, *, final: bool) -> str:
        """Text of the ids after `read_offset`, or "" while it ends inside a character."""
        if self._read_offset == len(self._ids):
            return ""
        window = self._ids[self._prefix_offset :]
        before = self._tok.decode(
            window[: self._read_offset - self._prefix_offset], skip_special_tokens=self._skip_special
        )
        after = self._tok.decode(window, skip_special_tokens=self._skip_special)
        if not final and (len(after) <= len(before) or after.endswith(REPLACEMENT_CHAR)):
            # nothing printable yet, or the last character is still incomplete: wait
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before) :]

    def _scan(self, text: str) -> tuple[str, str | None]:
        """Add `text` to the held text; return what may be emitted and the stop string, if any."""
        buf = self._held + text
        if not self._stop:
            self._held = ""
            return buf, None
        best: tuple[int, str] | None = None
        for s in self._stop:
            pos = buf.find(s)
            if pos >= 0 and (best is None or pos < best[0] or (pos == best[0] and len(s) > len(best[1]))):
                best = (pos, s)
        if best is not None:
            pos, s = best
            self._held = ""
            return buf[:pos] + (s if self._include_stop else ""), s
        # hold back the longest suffix that could still grow into a stop string
        hold = 0
        for k in range(min(len(buf), self._max_hold), 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self._stop):
                hold = k
                break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], None

    def _emit(self, pieces: list[str], stop: str | None) -> DetokenizerDelta:
        text = "".join(pieces)
        if text:
            self._output.append(text)
        return DetokenizerDelta(text, stop)

    def _done(self, pieces: list[str], stop: str | None) -> DetokenizerDelta:
        self.finished = True
        self.stopped = stop
        return self._emit(pieces, stop)
