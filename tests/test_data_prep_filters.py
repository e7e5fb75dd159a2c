"""Normalization, each quality rule on a planted document, language ID offline, exact dedup/split."""

from __future__ import annotations

import random
import socket

import numpy as np
import pytest

from data_prep.config import C4Config, CleanConfig, LanguageConfig, QualityConfig, SplitConfig
from data_prep.dedup import assign, first_occurrences, sample_rows
from data_prep.filters import PUNCTUATION, DocumentFilter, LanguageFilter, WordCounts, whole_lines
from data_prep.normalize import normalize_encoded, normalize_text
from data_prep.writer import DROP, TRAIN, VALID
from tests.data_prep_fixtures import FOREIGN, SENTENCES, english_doc


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("  a\r\nb\rc  ", "a\nb\nc"),
        ("line  \t\nnext \n", "line  \t\nnext"),
        ("a\n\n\n\n\nb", "a\n\n\n\n\nb"),
        ("\ufeffzero\x00 width\x07 bell\x7f", "zero width bell"),
        ("tab\tstays", "tab\tstays"),
        ("e\u0301 composed", "\u00e9 composed"),  # NFC
        ("\u00a0nbsp kept\u00a0inside", "nbsp kept\u00a0inside"),
    ],
)
def test_normalize(raw, clean):
    text, encoded = normalize_encoded(raw)
    assert text == clean and encoded == clean.encode()
    assert normalize_text(clean) == clean  # idempotent


def test_tidy_whitespace():
    assert normalize_text("line  \t\nnext \n\n\n\nend", tidy_whitespace=True) == "line\nnext\n\nend"


def test_normalize_forms():
    assert normalize_text("ﬁne ²", "NFKC") == "fine 2"
    assert normalize_text("ﬁne ²", "NFC") == "ﬁne ²"
    assert normalize_text("e\u0301", "none") == "e\u0301"


def no_language(**quality) -> DocumentFilter:
    return DocumentFilter(CleanConfig(language=LanguageConfig(enabled=False), quality=QualityConfig(**quality)))


GOOD = normalize_text(english_doc(7))
BULLETS = "\n".join(f"\u2022 {sentence}" for sentence in SENTENCES[:12]) + "\nThe end."


def test_good_document_passes_everything():
    assert DocumentFilter(CleanConfig())(GOOD) is None


@pytest.mark.parametrize(
    "text, rule",
    [
        ("word " * 49, "gopher_min_words"),
        (GOOD + " extra" * 100_000, "gopher_max_words"),
        ("the and of " + "a b c d " * 20, "gopher_mean_word_length"),
        ("the and of " + "internationalization " * 60, "gopher_mean_word_length"),
        (GOOD + " #tag" * 20, "gopher_symbol_word_ratio"),
        (GOOD.replace(" the ", " a ").replace(" to ", " ").replace(" of ", " ").replace(" and ", " "), None),
        ("Lorem dolor sit amet consectetur " * 12, "gopher_stop_words"),
        (GOOD + " 2024-01-15 +1(555)0100" * 40, "gopher_alpha_words"),
        (BULLETS, "gopher_bullet_lines"),
        (
            "\n".join("The story goes on and on with the old man and the sea and the..." for _ in range(12)),
            "gopher_ellipsis_lines",
        ),
        ("\n".join([SENTENCES[0]] * 5 + SENTENCES[1:6]), "gopher_duplicate_lines"),
        ("\n".join([SENTENCES[0] * 3] * 2 + SENTENCES[1:8]), "gopher_duplicate_line_chars"),
        (GOOD + "\nLorem Ipsum dolor sit amet.", "c4_lorem_ipsum"),
        ("\n".join(s.rstrip(".") for s in SENTENCES[:12]), "c4_terminal_punct"),
    ],
)
def test_each_rule_on_a_planted_document(text, rule):
    assert no_language()(normalize_text(text)) == rule


def only(**rule) -> DocumentFilter:
    """A filter with just the given quality rule(s) on, no language ID, no C4 rules."""
    off = {f: None for f in QUALITY_THRESHOLDS}
    return DocumentFilter(
        CleanConfig(
            language=LanguageConfig(enabled=False),
            quality=QualityConfig(**{**off, **rule}),
            c4=C4Config(enabled=False),
        )
    )


def c4_only(**rule) -> DocumentFilter:
    off = dict(drop_lorem_ipsum=False, drop_curly_brace=False, min_terminal_punct_lines_fraction=None)
    return DocumentFilter(
        CleanConfig(
            language=LanguageConfig(enabled=False), quality=QualityConfig(enabled=False), c4=C4Config(**{**off, **rule})
        )
    )


