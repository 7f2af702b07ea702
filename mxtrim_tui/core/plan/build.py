"""TrimPlan: pure data computed from an Inventory and a selection of layers.

The plan holds the old -> new layer mapping of every submodel, every config edit as
(file, JSON path, before, after), the tensor rename list, the coverage table (which target
path each kept layer exercises and which request triggers it), omitted paths with sizes, and
warnings / blocking errors with suggested fixes. Nothing is written here.

The last step re-evaluates the family's own runtime rules on the *rewritten* config and
compares them with the kinds of the kept layers: a plan whose output config would make vLLM
build a different layer kind than the one kept is blocked.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import cached_property

from .check_result import TransformersCheck
from .config_edit import MISSING, ConfigEdit, apply_edits, get_path
from ..model.families.base import DENSE, DSA_FULL, DSA_SHARED, HASH_MOE, MOE, Stack, compression_ratio, first_int, require_moe
from ..read.source import CONFIG_ONLY
from ..model.inventory import (
    PER_LAYER_LISTS, Inventory, LayerKind, is_layer_index_list, stack_config,
)
from ..units import index_ranges, plural, shown_bytes

CONFIG = "config.json"

# --- the generic catalogue of depth-dependent fields (structures guide §22-§23) ---------
# PER_LAYER_LISTS: from the inventory, which blocks a plan when one is shorter than the stack.
# Scalars in most configs, per-layer lists in some (MiniMax, HunYuan, Gemma 3n MatFormer).
LIST_OR_SCALAR = (
    "intermediate_size",
    "moe_topk",
    "moe_intermediate_size",
    "num_experts",
    "num_shared_expert",
    "num_local_experts",
    "shared_intermediate_size",
)
PER_LAYER_STRINGS = ("hybrid_override_pattern",)
INDEX_LISTS = (("mlp_only_layers",), ("moe_layers",), ("dspark_target_layer_ids",))
INDEX_LISTS_1BASED = (("linear_attn_config", "kda_layers"), ("linear_attn_config", "full_attn_layers"))
INDEX_DICTS = ("per_layer_config",)
# Lists that may happen to have one entry per layer without being per-layer.
NOT_PER_LAYER = frozenset({"architectures", "mrope_section", "rope_scaling", "image_grid_pinpoints", "auto_map"})
VISION_INDEX_LISTS = (("fullatt_block_indexes",), ("deepstack_visual_indexes",), ("intermediate_layers_indices",))


@dataclass(frozen=True)
class Selection:
    """What the user asked for. ``None`` means automatic."""

    keep: dict[str, tuple[int, ...] | str] = field(default_factory=dict)  # submodel -> indices | "auto"
    mtp: bool | None = None  # None: keep when present

    @classmethod
    def parse(cls, specs: list[str] | None, mtp: bool | None = None) -> "Selection":
        keep: dict[str, tuple[int, ...] | str] = {}
        for spec in specs or []:
            sub, indices = parse_keep_spec(spec)
            prev = keep.get(sub)
            if indices == "auto" or prev == "auto":
                keep[sub] = "auto"
            else:
                keep[sub] = tuple(sorted(set(prev or ()) | set(indices)))
        return cls(keep, mtp)


class SelectionError(ValueError):
    """A --keep spec that cannot be parsed (a usage error)."""


_SPEC = re.compile(r"^(?:([A-Za-z_][\w.-]*)=)?(.*)$")


_ASCII_INDEX = re.compile(r"[0-9]{1,9}")
MAX_LAYER_INDEX = 100_000  # no model has this many layers; a range past it is a typo


def parse_keep_spec(spec: str) -> tuple[str, tuple[int, ...] | str]:
    """``[SUBMODEL=]i,j,a-b`` in original indices (or ``auto``); default submodel text."""
    m = _SPEC.match(spec.strip())
    sub = (m.group(1) or "text") if m else "text"
    body = (m.group(2) if m else spec).strip()
    if body == "auto":
        return sub, "auto"
    out: set[int] = set()
    if not body:
        raise SelectionError(f"--keep {spec!r}: no layer indices")
    for part in body.split(","):
        part = part.strip()
        bounds = part.split("-", 1)
        if not all(_ASCII_INDEX.fullmatch(x.strip()) for x in bounds):
            raise SelectionError(f"--keep {spec!r}: {part!r} is not an index or a range a-b (ASCII digits)")
        lo, hi = int(bounds[0]), int(bounds[-1])
        if hi < lo:
            raise SelectionError(f"--keep {spec!r}: range {part!r} runs backwards")
        if hi >= MAX_LAYER_INDEX:
            raise SelectionError(f"--keep {spec!r}: {hi} is past any model's depth (indices below {MAX_LAYER_INDEX:,})")
        out.update(range(lo, hi + 1))
    if any(i < 0 for i in out):
        raise SelectionError(f"--keep {spec!r}: indices are non-negative")
    return sub, tuple(sorted(out))


@dataclass(frozen=True)
class LayerMap:
    submodel: str
    new: int
    old: int
    old_name: str  # e.g. model.layers.61
    new_name: str  # e.g. model.layers.3
    kind: LayerKind
    group: str  # group symbol


@dataclass(frozen=True)
class CoverageRow:
    submodel: str
    group: str
    kind: str
    kept: tuple[tuple[int, int], ...]  # (new, old)
    request: str
    available: int  # layers of this kind in the source
    bytes_dropped: int | None  # None: some dropped layer's tensors are in shards not on disk

    @property
    def covered(self) -> bool:
        return bool(self.kept)


@dataclass(frozen=True)
class Issue:
    level: str  # "error" (blocking) | "warning"
    message: str
    fix: str = ""


@dataclass
class TrimPlan:
    inventory: Inventory
    kept: dict[str, list[int]]  # submodel -> kept original indices (MTP: k)
    mtp_kept: bool
    mappings: list[LayerMap]
    edits: list[ConfigEdit]
    renames: list[tuple[str, str]]
    dropped: list[tuple[str, str]]  # (tensor, reason)
    coverage: list[CoverageRow]
    issues: list[Issue]
    new_documents: dict[str, dict]  # file -> rewritten JSON (config.json, side quant files)
    auto: dict[str, bool]
    # transformers' verdict on the output config (core/checks/transformers_plan.py), once run
    transformers_check: TransformersCheck | None = None

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.level == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.level == "warning"]

    @property
    def new_depth(self) -> int:
        return len(self.kept.get("text", []))

    @cached_property
    def retained_bytes(self) -> int:
        """Bytes of the retained tensors on disk (all of them unless retained_bytes_known is False)."""
        src = self.inventory.source
        return sum(src.tensor(old).nbytes for old, _ in self.renames)

    @cached_property
    def retained_bytes_known(self) -> bool:
        """Every retained tensor is in a shard on disk (else its bytes are not known)."""
        src = self.inventory.source
        if not src.all_headers:
            return False  # config only: no tensor is known at all
        return not src.absent_shards or all(map(src.is_present, (old for old, _ in self.renames)))

    def mapping(self, submodel: str) -> list[LayerMap]:
        return [m for m in self.mappings if m.submodel == submodel]

    @property
    def omitted(self) -> list[CoverageRow]:
        return [c for c in self.coverage if not c.covered]


def text_config(plan: TrimPlan) -> dict:
    """The output's text config (the rewritten one), where per-layer sizes live."""
    cfg = plan.new_documents.get("config.json") or plan.inventory.source.config
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else cfg


