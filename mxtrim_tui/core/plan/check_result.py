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
    judge: dict | None = None  # the transformers that judged: version, origin, interpreter (core/checks/judge.py)
    # the output model's tensors as transformers' meta build makes them, for parts without
    # headers (core/checks/meta_weights.py; None: not asked for, or not built)
    config_tensors: dict | None = None
    config_tensors_problem: str = ""

    @property
    def judged_by(self) -> str:
        """"transformers 4.57.1 (/env/.../transformers; $MXTRIM_VLLM_PYTHON)", or ""."""
        return describe_judge(self.judge)

    @property
    def judge_line(self) -> str:
        """"judged by transformers 4.57.1 (…)", or "not checked: transformers is not installed
        in mxtrim's interpreter (PY)", or "" (no judge recorded)."""
        return judge_line(self.judge)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "summary": self.summary,
            "problems": list(self.problems),
            "model_class": self.model_class,
            "solved": [{"path": ".".join(map(str, p)), "before": b, "after": a} for p, b, a in self.solved],
            "judge": self.judge,
        }


def judge_line(judge_doc: dict | None) -> str:
    """What judged the check, said whole: "judged by transformers …", or, where that interpreter
    has no transformers, "not checked: transformers is not installed in mxtrim's interpreter
    (PY)" with any interpreter passed over on the way; "" when none is recorded."""
    if not judge_doc:
        return ""
    if judge_doc.get("transformers"):
        return "judged by " + describe_judge(judge_doc)
    origin = judge_doc.get("chosen_by") or ""
    python = judge_doc.get("python") or "?"
    own = "mxtrim's own"
    if origin.startswith(own):
        passed = origin[len(own):].strip()
        return (f"not checked: transformers is not installed in mxtrim's interpreter ({python})"
                + (f"; {passed[1:-1]}" if passed.startswith("(") and passed.endswith(")") else ""))
    return f"not checked: transformers is not installed in the interpreter named by {origin or '?'} ({python})"


def describe_judge(judge_doc: dict | None) -> str:
    """"transformers 4.57.1 (/venv/lib/.../transformers, $MXTRIM_VLLM_PYTHON)", and whether
    mxtrim's own transformers differs."""
    if not judge_doc:
        return ""
    origin = judge_doc.get("chosen_by", "")
    where = judge_doc.get("origin") or "?"
    text = f"transformers {judge_doc.get('transformers') or 'not installed'} ({where}"
    text += f"; {origin})" if origin else ")"
    own = judge_doc.get("own_transformers")
    if own is not None and own != judge_doc.get("transformers"):
        text += f"; the runtime's judged, mxtrim's own is {own or 'not installed'}"
    return text
