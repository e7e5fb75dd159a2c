"""One tokenizer interface over SentencePiece ``.model`` files and Hugging Face ``tokenizer.json``.

The training side builds Megatron ``GPTDataset``s with it, so it carries what Megatron reads:
``eod`` (appended after every document here), ``pad`` (-1 when the model has none, or when it
equals ``eod``, as Megatron would reset it), ``vocab_size`` and ``unique_identifiers``.
:func:`train_sentencepiece` trains the model data_prep uses when none is given: identity
normalization and byte fallback, so ``decode(encode(text)) == text`` for any text.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from data_prep.config import TokenizerConfig
from jobscripts.atomic import atomic_write_bytes

# EOS spellings tried, in order, when a Hugging Face tokenizer is loaded without eod_token.
_HF_EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]")
_HF_PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|finetune_right_pad_id|>")
# Megatron-LM's GPT2BPETokenizer files (--vocab-file, --merge-file)
_GPT2_FILES = ("vocab.json", "merges.txt")
# Megatron's rule (tools/preprocess_data.py, GPTDatasetConfig): uint16 while every id fits.
UINT16_VOCAB_LIMIT = 65500


class TokenizerError(ValueError):
    """A tokenizer file cannot be used; the message names the file."""


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def token_dtype(vocab_size: int) -> type[np.unsignedinteger] | type[np.signedinteger]:
    """Megatron's on-disk dtype: uint16 when vocab < 65500, else int32."""
    return np.uint16 if vocab_size < UINT16_VOCAB_LIMIT else np.int32


class Tokenizer:
    """Base class: ``encode``/``encode_batch``/``decode`` plus the ids Megatron needs."""

    type: str
    path: str
    sha256: str
    vocab_size: int
    eod: int
    pad: int
    bos: int
    unique_identifiers: OrderedDict

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [ids.tolist() for ids in self.encode_batch_arrays(texts)]

    def encode_batch_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The fast path the pipeline uses: one int array per text, no EOD."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    # Megatron's MegatronLegacyTokenizer spelling of the same operations.
    def tokenize(self, text: str) -> list[int]:
        return self.encode(text)

    def detokenize(self, ids: Iterable[int]) -> str:
        return self.decode(ids)

    @property
    def eos(self) -> int:
        return self.eod

    def _identify(self) -> None:
        self.unique_identifiers = OrderedDict(
            [("class", type(self).__name__), ("tokenizer_path", [self.path]), ("sha256", self.sha256)]
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, vocab_size={self.vocab_size}, eod={self.eod}, pad={self.pad})"


class SentencePieceTokenizer(Tokenizer):
    type = "sentencepiece"

    def __init__(self, path: str, eod_token: str | None = None, threads: int = 1) -> None:
        import sentencepiece as spm

        self.path = str(path)
        try:
            self.model = spm.SentencePieceProcessor(model_file=self.path)
        except (OSError, RuntimeError) as exc:
            raise TokenizerError(f"{path}: not a SentencePiece model: {exc}") from exc
        self.threads = threads
        self.vocab_size = self.model.get_piece_size()
        if eod_token is not None:
            self.eod = self.model.piece_to_id(eod_token)
            if self.eod == self.model.unk_id() and eod_token != self.model.id_to_piece(self.model.unk_id()):
                raise TokenizerError(f"{path}: tokenizer.eod_token {eod_token!r} is not in the vocabulary")
        else:
            self.eod = self.model.eos_id()
            if self.eod < 0:
                raise TokenizerError(f"{path}: the model has no EOS piece; set tokenizer.eod_token")
        pad = self.model.pad_id()
        self.pad = pad if pad >= 0 and pad != self.eod else -1
        self.bos = self.model.bos_id()
        self.sha256 = file_sha256(self.path)
        self._identify()

    def encode_batch_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self.model.encode(list(texts), out_type="numpy", num_threads=self.threads)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.model.encode(list(texts), num_threads=self.threads)

    def encode(self, text: str) -> list[int]:
        return self.model.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self.model.decode([int(i) for i in ids])


