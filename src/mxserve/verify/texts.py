"""The text material the stages use: held-out sample tokens and the built-in prompts.

Held-out text comes from `heldout_sample.txt` next to the checkpoint (the packaged default
model ships one); it was never trained on, so perplexity on it measures the model, not memory.
"""

from __future__ import annotations

from mxserve.verify.session import VerifySession

HELDOUT_FILE = "heldout_sample.txt"


def heldout_tokens(session: VerifySession) -> list[int] | None:
    path = session.model_dir / HELDOUT_FILE
    if not path.is_file():
        return None
    return session.tokenizer.encode(path.read_text(encoding="utf-8"))


def heldout_prompt(session: VerifySession, length: int) -> list[int]:
    """BOS + the first length-1 held-out tokens (the built-in passages when there is no sample)."""
    tokens = heldout_tokens(session) or session.tokenizer.encode(" ".join(COMPLETION_PROMPTS) * 8)
    if len(tokens) < length - 1:
        tokens = (tokens * (length // max(len(tokens), 1) + 1))
    return [session.config.bos_token_id, *tokens[: length - 1]]


COMPLETION_PROMPTS = (
    "In the beginning God created the heaven and the earth.",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the poor in spirit: for theirs is",
    "And it came to pass in those days, that",
    "The words of the preacher, the son of David,",
    "Now the serpent was more subtil than any beast",
    "And Jesus answered and said unto them,",
    "Hear, O Israel: The LORD our God is",
    "Then spake Jesus again unto them, saying,",
    "I will lift up mine eyes unto the hills,",
)

CHAT_QUESTIONS = (
    "Who was Moses, and what did he do?",
    "Tell me about the children of Israel in Egypt.",
    "What happened to the walls of Jericho?",
)
