"""What the wizard knows at any moment: plain data shared by the screens."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.budget import BudgetInputs
from ..core.inventory import Inventory
from ..core.plan import Selection, TrimPlan


@dataclass
class WizardState:
    source_path: Path | None = None
    inventory: Inventory | None = None
    # kept original indices per submodel; None for a submodel = automatic
    keep: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    mtp: bool | None = None
    plan: TrimPlan | None = None
    mode: str = "dummy"
    output_path: Path | None = None
    workspace: Path = field(default_factory=Path.cwd)
    budget_inputs: BudgetInputs = field(default_factory=BudgetInputs)
    last_output: Path | None = None
    _estimate: tuple | None = field(default=None, repr=False)

    def disk_estimate(self):
        """The exact real-weight output size of the current plan, computed once per plan
        (the output screen asks on every keystroke in the path field)."""
        from ..core.disk_budget import estimate_output

        if self.plan is None:
            return None
        if self._estimate is None or self._estimate[0] is not self.plan:
            self._estimate = (self.plan, estimate_output(self.plan))
        return self._estimate[1]

    def selection(self) -> Selection:
        keep = {k: v for k, v in self.keep.items() if v is not None}
        return Selection(keep, self.mtp)

    def keep_args(self) -> list[str]:
        """The same selection as CLI flags (the run screen starts `mxtrim trim` with them)."""
        args: list[str] = []
        if self.plan is not None:
            for sub, idx in self.plan.kept.items():
                if sub == "text" or self.keep.get(sub) is not None:
                    args += ["--keep", f"{sub}=" + ",".join(map(str, idx))]
        if self.plan is not None and "mtp" in self.plan.inventory.submodels:
            args.append("--mtp" if self.plan.mtp_kept else "--no-mtp")
        return args
