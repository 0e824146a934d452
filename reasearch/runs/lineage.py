"""Which stored candidate a new candidate was derived from (the lineage a report draws).

Job: name a new candidate's parent by what it is, not by when it came: an agent that writes whole
files (or goes back to an older program) would otherwise get "the last evaluated candidate" as every
parent, and the lineage would be a straight chain. The parent is the earlier candidate whose source is
most similar line by line; a source like none of them (similarity under :data:`MIN_SIMILARITY`) is a
new root. Trust boundary: sources are candidate text (hostile, possibly huge); they are only compared
as strings, within caps on size, lines and how many candidates are compared, never run or parsed.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from reasearch.runs.store import CandidateRecord

__all__ = ["MIN_SIMILARITY", "nearest_candidate"]

MIN_SIMILARITY = 0.5  # difflib's line ratio: below this a source is a fresh start, not an edit
_MAX_LINES = 4000  # lines of each source compared (a candidate is a program or a prompt, not a data dump)
_MAX_CANDIDATES = 500  # the most recent candidates compared (a run's lineage is drawn from the latest work)
_MAX_CHARS = 200_000  # a larger source is not compared (a diff of huge files costs more than the lineage is worth)


def nearest_candidate(source: str, candidates: Sequence[CandidateRecord], *, exclude: str | None = None,
                      min_similarity: float = MIN_SIMILARITY) -> str | None:
    """The id of the candidate ``source`` was most likely derived from, or None (a new root).

    Args:
        source: the new candidate's text.
        candidates: the run's stored candidates, oldest first.
        exclude: an id never chosen (the new candidate's own, when it was stored before).
        min_similarity: the smallest line similarity (0..1) that still counts as derived.

    Returns:
        The most similar candidate's id (the most recent one on a tie), or None when none reaches
        ``min_similarity``.
    """
    if len(source) > _MAX_CHARS:
        return None
    lines = source.splitlines()[:_MAX_LINES]
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(lines)  # the new source is the fixed side: difflib caches what it knows of seq2
    best_id, best_ratio = None, min_similarity
    for cand in reversed(candidates[-_MAX_CANDIDATES:]):  # newest first: a tie keeps the most recent
        if cand.id == exclude or len(cand.source) > _MAX_CHARS:
            continue
        matcher.set_seq1(cand.source.splitlines()[:_MAX_LINES])
        if matcher.real_quick_ratio() < best_ratio or matcher.quick_ratio() < best_ratio:
            continue  # upper bounds of the ratio: cheap, and most candidates stop here
        ratio = matcher.ratio()
        if ratio >= best_ratio and (best_id is None or ratio > best_ratio):
            best_id, best_ratio = cand.id, ratio
    return best_id
