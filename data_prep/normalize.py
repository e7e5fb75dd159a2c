"""Text normalization applied before every filter, the dedup hash and the tokenizer.

It is also the text the round trip promises: a SentencePiece model trained here (identity
normalization, byte fallback) decodes each document back to exactly this string. The
checks are C-speed ``in`` / ``translate`` scans because they run on every byte.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import repeat

# C0 control characters except tab and newline, DEL, and the BOM / zero-width no-break space.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff]")
_CONTROL_OR_CR_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, 0x0D, *range(0x0E, 0x20), 0x7F])


def normalize_encoded(text: str, form: str = "NFC", tidy_whitespace: bool = False) -> tuple[str, bytes]:
    """The normalized text and its UTF-8 bytes (encoded once, for the filters and the hash).

    Unicode ``form`` (NFC | NFKC | none); ``\\r\\n`` and ``\\r`` become ``\\n``; C0 control
    characters (not tab, not newline), DEL and BOMs are removed; leading and trailing whitespace
    is stripped. ``tidy_whitespace`` also removes spaces and tabs before line ends and shrinks
    runs of blank lines to one (two more scans of every document).
    """
    if form != "none" and not text.isascii() and not unicodedata.is_normalized(form, text):
        text = unicodedata.normalize(form, text)
    encoded = text.encode("utf-8")
    original = text
    if len(encoded.translate(None, _CONTROL_OR_CR_BYTES)) != len(encoded):
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = _CONTROL.sub("", text)
    elif not text.isascii() and "\ufeff" in text:
        text = text.replace("\ufeff", "")
    if tidy_whitespace:
        if " \n" in text or "\t\n" in text:
            text = "\n".join(map(str.rstrip, text.split("\n"), repeat(" \t")))
        while "\n\n\n" in text:
            text = text.replace("\n\n\n", "\n\n")
    text = text.strip()
    if text is not original:
        encoded = text.encode("utf-8")
    return text, encoded


def normalize_text(text: str, form: str = "NFC", tidy_whitespace: bool = False) -> str:
    return normalize_encoded(text, form, tidy_whitespace)[0]
