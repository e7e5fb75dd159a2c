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
_ASCII_BYTES = bytes(range(128))
_INERT: dict[str, set[str]] = {"NFC": set(), "NFKC": set()}  # characters no context changes, per form
_NOT_INERT: dict[str, set[str]] = {"NFC": set(), "NFKC": set()}
_SECONDS: list[frozenset[int]] = []


def normalize_encoded(text: str, form: str = "NFC", tidy_whitespace: bool = False) -> tuple[str, bytes]:
    """The normalized text and its UTF-8 bytes (encoded once, for the filters and the hash).

    Unicode ``form`` (NFC | NFKC | none); ``\\r\\n`` and ``\\r`` become ``\\n``; C0 control
    characters (not tab, not newline), DEL and BOMs are removed; leading and trailing whitespace
    is stripped. ``tidy_whitespace`` also removes spaces and tabs before line ends and shrinks
    runs of blank lines to one (two more scans of every document).
    """
    encoded = text.encode("utf-8")
    non_ascii = None if len(encoded) == len(text) else set(encoded.translate(None, _ASCII_BYTES).decode("utf-8"))
    if form != "none" and non_ascii and not _inert(non_ascii, form) and not unicodedata.is_normalized(form, text):
        text = unicodedata.normalize(form, text)
        encoded = text.encode("utf-8")
        non_ascii = set(encoded.translate(None, _ASCII_BYTES).decode("utf-8"))
    original = text
    if len(encoded.translate(None, _CONTROL_OR_CR_BYTES)) != len(encoded):
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = _CONTROL.sub("", text)
    elif non_ascii and "\ufeff" in non_ascii:
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


def _inert(chars: set[str], form: str) -> bool:
    """True when every character is unchanged by ``form`` in any context: its quick-check
    property is Yes and its combining class 0 (cached per character). A text of ASCII and such
    characters is normalized (``unicodedata.is_normalized`` answers from the same quick check),
    so the per-character scan of ``is_normalized`` is skipped."""
    known = _INERT[form]
    if chars <= known:
        return True
    for char in chars - known:
        if char in _NOT_INERT[form]:
            return False
        if (
            unicodedata.combining(char) == 0
            and ord(char) not in _composition_seconds()
            and unicodedata.is_normalized(form, char)
        ):
            known.add(char)
        else:
            _NOT_INERT[form].add(char)
            return False
    return True


def _composition_seconds() -> frozenset[int]:
    """Code points that can combine with a preceding character (quick check Maybe, or more):
    the second of every two-character canonical decomposition, and the Hangul vowel and
    trailing jamo (composed algorithmically)."""
    if not _SECONDS:
        seconds = {*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)}
        for code in range(0x30000):  # no canonical decomposition lies above U+2FA1D
            decomposition = unicodedata.decomposition(chr(code))
            if decomposition and decomposition[0] != "<":
                parts = decomposition.split()
                if len(parts) == 2:
                    seconds.add(int(parts[1], 16))
        _SECONDS.append(frozenset(seconds))
    return _SECONDS[0]


def normalize_text(text: str, form: str = "NFC", tidy_whitespace: bool = False) -> str:
    return normalize_encoded(text, form, tidy_whitespace)[0]