QUALITY_THRESHOLDS = [
    "min_words",
    "max_words",
    "min_mean_word_length",
    "max_mean_word_length",
    "max_symbol_word_ratio",
    "max_bullet_lines_fraction",
    "max_ellipsis_lines_fraction",
    "min_alpha_words_fraction",
    "min_stop_words",
    "max_duplicate_lines_fraction",
    "max_duplicate_line_chars_fraction",
    "max_duplicate_paragraphs_fraction",
    "max_duplicate_paragraph_chars_fraction",
]


def test_stop_words_rule_needs_two_distinct_stop_words():
    text = normalize_text(GOOD.replace(" the ", " a ").replace("The ", "A "))
    assert no_language()(text) is None  # still has "to", "of", "and", ...
    only_one = normalize_text("The " + "alpha beta gamma delta. " * 20)
    assert no_language()(only_one) == "gopher_stop_words"
    rule = only(min_stop_words=2)
    # "the" 30 times is one distinct stop word (Gopher, datatrove: a set of words), not 30.
    assert rule("the red fox jumps over the fence " * 15) == "gopher_stop_words"
    assert rule("the red fox jumps over the fence and runs " * 15) is None
    assert rule("The red fox jumps. And the cat sleeps.") == "gopher_stop_words"  # case-sensitive, as datatrove
    # Looked for in the whole document, not only in the first sample_chars characters.
    late = "alpha beta gamma delta " * 200 + "the cat and the dog"
    assert len(late) > 4000 and rule(late) is None
    assert rule("alpha beta gamma delta " * 200 + "the cat") == "gopher_stop_words"


def test_terminal_punctuation_judges_whole_lines_when_quality_is_off():
    """A long single-line document (a KJV chapter is one line) is never judged on a cut line."""
    rule = c4_only(min_terminal_punct_lines_fraction=0.12)
    chapter = " ".join(SENTENCES)  # 2377 characters, one line, ends with "."
    assert len(chapter) > C4Config().sample_chars and rule(chapter) is None
    assert whole_lines(chapter, None, 2000) == [chapter]
    # The window's last line is judged whole: 1 of 2 lines ends a sentence (0.5 >= 0.12).
    two = "x" * 1990 + "\n" + chapter
    assert whole_lines(two, None, 2000) == ["x" * 1990, chapter] and rule(two) is None
    # 9 lines without end punctuation and one with: 0.1 < 0.12 drops, over whole lines.
    lines = "\n".join([s.rstrip(".") for s in SENTENCES[:9]] + [chapter])
    assert rule(lines) == "c4_terminal_punct"
    assert rule("\n".join([s.rstrip(".") for s in SENTENCES[:7]] + [chapter])) is None  # 1/8 = 0.125
    # The same verdicts with quality on (its own window) and with the window off.
    assert DocumentFilter(CleanConfig(language=LanguageConfig(enabled=False)))(chapter) is None
    assert c4_only(min_terminal_punct_lines_fraction=0.12, sample_chars=None)(lines) == "c4_terminal_punct"


def test_lorem_ipsum_anywhere_in_any_case():
    rule = c4_only(drop_lorem_ipsum=True)
    filler = " ".join(SENTENCES)  # 2377 characters
    for late in ("LOREM IPSUM dolor sit amet.", "Lorem IpSum dolor sit amet.", "lorem ipsum"):
        assert rule(filler + "\n" + late) == "c4_lorem_ipsum", late
    assert rule(filler + "\nLorem  ipsum, dolor.") is None  # two spaces: not the phrase (C4: "lorem ipsum")
    assert rule(filler) is None


def test_alpha_words_need_a_real_letter():
    rule = only(min_alpha_words_fraction=0.8)
    prose = " ".join(SENTENCES[0].split()[:12])  # 12 words with letters
    # 12 of 15 tokens have a letter: 0.8 keeps; 12 of 16: 0.75 drops. Symbols are no letters.
    for symbol in ("\u2014", "\u20ac5", "\u00a9", "\u00bd", "\U0001f600", "--"):
        assert rule(prose + f" {symbol}" * 3) is None, symbol
        assert rule(prose + f" {symbol}" * 4) == "gopher_alpha_words", symbol
    # Letters of any script count.
    assert rule(prose + " \u0416\u0416 \u00e9t\u00e9 \u4e2d\u6587 \u0928\u092e\u0938\u094d\u0924\u0947") is None


