"""The run's tokenizer as a Hugging Face fast tokenizer that ``AutoTokenizer`` loads with no custom code.

* A ``tokenizer.json`` (data_prep's HF option) is used as it is, less a post-processor that adds
  tokens (a BOS ``<s>``): data_prep encodes without it, so the model never saw them.
* A SentencePiece BPE ``.model`` (data_prep's default) becomes a ``tokenizers`` BPE model:
  vocabulary and merges from transformers' ``SentencePieceExtractor``, byte fallback, and
  SentencePiece's own normalization: the dummy prefix ``▁`` once at the start of the text and
  spaces as ``▁`` (a normalizer on the whole text, so a user-defined piece such as ``"\\n"``
  does not restart the prefix; BPE never merges across it because no piece contains it).
  Control pieces (``<unk>``, ``<s>``, ``</s>``) are special tokens, never matched in text
  (``split_special_tokens``: SentencePiece encodes the text ``"</s>"`` as characters). Unigram models and
  SentencePiece normalization rules other than identity are refused: they have no exact
  equivalent here, and the export checks equality (:func:`encoding_parity`), not similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data_prep.tokenizer import Tokenizer as RunTokenizer
from data_prep.tokenizer import tokenizer_type


class TokenizerExportError(ValueError):
    """The tokenizer cannot be exported exactly; names the file."""


def _sentencepiece_proto(path: Path) -> Any:
    """The model's proto, refused (:class:`TokenizerExportError`) where it has no exact export."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.BPE:
        raise TokenizerExportError(f"{path}: only SentencePiece BPE models are exported (this one is not BPE)")
    spec = proto.normalizer_spec
    if spec.name != "identity" or spec.remove_extra_whitespaces:
        raise TokenizerExportError(
            f"{path}: normalization {spec.name!r} (remove_extra_whitespaces={spec.remove_extra_whitespaces}) has "
            "no exact fast-tokenizer equivalent; data_prep trains with identity normalization"
        )
    return proto


def check_exportable(path: str | Path) -> None:
    """Refuse (:class:`TokenizerExportError`, naming the file) a tokenizer :func:`export_tokenizer`
    cannot export exactly, before any model work: a SentencePiece model that is not BPE or
    normalizes text (``nmt_nfkc``, extra-whitespace removal)."""
    if tokenizer_type(Path(path)) == "sentencepiece":
        _sentencepiece_proto(Path(path))


def _from_sentencepiece(path: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    proto = _sentencepiece_proto(path)
    spec = proto.normalizer_spec
    extracted = SentencePieceExtractor(str(path)).extract(models.BPE)
    unk = proto.pieces[proto.trainer_spec.unk_id].piece
    tok = Tokenizer(
        models.BPE(
            vocab=extracted["vocab"],
            merges=extracted["merges"],
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=proto.trainer_spec.byte_fallback,
        )
    )
    steps = [normalizers.Replace(" ", "▁")]
    if spec.add_dummy_prefix:
        steps.insert(0, normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(steps)
    decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if spec.add_dummy_prefix:
        decode.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(decode)
    tok.add_special_tokens([a for a in extracted["additional_special_tokens"] if a.special])
    return tok


def export_tokenizer(path: str | Path, eod_id: int, out_dir: Path, model_max_length: int) -> dict[str, Any]:
    """Write the HF tokenizer files into ``out_dir``; returns what export.json records.
    ``model_max_length``: the model's positions (``model.seq_length``), so that truncation
    and lm-eval's context window follow the model, not transformers' "unlimited" 1e30."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    kind = tokenizer_type(path)
    if kind == "sentencepiece":
        tok = _from_sentencepiece(path)
    else:
        tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
    # data_prep encodes documents without the post-processor (add_special_tokens=False): a
    # tokenizer.json whose post-processor adds tokens (Llama's "<s> $A") would put before every
    # text a token no training sequence holds, since transformers encodes with add_special_tokens=True
    # by default. The export adds nothing, as the data has nothing (and as the SentencePiece export).
    dropped = None
    if tok.post_processor is not None and tok.encode("a").ids != tok.encode("a", add_special_tokens=False).ids:
        dropped, tok.post_processor = type(tok.post_processor).__name__, None
    eos = tok.id_to_token(eod_id)
    if eos is None:
        raise TokenizerExportError(f"{path}: end-of-document id {eod_id} is not in the vocabulary")
    # BOS is the end-of-document token, as GPT-2's: data_prep puts EOD after every document and
    # nothing before one, so EOD is what the model saw before a document starts ("<s>" it never
    # saw; lm-eval prefixes the BOS to every request without a context).
    # Padding (batched scoring, generation) fills with EOD too, as GPT-2 exports set pad = eos: the
    # attention mask hides a padded position, so its id does not matter. Right padding (the
    # default) keeps every real token at its position; for generate(), pad on the left
    # (tokenizer.padding_side = "left"): transformers derives positions from the attention mask.
    specials = {"eos_token": eos, "bos_token": eos, "pad_token": eos}
    if tok.token_to_id("<unk>") is not None:
        specials["unk_token"] = "<unk>"
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        # SentencePiece encodes the text "</s>" as characters; a tokenizer.json (data_prep's
        # tokenizers encode) matches its special tokens in text: each export does as the data did
        split_special_tokens=kind == "sentencepiece",
        **specials,
    )
    wrapped.save_pretrained(str(out_dir))
    return {
        "source": str(path),
        "type": kind,
        "eos_token": eos,
        "bos_token": eos,
        "pad_token": eos,
        "split_special_tokens": kind == "sentencepiece",
        "eod_id": eod_id,
        "model_max_length": model_max_length,
        "dropped_post_processor": dropped,
    }


def encoding_parity(ours: RunTokenizer, exported_dir: Path, texts: Sequence[str]) -> dict[str, Any]:
    """Encode ``texts`` with the run's tokenizer (data_prep's) and the exported one: how many
    agree exactly, and whether the export decodes the run's ids back to each text. Each special
    token's string in a sentence is checked too (held-out documents seldom hold one)."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(exported_dir))
    specials = {t.content for t in theirs.added_tokens_decoder.values()} | set(theirs.all_special_tokens)
    probes = [f"a {t} b, x{t}y" for t in sorted(specials)]
    same = decoded = 0
    first_difference = None
    for text in [*texts, *probes]:
        a = ours.encode(text)
        b = theirs.encode(text, add_special_tokens=False, verbose=False)  # whole documents, as data_prep encodes them
        default = theirs.encode(text, verbose=False)  # transformers' default (add_special_tokens) adds nothing either
        same += a == b == default
        decoded += theirs.decode(a, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text
        if not a == b == default and first_difference is None:
            first_difference = {"text": text[:200], "run": a[:20], "export": (b if a != b else default)[:20]}
    return {
        "texts": len(texts) + len(probes),
        "identical_ids": same,
        "identical_decode": decoded,
        "first_difference": first_difference,
    }
