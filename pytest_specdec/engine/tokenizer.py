"""Byte-level tokenizer: token ids 0-255 are the UTF-8 bytes, then a few special tokens.

Bytes need no vocabulary file, round-trip any text, and keep the output layer small enough for
a CPU, so token counts are byte counts.
"""

from __future__ import annotations

import codecs

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
VOCAB_SIZE = 259
SPECIAL_TOKENS = {BOS_ID: "<s>", EOS_ID: "</s>", PAD_ID: "<pad>"}


class ByteTokenizer:
    """Encodes text as BOS + its UTF-8 bytes; decodes the byte ids, dropping special tokens."""

    vocab_size = VOCAB_SIZE
    bos_id = BOS_ID
    eos_id = EOS_ID
    pad_id = PAD_ID

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [BOS_ID, *text.encode("utf-8")] if add_special_tokens else list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class IncrementalDecoder:
    """Streams text out of byte ids, holding back an incomplete UTF-8 sequence until it completes.

    The streamed text is then always a prefix of the final text, which is what SSE clients that
    show cumulative text expect.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def feed(self, ids: list[int]) -> str:
        """Append the text of ``ids`` and return the whole text so far."""
        piece = self._decoder.decode(bytes(i for i in ids if i < 256))
        if piece:
            self.text += piece
        return self.text

    def finish(self) -> str:
        self.text += self._decoder.decode(b"", final=True)
        return self.text
