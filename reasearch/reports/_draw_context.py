"""What a solution drawing is given and what it is: :class:`DrawContext` and the ``Drawing`` type.

It has the attributes of :class:`reasearch.evaluators.svg.DrawingContext`, the duck type a task family's
``draw_svg`` is written against (families sit below the reports and never import them). Data only; the
stored result it carries is untrusted text and numbers that a drawing must escape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reasearch.evaluators.result import EvalResult

__all__ = ["DrawContext", "Drawing"]


@dataclass(frozen=True, slots=True)
class DrawContext:
    """What a drawing gets: the task, the result to draw and the candidate that produced it.

    Attributes:
        task_id: the registry id (``circle_packing/n26-v1``).
        task_params: the task's constructor parameters as stored with the run.
        result: the evaluation result (usually the best ``OK`` one; ``result.solution`` holds the answer).
        source: the candidate's source.
    """

    task_id: str
    task_params: Mapping[str, Any] = field(default_factory=dict)
    result: EvalResult | None = None
    source: str = ""

    @property
    def family(self) -> str:
        return self.task_id.split("/", 1)[0]


Drawing = Callable[[DrawContext], str]
