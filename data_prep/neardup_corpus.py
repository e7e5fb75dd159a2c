"""A corpus with planted near-duplicates, to measure near-dedup recall and false positives.

Text comes from an order-1 word Markov chain over a Zipf-distributed synthetic vocabulary
(each word prefers a few successors), so unrelated documents share frequent short phrases
as real text does, but no passage. Web-like hard negatives: most documents carry the header
and footer of one of a few sites, and a share of the originals are template pages (a short
body in a long site template) whose same-site pairs share up to ~45% of their shingles
without being duplicates. Planted near-duplicates: copies of an original page with a few
percent of its words edited (substituted, inserted or deleted) and another site's header and
footer added around it. ``cluster[i]`` is the original that document ``i`` copies (``i`` itself
for an original); documents are shuffled, so a copy may come before its original.

Deterministic for a seed; ``python -m data_prep.neardup_corpus OUT.jsonl`` writes one.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from rundir.contract import ExitCode

_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]


@dataclass
class PlantedCorpus:
    texts: list[str]
    cluster: np.ndarray  # per document: the original it copies (its own index for an original)
    site: np.ndarray  # per document: the site whose boilerplate it carries, -1 for none

    def planted_pairs(self) -> list[tuple[int, int]]:
        """(i, j), i < j, for every two documents of one cluster (an original and a copy, or two copies)."""
        members: dict[int, list[int]] = {}
        for doc, cluster in enumerate(self.cluster.tolist()):
            members.setdefault(cluster, []).append(doc)
        return [pair for docs in members.values() for pair in combinations(docs, 2)]


@dataclass
class CorpusSettings:
    documents: int = 2000  # originals plus copies
    duplicate_fraction: float = 0.2  # share of documents that are copies
    max_copies: int = 3  # copies of one original: 1..max_copies
    edit_fraction: tuple[float, float] = (0.01, 0.05)  # words edited in a copy, uniform in this range
    body_words: tuple[float, float, int] = (400.0, 0.6, 80)  # lognormal median, sigma, minimum
    sites: int = 10
    boilerplate_words: tuple[int, int] = (10, 40)  # header + footer words of a site, uniform
    boilerplate_fraction: float = 0.6  # originals that carry their site's boilerplate
    template_fraction: float = 0.15  # originals that are template pages: short body, long site template
    template_words: tuple[int, int] = (40, 100)  # words of a site's page template, uniform
    template_body_words: tuple[int, int] = (60, 140)  # words of a template page's own text, uniform
    vocabulary: int = 20_000
    seed: int = 0


class _Language:
    """Zipf words with preferred successors: frequent phrases, as in real text."""

    def __init__(self, rng: np.random.Generator, size: int) -> None:
        lengths = rng.integers(1, 4, size=size)
        self.words = ["".join(rng.choice(_SYLLABLES, n)) for n in lengths]
        ranks = np.arange(1, size + 1)
        self.p = 1.0 / ranks**1.05
        self.p /= self.p.sum()
        self.successors = rng.choice(size, size=(size, 6), p=self.p)
        self.rng = rng

    def words_of(self, count: int) -> list[str]:
        rng = self.rng
        out = np.empty(count, dtype=np.int64)
        out[0] = rng.choice(len(self.words), p=self.p)
        fresh = rng.choice(len(self.words), size=count, p=self.p)
        follow = rng.random(count) < 0.7
        pick = rng.integers(0, self.successors.shape[1], size=count)
        for i in range(1, count):
            out[i] = self.successors[out[i - 1], pick[i]] if follow[i] else fresh[i]
        return [self.words[i] for i in out]

    def text(self, count: int) -> str:
        words = self.words_of(count)
        for i in range(0, count, 14):  # sentences of 14 words
            words[i] = words[i].capitalize()
            end = min(i + 13, count - 1)
            words[end] += "."
        return " ".join(words)


def _edit(words: list[str], fraction: float, language: _Language) -> list[str]:
    rng = language.rng
    words = list(words)
    edits = max(1, round(fraction * len(words)))
    replacements = language.words_of(edits)
    for k in range(edits):
        position = int(rng.integers(0, len(words)))
        kind = rng.integers(0, 3)
        if kind == 0:
            words[position] = replacements[k]
        elif kind == 1:
            words.insert(position, replacements[k])
        elif len(words) > 1:
            del words[position]
    return words


def generate(settings: CorpusSettings | None = None) -> PlantedCorpus:
    s = settings or CorpusSettings()
    rng = np.random.default_rng(s.seed)
    language = _Language(rng, s.vocabulary)
    boilerplate = []
    for _ in range(s.sites):
        total = int(rng.integers(s.boilerplate_words[0], s.boilerplate_words[1] + 1))
        header = int(rng.integers(1, total))
        boilerplate.append((language.text(header), language.text(total - header)))
    templates = []
    for _ in range(s.sites):
        total = int(rng.integers(s.template_words[0], s.template_words[1] + 1))
        header = int(rng.integers(1, total))
        templates.append((language.text(header), language.text(total - header)))
    copies_total = int(s.documents * s.duplicate_fraction)
    originals = s.documents - copies_total
    median, sigma, minimum = s.body_words
    texts, cluster, site = [], [], []
    for i in range(originals):
        kind = rng.random()
        if kind < s.template_fraction:  # a template page: the site's long template around a short text
            home = int(rng.integers(0, s.sites))
            body = language.text(int(rng.integers(s.template_body_words[0], s.template_body_words[1] + 1)))
            texts.append(_wrap(body, templates[home]))
        else:
            body = language.text(max(minimum, int(rng.lognormal(np.log(median), sigma))))
            home = int(rng.integers(0, s.sites)) if kind < s.template_fraction + s.boilerplate_fraction else -1
            texts.append(_wrap(body, boilerplate[home]) if home >= 0 else body)
        cluster.append(i)
        site.append(home)
    sources = rng.choice(originals, size=originals, replace=False)
    made = 0
    for original in sources.tolist():
        for _ in range(int(rng.integers(1, s.max_copies + 1))):
            if made == copies_total:
                break
            fraction = float(rng.uniform(*s.edit_fraction))
            edited = " ".join(_edit(texts[original].split(" "), fraction, language))  # the whole page
            where = int(rng.integers(0, s.sites))
            texts.append(_wrap(edited, boilerplate[where]))  # and another site's header and footer around it
            cluster.append(original)
            site.append(where)
            made += 1
        if made == copies_total:
            break
    order = rng.permutation(len(texts))
    new_index = np.empty(len(order), dtype=np.int64)
    new_index[order] = np.arange(len(order))
    return PlantedCorpus(
        texts=[texts[i] for i in order],
        cluster=new_index[np.asarray(cluster)[order]],
        site=np.asarray(site)[order],
    )


def score(corpus: PlantedCorpus, labels: np.ndarray) -> dict:
    """Recall of planted pairs and false positives, given each document's component.

    ``fp_pair_rate``: pairs of documents of different clusters put in one component, over all
    such pairs; ``same_site_fp_rate``: the same over pairs that share a site's boilerplate (the
    hard negatives); ``lost_fraction``: clusters none of whose documents survives (the first
    document of each component is kept), over all clusters: unique text removed by mistake.
    """
    n = len(corpus.texts)
    planted = np.array(corpus.planted_pairs(), dtype=np.int64).reshape(-1, 2)
    found = labels[planted[:, 0]] == labels[planted[:, 1]]
    pairs_in = _pairs_per_group(labels)
    same_cluster_pairs_in = _pairs_per_group(labels * (n + 1) + corpus.cluster)
    non_dup_pairs = n * (n - 1) // 2 - _pairs_per_group(corpus.cluster)
    fp_pairs = pairs_in - same_cluster_pairs_in
    with_site = corpus.site >= 0
    site_key = corpus.site[with_site]
    site_pairs = _pairs_per_group(site_key) - _pairs_per_group(site_key * (n + 1) + corpus.cluster[with_site])
    lab, clu = labels[with_site], corpus.cluster[with_site]
    site_fp = _pairs_per_group(lab * (n + 1) + site_key) - _pairs_per_group((lab * (n + 1) + site_key) * (n + 1) + clu)
    first = np.full(int(labels.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    kept_clusters = set(corpus.cluster[first[labels] == np.arange(n)].tolist())
    clusters = set(corpus.cluster.tolist())
    return {
        "documents": n,
        "planted_pairs": int(len(planted)),
        "recall": float(found.mean()) if len(planted) else 1.0,
        "fp_pairs": int(fp_pairs),
        "non_duplicate_pairs": int(non_dup_pairs),
        "fp_pair_rate": fp_pairs / max(non_dup_pairs, 1),
        "same_site_fp_pairs": int(site_fp),
        "same_site_pairs": int(site_pairs),
        "same_site_fp_rate": site_fp / max(site_pairs, 1),
        "lost_clusters": len(clusters - kept_clusters),
        "lost_fraction": len(clusters - kept_clusters) / len(clusters),
        "removed": int(n - len(np.unique(labels))),
        "should_remove": int(n - len(clusters)),
    }


def _pairs_per_group(keys: np.ndarray) -> int:
    counts = np.unique(keys, return_counts=True)[1].astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def _wrap(body: str, site: tuple[str, str]) -> str:
    return f"{site[0]}\n\n{body}\n\n{site[1]}"


def main(argv: list[str]) -> ExitCode:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.neardup_corpus",
        description="Write the planted near-duplicate corpus (the default CorpusSettings) as JSONL: text, cluster",
    )
    parser.add_argument("out", metavar="OUT.jsonl", help="the JSONL file to write")
    args = parser.parse_args(argv)  # -h exits 0, a bad option 2: neither writes a file named after it
    corpus = generate()
    with open(args.out, "w") as fh:
        for text, cluster in zip(corpus.texts, corpus.cluster.tolist()):
            fh.write(json.dumps({"text": text, "cluster": cluster}) + "\n")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
