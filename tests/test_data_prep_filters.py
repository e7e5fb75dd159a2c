"""Normalization, each quality rule on a planted document, language ID offline, exact dedup/split."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from data_prep.config import C4Config, CleanConfig, LanguageConfig, QualityConfig, SplitConfig
from data_prep.dedup import assign, first_occurrences, sample_rows
from data_prep.filters import DocumentFilter, LanguageFilter
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


def test_stop_words_rule_counts_occurrences():
    text = normalize_text(GOOD.replace(" the ", " a ").replace("The ", "A "))
    assert no_language()(text) is None  # still has "to", "of", "and", ...
    only_one = normalize_text("The " + "alpha beta gamma delta. " * 20)
    assert no_language()(only_one) == "gopher_stop_words"


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
    split = SplitConfig(valid_fraction=0.0, min_valid_documents=2, seed=1)
    assignment = assign(hashes, dedup=True, cfg=split)
    assert (assignment == DROP).sum() == 3 and (assignment == VALID).sum() == 2 and (assignment == TRAIN).sum() == 4
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
