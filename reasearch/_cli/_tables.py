"""Tables that fit the terminal: ids and numbers are never cut or wrapped, columns drop by priority.

Job: build the rich tables of ``reasearch runs``, ``reasearch tasks`` and the fleet results so that at
any width (80 columns included) every id and every number a row shows stays whole on one line. Id and
number columns never wrap (their width is their longest cell); prose columns wrap between words and
are never narrower than their longest word (up to 20 characters: a longer word in prose may fold);
when the sum does not fit, the lowest-priority columns are left out (the caption says which, and
``--json`` has everything). Trust boundary: none; the cells are
the CLI's own text (run ids, task ids, model names from the store), printed without markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

__all__ = ["Column", "fitted_table"]

_PROSE_MIN = 12  # a prose column narrower than this is dropped rather than squeezed
_PROSE_WORD = 20  # a prose word longer than this may fold (a number or short id never is that long)


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its header, whether it is ``prose`` (may wrap) or whole (ids, numbers), and its priority.

    Attributes:
        header: the column's title.
        priority: higher is kept longer; the lowest goes first when the terminal is narrow.
        prose: wraps between words (summaries, feedback); otherwise the cells never wrap.
    """

    header: str
    priority: int
    prose: bool = False


def _need(col: Column, cells: Sequence[str]) -> int:
    """The narrowest width that keeps every cell's ids and numbers whole."""
    if col.prose:
        longest_word = min(_PROSE_WORD, max((len(w) for c in cells for w in c.split()), default=0))
        return max(len(col.header), min(_PROSE_MIN, max((len(c) for c in cells), default=0)), longest_word)
    return max([len(col.header), *(len(c) for c in cells)])


def fitted_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Table:
    """A table of ``rows`` (one string per column) that fits ``width`` terminal columns.

    Columns are dropped lowest priority first until the narrowest widths that keep every id and number
    whole fit (each column costs its width plus 3 for padding and rule, the table 1 more); at least
    the highest-priority column stays.
    """
    cells = [[str(r[i]) for r in rows] for i in range(len(columns))]
    need = [_need(c, cells[i]) for i, c in enumerate(columns)]
    kept = list(range(len(columns)))
    for i in sorted(kept, key=lambda k: columns[k].priority):
        if sum(need[k] + 3 for k in kept) + 1 <= width or len(kept) == 1:
            break
        kept.remove(i)
    dropped = [columns[i].header for i in range(len(columns)) if i not in kept]
    caption = f"not shown at {width} columns: {', '.join(dropped)} (--json has them)" if dropped else None
    table = Table(title=title, caption=caption)
    for i in kept:
        col = columns[i]
        if col.prose:
            table.add_column(col.header, overflow="fold", min_width=need[i])
        else:
            table.add_column(col.header, no_wrap=True, min_width=need[i], overflow="ignore")
    for r in rows:
        table.add_row(*(Text(str(r[i])) for i in kept))
    return table
