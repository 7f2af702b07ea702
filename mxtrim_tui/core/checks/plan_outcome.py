"""The transformers check of a plan, run in the check child process and remembered.

:func:`checked_plan_cached` gives what :func:`.transformers_plan.checked_plan` gives, without
importing torch or transformers into the calling process: the check runs in the run's check
child (:mod:`.child`), which rebuilds the same plan from the same request (source, ``--keep`` specs, MTP choice) and answers with the check's *outcome*:
what it changed (the text selection when it widened an automatic one, fields it solved),
the issues and the verdict. The outcome is stored in :mod:`.cache` under a digest of
everything the check reads, so a plan checked once (``mxtrim plan``, an earlier trim) is not
checked again. :func:`apply_outcome` turns an outcome back into the checked plan; a test
holds it equal to ``checked_plan`` for every kind of outcome.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys

from . import cache as check_cache
from .judge import Judge, current_judge, judge_record, same_interpreter
from ..plan.build import Issue, Selection, TrimPlan, build_plan
from ..plan.check_result import NOT_CHECKED, TransformersCheck
from ..plan.plan_file import TrimRequest

KIND = "plan"


def tensor_table_digest(source) -> str:
    """SHA-256 of every source tensor's name, dtype and shape, in order."""
    h = hashlib.sha256()
    for t in source.iter_tensors():
        h.update(f"{t.name}\0{t.dtype}\0{','.join(map(str, t.shape or ()))}\n".encode())
    return h.hexdigest()


def plan_key(plan: TrimPlan, force: bool) -> str:
    """The digest of everything the plan check reads."""
    src = plan.inventory.source
    renames = hashlib.sha256("\n".join(f"{o}\0{n}" for o, n in plan.renames).encode()).hexdigest()
    payload = {
        "config": src.config,
        "documents": plan.new_documents,
        "kept": plan.kept,
        "mtp": plan.mtp_kept,
        "auto": plan.auto,
        "issues": [[i.level, i.message, i.fix] for i in plan.issues],
        "renames": renames,
        "tensors": tensor_table_digest(src),
        "force": force,
    }
    return check_cache.key(KIND, payload)


def outcome_of(plan: TrimPlan, checked: TrimPlan) -> dict:
    """What ``checked_plan`` made of ``plan``, as JSON."""
    check = checked.transformers_check
    return {
        "text": checked.kept.get("text") if checked.kept != plan.kept else None,
        "auto": checked.auto,
        "issues": [[i.level, i.message, i.fix] for i in checked.issues],
        "check": None if check is None else {
            "status": check.status,
            "summary": check.summary,
            "problems": list(check.problems),
            "model_class": check.model_class,
            "solved": [[list(path), before, after] for path, before, after in check.solved],
            "judge": check.judge,
        },
        "config_tensors": config_tensors(checked),
    }


def config_tensors(checked: TrimPlan) -> dict | None:
    """transformers' meta build of the output config (core/checks/meta_weights.py), when some
    kept part has no safetensors header here; ``{"problem": why}`` when it cannot be built."""
    from ..plan.config_weights import MTP, parts_without_headers

    if checked.errors or not parts_without_headers(checked)[1]:
        return None
    from .transformers_plan import _first_line

    try:
        from .meta_weights import config_tensor_table
        from .transformers_plan import Builder, _text_path

        out_cfg = checked.new_documents.get("config.json", checked.inventory.source.config)
        builder = Builder(out_cfg)
        if builder.unavailable:
            return {"problem": builder.unavailable}
        mtp = sum(1 for m in checked.mappings if m.submodel == MTP)
        return config_tensor_table(builder, out_cfg, _text_path(checked.inventory), checked.new_depth, mtp)
    except Exception as exc:  # noqa: BLE001 - a build that fails: the budget says so
        return {"problem": f"transformers' meta build failed ({_first_line(exc)})"}


def apply_outcome(plan: TrimPlan, outcome: dict) -> TrimPlan:
    """The checked plan, from ``plan`` and the check's outcome."""
    from .transformers_plan import _mtp_choice, with_solution

    base = plan
    if outcome.get("text") is not None:
        base = build_plan(plan.inventory, Selection({"text": tuple(outcome["text"])}, _mtp_choice(plan)))
    c = outcome.get("check")
    check = None
    if c is not None:
        solved = tuple((tuple(path), before, after) for path, before, after in c["solved"])
        table = outcome.get("config_tensors") or None
        problem = table.get("problem", "") if table else ""
        check = TransformersCheck(c["status"], c["summary"], tuple(c["problems"]), c["model_class"], solved, c.get("judge"),
                                  None if problem else table, problem)
        if solved:
            base = with_solution(base, solved, check.model_class)
    issues = [Issue(level, message, fix) for level, message, fix in outcome["issues"]]
    return dataclasses.replace(base, auto=dict(outcome["auto"]), issues=issues, transformers_check=check)


