"""HTML bytes -> plain text for WARC ``response`` records (resiliparse, or trafilatura)."""

from __future__ import annotations

from data_prep.config import InputConfig


def decode_html(payload: bytes, http_charset: str | None, on_decode_error: str) -> str:
    """Decode with the HTTP charset, else the detected one; UTF-8 and cp1252 as fallbacks."""
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    encoding = http_charset or detect_encoding(payload)
    errors = "strict" if on_decode_error == "skip" else "replace"
    return bytes_to_str(payload, encoding, errors=errors)


def html_to_text(payload: bytes, http_charset: str | None, cfg: InputConfig) -> str:
    html = decode_html(payload, http_charset, cfg.on_decode_error)
    if cfg.html_extractor == "trafilatura":
        return _trafilatura_text(html)
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse(html), main_content=cfg.html_main_content, alt_texts=False)


def _trafilatura_text(html: str) -> str:
    try:
        import trafilatura
    except ImportError as exc:  # trafilatura 2.x needs lxml_html_clean with lxml >= 5.2
        raise ImportError(
            f"input.html_extractor=trafilatura: cannot import trafilatura ({exc}); "
            "install lxml_html_clean (pip install lxml_html_clean==0.4.6)"
        ) from exc
    return trafilatura.extract(html, include_comments=False, deduplicate=False) or ""