# ---------------------------------------------------------------------------------------
class TrimContext:
    """What a family's rewrite hook sees: the kept layers, their kinds, the text config and
    a way to record edits and issues."""

    def __init__(self, plan_edits, issues, config, stack: Stack | None, path: tuple, kept, kinds, inventory, mtp_kept: bool = False):
        self._edits = plan_edits
        self._issues = issues
        self.config = config
        self.stack = stack
        self.path = path
        self.cfg = get_path(config, path, {}) if path else config
        self.kept: list[int] = kept
        self.kinds: list[LayerKind] = kinds
        self.inventory = inventory
        self.mtp_kept = mtp_kept  # the MTP / draft heads are kept

    @property
    def new_n(self) -> int:
        return len(self.kept)

    def get(self, key, default=None):
        return self.cfg.get(key, default)

    def set(self, key: str | tuple, value, reason: str, *, force: bool = False) -> None:
        keys = key if isinstance(key, tuple) else (key,)
        path = self.path + keys
        before = get_path(self.config, path)
        if before == value and not force:
            return
        set_edit(self._edits, ConfigEdit(CONFIG, path, before, value, reason))

    def error(self, message: str, fix: str = "") -> None:
        self._issues.append(Issue("error", message, fix))

    def warn(self, message: str, fix: str = "") -> None:
        self._issues.append(Issue("warning", message, fix))


def set_edit(edits: list[ConfigEdit], edit: ConfigEdit) -> None:
    """Record an edit, replacing an earlier one of the same field (keeping its ``before``)."""
    for i, e in enumerate(edits):
        if e.file == edit.file and e.path == edit.path:
            edits[i] = ConfigEdit(e.file, e.path, e.before, edit.after, edit.reason or e.reason)
            return
    edits.append(edit)


# ---------------------------------------------------------------------------------------
def _text_stack(inv: Inventory) -> Stack | None:
    return next((s for s in inv.stacks if s.submodel == "text"), None)


def _stack_path(inv: Inventory, stack: Stack | None) -> tuple:
    if stack is None:
        return ()
    _, path = stack_config(inv.source.config, stack)
    return tuple(path.split(".")) if path else ()


def _rule_kinds(stack: Stack | None, cfg: dict, n: int) -> list[tuple[str | None, str | None]]:
    out = []
    for i in range(n):
        att = stack.attention(cfg, i) if stack and stack.attention else None
        mlp = stack.mlp(cfg, i) if stack and stack.mlp else None
        out.append((att, mlp))
    return out


def _same_kind(rule: tuple, kind: LayerKind) -> bool:
    att, mlp = rule
    if att is not None and att != kind.attention:
        return False
    if mlp is not None and mlp != kind.mlp and not (mlp == MOE and kind.mlp == HASH_MOE):
        return False
    return True


PREFIX_PROBES = 64  # longest prefix beyond the groups' first layers auto_select tries


def auto_select(inv: Inventory, submodel: str = "text", *, heads_kept: bool = False) -> list[int]:
    """The fewest layers covering every distinct signature of ``submodel`` whose rewritten
    config reproduces their kinds; dependency fixes (DSA full-before-shared, dense prefix,
    parity/period rules) are found by a bounded search over each group's first layers.
    ``heads_kept``: the draft heads stay, so the text layers they read (the family's
    ``target_lists``, DSpark's targets) are kept too."""
    sm = inv.submodels.get(submodel)
    if sm is None or not sm.layers:
        return []
    # A family whose config declares fewer layers than the checkpoint holds (the plan is
    # blocked by it: Inventory.problems) chooses among the declared layers only.
    limit = sm.declared_depth if inv.family.stacks and submodel == "text" else None
    members = [sorted(i for i in g.layers if limit is None or i < limit) for g in inv.groups if g.submodel == submodel]
    members = [m for m in members if m] or [sorted(g.layers) for g in inv.groups if g.submodel == submodel]
    first = sorted(m[0] for m in members)
    candidates = [m[:4] for m in members]
    best = None
    if _plan_is_clean(inv, submodel, first):
        best = first
    else:
        tried = 0
        for combo in itertools.product(*candidates):
            tried += 1
            if tried > 4096:
                break
            keep = sorted(set(combo))
            if _plan_is_clean(inv, submodel, keep) and (best is None or (len(keep), keep) < (len(best), best)):
                best = keep
        if best is None:
            # A prefix of the original stack keeps every index where it was, so position
            # rules (MoE step, parity, periods) hold: the shortest prefix covering all groups.
            # Bounded: an error no short prefix clears (a per-layer list of the wrong
            # length, say) is one every selection shows, and would cost n plans here.
            indices = [l.index for l in sm.layers if limit is None or l.index < limit] or [l.index for l in sm.layers]
            for k in range(max(first) + 1, min(len(indices), max(first) + PREFIX_PROBES) + 1):
                if _plan_is_clean(inv, submodel, indices[:k]):
                    best = indices[:k]
                    break
        if best is None:
            best = first  # the plan will show why no set works
    if submodel == "text" and heads_kept:
        held = {l.index for l in sm.layers}
        targets = sorted(set(draft_targets(inv)) & held)
        wider = sorted(set(best) | set(targets))
        if wider != best and _plan_is_clean(inv, submodel, wider):
            best = wider
    # Qwen3-VL deepstack: features are injected into text layers 0..len-1
    if submodel == "text":
        need = _deepstack_len(inv)
        extra = [l.index for l in sm.layers if l.index not in best]
        while len(best) < need and extra:
            best = sorted(best + [extra.pop(0)])
    return best


