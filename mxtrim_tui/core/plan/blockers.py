"""Whether a plan's output can be written: decided here once, for `mxtrim trim` and the
wizard's write alike (the wizard asks before it starts the trim, which asks again)."""

from __future__ import annotations

from .budget import BudgetInputs, check_parallelism
from .build import TrimPlan
from .needed_shards import weights_blocker

NO_WEIGHTS = "has no weights (no safetensors shard, no index): only dummy mode applies"


def write_blockers(plan: TrimPlan, serve: BudgetInputs | None, mode: str | None, repo: str | None = None) -> list[str]:
    """Why the ``mode`` output of ``plan`` cannot be written, one phrase each (empty: it can):
    the plan's blocking errors with their fixes, serve settings vLLM would refuse at start-up,
    and for real weights the source shards that are not on disk (``mode`` None: a plan, no
    mode chosen yet)."""
    found = [i.message + (f" (fix: {i.fix})" if i.fix else "") for i in plan.errors]
    if serve is not None:
        found += [f"--{key}: {message}" for key, message in check_parallelism(plan, serve).items()]
    if mode == "weights":
        missing = real_weights_blocker(plan, repo)
        if missing:
            found.append(missing)
    return found


def real_weights_blocker(plan: TrimPlan, repo: str | None = None) -> str | None:
    """Why a real-weight output of ``plan`` cannot be written (None: it can): a source without
    weights, or the shards it reads that are not on disk."""
    src = plan.inventory.source
    return weights_blocker(plan, repo) if src.all_headers else f"the source {src.root} {NO_WEIGHTS}"
