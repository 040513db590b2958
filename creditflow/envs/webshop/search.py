"""BM25 product search with ``bm25s`` (the Lucene variant, Pyserini's k1 = 0.9, b = 0.4).

WebShop ranks products with Pyserini's Lucene BM25 and keeps the top ``SEARCH_RETURN_N`` = 50
(``engine.py``); we do the same over each product's title, description and attributes. ``bm25s`` was
chosen over SQLite FTS5 because it implements Lucene's BM25 scoring (the engine WebShop uses) with the
same parameters, treats a free-text query as a disjunction of its words as Lucene does (FTS5 joins
words with AND and has a query syntax that arbitrary agent text would trip), needs only NumPy, and its
in-memory index pickles with the env. Ties are broken by product order, so rankings are deterministic.
"""

from __future__ import annotations

import os
import re
import sys

# bm25s runs a JAX top-k when it is imported, if JAX is installed. On a GPU machine JAX then takes 75% of the
# GPU's memory (its default preallocation) in every process that imports this module, and the policy runs
# out of memory (seen on a lent H100 with 10 collections at once, 2026-11-27). We only use bm25s's scores,
# never its top-k, so JAX stays on the CPU unless it was already imported or the user chose its platform.
if "jax" not in sys.modules:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bm25s  # noqa: E402
import numpy as np  # noqa: E402

SEARCH_RETURN_N = 50  # WebShop engine.py
K1, B = 0.9, 0.4  # Pyserini's BM25 defaults

_TOKEN = re.compile(r"[a-z0-9]+")
# Lucene's classic English stop set (what Pyserini's default analyzer drops) plus the instruction
# fillers that carry no product meaning.
STOPWORDS = frozenset((
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with i am im i'm need want looking find me my some").split())


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric words of ``text`` without stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class SearchIndex:
    """An in-memory BM25 index over documents given as strings; ``search`` returns document indices."""

    def __init__(self, documents: list[str], *, k1: float = K1, b: float = B):
        self.size = len(documents)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index([tokenize(d) for d in documents], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no query word is in the index)."""
        ids = self._bm25.get_tokens_ids(tokenize(query))
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        return self._bm25.get_scores_from_ids(ids)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the ``k`` best documents that share a word with ``query``, best first."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))]
        return order[:k].tolist()