def draft_targets(inv: Inventory) -> list[int]:
    """The text layers the draft heads read (the family's ``target_lists``: DSpark's targets)."""
    cfg = stack_config(inv.source.config, _text_stack(inv))[0] if _text_stack(inv) else inv.source.config
    out: list[int] = []
    for f in inv.family.target_lists:
        v = cfg.get(f)
        if isinstance(v, list):
            out += [x for x in v if type(x) is int]
    return out


def _plan_is_clean(inv: Inventory, submodel: str, keep: list[int]) -> bool:
    sel = Selection({submodel: tuple(keep)})
    plan = build_plan(inv, sel, _auto_probe=True)
    return not plan.errors


def _deepstack_len(inv: Inventory) -> int:
    vc = inv.source.config.get("vision_config")
    if isinstance(vc, dict) and isinstance(vc.get("deepstack_visual_indexes"), list):
        return len(vc["deepstack_visual_indexes"])
    return 0


# ---------------------------------------------------------------------------------------
def build_plan(inv: Inventory, selection: Selection | None = None, *, _auto_probe: bool = False) -> TrimPlan:
    selection = selection or Selection()
    fam = inv.family
    config = inv.source.config
    issues: list[Issue] = []
    edits: list[ConfigEdit] = []
    auto: dict[str, bool] = {}

    if not _auto_probe:  # config.json contradicts the checkpoint: no plan can be trusted
        issues += [Issue("error", message, fix) for message, fix in inv.problems]
    mtp_issues: list[Issue] = []
    has_mtp, mtp_kept = _resolve_mtp(inv, selection, mtp_issues)
    kept = _resolve_kept(inv, selection, issues, auto, _auto_probe, mtp_kept)
    issues += mtp_issues
    text_kept = kept.get("text", [])
    _check_text_kept(inv, text_kept, issues)

    # --- text stack: generic catalogue, family hooks
    text_stack = _text_stack(inv)
    text_path = _stack_path(inv, text_stack)
    text_cfg = get_path(config, text_path, {}) if text_path else config
    sm_text = inv.submodels.get("text")
    by_index = {l.index: l for l in sm_text.layers} if sm_text else {}
    kinds = [by_index[i].kind for i in text_kept if i in by_index]
    old_n = sm_text.declared_depth if sm_text and sm_text.declared_depth is not None else len(by_index)
    new_n = len(text_kept)
    if sm_text is not None:
        ctx = TrimContext(edits, issues, config, text_stack, text_path, text_kept, kinds, inv, mtp_kept)
        _rewrite_text_stack(ctx, fam, text_stack, old_n, text_kept)
        _check_target_lists(ctx, fam)

    _rewrite_other_stacks(inv, kept, edits, issues, config)

    # --- MTP
    _plan_mtp(inv, edits, issues, config, text_path, text_cfg, mtp_kept, has_mtp)

    # --- quantization module lists
    mappings = _mappings(inv, kept, mtp_kept, old_n, new_n)
    _rewrite_quant_entries(inv, edits, issues, mappings, kept, mtp_kept)

    # --- apply and verify
    files = {CONFIG: config, **inv.source.side_quant_configs}
    new_documents = {f: apply_edits(doc, edits, f) for f, doc in files.items()}
    if sm_text is not None and text_kept and not inv.problems:  # else what follows from them only adds noise
        _verify_rules(inv, new_documents[CONFIG], text_stack, text_path, text_kept, kinds, issues)
    if not _auto_probe:
        _check_output_config(fam, new_documents[CONFIG], text_path, issues)
        _family_warnings(inv, new_n, mtp_kept, issues)

    renames, dropped = _renames(inv, mappings, mtp_kept) if not _auto_probe else ([], [])
    coverage = _coverage(inv, kept, mtp_kept, has_mtp, mappings) if not _auto_probe else []
    return TrimPlan(inv, kept, mtp_kept, mappings, edits, renames, dropped, coverage, issues, new_documents, auto)


def _resolve_kept(inv: Inventory, selection: Selection, issues: list[Issue], auto: dict[str, bool], auto_probe: bool,
                  mtp_kept: bool = False) -> dict[str, list[int]]:
    """The kept layer indices per submodel (MTP aside), with errors for unknown layers or names."""
    kept: dict[str, list[int]] = {}
    # stacks the family declares but the checkpoint has no layers of: the text stack always (a
    # trim of no layers is no trim), another when layers of it were asked for
    declared = {st.submodel for st in inv.family.stacks}
    for name in sorted(declared - set(inv.submodels)):
        if name == "text" or name in selection.keep:
            issues.append(_no_layers_found(inv, name, selection.keep.get(name)))
    for name, sm in inv.submodels.items():
        if name == "mtp":
            continue
        want = selection.keep.get(name)
        if want is None and name != "text":
            kept[name] = [l.index for l in sm.layers]  # other stacks are kept whole by default
            continue
        if want is None or want == "auto":
            auto[name] = True
            kept[name] = auto_select(inv, name, heads_kept=mtp_kept) if not auto_probe else [l.index for l in sm.layers]
            continue
        valid = {l.index for l in sm.layers}
        bad = [i for i in want if i not in valid]
        if bad and not valid:  # nothing to choose from: say where layers were looked for
            issues.append(_no_layers_found(inv, name, bad))
        elif bad:
            issues.append(
                Issue(
                    "error",
                    f"{name}: layer(s) {index_ranges(bad)} do not exist (the {name} submodel has layers "
                    f"{index_ranges(sorted(valid))})",
                    f"choose indices in {index_ranges(sorted(valid))}",
                )
            )
        kept[name] = [i for i in want if i in valid]
    for name in selection.keep:
        if name == "mtp":
            issues.append(Issue("error", "MTP / draft heads are kept or dropped as a whole", "use --mtp or --no-mtp instead of --keep mtp=..."))
        elif name not in inv.submodels and name not in declared:
            has = ", ".join(inv.submodels)
            issues.append(
                Issue(
                    "error",
                    f"--keep {name}=...: no submodel named {name!r}" + (f" (this model has: {has})" if has else ""),
                    f"use one of: {has}" if has else "check that config.json's model_type / architectures describe this checkpoint's tensor names",
                )
            )
    return kept


