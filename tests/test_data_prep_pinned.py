"""Pinned outputs: every keep/drop verdict and the output bytes of a fixed corpus.

The hashes were computed before the filters and readers were made faster (issue #16), so a
speed-up that changes a single verdict, a normalized text or an output byte fails here.
The corpus is built from the test fixtures with a seeded generator (no download); the real
Common Crawl documents (dolma 1.2.1, pinned download) are pinned too when they are cached.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from data_prep.api import load_data_prep_config
from data_prep.filters import DocumentFilter
from data_prep.normalize import normalize_encoded
from data_prep.pipeline import run
from tests.data_prep_fixtures import FOREIGN, SENTENCES, write_jsonl, write_parquet, write_wet

REPO = Path(__file__).resolve().parents[1]

# Per-document "normalized text hash + verdict" under each config, before the #16 speed-ups.
VERDICT_SHA256 = {
    "default": "5651642a8c61028b089c5f175330ee1885c951df845c5d6847efdea653602ec2",
    "gopher_full": "97ca5ceb8315a261a78b02f5444b463a3ebd94ada8dd0d966f920be334e84980",
    "quality_off": "858a4be24d1e140e6aca7b067cba479e5af85219c6485aa29739e4df33fc1fd2",
    "whole_document": "fb9656759814e620cc4f8ed51ea76bbc823625f91f1a804bdcbeed8eff7dfc75",
    "nfkc_tidy": "0977891f10202b2f9febc39286b217768231ce3b4040a6d1abed1abb9fdea62a",
}
REAL_VERDICT_SHA256 = "b88e367c84a4e23d1524ecc0388f4df60d14009738c27a691a3f5aa7278dbce0"
OUTPUT_SHA256 = "6567fa545d64aac21df8782602867d4c50d35b11f2d967dcf3eeef35f13106f5"

CONFIGS = {
    "default": [],
    "gopher_full": [
        "clean.quality.top_ngram_max_char_fraction=[[2,0.2],[3,0.18],[4,0.16]]",
        "clean.quality.duplicate_ngram_max_char_fraction=[[5,0.15],[6,0.14],[7,0.13],[8,0.12],[9,0.11],[10,0.1]]",
        "clean.c4.drop_curly_brace=true",
    ],
    "quality_off": ["clean.quality.enabled=false", "clean.language.detector=resiliparse"],
    "whole_document": ["clean.quality.sample_chars=null", "clean.c4.sample_chars=null"],
    "nfkc_tidy": ["clean.unicode_normalization=NFKC", "clean.tidy_whitespace=true", "clean.language.enabled=false"],
}

_ODD = [
    "\xa0",
    "\u2003",
    "\u3000",
    "\u2028",
    "\x85",
    "\ufeff",
    "\x00",
    "\x07",
    "\r\n",
    "\r",
    "\t",
    "\x1c",
    "—",
    "–",
    "…",
    "...",
    "#",
    "|",
    "€",
    "©",
    "½",
    "😀",
    "ﬁ",
    "é",
    "e\u0301",
    "Ⅻ",
    "“",
    "”",
    "’",
    "!",
    "?",
    "。",
    "{",
    "}",
    "2024",
]


def pinned_corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """Documents from the fixtures' sentences, bent in seeded ways that trip or straddle each rule."""
    rng = random.Random(seed)
    words = " ".join(SENTENCES).replace(".", "").replace(",", "").split()
    docs = []
    for _ in range(n):
        kind = rng.randrange(17)
        lines = [" ".join(rng.sample(SENTENCES, rng.randint(1, 4))) for _ in range(rng.randint(1, 12))]
        if kind == 0:  # bullets
            lines = [rng.choice(["• ", "- ", "  * ", "– ", "● ", ""]) + line for line in lines]
        elif kind == 1:  # ellipses and no end punctuation
            lines = [line.rstrip(".") + rng.choice(["...", "…", "", " ...  ", "."]) for line in lines]
        elif kind == 2:  # duplicate lines and paragraphs
            lines = lines + rng.choices(lines, k=rng.randint(1, 6))
            rng.shuffle(lines)
        elif kind == 3:  # odd characters inside and between words
            lines = [
                "".join(w + rng.choice([" ", " ", " ", rng.choice(_ODD)]) for w in line.split(" ")) for line in lines
            ]
        elif kind == 4:  # short
            lines = [" ".join(rng.choices(words, k=rng.randint(1, 70)))]
        elif kind == 5:  # foreign, or foreign plus English
            lines = [FOREIGN[rng.choice(sorted(FOREIGN))]] + lines[: rng.randint(0, 3)]
        elif kind == 6:  # symbols
            lines = [line + " #tag" * rng.randint(0, 5) + " wait..." * rng.randint(0, 3) for line in lines]
        elif kind == 7:  # lorem ipsum, braces
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(["Lorem IPSUM dolor", "lorem-ipsum", "f() { x }"]))
        elif kind == 8:  # repeated n-grams
            phrase = " ".join(rng.choices(words, k=rng.randint(2, 8)))
            lines = [line + (" " + phrase) * rng.randint(0, 6) for line in lines]
        elif kind == 9:  # long lines past the sample window
            lines = [" ".join(rng.choices(SENTENCES, k=rng.randint(20, 60))).rstrip(".") + rng.choice([".", ";", ""])]
        elif kind == 10:  # mean word length at the edges
            pad = rng.choice(["a", "I", "an", "Internationalization", "counterrevolutionaries"])
            lines = [line + (" " + pad) * rng.randint(0, 120) for line in lines]
        elif kind == 11:  # blank lines, whitespace lines, trailing spaces
            lines = [line + rng.choice(["", "  ", "\t"]) for line in lines]
            for _ in range(rng.randint(1, 5)):
                lines.insert(rng.randrange(len(lines) + 1), rng.choice(["", " ", "\t ", ""]))
        elif kind == 12:  # stop words only in odd forms
            lines = [" ".join(rng.choices([*words[:40], "The", "AND", "the,", "(of)"], k=rng.randint(50, 90)))]
        elif kind == 13:  # tokens without a letter
            bad = rng.choice(["2024", "—", "€5", "©", "½", "42%", "Ⅻ", "--", "x2"])
            tokens = " ".join(lines).split()
            tokens += [bad] * int(len(tokens) * rng.uniform(0.1, 0.4))
            rng.shuffle(tokens)
            lines = [" ".join(tokens)]
        elif kind == 14:  # duplicate paragraphs among long unique ones
            share = rng.choice(["Share this page", "Read more", "Lorem dolor"])
            paragraphs = ["\n".join(rng.sample(SENTENCES, 8)) for _ in range(rng.randint(2, 6))]
            paragraphs += [share] * rng.randint(1, 5)
            rng.shuffle(paragraphs)
            docs.append("\n\n".join(paragraphs))
            continue
        sep = rng.choice(["\n", "\n", "\n\n", "\n\n\n", " "])
        docs.append(rng.choice(["", " ", "\n"]) + sep.join(lines) + rng.choice(["", "\n", " \n "]))
    docs += ["", "   ", "\n\t\n", "x", "😀" * 60]
    docs += [" ".join(rng.choices(words, k=k)) + "." for k in (99_999, 100_001)]
    return docs


