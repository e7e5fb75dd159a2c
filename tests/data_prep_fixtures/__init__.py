"""Builders for data_prep test inputs: English and foreign documents, JSONL/parquet/WET/WARC files.

WET (``conversion``) and WARC (``response``) files are written with warcio's WARCWriter,
the same record layout Common Crawl publishes.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

SENTENCES = [
    "The river that runs through the old town has been cleaned over the last ten years.",
    "Most of the people who live here walk to work, and many of them have never owned a car.",
    "A small bakery on the corner sells bread that is still warm early in the morning.",
    "The committee decided to postpone the vote until the budget report is finished.",
    "Engineers tested the new bridge with heavy trucks before it was opened to the public.",
    "Children in the village learn to swim in the lake during the short summer months.",
    "The museum will stay open late on Fridays so that more visitors can see the exhibition.",
    "Farmers in the valley have started to grow more vegetables and fewer grain crops.",
    "She wrote the first draft of the novel in a notebook that she carried everywhere.",
    "The train to the coast leaves twice an hour and takes about forty minutes.",
    "Local volunteers repaired the roof of the library after the storm in January.",
    "A study of the forest found that the number of birds has grown since the fire.",
    "The new software update fixes several bugs and makes the program start faster.",
    "Students who read every day tend to write with more confidence and fewer errors.",
    "The mayor said that the city would plant a thousand trees along the main roads.",
    "Prices at the market were higher this week because of the poor harvest.",
    "The orchestra rehearsed for three months before the concert in the cathedral.",
    "Doctors recommend that adults sleep for at least seven hours each night.",
    "The old factory was turned into apartments, shops and a community garden.",
    "Researchers measured the temperature of the ocean at different depths and seasons.",
    "He learned to repair bicycles from his grandfather, who owned a workshop in the town.",
    "The team that won the championship celebrated with a parade through the streets.",
    "Heavy rain caused the river to rise, and several roads were closed for a day.",
    "The recipe calls for two cups of flour, one egg and a little salt.",
    "Visitors to the island can rent small boats and explore the quiet bays.",
    "The report explains how the school spent the money it received from the state.",
    "Many of the houses on this street were built with stone from the nearby hills.",
    "Scientists hope that the new telescope will help them study distant galaxies.",
    "The company plans to hire fifty new workers when the second factory opens.",
    "Our neighbors keep bees in their garden and sell honey at the weekend market.",
]

FOREIGN = {
    "de": (
        "Die Bundesregierung hat am Mittwoch einen Gesetzentwurf beschlossen, der die Digitalisierung der "
        "Verwaltung beschleunigen soll. Bürgerinnen und Bürger sollen künftig die meisten Behördengänge online "
        "erledigen können, ohne persönlich in einem Amt erscheinen zu müssen. Kritiker bemängeln jedoch, dass "
        "die Finanzierung noch nicht gesichert sei und viele Kommunen keine ausreichende Ausstattung besitzen. "
        "Die Opposition fordert deshalb zusätzliche Mittel für kleine Gemeinden auf dem Land."
    ),
    "fr": (
        "Le conseil municipal a adopté hier soir le nouveau plan de circulation du centre-ville. Les voitures ne "
        "pourront plus traverser la place principale, qui sera réservée aux piétons et aux cyclistes. Les "
        "commerçants craignent une baisse de leur chiffre d'affaires, mais la mairie promet des parkings "
        "supplémentaires à proximité et une navette gratuite pendant les premiers mois de la réforme."
    ),
    "es": (
        "El ayuntamiento anunció ayer la construcción de una nueva biblioteca pública en el barrio norte de la "
        "ciudad. El proyecto incluirá salas de estudio, un espacio infantil y acceso gratuito a internet para "
        "todos los vecinos. Las obras comenzarán en primavera y se espera que terminen antes de finales del "
        "próximo año, según explicó la concejala de cultura durante la presentación del proyecto."
    ),
    "ru": (
        "Вчера в городе открылся новый музей современного искусства. В экспозиции представлены работы более ста "
        "художников из разных стран мира. Посетители смогут увидеть живопись, скульптуру и видеоинсталляции, а "
        "также принять участие в бесплатных экскурсиях по выходным дням. Директор музея рассказал, что в "
        "следующем году планируется открыть ещё два выставочных зала и небольшую библиотеку для студентов."
    ),
}


def english_doc(index: int, sentences: int = 8) -> str:
    """A distinct English document of two paragraphs (passes every default filter)."""
    rng = random.Random(index)
    picked = rng.sample(SENTENCES, sentences)
    half = sentences // 2
    number = f"This is report number {index} in the series."
    return " ".join([number, *picked[:half]]) + "\n\n" + " ".join(picked[half:])


def write_jsonl(path: Path, records: list, text_key: str = "text") -> Path:
    """records: strings (become {"id", text_key}) or ready dicts; .gz / .zst by suffix."""
    lines = []
    for i, record in enumerate(records):
        obj = {"id": f"{path.stem}-{i}", text_key: record} if isinstance(record, str) else record
        lines.append(json.dumps(obj, ensure_ascii=False))
    data = ("\n".join(lines) + "\n").encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, texts: list, text_key: str = "text", row_group_size: int = 1000) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({text_key: texts}), path, row_group_size=row_group_size)
    return path


def write_wet(path: Path, texts: list[str]) -> Path:
    """A WET file: one ``conversion`` record (text/plain) per text, gzip per record."""
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for i, text in enumerate(texts):
            record = writer.create_warc_record(
                f"https://example.org/wet/{i}",
                "conversion",
                payload=io.BytesIO(text.encode("utf-8") if isinstance(text, str) else text),
                warc_content_type="text/plain",
            )
            writer.write_record(record)
    return path


def html_page(title: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<p>{p}</p>\n" for p in paragraphs)
    nav = '<nav><a href="/">Home</a> | <a href="/about">About</a></nav>'
    return (
        f"<!doctype html><html><head><title>{title}</title><script>var x = 1;</script></head>"
        f"<body>{nav}<article><h1>{title}</h1>\n{body}</article><footer>Contact us</footer></body></html>"
    ).encode()


def write_warc(path: Path, pages: list[tuple[str, str, str, bytes]], gzip_records: bool = True) -> Path:
    """A WARC file of ``response`` records: (url, "200 OK", content type, body) each."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=gzip_records)
        for url, status, content_type, body in pages:
            headers = StatusAndHeaders(status, [("Content-Type", content_type)], protocol="HTTP/1.1")
            record = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=headers)
            writer.write_record(record)
    return path