def _resolve_mtp(inv: Inventory, selection: Selection, issues: list[Issue]) -> tuple[bool, bool]:
    """Whether the model has MTP / draft heads and whether they are kept."""
    mtp_sm = inv.submodels.get("mtp")
    # a config that declares MTP layers is believed only where the tensors cannot be listed
    # (a config-only source): a checkpoint that names its tensors and none of them is an MTP
    # layer has no head to keep
    names_known = inv.source.state != CONFIG_ONLY
    declared_only = mtp_sm is not None and not mtp_sm.layers and inv.mtp_count > 0 and names_known
    has_mtp = mtp_sm is not None and (bool(mtp_sm.layers) or (inv.mtp_count > 0 and not names_known))
    mtp_kept = has_mtp if selection.mtp is None else (selection.mtp and has_mtp)
    if declared_only:
        issues.append(Issue("warning", f"the config declares {inv.mtp_count} MTP layer(s) but the checkpoint holds no MTP "
                                       "tensors: no MTP head is kept, and speculative decoding through it cannot run"))
    elif selection.mtp and not has_mtp:
        issues.append(Issue("warning", "--mtp: this model has no MTP / draft heads"))
    return has_mtp, mtp_kept


def _check_text_kept(inv: Inventory, text_kept: list[int], issues: list[Issue]) -> None:
    """Warn when too few text layers remain for deepstack; refuse an empty text stack."""
    deep = _deepstack_len(inv)
    if deep and 0 < len(text_kept) < deep:
        issues.append(
            Issue(
                "warning",
                f"Qwen3-VL injects {deep} deepstack feature levels into text layers 0..{deep - 1}; with "
                f"{len(text_kept)} text layer(s) the last {deep - len(text_kept)} level(s) are never consumed",
                f"keep at least {plural(deep, 'text layer')}",
            )
        )
    if "text" in inv.submodels and not text_kept and not issues:
        issues.append(Issue("error", "no text layers kept", "keep at least one text layer"))
    if "text" not in inv.submodels and not any(i.level == "error" for i in issues):
        issues.append(_no_text_stack(inv))


def _no_text_stack(inv: Inventory) -> Issue:
    """No text stack to keep layers of: a trim would hold none. A family module reads the
    depth from the config; without one the layers are found by their tensor names only."""
    config = inv.source.config
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    depth = first_int(text, "num_hidden_layers", "n_layer", "n_layers", "num_layers")
    said = f" (config.json declares {plural(depth, 'layer')})" if depth else ""
    if inv.source.state == CONFIG_ONLY:
        return Issue(
            "error",
            f"no text layers to keep: this config-only directory{said} names no tensor, and mxtrim has no family module "
            f"for model_type {config.get('model_type')!r} to read its layers from the config; a trim would hold 0 layers",
            "add model.safetensors.index.json (or the weights) so the layers can be found by their tensor names",
        )
    return Issue(
        "error",
        f"no text layers to keep: no tensor is named like a numbered layer stack (layers.N., blocks.N., h.N.){said}; "
        "a trim would hold 0 layers",
        "check that config.json's model_type / architectures describe this checkpoint's tensor names",
    )


def _rewrite_text_stack(ctx: TrimContext, fam, text_stack: Stack | None, old_n: int, text_kept: list[int]) -> None:
    """Rewrite the text stack's config from the generic catalogue, then run the family's hooks."""
    _rewrite_stack(ctx, text_stack, old_n, text_kept, PER_LAYER_LISTS, INDEX_LISTS)
    if fam.dense_prefix:
        _check_dense_prefix(ctx)
    if fam.requires_moe:
        require_moe(ctx)
    for hook in fam.trim:
        hook(ctx)


def _rewrite_other_stacks(inv: Inventory, kept: dict[str, list[int]], edits: list[ConfigEdit], issues: list[Issue], config: dict) -> None:
    """Rewrite the config of every trimmed non-text stack (vision, audio...)."""
    for name, keep in kept.items():
        if name == "text":
            continue
        sm = inv.submodels[name]
        st = next((s for s in inv.stacks if s.submodel == name), None)
        path = _stack_path(inv, st)
        if not path:
            continue
        depth = sm.declared_depth if sm.declared_depth is not None else len(sm.layers)
        if keep == [l.index for l in sm.layers] and (len(keep) == depth or not sm.layers):
            continue  # all kept (a stack whose layers the checkpoint names otherwise is left alone)
        vkinds = [next(l.kind for l in sm.layers if l.index == i) for i in keep]
        vctx = TrimContext(edits, issues, config, st, path, keep, vkinds, inv)
        _rewrite_stack(vctx, st, depth, keep, (), VISION_INDEX_LISTS)
        deep = get_path(config, path + ("deepstack_visual_indexes",))
        if isinstance(deep, list):
            missing = [i for i in deep if i not in keep]
            if missing:
                vctx.error(
                    f"{name}: deepstack blocks {missing} are not kept; their merger modules are indexed by position, "
                    "so every deepstack block must stay",
                    f"add {name}={','.join(map(str, missing))}",
                )


