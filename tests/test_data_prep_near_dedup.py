"""Near-duplicate removal: datasketch's MinHash values, planted recall and false positives, determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from data_prep import near_dedup as nd
from data_prep.config import NearDedupConfig
from data_prep.neardup_corpus import CorpusSettings, generate, score

CFG = NearDedupConfig(enabled=True)  # the defaults


def test_signatures_are_datasketch_minhash_values():
    from datasketch import MinHash

    texts = [
        "A short text.",
        "one two",
        "Ünïcode wörds and   tabs\tand\nnew lines, in ONE document that is long enough for shingles",
        *generate(CorpusSettings(documents=60, seed=3)).texts,
    ]
    for cfg in (CFG, replace(CFG, num_perm=64, bands=16, seed=7, shingle_words=3)):
        sig = nd.signatures(texts, cfg, nd.permutations(cfg))
        assert sig.shape == (cfg.num_perm, len(texts)) and sig.dtype == np.uint32
        for j, text in enumerate(texts):
            reference = MinHash(num_perm=cfg.num_perm, seed=cfg.seed)
            reference.update_batch(nd.shingles(text, cfg.shingle_words))
            assert np.array_equal(reference.hashvalues, sig[:, j]), j


@pytest.fixture(scope="module")
def planted():
    corpus = generate(CorpusSettings(documents=2000, seed=11))
    return corpus, nd.signatures(corpus.texts, CFG, nd.permutations(CFG))


def _labels(sig: np.ndarray, cfg: NearDedupConfig, cuts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The bucket and component steps over signatures split into shards at ``cuts``."""
    maps = np.split(sig, cuts, axis=1)
    pairs = np.concatenate([nd.band_pairs_of(maps, band, cfg)[1] for band in range(cfg.bands)])
    return nd.component_labels(sig.shape[1], pairs), nd.first_of_components(sig.shape[1], pairs)


def test_planted_recall_and_false_positives_at_the_defaults(planted):
    corpus, sig = planted
    labels, keep = _labels(sig, CFG, [700, 701, 1500])
    result = score(corpus, labels)
    assert result["planted_pairs"] >= 400 and result["same_site_pairs"] > 100_000
    assert result["recall"] >= 0.9
    assert result["fp_pair_rate"] < 0.001 and result["same_site_fp_rate"] < 0.001
    assert result["lost_fraction"] < 0.001  # no original's text removed along with a duplicate
    assert int((~keep).sum()) == result["removed"] <= result["should_remove"]


def test_the_checks_can_fail(planted):
    """A low threshold merges hard negatives (template pages of one site): the score sees it."""
    corpus, sig = planted
    loose = replace(CFG, threshold=0.2)
    result = score(corpus, _labels(sig, loose, [1000])[0])
    assert result["same_site_fp_rate"] > 0.001 and result["lost_clusters"] > 0
    strict = replace(CFG, bands=8, rows=16)  # candidates need 16 equal values: misses edited copies
    assert score(corpus, _labels(sig, strict, [1000])[0])["recall"] < 0.9


def test_decisions_do_not_depend_on_the_shard_cut(planted):
    _, sig = planted
    reference = _labels(sig, CFG, [])[1]
    for cuts in ([1], [500, 1000, 1500], list(range(100, 2000, 100))):
        assert np.array_equal(_labels(sig, CFG, cuts)[1], reference)


def test_components_keep_their_first_document():
    pairs = np.array([[3, 5], [1, 3], [6, 7], [0, 9]])  # components {1,3,5}, {6,7}, {0,9}; 2, 4, 8 alone
    keep = nd.first_of_components(10, pairs)
    assert keep.tolist() == [True, True, True, False, True, False, True, False, True, False]
    keys = np.array([[1, 2, 1, 3, 1, 2], [5, 5, 5, 5, 6, 5]], dtype=np.uint32)  # buckets {0,2}, {1,5}; 3, 4 alone
    assert nd.bucket_pairs(keys).tolist() == [[0, 2], [1, 5]]
