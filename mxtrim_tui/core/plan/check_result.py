"""transformers' verdict on a plan, as the plan carries it (core/checks/transformers_plan.py
reaches it; the plan, the report and the wizard read it)."""

from __future__ import annotations

from dataclasses import dataclass

EXACT = "exact"
MISMATCH = "mismatch"
NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class TransformersCheck:
    status: str  # EXACT | MISMATCH | NOT_CHECKED
    summary: str
    problems: tuple[str, ...] = ()
    model_class: str | None = None
    solved: tuple = ()  # (path tuple, before, after) edits found by the solver

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "summary": self.summary,
            "problems": list(self.problems),
            "model_class": self.model_class,
            "solved": [{"path": ".".join(map(str, p)), "before": b, "after": a} for p, b, a in self.solved],
        }