def _check_output_config(fam, new_config: dict, text_path: tuple, issues: list[Issue]) -> None:
    """Run the family's config checks on the output config's text section, as warnings."""
    for check in fam.checks:
        new_text = get_path(new_config, text_path, {}) if text_path else new_config
        for msg in check(new_text):
            issues.append(Issue("warning", f"output config: {msg}"))


def _rewrite_stack(ctx: TrimContext, stack: Stack | None, old_n: int, keep: list[int], lists, index_lists) -> None:
    cfg = ctx.cfg
    new_n = len(keep)
    pos = {old: new for new, old in enumerate(keep)}
    depth_fields = stack.depth_fields if stack else ("num_hidden_layers",)
    wrote_depth = False
    for f in depth_fields:
        if isinstance(cfg.get(f), int):
            ctx.set(f, new_n, "kept layers")
            wrote_depth = True
    if not wrote_depth and stack is not None and stack.submodel == "text":
        ctx.set(depth_fields[0], new_n, "kept layers")
    for f in stack.depth_aliases if stack else ():
        if cfg.get(f) == old_n and not isinstance(cfg.get(f), bool):
            ctx.set(f, new_n, "kept layers")
    last = max(keep, default=-1)

    def entries_missing(f: str, v) -> bool:
        """A kept layer past the end of ``v`` (one past the declared depth: the checkpoint
        holds more layers than the config says): nothing to re-slice it from. Blocking,
        and said once (a contradicting config is already blocking: Inventory.problems)."""
        if last < len(v):
            return False
        if not ctx.inventory.problems:
            bad = index_ranges([i for i in keep if i >= len(v)])
            ctx.error(f"{f} has {len(v)} entries: kept layer(s) {bad} have none", f"keep layers below {len(v)}")
        return True

    for f in lists:
        v = cfg.get(f)
        if isinstance(v, list):
            if len(v) >= old_n:
                if not entries_missing(f, v):
                    ctx.set(f, [v[i] for i in keep] + v[old_n:], "per-layer list re-sliced to the kept layers")
            elif not ctx.inventory.problems:  # else already a blocking error (Inventory.problems)
                ctx.warn(f"{f} has {len(v)} entries but the stack has {plural(old_n, 'layer')}; left unchanged")
    if lists:
        _rewrite_unlisted_per_layer_fields(ctx, old_n, keep, pos, lists, index_lists, entries_missing)
    for f in LIST_OR_SCALAR if lists else ():
        v = cfg.get(f)
        if isinstance(v, list) and len(v) == old_n and not entries_missing(f, v):
            ctx.set(f, [v[i] for i in keep], "per-layer list re-sliced to the kept layers")
    for f in PER_LAYER_STRINGS if lists else ():
        v = cfg.get(f)
        if isinstance(v, str) and len(v) >= old_n and not entries_missing(f, v):
            ctx.set(f, "".join(v[i] for i in keep), "per-layer pattern re-sliced to the kept layers")
    for keys in index_lists:
        v = get_path(cfg, keys)
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            ctx.set(keys, [pos[i] for i in v if i in pos], "layer indices remapped to the new numbering")
    for keys in INDEX_LISTS_1BASED if lists else ():
        v = get_path(cfg, keys)
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            ctx.set(keys, [pos[i - 1] + 1 for i in v if i - 1 in pos], "1-based layer indices remapped")
    for f in INDEX_DICTS if lists else ():
        v = cfg.get(f)
        if isinstance(v, dict):
            new = {}
            for k, val in v.items():
                try:
                    old = int(k)
                except (TypeError, ValueError):
                    new[k] = val
                    continue
                if old in pos:
                    new[str(pos[old]) if isinstance(k, str) else pos[old]] = val
            ctx.set(f, new, "per-layer overrides re-keyed to the new numbering")


def _rewrite_unlisted_per_layer_fields(ctx: TrimContext, old_n: int, keep: list[int], pos: dict, lists, index_lists, entries_missing) -> None:
    """Fields outside the catalogue that are per-layer by their shape: any list with one entry
    per layer is re-sliced, any list of layer indices remapped (architectures without a family
    module name them freely: ``layer_rope_theta``, ``attn_layer_indices``...)."""
    known = set(lists) | set(LIST_OR_SCALAR) | set(PER_LAYER_STRINGS) | {k[0] for k in index_lists}
    known |= {k[0] for k in INDEX_LISTS_1BASED} | set(INDEX_DICTS)
    for f, v in list(ctx.cfg.items()):
        if f in known or f in NOT_PER_LAYER or "token" in f:
            continue
        if is_layer_index_list(f, v, old_n):
            ctx.set(f, [pos[i] for i in v if i in pos], "layer indices remapped to the new numbering")
        elif isinstance(v, list) and len(v) == old_n and old_n > 1 and not entries_missing(f, v):
            ctx.set(f, [v[i] for i in keep], "per-layer list re-sliced to the kept layers")


def _check_target_lists(ctx: TrimContext, fam) -> None:
    """The text layers the draft heads read (DSpark's ``dspark_target_layer_ids``) follow the
    mapping; a target that is not kept is said, never substituted: the heads' input
    projection is sized for every target, so drafting no longer loads."""
    pos = {old: new for new, old in enumerate(ctx.kept)}
    for f in fam.target_lists:
        v = ctx.get(f)
        if not (isinstance(v, list) and v and all(type(x) is int for x in v)):
            continue
        ctx.set(f, [pos[i] for i in v if i in pos], "draft heads' target layers remapped to the new numbering")
        missing = [i for i in v if i not in pos]
        if not missing or not ctx.mtp_kept:
            continue  # all kept, or no heads to read them (the heads' own message says so)
        remain = [i for i in v if i in pos]
        where = (f"the remaining target(s) {', '.join(map(str, remain))} become layer(s) "
                 f"{', '.join(str(pos[i]) for i in remain)}" if remain else "no target remains")
        width = _projection_targets(ctx.inventory)
        reads = f"{width} target layers (mtp.0.main_proj)" if width else f"{len(v)} target layers"
        ctx.warn(
            f"{f} {v}: DSpark is no longer fully covered: target layer(s) {', '.join(map(str, missing))} not kept; "
            f"{where}. The draft heads read {reads}, so DSpark drafting will not load this output",
            f"keep layers {index_ranges(sorted(set(ctx.kept) | set(v)))} (--keep), or drop the draft heads (--no-mtp)",
        )


