"""The machine-readable plan (schema ``mxtrim.plan/1``): ``mxtrim plan --json``,
``mxtrim trim --json`` and ``mxtrim-plan.json`` in every output directory."""

from __future__ import annotations

from .build import TrimPlan
from .budget import BudgetInputs, compute_budget, default_serve
from .needed_shards import needed_shards

SCHEMA = "mxtrim.plan/1"


def plan_to_json(plan: TrimPlan, *, with_tensors: bool = False, serve: BudgetInputs | None = None) -> dict:
    """The plan document; ``budget`` is computed for ``serve`` (default: the report's settings)."""
    inv = plan.inventory
    doc = {
        "schema": SCHEMA,
        "source": inv.source.origin or str(inv.source.root),
        "model": {
            "name": inv.model_name,
            "model_type": inv.source.model_type,
            "architectures": inv.source.architectures,
            "family": inv.family.key,
        },
        "kept": {k: v for k, v in plan.kept.items()},
        "auto": plan.auto,
        "mtp_kept": plan.mtp_kept,
        "new_depth": plan.new_depth,
        "mapping": [
            {
                "submodel": m.submodel,
                "new": m.new,
                "old": m.old,
                "old_name": m.old_name,
                "new_name": m.new_name,
                "group": m.group,
                "kind": m.kind.to_json(),
            }
            for m in plan.mappings
        ],
        "config_edits": [e.to_json() for e in plan.edits],
        "coverage": [
            {
                "submodel": c.submodel,
                "group": c.group,
                "kind": c.kind,
                "kept": [{"new": n, "old": o} for n, o in c.kept],
                "covered": c.covered,
                "available": c.available,
                "request": c.request,
                "bytes_dropped": c.bytes_dropped,
            }
            for c in plan.coverage
        ],
        "omitted": [{"submodel": c.submodel, "group": c.group, "kind": c.kind, "bytes": c.bytes_dropped} for c in plan.omitted],
        "tensors": {
            "retained": len(plan.renames),
            "renamed": sum(1 for o, n in plan.renames if o != n),
            "dropped": len(plan.dropped),
            "retained_bytes": plan.retained_bytes if plan.retained_bytes_known else None,
            "retained_bytes_present": plan.retained_bytes,
        },
        "source_state": {"state": inv.source.state, "detail": inv.source.state_detail,
                         "absent_shards": len(inv.source.absent_shards)},
        "transformers_check": plan.transformers_check.to_json() if plan.transformers_check is not None else None,
        "issues": [{"level": i.level, "message": i.message, "fix": i.fix} for i in plan.issues],
        "ok": not plan.errors,
    }
    doc["needed_shards"] = [s.to_json() for s in needed_shards(plan)]
    doc["budget"] = compute_budget(plan, serve or default_serve(plan)).to_json()
    if with_tensors:
        doc["tensors"]["renames"] = [[o, n] for o, n in plan.renames]
        doc["tensors"]["dropped_names"] = [[t, r] for t, r in plan.dropped]
    return doc
