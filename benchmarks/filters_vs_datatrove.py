"""Our Gopher and C4 rules against datatrove 0.10.1's reference filters, rule by rule.

    python benchmarks/filters_vs_datatrove.py [--tokens whitespace|nltk|spacy] [--show N]

Each of our rules runs alone (``DocumentFilter`` with every other rule off) next to the
datatrove filter that implements it, configured with the same threshold and every other
check off: ``GopherQualityFilter`` (words, mean length, symbols, stop words, alpha words,
bullets, ellipses), ``GopherRepetitionFilter`` (duplicate lines and paragraphs, n-grams),
``C4QualityFilter`` (lorem ipsum, curly brace) and ``FineWebQualityFilter`` (the fraction of
lines with terminal punctuation: our ``c4_terminal_punct``, with our set of end characters).

Documents: real Common Crawl text (dolma 1.2.1's samples: 20 cc_net documents, 10 documents
of its provided set, the HTML pages of two WARC crawls as our reader extracts them), runs of
3, 8 and 20 of their lines as shorter documents, the 1,189 King James Bible chapters when the
demo's wheel is cached (one line each), and synthetic documents planted on both sides of every
threshold. A disagreement is "explained" when one of the documented differences (EXCEPTIONS,
docs/data_prep.md "Filters against the reference implementations") accounts for it: the
decision agrees once that one difference is taken away.

Words: datatrove 0.10.1 maps English to ``SpaCyTokenizer("en")`` (``spacy.blank("en")``, no
model download), and spaCy is not installed here; its NLTK path needs the punkt_tab data,
which cannot be downloaded offline. Gopher's rules (and ours) count whitespace-separated
words, so the main comparison passes datatrove a ``str.split()`` word tokenizer. ``--tokens
nltk`` uses NLTK's Treebank word tokenizer (no data files; it splits punctuation off words as
spaCy does) to show what punctuation tokens do to the reference; ``--tokens spacy`` uses
datatrove's own English tokenizer where spaCy is installed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import tarfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data_prep.config import C4Config, CleanConfig, LanguageConfig, QualityConfig  # noqa: E402
from data_prep.filters import LINE_END_PUNCTUATION, DocumentFilter  # noqa: E402
from data_prep.normalize import normalize_text  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
TOP_NGRAMS = ((2, 0.20), (3, 0.18), (4, 0.16))
DUP_NGRAMS = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
QUALITY_OFF = {
    "min_words": None,
    "max_words": None,
    "min_mean_word_length": None,
    "max_mean_word_length": None,
    "max_symbol_word_ratio": None,
    "max_bullet_lines_fraction": None,
    "max_ellipsis_lines_fraction": None,
    "min_alpha_words_fraction": None,
    "min_stop_words": None,
    "max_duplicate_lines_fraction": None,
    "max_duplicate_line_chars_fraction": None,
    "max_duplicate_paragraphs_fraction": None,
    "max_duplicate_paragraph_chars_fraction": None,
}
C4_OFF = {"drop_lorem_ipsum": False, "drop_curly_brace": False, "min_terminal_punct_lines_fraction": None}
GOPHER_QUALITY_OFF = {
    "min_doc_words": None,
    "max_doc_words": None,
    "min_avg_word_length": None,
    "max_avg_word_length": None,
    "max_symbol_word_ratio": None,
    "max_bullet_lines_ratio": None,
    "max_ellipsis_lines_ratio": None,
    "max_non_alpha_words_ratio": None,
    "min_stop_words": None,
}
GOPHER_REPETITION_OFF = {
    "dup_line_frac": None,
    "dup_para_frac": None,
    "dup_line_char_frac": None,
    "dup_para_char_frac": None,
    "top_n_grams": (),
    "dup_n_grams": (),
}
C4_QUALITY_OFF = {  # C4QualityFilter with every line and document check off
    "split_paragraph": True,
    "remove_citations": False,
    "filter_no_terminal_punct": False,
    "min_num_sentences": -1,
    "min_words_per_line": -1,
    "max_word_length": -1,
    "filter_lorem_ipsum": False,
    "filter_javascript": False,
    "filter_curly_bracket": False,
    "filter_policy": False,
}


# ----------------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Rule:
    """One of our rules (config keys) and the datatrove filter class and arguments that match it."""

    name: str
    quality: dict = field(default_factory=dict)  # QualityConfig keys turned on
    c4: dict = field(default_factory=dict)  # C4Config keys turned on
    reference: str = ""  # datatrove filter class
    reference_args: dict = field(default_factory=dict)
    words: bool = False  # the reference splits the text into words (its tokenizer matters)


RULES = [
    Rule("gopher_min_words", {"min_words": 50}, {}, "GopherQualityFilter", {"min_doc_words": 50}, True),
    Rule("gopher_max_words", {"max_words": 100_000}, {}, "GopherQualityFilter", {"max_doc_words": 100_000}, True),
    Rule(
        "gopher_mean_word_length",
        {"min_mean_word_length": 3, "max_mean_word_length": 10},
        {},
        "GopherQualityFilter",
        {"min_avg_word_length": 3, "max_avg_word_length": 10},
        True,
    ),
    Rule(
        "gopher_symbol_word_ratio",
        {"max_symbol_word_ratio": 0.1},
        {},
        "GopherQualityFilter",
        {"max_symbol_word_ratio": 0.1},
        True,
    ),
    Rule("gopher_stop_words", {"min_stop_words": 2}, {}, "GopherQualityFilter", {"min_stop_words": 2}, True),
    Rule(
        "gopher_alpha_words",
        {"min_alpha_words_fraction": 0.8},
        {},
        "GopherQualityFilter",
        {"max_non_alpha_words_ratio": 0.8},  # datatrove's name; it is the minimum fraction of words with a letter
        True,
    ),
    Rule(
        "gopher_bullet_lines",
        {"max_bullet_lines_fraction": 0.9},
        {},
        "GopherQualityFilter",
        {"max_bullet_lines_ratio": 0.9},
        True,
    ),
    Rule(
        "gopher_ellipsis_lines",
        {"max_ellipsis_lines_fraction": 0.3},
        {},
        "GopherQualityFilter",
        {"max_ellipsis_lines_ratio": 0.3},
        True,
    ),
    Rule(
        "gopher_duplicate_lines",
        {"max_duplicate_lines_fraction": 0.3},
        {},
        "GopherRepetitionFilter",
        {"dup_line_frac": 0.3},
    ),
    Rule(
        "gopher_duplicate_line_chars",
        {"max_duplicate_line_chars_fraction": 0.2},
        {},
        "GopherRepetitionFilter",
        {"dup_line_char_frac": 0.2},
    ),
    Rule(
        "gopher_duplicate_paragraphs",
        {"max_duplicate_paragraphs_fraction": 0.3},
        {},
        "GopherRepetitionFilter",
        {"dup_para_frac": 0.3},
    ),
    Rule(
        "gopher_duplicate_paragraph_chars",
        {"max_duplicate_paragraph_chars_fraction": 0.2},
        {},
        "GopherRepetitionFilter",
        {"dup_para_char_frac": 0.2},
    ),
    Rule(
        "gopher_top_ngram",
        {"top_ngram_max_char_fraction": [list(p) for p in TOP_NGRAMS]},
        {},
        "GopherRepetitionFilter",
        {"top_n_grams": TOP_NGRAMS},
        True,
    ),
    Rule(
        "gopher_duplicate_ngram",
        {"duplicate_ngram_max_char_fraction": [list(p) for p in DUP_NGRAMS]},
        {},
        "GopherRepetitionFilter",
        {"dup_n_grams": DUP_NGRAMS},
        True,
    ),
    Rule("c4_lorem_ipsum", {}, {"drop_lorem_ipsum": True}, "C4QualityFilter", {"filter_lorem_ipsum": True}),
    Rule("c4_curly_brace", {}, {"drop_curly_brace": True}, "C4QualityFilter", {"filter_curly_bracket": True}),
    Rule(
        "c4_terminal_punct",
        {},
        {"min_terminal_punct_lines_fraction": 0.12},
        "FineWebQualityFilter",
        {
            "line_punct_thr": 0.12,
            "stop_chars": tuple(sorted(LINE_END_PUNCTUATION)),
            "short_line_thr": 1.0,  # a fraction is never > 1: off
            "char_duplicates_ratio": 1.0,
            "new_line_ratio": float("inf"),
        },
        True,  # FineWebQualityFilter splits the text into words at its end, whatever the thresholds
    ),
]
RULES_BY_NAME = {rule.name: rule for rule in RULES}


def ours(rule: Rule, whole: bool = False) -> DocumentFilter:
    """Our filter with only ``rule`` on. ``whole``: no head window (sample_chars null, every token)."""
    window = {"sample_chars": None, "ngram_max_words": 10**9} if whole else {}
    quality = QualityConfig(**{**QUALITY_OFF, **window, **rule.quality}) if rule.quality else None
    c4 = C4Config(**{**C4_OFF, **rule.c4, **({"sample_chars": None} if whole else {})}) if rule.c4 else None
    return DocumentFilter(
        CleanConfig(
            language=LanguageConfig(enabled=False),
            quality=quality or QualityConfig(enabled=False),
            c4=c4 or C4Config(enabled=False),
        )
    )


def word_tokenizer(kind: str):
    """A datatrove ``WordTokenizer``: whitespace (Gopher's words), NLTK Treebank, or datatrove's English."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    if kind == "spacy":
        return "en"  # datatrove's own assignment: SpaCyTokenizer("en") (needs the spacy package)

    class Words(WordTokenizer):
        def __init__(self) -> None:
            super().__init__("en")
            if kind == "nltk":
                from nltk.tokenize import NLTKWordTokenizer

                self._split = NLTKWordTokenizer().tokenize  # no punkt data: no sentence splitting
            elif kind == "whitespace":
                self._split = str.split
            else:
                raise ValueError(f"--tokens: whitespace, nltk or spacy, got {kind!r}")

        def word_tokenize(self, text: str) -> list[str]:
            return self._split(text)

        def sent_tokenize(self, text: str) -> list[str]:  # no rule compared here splits sentences
            raise NotImplementedError

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            raise NotImplementedError

        def __repr__(self) -> str:
            return f"Words({kind})"

    return Words()


def reference(rule: Rule, tokens: str = "whitespace", **overrides):
    """The datatrove filter for ``rule``, every other check off."""
    from datatrove.pipeline import filters

    cls = getattr(filters, rule.reference)
    off = {
        "GopherQualityFilter": GOPHER_QUALITY_OFF,
        "GopherRepetitionFilter": GOPHER_REPETITION_OFF,
        "C4QualityFilter": C4_QUALITY_OFF,
        "FineWebQualityFilter": {},
    }[rule.reference]
    language = {} if rule.reference == "C4QualityFilter" else {"language": word_tokenizer(tokens)}
    return cls(**{**off, **rule.reference_args, **overrides}, **language)


def keeps(flt, text: str) -> bool:
    """datatrove's verdict: ``filter`` returns True to keep, False or (False, reason) to drop."""
    from datatrove.data import Document

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's "mean of empty slice" for a document of punctuation only
        return flt.filter(Document(text=text, id="doc")) is True


# ----------------------------------------------------------------------------- documented differences


@dataclass(frozen=True)
class Difference:
    """A documented reason why our verdict and datatrove's differ, with a document that shows it."""

    name: str
    rules: tuple[str, ...]
    explains: Callable[[Rule, str, bool], bool]  # (rule, text, our keep) -> the difference accounts for it
    example: str  # a short document on which the two verdicts differ for rules[0]


def _whole_document_agrees(rule: Rule, text: str, our_keep: bool) -> bool:
    """Our verdict without the head window equals the reference's."""
    return (ours(rule, whole=True)(text) is None) != our_keep


def _stop_words_by_tokens(rule: Rule, text: str, our_keep: bool) -> bool:
    """We find a stop word next to punctuation ("the,", "to:[") that no whitespace token equals."""
    found = set(re.findall(r"\b(?:the|be|to|of|and|that|have|with)\b", text))
    tokens = STOP_WORDS.intersection(text.split())
    return (len(found) >= 2) == our_keep and (len(tokens) >= 2) != our_keep


BULLETS = ("•", "●", "○", "■", "□", "▪", "▫", "–", "-", "*", "‣", "⁃", "◦")


def _bullet_characters(rule: Rule, text: str, our_keep: bool) -> bool:
    """datatrove's bullet fraction, with our bullet characters, gives our verdict."""
    lines = text.splitlines()
    fraction = sum(line.lstrip().startswith(BULLETS) for line in lines) / len(lines)
    return (fraction <= 0.9) == our_keep


def _union_of_duplicate_ngrams(rule: Rule, text: str, our_keep: bool) -> bool:
    """Counting every word inside any repeated n-gram (Gopher's definition), instead of datatrove's
    greedy scan that jumps n words after each repeat, gives our verdict."""
    words = text.split()
    for n, limit in DUP_NGRAMS:
        seen: set[tuple[str, ...]] = set()
        covered = [False] * len(words)
        for i in range(len(words) - n + 1):
            gram = tuple(words[i : i + n])
            if gram in seen:
                covered[i : i + n] = [True] * n
            seen.add(gram)
        if sum(len(w) for w, c in zip(words, covered) if c) / len(text) > limit:
            return not our_keep
    return our_keep


def _reference_with_whitespace_words(rule: Rule, text: str, our_keep: bool) -> bool:
    """With whitespace words the reference gives our verdict: its tokenizer's punctuation tokens
    (spaCy / NLTK split "word." into "word" and ".") made the difference."""
    return keeps(reference(rule, "whitespace"), text) == our_keep


_PROSE = (
    "The river that runs through the old town has been cleaned over the last ten years, and most of "
    "the people who live here walk to work. "
)
DIFFERENCES = [
    Difference(
        "head window",
        (
            "gopher_symbol_word_ratio",
            "gopher_mean_word_length",
            "gopher_alpha_words",
            "gopher_bullet_lines",
            "gopher_ellipsis_lines",
            "gopher_top_ngram",
            "gopher_duplicate_ngram",
            "c4_terminal_punct",
        ),
        _whole_document_agrees,
        (_PROSE * 20 + "#tag " * 80).strip(),  # the hashtags start after character 2000
    ),
    Difference(
        "stop word next to punctuation",
        ("gopher_stop_words",),
        _stop_words_by_tokens,
        "Skip to:[Main Navigation | Page Content]\nBritish Film & Video Council\nmoving image and sound",
    ),
    Difference(
        "bullet characters",
        ("gopher_bullet_lines",),
        _bullet_characters,
        "\n".join(f"* item number {i} of the list" for i in range(10)),
    ),
    Difference(
        "overlapping duplicate n-grams",
        ("gopher_duplicate_ngram",),
        _union_of_duplicate_ngrams,
        "we saw a red boat on the sea at dawn yesterday-morning. then a long road runs past old farms and "
        "small towns until it reaches the hills where sheep graze on green grass near rivers full of fish "
        "that jump high in bright summer light. we saw a red boat on the sea at dawn yesterday-morning.",
    ),
]
TOKEN_DIFFERENCE = Difference(  # only with --tokens nltk / spacy
    "punctuation tokens",
    ("gopher_alpha_words", *(rule.name for rule in RULES if rule.words and rule.name != "gopher_alpha_words")),
    _reference_with_whitespace_words,
    "Well, yes: he said it (twice), and then, after ten, twenty or thirty minutes, he left; it was late.",
)


# ----------------------------------------------------------------------------- documents


def real_documents() -> list[str]:
    """dolma 1.2.1's Common Crawl samples (pinned pip download, cached), normalized like the pipeline."""
    from data_prep.config import InputConfig
    from data_prep.readers import read_all_texts
    from data_prep.testdata import dolma_files

    files = dolma_files()
    texts: list[str] = []
    for key in ("cc_jsonl0", "cc_jsonl1"):
        with gzip.open(files[key], "rt") as fh:
            texts += [json.loads(line)["text"] for line in fh if line.strip()]
    sdist = files["cc_jsonl0"].parents[3] / "download" / "dolma-1.2.1.tar.gz"
    with tarfile.open(sdist) as tar:
        member = tar.extractfile("dolma-1.2.1/tests/data/provided/documents/000.json.gz")
        assert member is not None
        texts += [json.loads(line)["text"] for line in gzip.decompress(member.read()).decode().splitlines() if line]
    for key in ("warc0", "warc1"):
        texts += read_all_texts(files[key], InputConfig(paths=["x"]))[0]
    return [t for t in map(normalize_text, texts) if t]


def line_runs(texts: list[str], sizes=(3, 8, 20)) -> list[str]:
    """Runs of consecutive lines of real documents: real text, more documents, more short ones."""
    runs = []
    for text in texts:
        lines = text.split("\n")
        for size in sizes:
            for start in range(0, len(lines), size):
                run = normalize_text("\n".join(lines[start : start + size]))
                if run:
                    runs.append(run)
    return runs


def kjv_chapters() -> list[str]:
    """The King James Bible, one document per chapter, if the demo's pinned wheel is cached."""
    from data_prep.registry_corpora import CORPORA, default_cache_dir, documents

    cached = (default_cache_dir() / CORPORA["kjv"].artifact.filename).is_file()
    return [normalize_text(c["text"]) for c in documents("kjv")] if cached else []


VOCAB = (_PROSE + "Children in the village learn to swim in the lake during the short summer months.").split()


def synthetic_documents(seed: int = 0) -> dict[str, list[str]]:
    """Documents planted on both sides of each rule's threshold (and on the edge cases)."""
    rng = random.Random(seed)
    plain = [w.strip(".,") for w in VOCAB]

    def words(n: int) -> list[str]:
        return [rng.choice(plain) for _ in range(n)]

    def sentence_lines(n: int, end: str = ".") -> list[str]:
        return [" ".join(words(rng.randint(6, 14))) + end for _ in range(n)]

    docs: dict[str, list[str]] = {}
    docs["gopher_min_words"] = [" ".join(words(n)) for n in range(44, 57)] + [
        " ".join(words(n)) + " |" * k + " —" * k for n in (47, 49, 50, 52) for k in (1, 3)
    ]
    docs["gopher_min_words"] += ["\xa0".join(words(n)) for n in (49, 50)] + ["\u2003".join(words(51))]
    docs["gopher_max_words"] = [" ".join(words(n)) for n in (99_999, 100_000, 100_001)] + [
        " ".join(words(100_000)) + " -" * 5
    ]
    mean = []
    for target in (2.6, 2.9, 3.0, 3.1, 3.4, 9.6, 9.9, 10.0, 10.1, 10.4):
        n = 80
        total = round(target * n)
        lengths = [total // n + (i < total % n) for i in range(n)]
        mean.append(" ".join("x" * length for length in lengths))
        mean.append(" ".join("y" * length for length in lengths) + " — |" * 4)
    docs["gopher_mean_word_length"] = mean
    symbol = []
    for hashes in (8, 10, 11, 13):
        for dots in (0, 9, 11):
            body = words(100) + ["#tag"] * hashes + ["wait..."] * (dots // 2) + ["then…"] * (dots - dots // 2)
            rng.shuffle(body)
            symbol.append(" ".join(body))
    docs["gopher_symbol_word_ratio"] = symbol
    docs["gopher_stop_words"] = [
        "Alpha beta gamma delta. " * 20,
        "the alpha beta gamma " * 20,
        "the alpha beta the gamma " * 20,
        "the alpha beta and gamma " * 20,
        "The alpha And beta " * 20,
        "alpha beta gamma delta " * 300 + "the cat and the dog",
        "alpha beta the, gamma and delta " * 10,
        "alpha the-beta gamma to delta " * 10,
    ]
    alpha = []
    for bad in ("2024", "—", "€5", "©", "½", "😀", "--", "42%", "Ⅻ"):
        for k in (18, 20, 21, 25):
            tokens = words(80) + [bad] * k
            rng.shuffle(tokens)
            alpha.append(" ".join(tokens))
    alpha.append(" ".join(["Жук", "été", "中文", "नमस्ते"] * 20))
    docs["gopher_alpha_words"] = alpha
    bullets = []
    for marker in ("• ", "- ", "  • ", "– ", "* ", "● "):
        for k in (8, 9, 10):
            lines = [marker + line for line in sentence_lines(k)] + sentence_lines(10 - k)
            bullets += ["\n".join(lines), "\n\n".join(lines)]
    docs["gopher_bullet_lines"] = bullets
    ellipsis = []
    for end in ("...", "…", "... "):
        for k in (2, 3, 4):
            lines = sentence_lines(k, end) + sentence_lines(10 - k)
            rng.shuffle(lines)
            ellipsis += ["\n".join(lines), "\n\n".join(lines)]
    docs["gopher_ellipsis_lines"] = ellipsis
    duplicates = []
    for repeats in (2, 3, 4, 5):
        lines = sentence_lines(10)
        duplicates.append("\n".join(lines + lines[:repeats]))
        duplicates.append("\n".join(lines + [lines[0]] * repeats))
        duplicates.append("\n\n".join(lines + lines[:repeats]))
        long_line = " ".join(words(40)) + "."
        duplicates.append("\n".join([long_line] + lines[: 3 + repeats] + [long_line]))
    docs["gopher_duplicate_lines"] = duplicates
    docs["gopher_duplicate_line_chars"] = duplicates
    paragraphs = []
    for repeats in (1, 2, 3):
        body = ["\n".join(sentence_lines(3)) for _ in range(6)]
        share = "Share this page"
        paragraphs.append("\n\n".join([share, *body[:2], *[share] * repeats, *body[2:4]]))
        paragraphs.append("\n\n".join([*body[:3], *body[:repeats]]))
        paragraphs.append("\n\n\n".join([*body[:4], *body[:repeats]]))
    docs["gopher_duplicate_paragraphs"] = paragraphs
    docs["gopher_duplicate_paragraph_chars"] = paragraphs
    top = []
    for phrase in ("buy now", "click here today", "best price in town"):
        for k in (6, 10, 14, 18, 24):
            body = words(120) + [phrase] * k
            rng.shuffle(body)
            top.append(" ".join(body))
    top += ["Hello world", "Hello there world", "one two three four five six"]
    docs["gopher_top_ngram"] = top
    dup = []
    for length in (5, 6, 8, 12):
        passage = words(length)
        for k in (1, 2, 3, 4):
            body = words(100)
            for _ in range(k):
                at = rng.randrange(len(body))
                body[at:at] = passage
            dup.append(" ".join(body))
    docs["gopher_duplicate_ngram"] = dup
    filler = " ".join(sentence_lines(30))
    docs["c4_lorem_ipsum"] = [
        filler + " Lorem ipsum dolor sit amet.",
        "LOREM IPSUM\n" + filler,
        filler + "\nlorem  ipsum",
        filler + " Lorem IpSum.",
        filler,
        filler + " lorem-ipsum",
    ]
    docs["c4_curly_brace"] = [filler + " {", filler, "function f() { return 1; }\n" + filler]
    terminal = []
    for k in (0, 1, 2):
        for n in (8, 10, 12):
            lines = sentence_lines(k) + [line.rstrip(".") for line in sentence_lines(n - k)]
            rng.shuffle(lines)
            terminal += ["\n".join(lines), "\n  \n".join(lines)]
    terminal += [" ".join(sentence_lines(40)), " ".join(sentence_lines(40)) + " and so"]
    terminal += ['He said: "Stop."\nno end\nno end here\nnone', "Quoted ’end’\nno end\nnone\nnot\nno\nx\ny\nz"]
    docs["c4_terminal_punct"] = terminal
    return {rule: [t for t in map(normalize_text, texts) if t] for rule, texts in docs.items()}


def corpus(kjv: bool = True) -> tuple[list[str], dict[str, list[str]]]:
    """(shared documents every rule sees, synthetic documents per rule)."""
    real = real_documents()
    shared = real + line_runs(real) + (kjv_chapters() if kjv else [])
    return shared, synthetic_documents()


# ----------------------------------------------------------------------------- comparison


@dataclass
class Row:
    rule: str
    documents: int = 0
    agree: int = 0
    ours_drop: int = 0
    reference_drop: int = 0
    explained: dict[str, int] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)

    @property
    def disagree(self) -> int:
        return self.documents - self.agree

    @property
    def agreement(self) -> float:
        """Agreeing and explained decisions, of all."""
        return (self.agree + sum(self.explained.values())) / self.documents if self.documents else 1.0


def compare(
    rule: Rule, texts: list[str], tokens: str = "whitespace", differences: list[Difference] | None = None
) -> Row:
    """Both verdicts on every text; each disagreement is explained by the first difference that accounts for it."""
    if differences is None:
        differences = DIFFERENCES + ([TOKEN_DIFFERENCE] if tokens != "whitespace" else [])
    mine, theirs = ours(rule), reference(rule, tokens)
    row = Row(rule.name)
    for text in texts:
        our_keep = mine(text) is None
        their_keep = keeps(theirs, text)
        row.documents += 1
        row.ours_drop += not our_keep
        row.reference_drop += not their_keep
        if their_keep == our_keep:
            row.agree += 1
            continue
        for difference in differences:
            if rule.name in difference.rules and difference.explains(rule, text, our_keep):
                row.explained[difference.name] = row.explained.get(difference.name, 0) + 1
                break
        else:
            row.unexplained.append(text)
    return row


def table(rows: list[Row]) -> str:
    lines = [
        f"{'rule':34s} {'documents':>9s} {'dropped':>13s} {'agree':>7s} {'disagree':>8s} {'explained':>9s} "
        f"{'agreement':>9s}  explained by"
    ]
    for row in rows:
        by = ", ".join(f"{name} {count}" for name, count in row.explained.items())
        lines.append(
            f"{row.rule:34s} {row.documents:9d} {f'{row.ours_drop}/{row.reference_drop}':>13s} {row.agree:7d} {row.disagree:8d} "
            f"{sum(row.explained.values()):9d} {row.agreement:9.4f}  {by}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="whitespace", choices=("whitespace", "nltk", "spacy"))
    parser.add_argument("--no-kjv", action="store_true", help="leave out the King James Bible chapters")
    parser.add_argument("--show", type=int, default=2, help="unexplained documents to print per rule")
    args = parser.parse_args(argv)
    if args.tokens == "spacy":
        try:
            import spacy  # noqa: F401
        except ImportError:
            print("--tokens spacy: the spacy package is not installed (datatrove's English tokenizer)")
            return ExitCode.USAGE
    shared, planted = corpus(kjv=not args.no_kjv)
    print(
        f"datatrove word tokens: {args.tokens}; {len(shared)} shared documents (real Common Crawl text, "
        f"runs of its lines, KJV chapters) + planted documents per rule; dropped: ours/datatrove\n"
    )
    rows = [compare(rule, shared + planted.get(rule.name, []), args.tokens) for rule in RULES]
    print(table(rows))
    for row in rows:
        for text in row.unexplained[: args.show]:
            print(f"\n{row.rule}: unexplained ({len(text)} chars): {text[:300]!r}")
    fineweb = reference(RULES_BY_NAME["c4_terminal_punct"], args.tokens, stop_chars=None)
    mine = ours(RULES_BY_NAME["c4_terminal_punct"], whole=True)
    differ = sum((mine(t) is None) != keeps(fineweb, t) for t in shared)
    print(
        f"\nc4_terminal_punct against FineWeb's own end characters (no quotes, no …): {differ} of "
        f"{len(shared)} shared documents differ (documented: our set adds \" ” ' ’ …)"
    )
    return ExitCode.OK if all(not row.unexplained for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