def _projection_targets(inv: Inventory) -> int | None:
    """How many target layers DSpark's ``main_proj`` takes: its input width over hidden_size."""
    mtp = inv.submodels.get("mtp")
    hidden = first_int(inv.source.config, "hidden_size")
    if mtp is None or not hidden:
        return None
    for layer in mtp.layers:
        for name in layer.tensors:
            if name.endswith(".main_proj.weight"):
                shape = inv.source.tensor(name).shape
                if shape and len(shape) == 2 and shape[1] % hidden == 0:
                    return shape[1] // hidden
    return None


def _check_dense_prefix(ctx: TrimContext) -> None:
    seen_moe = False
    for old, kind in zip(ctx.kept, ctx.kinds):
        if kind.mlp in (MOE, HASH_MOE):
            seen_moe = True
        elif kind.mlp == DENSE and seen_moe:
            dense = [o for o, k in zip(ctx.kept, ctx.kinds) if k.mlp == DENSE]
            ctx.error(
                f"dense layer {old} would follow an MoE layer: this family marks the first "
                "first_k_dense_replace layers dense, so kept dense layers must come first",
                f"keep dense layers only before the first kept MoE layer (dense kept: {index_ranges(dense)})",
            )
            return


def _plan_mtp(inv, edits, issues, config, text_path, text_cfg, mtp_kept, has_mtp) -> None:
    fam = inv.family
    if fam.mtp is None or mtp_kept:
        return
    # declared by the config, absent from the checkpoint: the output says it has none
    absent = not has_mtp and inv.mtp_count > 0 and "mtp" in inv.submodels
    if not has_mtp and not absent:
        return
    # Dropping MTP: zero every count field the config has (and the one vLLM reads by default).
    why = "the checkpoint holds no MTP tensors" if absent else "MTP / draft heads dropped (--no-mtp)"
    wrote = False
    for f in fam.mtp.count_fields:
        for path in (text_path + (f,), (f,)):
            if get_path(config, path) not in (MISSING, None, 0):
                set_edit(edits, ConfigEdit(CONFIG, path, get_path(config, path), 0, why))
                wrote = True
    if not wrote and fam.mtp.default_count:
        path = text_path + (fam.mtp.count_fields[0],)
        set_edit(edits, ConfigEdit(CONFIG, path, MISSING, 0, ("no MTP tensors" if absent else "MTP dropped") + "; vLLM would otherwise assume 1"))
    if absent:
        return
    sm = inv.submodels["mtp"]
    drafts = [f for f in fam.target_lists if get_path(config, text_path + (f,)) not in (MISSING, None)]
    also = f"; nor DSpark drafting ({', '.join(drafts)} left as it was, for heads the output does not have)" if drafts else ""
    issues.append(
        Issue(
            "warning",
            f"MTP / draft heads dropped: speculative decoding with MTP is not covered{also} ({shown_bytes(sm.nbytes, sm.bytes_known)} omitted)",
            "omit --no-mtp to keep them",
        )
    )


def _mappings(inv: Inventory, kept, mtp_kept, old_n, new_n) -> list[LayerMap]:
    out = []
    sym = {g.id: g.symbol for g in inv.groups}
    for name, keep in kept.items():
        sm = inv.submodels[name]
        by_index = {l.index: l for l in sm.layers}
        # a stack kept whole keeps its numbering: held indices with gaps (a conv encoder whose
        # activations hold no tensors: layers 0, 1, 3, 4...) are not closed up
        whole = sorted(keep) == sorted(by_index)
        for new, old in enumerate(keep):
            new = old if whole else new
            layer = by_index[old]
            out.append(LayerMap(name, new, old, layer.name, f"{layer.prefix}{new}", layer.kind, sym.get(layer.group, "?")))
    if mtp_kept and "mtp" in inv.submodels:
        absolute = inv.family.mtp is not None and inv.family.mtp.style == "absolute"
        for layer in inv.submodels["mtp"].layers:
            new_stored = new_n + layer.index if absolute else layer.stored_index
            out.append(
                LayerMap("mtp", layer.index, layer.index, layer.name, f"{layer.prefix}{new_stored}", layer.kind, sym.get(layer.group, "?"))
            )
    return out


def _no_layers_found(inv: Inventory, name: str, wanted) -> Issue:
    """Layers asked of a stack the checkpoint has none of: where they were looked for."""
    prefixes = [p for st in inv.family.stacks if st.submodel == name for p in st.prefixes]
    looked = " or ".join(f"{p}N." for p in prefixes) or "a numbered layer stack"
    which = f"layer(s) {index_ranges(sorted(wanted))}" if isinstance(wanted, list) and wanted else "its layers"
    return Issue(
        "error",
        f"{name}: {which} do not exist: no tensor of the checkpoint is named {looked} "
        f"(read as {inv.family.display})",
        "check that config.json's model_type / architectures describe this checkpoint's tensor names",
    )


