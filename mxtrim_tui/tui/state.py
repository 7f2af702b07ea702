"""What the wizard knows at any moment: plain data shared by the screens."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.plan.budget import BudgetInputs
from ..core.model.inventory import Inventory
from ..core.plan.build import Selection, TrimPlan


@dataclass
class WizardState:
    source_path: Path | None = None
    inventory: Inventory | None = None
    # kept original indices per submodel; None for a submodel = automatic
    keep: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    mtp: bool | None = None
    plan: TrimPlan | None = None
    mode: str = "dummy"
    # exactly what the user typed as the output directory; None = the default name, which
    # follows the plan and the mode
    output_text: str | None = None
    workspace: Path = field(default_factory=Path.cwd)
    budget_inputs: BudgetInputs = field(default_factory=BudgetInputs)
    # the budget step's fields as typed, and whether the user changed any of them (only then do
    # they reach the serve command written into the report)
    budget_text: dict[str, str] = field(default_factory=dict)
    budget_errors: dict[str, str] = field(default_factory=dict)
    last_output: Path | None = None
    # the batched_test model YAML the write appends the output's harness entry to, as typed
    # (relative to the workspace); None: no entry
    batched_test_text: str | None = None
    _estimate: tuple | None = field(default=None, repr=False)
    _dummy_estimate: tuple | None = field(default=None, repr=False)
    _needed: tuple | None = field(default=None, repr=False)
    _batched_test: tuple | None = field(default=None, repr=False)

    @property
    def output_path(self) -> Path | None:
        """The absolute directory a write goes to: what the user typed (relative to the
        workspace, ``~`` expanded), else the default name for the current plan and mode."""
        if self.output_text is not None:
            path = Path(os.path.expanduser(self.output_text))
            return Path(os.path.abspath(path if path.is_absolute() else self.workspace / path))
        if self.plan is None:
            return None
        from ..core.write.writer import default_output_dir

        return default_output_dir(self.plan, Path(os.path.abspath(self.workspace)), self.mode)

    @property
    def budget_chosen(self) -> bool:
        return bool(self.budget_text)

    def disk_estimate(self):
        """The exact real-weight output size of the current plan, computed once per plan
        (the output screen asks on every keystroke in the path field)."""
        from ..core.plan.disk_budget import estimate_output

        if self.plan is None:
            return None
        if self._estimate is None or self._estimate[0] is not self.plan:
            self._estimate = (self.plan, estimate_output(self.plan))
        return self._estimate[1]

    def writes_weights(self) -> bool:
        """Real weights are chosen and can be written (every shard they need is on disk)."""
        return self.mode == "weights" and self.weights_blocker() is None

    def output_bytes(self) -> int:
        """Exact: for real weights the extraction layout (shard headers and all); for dummy
        outputs, and while real weights are blocked, every file a dummy output writes."""
        return self.disk_estimate().total if self.writes_weights() else self.dummy_estimate()

    def location_problem(self) -> str | None:
        """Why the chosen output directory cannot be written (one line), or None. The same check
        `mxtrim trim` makes before writing anything."""
        from ..core.errors import InputError
        from ..core.write.writer import check_output_location

        try:
            check_output_location(self.output_path, self.plan.inventory.source.root, self.output_bytes())
        except InputError as exc:
            return str(exc)
        return None

    @property
    def batched_test_config(self) -> Path | None:
        """The model YAML the write appends its harness entry to (absolute), or None."""
        if not self.batched_test_text:
            return None
        path = Path(os.path.expanduser(self.batched_test_text))
        return Path(os.path.abspath(path if path.is_absolute() else self.workspace / path))

    def batched_test_problem(self) -> str | None:
        """Why the harness entry of the chosen output could not be appended to the chosen model
        YAML (one line), or None. The check `mxtrim trim --batched-test-config` makes first."""
        from ..core.errors import InputError
        from ..core.write.batched_test_entry import check_config

        config, out = self.batched_test_config, self.output_path
        if config is None or out is None:
            return None
        # checked again only when the file, its folder or the name changed, not at every key
        # typed in step 5 (the file is read and parsed twice)
        key = (config, out.name, _file_state(config))
        if self._batched_test is None or self._batched_test[0] != key:
            try:
                check_config(config, [out.name])
                problem = None
            except InputError as exc:
                problem = str(exc)
            self._batched_test = (key, problem)
        return self._batched_test[1]

    def dummy_estimate(self) -> int:
        """Every byte a dummy output of the current plan writes, README.md and mxtrim-plan.json
        included (rendered as the writer renders them), computed once per plan, output path and
        serve settings."""
        from ..core.write.writer import estimate_dummy_bytes

        serve = self.budget_inputs if self.budget_chosen else None
        out = self.output_path
        cached = self._dummy_estimate
        if cached is None or cached[0] is not self.plan or cached[1:3] != (out, serve):
            cached = self._dummy_estimate = (self.plan, out, serve, estimate_dummy_bytes(self.plan, out, serve))
        return cached[3]

    def _shards(self, plan: TrimPlan) -> tuple:
        """(plan, the shards a real-weight trim of it reads, why real weights cannot be written
        or None), computed once per plan (the output screen asks on every keystroke)."""
        from ..core.plan.blockers import real_weights_blocker
        from ..core.plan.needed_shards import needed_shards

        if self._needed is None or self._needed[0] is not plan:
            headers = plan.inventory.source.all_headers
            self._needed = (plan, needed_shards(plan) if headers else [], real_weights_blocker(plan))
        return self._needed

    def needed_shards(self, plan: TrimPlan | None = None) -> list:
        """The source shards a real-weight trim of ``plan`` (default: the current one) reads."""
        plan = plan or self.plan
        return [] if plan is None else self._shards(plan)[1]

    def weights_blocker(self) -> str | None:
        """Why real weights cannot be written for the current plan (no weights at all, or
        needed shards not on disk, with what to fetch); None when they can."""
        return None if self.plan is None else self._shards(self.plan)[2]

    def selection(self) -> Selection:
        keep = {k: v for k, v in self.keep.items() if v is not None}
        return Selection(keep, self.mtp)

    def keep_specs(self) -> tuple[str, ...] | None:
        """The selection as ``--keep`` specs (what a plan file records). An automatic choice
        stays automatic, so that the trim's plan, report and size are the ones shown here."""
        specs: list[str] = []
        if self.plan is not None:
            for sub, idx in self.plan.kept.items():
                if self.keep.get(sub) is not None:
                    specs.append(f"{sub}=" + ",".join(map(str, idx)))
        return tuple(specs) or None

    def mtp_choice(self) -> bool | None:
        if self.plan is not None and "mtp" in self.plan.inventory.submodels and self.mtp is not None:
            return self.plan.mtp_kept
        return None

    def serve_settings(self) -> dict:
        """The budget step's fields the user changed, as typed (a plan file's serve settings;
        the others keep the report's defaults)."""
        return {k: v for k, v in self.budget_text.items() if v != ""}

    def trim_request(self):
        """The write asked for: what the wizard's plan file holds."""
        from ..core.plan.plan_file import TrimRequest

        return TrimRequest(source=self.source_path, keep=self.keep_specs(), mtp=self.mtp_choice(), mode=self.mode,
                           out=self.output_path, serve=self.serve_settings())


def _file_state(path: Path) -> tuple:
    """What a check of ``path`` depends on: its size and change time, or, absent, whether its
    folder exists."""
    try:
        st = path.stat()
        return (st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        return ("absent", path.parent.is_dir())