class HuggingFaceTokenizer(Tokenizer):
    type = "huggingface"

    def __init__(self, path: str, eod_token: str | None = None) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.path = str(path)
        try:
            self.model = HFTokenizer.from_file(self.path)
        except Exception as exc:  # tokenizers raises its own Exception subclass
            raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json: {exc}") from exc
        self.vocab_size = self.model.get_vocab_size(with_added_tokens=True)
        candidates = (eod_token,) if eod_token is not None else _HF_EOD_CANDIDATES
        found = [self.model.token_to_id(token) for token in candidates]
        found = [i for i in found if i is not None]
        if not found:
            what = (
                f"tokenizer.eod_token {eod_token!r} is not in the vocabulary"
                if eod_token
                else (f"none of {list(_HF_EOD_CANDIDATES)} is in the vocabulary; set tokenizer.eod_token")
            )
            raise TokenizerError(f"{path}: {what}")
        self.eod = found[0]
        pads = [self.model.token_to_id(token) for token in _HF_PAD_CANDIDATES]
        pads = [i for i in pads if i is not None and i != self.eod]
        self.pad = pads[0] if pads else -1
        self.bos = -1
        self.sha256 = file_sha256(self.path)
        self._identify()

    def encode_batch_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        encode = getattr(self.model, "encode_batch_fast", self.model.encode_batch)
        return [np.asarray(e.ids, dtype=np.int64) for e in encode(list(texts), add_special_tokens=False)]

    def encode(self, text: str) -> list[int]:
        return self.model.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.model.decode([int(i) for i in ids], skip_special_tokens=False)


def tokenizer_type(path: str | os.PathLike) -> str:
    """``sentencepiece`` for a .model protobuf, ``huggingface`` for tokenizer.json (or its folder)."""
    path = Path(path)
    if path.is_dir():
        return "huggingface"
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip()
    return "huggingface" if head.startswith(b"{") else "sentencepiece"


def load_tokenizer(path: str | os.PathLike, eod_token: str | None = None) -> Tokenizer:
    """A SentencePiece ``.model`` or a Hugging Face ``tokenizer.json`` (or a folder holding one)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if path.name in _GPT2_FILES or (path.is_dir() and not (path / "tokenizer.json").exists()):
        if all((folder / name).is_file() for name in _GPT2_FILES):
            raise TokenizerError(
                f"{folder}: GPT-2 BPE files (vocab.json, merges.txt) are not read directly; convert them to a "
                "tokenizer.json there: from tokenizers import ByteLevelBPETokenizer; t = ByteLevelBPETokenizer("
                f"'{folder / 'vocab.json'}', '{folder / 'merges.txt'}'); t.add_special_tokens(['<|endoftext|>']); "
                f"t.save('{folder / 'tokenizer.json'}')"
            )
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(f"tokenizer file not found: {path}")
    if tokenizer_type(path) == "huggingface":
        return HuggingFaceTokenizer(str(path), eod_token)
    return SentencePieceTokenizer(str(path), eod_token)


def _training_lines(texts: Iterable[str], max_bytes: int) -> Iterator[str]:
    """SentencePiece trains on lines; a longer line is cut into pieces it will accept."""
    for text in texts:
        for line in text.split("\n"):
            if not line.strip():
                continue
            while len(line.encode("utf-8")) > max_bytes:
                cut = max_bytes // 4  # <= max_bytes in UTF-8 whatever the characters
                yield line[:cut]
                line = line[cut:]
            yield line


def train_sentencepiece(texts: Iterable[str], out_path: str | os.PathLike, cfg: TokenizerConfig) -> int:
    """Train on ``texts`` (in the order given; deterministic for a fixed train_threads).

    Returns the vocabulary size reached, which is below ``cfg.vocab_size`` only when the
    sample is too small to fill it.
    """
    import sentencepiece as spm

    max_sentence_bytes = 1 << 14
    model = io.BytesIO()
    spm.set_random_generator_seed(1)
    try:
        _train(spm, texts, model, cfg, max_sentence_bytes)
    except RuntimeError as exc:  # SentencePiece's C++ checks: a traceback of its source lines otherwise
        raise TokenizerError(_training_refused(str(exc), cfg)) from None
    atomic_write_bytes(out_path, model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()


_TOO_FEW_PIECES = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _training_refused(message: str, cfg: TokenizerConfig) -> str:
    """One line naming the key to change, for what SentencePiece refuses to train."""
    few = _TOO_FEW_PIECES.search(message)
    if few:
        return (
            f"tokenizer.vocab_size: {few.group(1)} is below the {few.group(2)} pieces a model of this text must "
            f"hold (its characters at tokenizer.character_coverage={cfg.character_coverage}, 256 byte pieces, "
            f"the special tokens): give tokenizer.vocab_size >= {few.group(2)}, or a lower "
            "tokenizer.character_coverage (rarer characters then go to byte pieces)"
        )
    return f"tokenizer: SentencePiece refused to train: {message.splitlines()[0] if message else 'no reason given'}"


def _train(spm, texts: Iterable[str], model: io.BytesIO, cfg: TokenizerConfig, max_sentence_bytes: int) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=_training_lines(texts, max_sentence_bytes),
        model_writer=model,
        vocab_size=cfg.vocab_size,
        model_type=cfg.model_type,
        character_coverage=cfg.character_coverage,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        split_digits=cfg.split_digits,
        user_defined_symbols=["\n"],
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        max_sentence_length=max_sentence_bytes,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        hard_vocab_limit=False,
        num_threads=cfg.train_threads,
        minloglevel=2,
    )