def _rewrite_quant_entries(inv: Inventory, edits, issues, mappings: list[LayerMap], kept, mtp_kept) -> None:
    q = inv.quantization
    if q is None or not q.entries:
        return
    splitter = inv.layer_name_pattern
    rename = {m.old_name: m.new_name for m in mappings}
    stored_sub = {}
    for sm in inv.submodels.values():
        for l in sm.layers:
            stored_sub[l.name] = sm.name
    containers: dict[tuple, list] = {}
    for e in q.entries:
        containers.setdefault(e.path[:-1], []).append(e)
    substring_match = q.method in ("awq", "moe_wna16") or q.method.startswith("gptq/awq")
    for cpath, entries in containers.items():
        file, doc_path = (cpath[0], cpath[1:]) if cpath[0] in inv.source.side_quant_configs else (CONFIG, cpath)
        doc = inv.source.side_quant_configs.get(file) if file != CONFIG else inv.source.config
        before = get_path(doc, doc_path)
        if before is MISSING:
            continue
        changed = False
        if isinstance(before, list):
            after = []
            for item in before:
                new = _rename_entry(item, splitter, rename, stored_sub) if isinstance(item, str) else item
                if new != item:
                    changed = True
                if new is not None:
                    after.append(new)
        elif isinstance(before, dict):
            after = {}
            for k, v in before.items():
                new = _rename_entry(k, splitter, rename, stored_sub)
                if new != k:
                    changed = True
                if new is not None:
                    after[new] = v
        else:
            continue
        if changed:
            set_edit(
                edits,
                ConfigEdit(file, doc_path, before, after, "quantization entries renumbered; entries of dropped layers removed"),
            )
        for e in entries:
            if e.value.startswith("re:") and re.search(r"\d", e.value):
                issues.append(
                    Issue("warning", f"quantization regex {e.value!r} contains digits; it was left unchanged — check it does not name layers")
                )
        if substring_match and isinstance(after, list):
            _substring_collisions(after, mappings, issues)


def _rename_entry(value: str, splitter, rename: dict, stored_sub: dict):
    """New text of one module entry, or None to delete it (its layer was dropped)."""
    if value.startswith(("re:", "+:", "-:")):
        return value
    # a sentinel segment lets "model.layers.11" (no sub-module) split like a tensor name
    prefix, idx_s, rest = splitter.match(value + ".#").groups()
    if prefix is None:
        return value
    old_name = f"{prefix}{idx_s}"
    if old_name not in stored_sub:
        return value  # names a layer the checkpoint does not have: leave it alone
    new_name = rename.get(old_name)
    if new_name is None:
        return None
    rest = rest[:-2]  # drop ".#" (or the lone "#")
    return new_name + ("." + rest if rest else "")


def _substring_collisions(entries, mappings, issues) -> None:
    names = [m.new_name + "." for m in mappings]
    for e in entries:
        if not isinstance(e, str) or e.startswith("re:"):
            continue
        hits = [n for n in names if e in n or n.startswith(e)]
        exact = [n for n in hits if n.startswith(e + ".") or n == e + "."]
        if len(hits) > max(1, len(exact)):
            issues.append(
                Issue(
                    "warning",
                    f"substring-matched quantization entry {e!r} also matches {', '.join(h[:-1] for h in hits if h not in exact)}",
                    "write the entry with a trailing module name",
                )
            )


def _verify_rules(inv, new_config, stack, path, kept, kinds, issues) -> None:
    """Evaluate the family's runtime rules on the rewritten config at the new indices."""
    if stack is None:
        return
    new_cfg = get_path(new_config, path, {}) if path else new_config
    rules = _rule_kinds(stack, new_cfg, len(kept))
    for new, (old, kind, rule) in enumerate(zip(kept, kinds, rules)):
        if not _same_kind(rule, kind):
            att, mlp = rule
            issues.append(
                Issue(
                    "error",
                    f"after renumbering, the runtime would build new layer {new} (original {old}, "
                    f"{kind.attention} · {kind.mlp}) as {att or kind.attention} · {mlp or kind.mlp}",
                    inv.family.formula_fix,
                )
            )
    # transformers validates per-layer list lengths against num_hidden_layers
    n = len(kept)
    for f in ("layer_types", "mlp_layer_types", "indexer_types", "activation_sparsity_pattern"):
        v = new_cfg.get(f)
        if isinstance(v, list) and len(v) != n:
            issues.append(Issue("error", f"output {f} has {len(v)} entries, num_hidden_layers is {n}"))


def _family_warnings(inv, new_n, mtp_kept, issues) -> None:
    fam = inv.family
    n = fam.metax_dense_mtp_depth
    if n is not None and new_n == n and mtp_kept:
        issues.append(
            Issue(
                "warning",
                f"vLLM-MetaX treats layer {n} of a {n}-layer DeepSeek-architecture model as a dense MTP layer (JoyAI hack): "
                f"the MTP MLP kind changes at exactly {n} kept layers",
                f"keep {n - 1} or {n + 1} layers",
            )
        )
    if mtp_kept and fam.mtp_ignored_by_transformers and "mtp" in inv.submodels:
        issues.append(
            Issue(
                "warning",
                "transformers hard-codes the original MTP index in _keys_to_ignore_on_load_unexpected: loading the "
                "trimmed checkpoint with transformers reports the moved MTP tensors as unexpected (vLLM is unaffected)",
            )
        )


def _renames(inv: Inventory, mappings: list[LayerMap], mtp_kept) -> tuple[list, list]:
    renames: list[tuple[str, str]] = []
    dropped: list[tuple[str, str]] = []
    by_name = {(m.submodel, m.old_name): m for m in mappings}
    for sm in inv.submodels.values():
        for layer in sm.layers:
            m = by_name.get((sm.name, layer.name))
            if m is None:
                reason = "MTP dropped" if sm.name == "mtp" else f"{sm.name} layer {layer.index} not kept"
                dropped.extend((t, reason) for t in layer.tensors)
                continue
            old_prefix, new_prefix = layer.name + ".", m.new_name + "."
            renames.extend((t, new_prefix + t[len(old_prefix):]) for t in layer.tensors)
        for part in sm.parts:
            if sm.name == "mtp" and not mtp_kept:
                dropped.extend((t, "MTP dropped") for t in part.tensors)
            else:
                renames.extend((t, t) for t in part.tensors)
    for part in inv.shared:
        renames.extend((t, t) for t in part.tensors)
    for t in inv.unassigned:
        dropped.append((t, "unassigned: belongs to no known layer or part"))
    return renames, dropped


# --- fields nothing checked -------------------------------------------------------------
# Scalar fields whose name says they may place layers by index (a boundary, a period, a
# count of leading layers: num_hash_layers, first_k_dense_replace, moe_layer_freq...); and
# names of counts and sizes that are not about layer positions.
_INDEX_FIELD = re.compile(r"layers?(_|$)|dense|moe|sparse|first|last|start|end$|offset|freq|step|interval|period|every|replace", re.I)
_NOT_INDEX_FIELD = re.compile(r"size|dim|head|tok|nextn|predict|mtp|draft|routed|shared|group|top_?k|experts?$|vocab|rank|window|chunk|position|rope|_id$|hidden_layers", re.I)


