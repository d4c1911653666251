"""Aligned tables that fit the terminal they are printed on, and whole when piped."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

TABLE_WIDTH = 100
"""The width of the demo's report, which is read in a terminal of any size."""
ELLIPSIS = "\u2026"


def output_width(stream: TextIO | None = None) -> int | None:
    """The columns a table printed on `stream` (default stdout) may take: COLUMNS when set,
    else the terminal's width; None (cut nothing) when the output goes to a pipe or a file,
    where a reader or a script wants every cell whole."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):  # no descriptor (a captured stream), or closed
        return None


def clip(text: str, width: int) -> str:
    """`text` in at most `width` columns, its end replaced by an ellipsis when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None = None,
    whole: Sequence[int] = (),
) -> str:
    """Aligned columns in at most `width` columns (default: `output_width()`, and no limit when
    that is None): the widest columns are cut first, each cell with an ellipsis, so that no
    line wraps in the middle of a column. A column keeps at least 16 characters (a code like
    `operator_resolve` stays whole); the first column, which names the row (a run id to copy),
    and the columns in `whole` (closed codes) are never cut: past those the line is wider
    instead."""
    if width is None:
        width = output_width()
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    floor = [min(w, max(len(h), 16)) for w, h in zip(widths, headers, strict=True)]
    for i in (0, *whole):
        floor[i] = widths[i]
    while width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        i = max(range(len(widths)), key=lambda k: widths[k] - floor[k])
        if widths[i] <= floor[i]:
            break  # every column is at its narrowest: a wider line beats unreadable cells
        widths[i] -= 1

    def line(cells: Sequence[str]) -> str:
        return "  ".join(clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
