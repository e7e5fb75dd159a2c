"""The Tokenizer API (SentencePiece and Hugging Face), training determinism, Megatron's dtype rule."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from data_prep.config import TokenizerConfig
from data_prep.tokenizer import TokenizerError, load_tokenizer, token_dtype, train_sentencepiece
from data_prep.writer import encode_documents
from tests.data_prep_fixtures import FOREIGN, english_doc

TRICKY = [
    "Hello  world\n\nfoo\tbar",
    "  leading spaces and trailing  ",
    "emoji 😀, CJK 漢字, Cyrillic ёж, Arabic مرحبا, ligature ﬁ",
    "digits 3.14159 and 2024-01-15",
    "a\x01control",
    "line one\nline two\n",
    "\u00a0nbsp\u2028sep",
    FOREIGN["ru"],
]


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "tokenizer.model"
    texts = [english_doc(i) for i in range(60)]
    vocab = train_sentencepiece(texts, path, TokenizerConfig(vocab_size=700, train_threads=2))
    return path, vocab, texts


def test_training_is_deterministic(sp_model, tmp_path):
    path, vocab, texts = sp_model
    again = tmp_path / "again.model"
    assert train_sentencepiece(texts, again, TokenizerConfig(vocab_size=700, train_threads=2)) == vocab
    assert again.read_bytes() == path.read_bytes()
    assert 500 <= vocab <= 700


def test_sentencepiece_round_trip_is_exact(sp_model):
    tok = load_tokenizer(sp_model[0])
    for text in TRICKY + sp_model[2][:5]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text, repr(text)
        assert tok.eod not in ids
    assert tok.encode_batch(TRICKY) == [tok.encode(t) for t in TRICKY]
    arrays = tok.encode_batch_arrays(TRICKY)
    assert [a.tolist() for a in arrays] == tok.encode_batch(TRICKY)


def test_sentencepiece_megatron_attributes(sp_model):
    path = sp_model[0]
    tok = load_tokenizer(path)
    assert (tok.type, tok.eod, tok.pad, tok.bos, tok.eos) == ("sentencepiece", 2, -1, 1, 2)
    assert tok.vocab_size == sp_model[1]
    assert tok.unique_identifiers["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert tok.unique_identifiers["class"] == "SentencePieceTokenizer"
    assert tok.tokenize("a b") == tok.encode("a b") and tok.detokenize(tok.encode("a b")) == "a b"
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        load_tokenizer(path, eod_token="<no such piece>")
    assert load_tokenizer(path, eod_token="<s>").eod == 1


def test_encode_documents_appends_eod(sp_model):
    tok = load_tokenizer(sp_model[0])
    tokens, lengths = encode_documents(tok, ["first doc", "second", "x"], np.uint16)
    assert tokens.dtype == np.uint16
    expected = [*tok.encode("first doc"), 2, *tok.encode("second"), 2, *tok.encode("x"), 2]
    assert tokens.tolist() == expected and lengths.tolist() == [
        len(tok.encode(t)) + 1 for t in ("first doc", "second", "x")
    ]


def test_dtype_rule():
    assert token_dtype(32000) is np.uint16 and token_dtype(65499) is np.uint16
    assert token_dtype(65500) is np.int32 and token_dtype(128256) is np.int32


def hf_tokenizer(tmp_path, special: list[str]) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([english_doc(i) for i in range(40)], trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def test_huggingface_tokenizer_json(tmp_path):
    path = hf_tokenizer(tmp_path, ["<pad>", "<|endoftext|>"])
    tok = load_tokenizer(path)
    assert (tok.type, tok.eod, tok.pad) == ("huggingface", 1, 0)
    for text in TRICKY:
        assert tok.decode(tok.encode(text)) == text  # byte-level BPE: exact
    assert load_tokenizer(tmp_path).path == path  # a folder holding tokenizer.json
    assert tok.unique_identifiers["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_huggingface_without_eod_needs_eod_token(tmp_path):
    path = hf_tokenizer(tmp_path, ["[END]"])
    with pytest.raises(TokenizerError, match="set tokenizer.eod_token"):
        load_tokenizer(path)
    assert load_tokenizer(path, eod_token="[END]").eod == 0


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(tmp_path / "missing.model")
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"\x00\x01 not a model")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        load_tokenizer(junk)
    bad_json = tmp_path / "tokenizer.json"
    bad_json.write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(bad_json)


def test_gpt2_vocab_and_merges_name_the_conversion_and_it_gives_the_same_ids(tmp_path):
    """Megatron-LM's GPT-2 BPE files (vocab.json + merges.txt): before, the folder said "tokenizer
    file not found: .../tokenizer.json" and vocab.json "not a Hugging Face tokenizer.json"; now
    the error gives the conversion, and the converted file encodes as the original byte-level BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [english_doc(i) for i in range(20)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet)
    )
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    tok.model.save(str(gpt2))
    for given in (gpt2, gpt2 / "vocab.json", gpt2 / "merges.txt"):
        with pytest.raises(TokenizerError, match="GPT-2 BPE files") as err:
            load_tokenizer(given)
    recipe = str(err.value).split("tokenizer.json there: ")[1]
    exec(recipe.replace("; ", "\n"))
    converted = load_tokenizer(gpt2)
    assert (converted.vocab_size, converted.eod) == (400, 0)
    assert converted.encode_batch(texts) == [tok.encode(t).ids for t in texts]


def _many_characters(documents: int = 20) -> list[str]:
    """English lines with 400 distinct CJK characters: more pieces than a 300-piece model holds."""
    chars = "".join(chr(0x4E00 + i) for i in range(400))
    return [english_doc(i) + "\n" + chars for i in range(documents)]


def test_a_vocabulary_too_small_for_the_characters_names_the_key(tmp_path):
    """SentencePiece's own check ended the run with a RuntimeError traceback from its C++ source."""
    with pytest.raises(TokenizerError) as err:
        train_sentencepiece(_many_characters(), tmp_path / "t.model", TokenizerConfig(vocab_size=300))
    needed = int(str(err.value).split(" is below the ")[1].split()[0])
    assert needed > 400 + 256  # the characters, the byte pieces and the special tokens
    assert str(err.value) == (
        f"tokenizer.vocab_size: 300 is below the {needed} pieces a model of this text must hold (its characters at "
        "tokenizer.character_coverage=0.9995, 256 byte pieces, the special tokens): give tokenizer.vocab_size >= "
        f"{needed}, or a lower tokenizer.character_coverage (rarer characters then go to byte pieces)"
    )
    assert not (tmp_path / "t.model").exists()
    train_sentencepiece(_many_characters(), tmp_path / "t.model", TokenizerConfig(vocab_size=needed))  # enough


def test_the_cli_exits_2_on_a_vocabulary_too_small(tmp_path, capsys):
    import json

    from data_prep.__main__ import main

    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in _many_characters()))
    argv = ["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out"), "--vocab-size", "300"]
    off = ["clean.language.enabled=false", "clean.quality.enabled=false", "clean.c4.enabled=false"]
    assert main([*argv, "--workers", "0", "--no-progress", *off]) == 2
    err = capsys.readouterr().err
    assert "data_prep: config error: tokenizer.vocab_size: 300 is below the " in err and "Traceback" not in err