def test_word_counts_match_whitespace_tokens():
    """Tokens are str.split() tokens (NBSP and other Unicode spaces separate words); a token of
    punctuation only is no word; every count is exact, non-ASCII text included."""
    rng = random.Random(0)
    alphabet = [*"ab Z1_-.,!#|\t\n  ", "\xa0", "\u2003", "\u2014", "\u2019", "\u00e9", "\u0416", "\U0001f630"]
    alphabet += ["\u00a9", "\u00bd", "\u3002", "\x85", "\u2028", "\u4e2d", "\u0301"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        tokens = text.split()
        words = [w for w in tokens if any(c not in PUNCTUATION for c in w)]
        counts = WordCounts.of(text, text.encode())
        assert (counts.tokens, counts.words, counts.alpha, counts.chars) == (
            len(tokens),
            len(words),
            sum(any(c.isalpha() for c in w) for w in tokens),
            sum(map(len, tokens)),
        ), repr(text)
        assert counts.punct_only_chars() == sum(len(w) for w in tokens if w not in words), repr(text)
    rule = only(min_words=5)
    assert rule("one two three four | \u2014 -") == "gopher_min_words"  # 4 words, 7 tokens
    assert rule("one\xa0two\xa0three\xa0four\xa0five") is None  # NBSP separates words


def test_symbol_ratio_counts_hashes_and_ellipses_separately():
    rule = only(max_symbol_word_ratio=0.1)
    words = " ".join(["word"] * 100)
    assert rule(words + " #" * 10 + " ..." * 10) is None  # 10/120 each: Gopher's "either" rule
    assert rule(words + " #x" * 14) == "gopher_symbol_word_ratio"  # 14/114
    assert rule(words + " wait\u2026" * 8 + " then..." * 6) == "gopher_symbol_word_ratio"  # 14/114


def test_line_rules_count_blank_lines_and_indented_bullets():
    bullets = only(max_bullet_lines_fraction=0.9)
    items = [f"  \u2022 {s}" for s in SENTENCES[:10]]  # indented bullets count
    assert bullets("\n".join(items)) == "gopher_bullet_lines"
    assert bullets("\n\n".join(items)) is None  # 10 of 19 lines (blank ones count, as in datatrove)
    ellipsis = only(max_ellipsis_lines_fraction=0.3)
    lines = [s[:-1] + "... " for s in SENTENCES[:4]] + SENTENCES[4:10]  # trailing space ignored
    assert ellipsis("\n".join(lines)) == "gopher_ellipsis_lines"  # 4/10
    assert ellipsis("\n\n".join(lines)) is None  # 4/19


def test_duplicate_paragraph_rules():
    paragraphs = only(max_duplicate_paragraphs_fraction=0.3)
    chars = only(max_duplicate_paragraph_chars_fraction=0.2)
    share = "Share this page"
    body = ["\n".join(SENTENCES[i : i + 3]) for i in range(0, 18, 3)]  # 6 three-line paragraphs
    text = "\n\n".join([share, *body[:2], share, *body[2:4], share])  # 2 of 7 paragraphs repeat
    assert paragraphs(text) is None and chars(text) is None
    text = "\n\n".join([share, body[0], share, body[1], share])  # 2 of 5: 0.4
    assert paragraphs(text) == "gopher_duplicate_paragraphs" and chars(text) is None
    assert chars("\n\n".join([*body[:3], body[0]])) == "gopher_duplicate_paragraph_chars"  # ~1/4 of chars
    assert only(max_duplicate_lines_fraction=0.3)("\n\n".join([*body[:3], body[0]])) is None  # 3 of 12 lines


def test_rules_can_be_disabled_and_curly_brace_is_opt_in():
    assert no_language(max_bullet_lines_fraction=None, max_duplicate_lines_fraction=None)(BULLETS) is None
    off = CleanConfig(
        language=LanguageConfig(enabled=False), quality=QualityConfig(enabled=False), c4=C4Config(enabled=False)
    )
    assert DocumentFilter(off)("x") is None
    code = GOOD + "\nfunction f() { return 1; }"
    assert no_language()(code) is None
    f = DocumentFilter(CleanConfig(language=LanguageConfig(enabled=False), c4=C4Config(drop_curly_brace=True)))
    assert f(code) == "c4_curly_brace"


def test_ngram_repetition_rules_when_enabled():
    top = no_language(top_ngram_max_char_fraction=[[2, 0.20], [3, 0.18], [4, 0.16]])
    dup = no_language(duplicate_ngram_max_char_fraction=[[n, 0.15 - 0.01 * (n - 5)] for n in range(5, 11)])
    assert top(GOOD) is None and dup(GOOD) is None
    repeated_pair = normalize_text(GOOD + " " + "buy now. " * 60)
    assert top(repeated_pair) == "gopher_top_ngram"
    repeated_sentence = normalize_text(" ".join([SENTENCES[3]] * 3 + SENTENCES[10:16]))
    assert dup(repeated_sentence) == "gopher_duplicate_ngram"
    assert dup(normalize_text(" ".join(SENTENCES[3:4] + SENTENCES[10:16]))) is None
    assert no_language()(repeated_sentence) is None  # off by default


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("detector", ["fasttext", "resiliparse"])
def test_language_filter_offline(no_network, detector):
    lang = LanguageFilter(LanguageConfig(detector=detector))
    for i in range(10):
        assert lang.keeps(normalize_text(english_doc(i)))
    for code, text in FOREIGN.items():
        assert not lang.keeps(text), code
        assert lang.resiliparse(text)[0] == code
        if detector == "fasttext":
            label, score = lang.fasttext(text)
            assert label == code and score > 0.9
    german = LanguageFilter(LanguageConfig(detector=detector, languages=["de", "fr"]))
    assert german.keeps(FOREIGN["de"]) and german.keeps(FOREIGN["fr"]) and not german.keeps(GOOD)


def test_fasttext_decides_when_the_prescreen_is_off(no_network):
    strict = LanguageFilter(LanguageConfig(resiliparse_accept_rank=None, min_score=0.999))
    assert not strict.keeps(GOOD)  # fastText alone, and no English text scores 0.999 on 200 chars
    assert LanguageFilter(LanguageConfig(resiliparse_accept_rank=None)).keeps(GOOD)


def test_first_occurrences_and_assignment():
    rng = np.random.default_rng(0)
    unique = rng.integers(0, 256, size=(6, 16), dtype=np.uint8)
    hashes = unique[[0, 1, 2, 1, 3, 0, 4, 5, 5]]
    assert first_occurrences(hashes).tolist() == [True, True, True, False, True, False, True, True, False]
    split = SplitConfig(valid_fraction=1e-12, min_valid_documents=2, seed=1)  # topped up to 2 from train
    assignment = assign(hashes, dedup=True, cfg=split)
    assert (assignment == DROP).sum() == 3 and (assignment == VALID).sum() == 2 and (assignment == TRAIN).sum() == 4
    no_valid = assign(hashes, dedup=True, cfg=SplitConfig(valid_fraction=0.0, min_valid_documents=2))
    assert (no_valid == VALID).sum() == 0 and (no_valid == TRAIN).sum() == 6  # fraction 0: no valid split
    assert assign(hashes, dedup=True, cfg=split).tolist() == assignment.tolist()  # deterministic
    other_seed = assign(hashes, dedup=True, cfg=SplitConfig(valid_fraction=0.5, seed=2))
    assert set(other_seed[assignment == DROP].tolist()) == {DROP}
    assert (assign(hashes, dedup=False, cfg=split) != DROP).all()


def test_split_fraction_is_close_and_stable():
    hashes = np.random.default_rng(1).integers(0, 256, size=(20_000, 16), dtype=np.uint8)
    a = assign(hashes, dedup=True, cfg=SplitConfig(valid_fraction=0.1, seed=7))
    assert abs((a == VALID).mean() - 0.1) < 0.01
    b = assign(hashes[:10_000], dedup=True, cfg=SplitConfig(valid_fraction=0.1, seed=7))
    assert b.tolist() == a[:10_000].tolist()  # a document's split does not depend on the others


def test_sample_rows_budget_and_determinism():
    hashes = np.random.default_rng(2).integers(0, 256, size=(100, 16), dtype=np.uint8)
    eligible = np.ones(100, dtype=bool)
    eligible[::2] = False
    rows = sample_rows(hashes, eligible, np.full(100, 10), budget=95)
    assert len(rows) == 10 and all(r % 2 == 1 for r in rows) and list(rows) == sorted(rows)
    assert sample_rows(hashes, eligible, np.full(100, 10), budget=10**9).tolist() == list(range(1, 100, 2))


@pytest.mark.parametrize("form", ["NFC", "NFKC"])
def test_inert_characters_need_no_normalization(form):
    """normalize_encoded skips unicodedata.is_normalized when every non-ASCII character of a text is
    "inert"; a text of ASCII and inert characters must then be normalized, whatever their order."""
    import random
    import unicodedata

    from data_prep.normalize import _inert

    inert = [chr(c) for c in range(0x80, 0x30000) if not 0xD800 <= c < 0xE000 and _inert({chr(c)}, form)]
    assert len(inert) > 100_000 and not _inert({"\u0301"}, form) and not _inert({"\u1161"}, form)
    partners = random.Random(0).choices(inert, k=len(inert))
    for char, other in zip(inert, partners):
        for text in ("a" + char + "e", char + other, other + char + "o", "\t" + char + char):
            assert unicodedata.normalize(form, text) == text, (hex(ord(char)), hex(ord(other)))