def checked_plan_cached(plan: TrimPlan, *, force: bool = False, request: TrimRequest | None = None) -> TrimPlan:
    """``checked_plan(plan, force=force)``, remembered. On a miss, with ``request`` (what
    ``plan`` was built from: the source, ``--keep`` specs and MTP choice) the check runs in a
    child process, which rebuilds the plan from it; without it, here."""
    return start_plan_check(plan, force=force, request=request).result()


class PlanCheck:
    """The plan check of one plan, asked now and answered later: the verdict remembered
    (:mod:`.cache`) when there is one, else, with a ``request``, the question sent to the run's
    check child (:mod:`.child`) at once, so that torch's import and the meta builds run while
    the caller does something else (a real-weight trim copies). :meth:`result` gives what
    :func:`checked_plan_cached` gives, and remembers the verdict."""

    def __init__(self, plan: TrimPlan, force: bool = False, request: TrimRequest | None = None):
        self.plan = plan
        self.force = force
        self.digest = plan_key(plan, force)
        self.child = None
        self.sent = False
        self._checked: TrimPlan | None = None
        outcome = check_cache.load(KIND, self.digest)
        if outcome is not None:
            try:
                judge = (outcome.get("check") or {}).get("judge")
                now = current_judge() if isinstance(judge, dict) else None
                # an interpreter passed over is said as it is now, when the same one judges now
                if now is not None and same_interpreter(str(judge.get("python") or ""), now.python):
                    judge["chosen_by"] = now.origin
                self._checked = apply_outcome(plan, outcome)
            except (KeyError, TypeError, ValueError):
                pass  # an entry of another shape: check again
        if self._checked is None and request is not None:
            from .child import CheckChild

            self.child = CheckChild.shared()
            self.sent = self.child.send({"op": "plan", "source": str(request.source), "keep": request.keep_list,
                                         "mtp": request.mtp, "force": force})

    @property
    def known(self) -> bool:
        """The verdict is at hand (remembered, or already received)."""
        return self._checked is not None

    @property
    def pending(self) -> bool:
        """The question is with the check child and its answer not read yet."""
        return self._checked is None and self.child is not None

    def result(self, interrupt=None) -> TrimPlan:
        """The checked plan; waits for the child's answer (``interrupt()`` is called every
        0.1 s meanwhile and may raise) or, without a child, checks here."""
        if self._checked is not None:
            return self._checked
        plan = self.plan
        if self.child is not None:
            child = self.child
            outcome = child.receive(interrupt=interrupt) if self.sent else None
            if outcome is None:
                from .transformers_plan import plan_with_check

                failed = TransformersCheck(NOT_CHECKED, f"the check's process failed ({child.last_words()})",
                                           judge=judge_record(child.judge))
                self._checked = plan_with_check(plan, failed)
                return self._checked
            judge = judge_record(child.judge, outcome.pop("judge", None))
        else:
            from .transformers_plan import checked_plan

            outcome = outcome_of(plan, checked_plan(plan, force=self.force))
            judge = judge_record(Judge(sys.executable, "mxtrim's own"))
        if outcome.get("check") is not None:
            outcome["check"]["judge"] = judge
        check_cache.store(KIND, self.digest, outcome)
        self._checked = apply_outcome(plan, outcome)
        return self._checked


def start_plan_check(plan: TrimPlan, *, force: bool = False, request: TrimRequest | None = None) -> PlanCheck:
    """The plan check of ``plan`` started now (see :class:`PlanCheck`): a caller that reads
    the source early (the wizard, once a source is read) can start it there and take
    :meth:`PlanCheck.result` later, or let a later :func:`checked_plan_cached` of the same
    plan find the verdict in the cache."""
    return PlanCheck(plan, force, request)


def outcome_for_request(request: dict) -> dict:
    """In the check child: the plan rebuilt from the request, checked, as an outcome."""
    from ..model.inventory import build_inventory
    from ..read.source import open_source
    from .transformers_plan import checked_plan

    plan = build_plan(build_inventory(open_source(request["source"])), Selection.parse(request.get("keep"), request.get("mtp")))
    return outcome_of(plan, checked_plan(plan, force=bool(request.get("force"))))
