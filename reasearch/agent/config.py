"""``AgentConfig``: the typed settings of one agent run (unknown keys are an error; every key is read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from reasearch.errors import ConfigError
from reasearch.models.base import ModelSpec

__all__ = ["ROLES", "AgentConfig"]

ROLES = ("agent", "editor", "summarizer")  # the main loop, edit_code rewrites, compaction summaries


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Settings of the agent loop; stored in the run's config and read back on resume.

    Attributes:
        models: a :class:`ModelSpec` per role (``agent``, ``editor``, ``summarizer``); a missing
            role uses the ``agent`` model.
        fallbacks: a stronger model per role, tried when the role's (cheap) model fails: no usable
            reply, or for ``editor`` an edit that has no code block, does not compile, lacks the entry
            point or does not import. Both attempts are recorded and debited.
        max_turns: model turns before the run wraps up.
        max_turns_without_tools: consecutive model turns without a tool call after which the run
            stops (the harness chooses the best candidate); the turn before the last one, the nudge
            warns the model.
        max_wall_s: active wall seconds (summed over resumes) before the run wraps up; None = no limit.
        compact_threshold_tokens: context size that triggers a compaction.
        stagnation_after: evaluations without improvement before the snapshot warns.
        recent_evaluations: evaluations listed in each snapshot.
        tool_timeout_s: default and maximum time of one ``python_exec``/``bash`` call.
        tool_memory_mb: address-space limit of those calls.
        sandbox_mode: ``auto``, ``nsjail`` or ``process`` for ``python_exec``/``bash``.
        max_reply_attempts: attempts to get a usable reply when one comes back empty or cut off.
        wrap_up_turn: when a soft limit (turns, wall time, evaluations) is reached, give the agent one
            last turn in which it may only call ``finish``.
        lessons_max_chars: characters of ``lessons.md`` shown in each snapshot.
        tool_result_max_chars: characters of a tool result kept in the conversation.
        workspace_max_mb: bytes (MiB) the workspace may hold on the host; a command that leaves more is
            rolled back with a tool error.
        workspace_max_files: files, directories and links the workspace may hold (likewise).
        use_snapshot: re-emit the state snapshot every turn; False is the ``agent:no-snapshot`` ablation (the
            model sees only its own history, as in a plain coding agent).
        use_lessons: keep ``lessons.md`` (in the workspace, the snapshot and compactions); False is
        ``agent:no-lessons``.
        use_compaction: compact the context at the threshold or on ``compact()``; False is ``agent:no-compaction``
            (no ``compact`` tool; the context only grows).
    """

    models: Mapping[str, ModelSpec] = field(default_factory=lambda: {"agent": ModelSpec()})
    fallbacks: Mapping[str, ModelSpec] = field(default_factory=dict)
    max_turns: int = 200
    max_turns_without_tools: int = 5
    max_wall_s: float | None = None
    compact_threshold_tokens: int = 90_000
    stagnation_after: int = 8
    recent_evaluations: int = 5
    tool_timeout_s: float = 300.0
    tool_memory_mb: int = 2048
    sandbox_mode: str = "auto"
    max_reply_attempts: int = 3
    wrap_up_turn: bool = True
    lessons_max_chars: int = 6000
    tool_result_max_chars: int = 20_000
    workspace_max_mb: int = 256
    workspace_max_files: int = 20_000
    use_snapshot: bool = True
    use_lessons: bool = True
    use_compaction: bool = True

    def __post_init__(self) -> None:
        models = {}
        for role, spec in dict(self.models).items():
            if role not in ROLES:
                raise ConfigError(f"unknown model role {role!r}; roles are {list(ROLES)}")
            models[role] = spec if isinstance(spec, ModelSpec) else ModelSpec.from_dict(spec)
        if "agent" not in models:
            raise ConfigError("the config needs a model for the 'agent' role")
        object.__setattr__(self, "models", models)
        fallbacks = {}
        for role, spec in dict(self.fallbacks).items():
            if role not in ROLES:
                raise ConfigError(f"unknown fallback role {role!r}; roles are {list(ROLES)}")
            fallbacks[role] = spec if isinstance(spec, ModelSpec) else ModelSpec.from_dict(spec)
        object.__setattr__(self, "fallbacks", fallbacks)
        for name in (
            "max_turns",
            "max_turns_without_tools",
            "compact_threshold_tokens",
            "stagnation_after",
            "recent_evaluations",
            "max_reply_attempts",
            "lessons_max_chars",
            "tool_result_max_chars",
            "tool_memory_mb",
            "workspace_max_mb",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}")
        if self.workspace_max_files < 16:
            raise ConfigError(f"workspace_max_files must be >= 16, not {self.workspace_max_files}")
        if self.tool_timeout_s <= 0 or (self.max_wall_s is not None and self.max_wall_s <= 0):
            raise ConfigError("tool_timeout_s and max_wall_s must be > 0")
        if self.sandbox_mode not in ("auto", "nsjail", "process"):
            raise ConfigError(f"sandbox_mode must be auto, nsjail or process, not {self.sandbox_mode!r}")

    @classmethod
    def ablation(cls, name: str) -> dict[str, bool]:
        """The settings of an ablation flag (``no-snapshot``, ``no-lessons``, ``no-compaction``)."""
        flags = {"no-snapshot": {"use_snapshot": False}, "no-lessons": {"use_lessons": False},
                 "no-compaction": {"use_compaction": False}}
        if name not in flags:
            raise ConfigError(f"unknown agent ablation {name!r}; known: {sorted(flags)}")
        return flags[name]

    def model(self, role: str) -> ModelSpec:
        """The spec of ``role`` (the agent's own model when the role has none)."""
        return self.models.get(role) or self.models["agent"]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["models"] = {role: asdict(spec) for role, spec in self.models.items()}
        d["fallbacks"] = {role: asdict(spec) for role, spec in self.fallbacks.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown agent config keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)