def unchecked_index_fields(plan: TrimPlan) -> list[str]:
    """Text-config scalars that may decide layer kinds by their index and that nothing
    re-derived for the kept layers: no family module (its rules are re-evaluated on the output
    config) and no edit. A selection that is a prefix of the stack keeps every index, so
    nothing there can move. Meant for when transformers' check did not run: it re-derives
    these (and solves them) when it does."""
    inv = plan.inventory
    if inv.family.stacks or plan.errors:
        return []
    kept = plan.kept.get("text") or []
    sm = inv.submodels.get("text")
    if not kept or sm is None or kept == list(range(len(kept))):
        return []
    stack = _text_stack(inv)
    path = _stack_path(inv, stack)
    cfg = get_path(inv.source.config, path, {}) if path else inv.source.config
    depth = sm.declared_depth or len(sm.layers)
    edited = {e.path[-1] for e in plan.edits if e.file == CONFIG and e.path[:-1] == path}
    depth_fields = set(stack.depth_fields if stack else ()) | set(stack.depth_aliases if stack else ())
    out = []
    for key, value in cfg.items():
        if (type(value) is int and 0 < value < depth and key not in edited and key not in depth_fields
                and _INDEX_FIELD.search(key) and not _NOT_INDEX_FIELD.search(key)):
            out.append(f"{key}={value}")
    return out


# --- coverage ---------------------------------------------------------------------------
def trigger_request(inv: Inventory, submodel: str, kind: LayerKind) -> str:
    cfg = inv.source.config
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    if submodel == "mtp":
        return 'speculative decoding: --speculative-config \'{"method":"mtp","num_speculative_tokens":1}\''
    if submodel == "vision":
        return "an image request (chat completion with an image_url part)"
    if submodel != "text":
        return f"a request that uses the {submodel} encoder"
    att = kind.attention
    parts = []
    ratio = compression_ratio(att)
    if ratio is not None:  # DeepSeek-V4: a window on every layer, compressed entries past it
        parts.append(long_input_request(text, ratio))
    elif att in (DSA_FULL, DSA_SHARED):
        topk = text.get("index_topk")
        parts.append(f"a prompt longer than index_topk={topk} tokens (sparse top-k selection)" if topk else "a long prompt")
    elif att == "sliding":
        w = text.get("sliding_window")
        parts.append(f"a prompt longer than sliding_window={w} tokens" if w else "a long prompt")
    elif att == "chunked":
        c = text.get("attention_chunk_size")
        parts.append(f"a prompt longer than attention_chunk_size={c} tokens" if c else "a long prompt")
    elif att in ("linear", "mamba"):
        parts.append("any prompt; a multi-chunk prefill (prompt > max_num_batched_tokens) carries the recurrent state")
    else:
        parts.append("any prompt (prefill + decode)")
    if kind.mlp in (MOE, HASH_MOE):
        k = first_int(text, "num_experts_per_tok", "moe_topk", "top_k")
        parts.append(f"routes each token to {k} of {kind.experts} experts" if k and kind.experts else "routes tokens to experts")
    return "; ".join(parts)


def long_input_tokens(cfg: dict, ratio: int) -> tuple[int, str]:
    """DeepSeek-V4: how long a prompt must be to take every path of a layer with compression
    ratio ``ratio`` (past the sliding window; past one compressed block; at ratio 4 past the
    indexer's top-k of compressed entries, vLLM selecting every entry below it), and why: the
    longest of the family's boundaries (``Family.long_input``)."""
    from ..model.families import family_for
    from ..model.families.base import compressed_kind

    found = family_for(cfg).long_input(cfg, compressed_kind(ratio))
    longest = max(found, key=lambda b: b.tokens, default=None)
    return (longest.tokens, longest.source) if longest else (0, "")


def default_context(plan: TrimPlan) -> int:
    """The context (--max-model-len) of the report's serve command when none is chosen:
    conservative, but long enough for the longest triggering prompt: every kept attention
    kind's boundaries (``Family.long_input``: windows, chunks, index_topk, compressed blocks)."""
    cfg = plan.inventory.source.config
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    kinds = {m.kind.attention for m in plan.mappings if m.submodel == "text"}
    need = max((b.tokens for kind in kinds for b in plan.inventory.family.long_input(text, kind)), default=0)
    length = 4096
    while length < need + 512:
        length *= 2
    cap = text.get("max_position_embeddings")
    if isinstance(cap, int) and cap > 0:
        length = min(length, cap)
    return length


def long_input_request(cfg: dict, ratio: int) -> str:
    need, why = long_input_tokens(cfg, ratio)
    return f"a prompt longer than {need} tokens ({why})" if need else "a long prompt"


def _coverage(inv: Inventory, kept, mtp_kept, has_mtp, mappings) -> list[CoverageRow]:
    rows = []
    by_sub = {}
    for m in mappings:
        by_sub.setdefault((m.submodel, m.old), m)
    layer_bytes = {(sm.name, l.index): (l.nbytes if l.bytes_known else None) for sm in inv.submodels.values() for l in sm.layers}
    for g in inv.groups:
        if g.submodel == "mtp":
            members = set(g.layers)
            keep = [(m.new, m.old) for m in mappings if m.submodel == "mtp" and m.old in members]
        else:
            keep = [(by_sub[(g.submodel, i)].new, i) for i in g.layers if (g.submodel, i) in by_sub]
        kept_old = {o for _, o in keep}  # once per group: the coverage stays linear in the layers
        sizes = [layer_bytes[(g.submodel, i)] for i in g.layers if i not in kept_old]
        dropped = None if None in sizes else sum(sizes)
        label = g.kind.label + (f" + {', '.join(g.kind.special)}" if g.kind.special else "")
        rows.append(
            CoverageRow(g.submodel, g.symbol, label, tuple(keep), trigger_request(inv, g.submodel, g.kind), len(g.layers), dropped)
        )
    return rows
