"""Regenerate ``pydoc_continuation.jsonl``, the local lm-eval task the tests run (no download).

Each item: the start of a passage of CPython's documentation (``pydoc_data.topics``, shipped
with Python), the true next 60 characters, and three 60-character continuations taken from
other passages at the same offset. Seeded; the shipped file was made with Python 3.11.7.

    python eval/lm_eval_tasks/make_pydoc_continuation.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CONTEXT_CHARS = 120
CHOICE_CHARS = 60
ITEMS = 40


def items(seed: int = 0) -> list[dict]:
    from pydoc_data.topics import topics

    passages = [" ".join(t.split()) for _, t in sorted(topics.items())]
    passages = [p for p in passages if len(p) >= CONTEXT_CHARS + CHOICE_CHARS]
    rng = random.Random(seed)
    chosen = rng.sample(range(len(passages)), ITEMS)
    out = []
    for i in chosen:
        p = passages[i]
        context, truth = p[:CONTEXT_CHARS], p[CONTEXT_CHARS : CONTEXT_CHARS + CHOICE_CHARS]
        others = rng.sample([j for j in range(len(passages)) if j != i], 3)
        choices = [passages[j][CONTEXT_CHARS : CONTEXT_CHARS + CHOICE_CHARS] for j in others]
        label = rng.randrange(4)
        choices.insert(label, truth)
        out.append({"context": context, "choices": choices, "label": label})
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("pydoc_continuation.jsonl")
    path.write_text("".join(json.dumps(item) + "\n" for item in items()))
    print(f"wrote {path}")