def verdict_digest(texts: list[str], overrides: list[str]) -> str:
    clean = load_data_prep_config(None, ["input.paths=[x]", *overrides]).clean
    doc_filter = DocumentFilter(clean)
    digest = hashlib.sha256()
    for raw in texts:
        if len(raw) > clean.max_chars:
            verdict, text = "too_long", ""
        else:
            text, encoded = normalize_encoded(raw, clean.unicode_normalization, clean.tidy_whitespace)
            verdict = "empty" if not text else (doc_filter(text, encoded) or "keep")
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8] + verdict.encode() + b"\n")
    return digest.hexdigest()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_verdicts_pinned(name):
    assert verdict_digest(pinned_corpus(), CONFIGS[name]) == VERDICT_SHA256[name]


def test_real_verdicts_pinned():
    from data_prep.testdata import SampleDataUnavailable

    spec = importlib.util.spec_from_file_location(
        "filters_vs_datatrove_pinned", REPO / "benchmarks" / "filters_vs_datatrove.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        real = module.real_documents()
    except SampleDataUnavailable as exc:
        pytest.skip(f"real sample data unavailable: {exc}")
    texts = real + module.line_runs(real)
    digest = hashlib.sha256()
    for name in sorted(CONFIGS):
        digest.update(verdict_digest(texts, CONFIGS[name]).encode())
    assert digest.hexdigest() == REAL_VERDICT_SHA256


def pinned_inputs(raw: Path) -> None:
    docs = pinned_corpus(1200, seed=1)
    raw.mkdir(parents=True, exist_ok=True)
    write_jsonl(raw / "a.jsonl", docs[:500])  # cut into byte ranges below
    members = b"".join(
        gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in docs[k : k + 37]).encode(), mtime=0)
        for k in range(500, 800, 37)
    )
    (raw / "b.jsonl.gz").write_bytes(members)  # multi-member gzip
    write_parquet(raw / "c.parquet", docs[800:1000], row_group_size=40)
    write_wet(raw / "d.warc.wet.gz", [t for t in docs[1000:] if t.strip()])


def test_pipeline_output_pinned(tmp_path):
    pinned_inputs(tmp_path / "raw")
    out = tmp_path / "out"
    manifest = run(
        load_data_prep_config(
            None,
            [
                f"input.paths=[{tmp_path / 'raw'}]",
                f"output.dir={out}",
                "input.shard_bytes=100000",
                "tokenizer.vocab_size=800",
                "split.valid_fraction=0.1",
                "runtime.workers=0",
                "runtime.progress=false",
            ],
        )
    )
    digest = hashlib.sha256()
    for name in ("tokenizer.model", "train.bin", "train.idx", "valid.bin", "valid.idx"):
        digest.update(hashlib.sha256((out / name).read_bytes()).digest())
    digest.update(json.dumps([manifest["filters"], manifest["documents"]], sort_keys=True).encode())
    assert digest.hexdigest() == OUTPUT_SHA256
