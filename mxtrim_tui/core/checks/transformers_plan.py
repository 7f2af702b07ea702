"""The plan checked, and where needed solved, against transformers itself.

transformers builds any architecture it knows on the ``meta`` device in a fraction of a
second, from a config alone. That gives an oracle for what a rewritten config makes the
runtime build:

* **per-layer signatures** of the SOURCE model: each text layer's module classes and
  parameter shapes, plus its entries in every per-layer list of the normalised config (the
  config class regenerates ``layer_types`` from ``sliding_window_pattern`` and the like). The
  automatic selection covers every distinct signature.
* **the plan's check**: the OUTPUT config is built too; output layer j must have the
  signature of source layer kept[j]; everything outside the text stack must be unchanged;
  and transformers' own loader, given the tensor names and shapes the output will hold,
  must report no missing / unexpected / mis-shaped tensor that it did not already report for
  the same tensors of the source (a checkpoint-vs-transformers difference the source already
  has, such as MTP heads or an indexer stored on shared layers, is the source's, not the trim's).
* **solving**: when the output builds other layers than the kept ones, the scalar structure
  fields of the text config (``*dense*``, ``*moe*``, ``*start*``, ``*freq*``, ...) are searched
  for values that make every layer equal, and each found value becomes an edit whose reason
  names the class it was solved against.

torch and transformers are imported only when a check runs.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import lru_cache

from ..plan.check_result import EXACT, MISMATCH, NOT_CHECKED, TransformersCheck
from ..units import index_ranges, plural
from .imports import import_torch_transformers, quiet_transformers as _quiet
from .loader import LoaderUnavailable


# Scalar config fields that may decide which layers are dense / MoE / sliding...: the solver
# searches these (names, not a family list: the unknown family's own vocabulary).
SOLVABLE_FIELD = re.compile(r"dense|moe|sparse|expert|start|end|freq|step|interval|period|offset|pattern|first|last|every|layers|types", re.I)
WIDEN_TRIES = 12  # prefixes tried when an automatic selection does not build exactly
_VISIONISH = ("vision", "visual", "audio", "vit.", "image", "speech", "mtp")


def _first_line(exc: BaseException) -> str:
    """The exception in one line; a validation wrapper gives its cause's message."""
    cause = exc.__cause__ or exc
    lines = [l.strip() for l in str(cause).strip().splitlines() if l.strip()]
    return f"{type(cause).__name__}: {(lines[-1] if lines else '')[:160]}"


def _unquantized(cfg_dict: dict) -> dict:
    """A copy without quantization configs: the model is built unquantized (quantizers need
    accelerator kernels or extra packages), which changes no layer's structure."""
    d = copy.deepcopy(cfg_dict)
    d.pop("quantization_config", None)
    for value in d.values():
        if isinstance(value, dict):
            value.pop("quantization_config", None)
    return d


class Builder:
    """Builds models of one architecture on ``meta`` from config dicts."""

    def __init__(self, config: dict):
        self.torch, self.transformers, self.unavailable = import_torch_transformers()
        self.model_class = None
        if self.unavailable:
            return
        model_type = config.get("model_type")
        from transformers import CONFIG_MAPPING

        # transformers' own class when it has one (as trust_remote_code=False loads it); the
        # model's auto_map code is never executed.
        if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
            if config.get("auto_map"):
                self.unavailable = "the architecture needs the model's own code (auto_map), which mxtrim never executes"
            else:
                self.unavailable = f"transformers {self.transformers.__version__} does not know model_type {model_type!r}"
            return
        self.config_class = CONFIG_MAPPING[model_type]
        self.model_class = self._model_class(config)
        if self.model_class is None:
            self.unavailable = "transformers has no causal-LM or image-text class for this architecture"

    def _model_class(self, config: dict):
        for arch in config.get("architectures") or []:
            cls = getattr(self.transformers, arch, None) if isinstance(arch, str) else None
            if cls is not None:
                return cls
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        )

        for mapping in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
            name = mapping.get(config.get("model_type"))
            if isinstance(name, (list, tuple)):
                name = name[0]
            cls = getattr(self.transformers, name, None) if name else None
            if cls is not None:
                return cls
        return None

    def config(self, cfg_dict: dict):
        return self.config_class.from_dict(_unquantized(cfg_dict))

    def build(self, cfg_dict: dict):
        """(config object, model on meta)."""
        cfg = self.config(cfg_dict)
        with self.torch.device("meta"):
            return cfg, self.model_class._from_config(cfg)


def text_layer_list(model, depth: int, checkpoint_prefix: str = "") -> str | None:
    """Qualified name of the model's text decoder layer list (a ModuleList of ``depth``)."""
    import torch

    leaf = checkpoint_prefix.rstrip(".").rsplit(".", 1)[-1] if checkpoint_prefix else ""
    candidates = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == depth:
            lowered = name.lower() + "."
            if any(w in lowered for w in _VISIONISH):
                continue
            candidates.append(name)
    if not candidates:
        return None
    same_leaf = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    return (same_leaf or candidates)[0]


def module_signature(module) -> tuple:
    """Module classes and parameter shapes inside one layer (names relative to it)."""
    classes = tuple((n, type(m).__name__) for n, m in module.named_modules())
    params = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
    return classes, params


def per_layer_entries(text_cfg: dict, depth: int) -> dict[str, list]:
    """Every list of the normalised text config with one entry per layer, and every list of
    layer indices (its entries are compared renumbered)."""
    from ..model.inventory import is_layer_index_list

    return {
        k: v for k, v in text_cfg.items()
        if k != "architectures" and (is_layer_index_list(k, v, depth) or (isinstance(v, list) and len(v) == depth))
    }


def _names_layers(key: str, values: list, depth: int) -> bool:
    from ..model.inventory import is_layer_index_list

    return is_layer_index_list(key, values, depth) or sorted(values, key=str) == list(range(depth))


def _text_dict(cfg) -> dict:
    get_text = getattr(cfg, "get_text_config", None)
    text = get_text() if get_text else cfg
    return text.to_dict()


@dataclass
class SourceModel:
    """The source's text layers as transformers builds them."""

    builder: Builder
    stack_path: str
    signatures: list[tuple]
    config_lists: dict[str, list]
    outside: dict[str, tuple]  # parameters outside the text stack -> shape
    class_name: str
    model: object = None  # the source model on meta (reused for the loader's report)


def _outside(model, stack_path: str) -> dict[str, tuple]:
    prefix = stack_path + "."
    return {n: tuple(t.shape) for n, t in model.state_dict(keep_vars=True).items() if not n.startswith(prefix)}


def describe_source(inv) -> SourceModel | str:
    """The source's per-layer structure, or why it cannot be had."""
    return _describe_source_cached(id(inv), _Key(inv))


class _Key:
    """Hashable handle on an inventory for the cache (identity)."""

    def __init__(self, inv):
        self.inv = inv

    def __hash__(self):
        return id(self.inv)

    def __eq__(self, other):
        return isinstance(other, _Key) and other.inv is self.inv


@lru_cache(maxsize=4)
def _describe_source_cached(_ident: int, key: _Key) -> SourceModel | str:
    inv = key.inv
    text = inv.submodels.get("text")
    if text is None or not text.layers:
        return "no text layers"
    builder = Builder(inv.source.config)
    if builder.unavailable:
        return builder.unavailable
    depth = len(text.layers)
    try:
        with _quiet():
            cfg, model = builder.build(inv.source.config)
    except Exception as exc:  # any config the class rejects
        return f"transformers cannot build {builder.model_class.__name__} from the source config ({_first_line(exc)})"
    prefix = text.layers[0].prefix
    path = text_layer_list(model, depth, prefix)
    if path is None:
        return f"{type(model).__name__} has no text layer list of {plural(depth, 'layer')}"
    layers = model.get_submodule(path)
    return SourceModel(
        builder, path, [module_signature(l) for l in layers], per_layer_entries(_text_dict(cfg), depth),
        _outside(model, path), type(model).__name__, model,
    )


def layer_signatures(inv) -> list[tuple] | None:
    """One signature per source text layer (module structure + per-layer config entries), or
    None when transformers cannot build the source."""
    src = describe_source(inv)
    if isinstance(src, str):
        return None
    depth = len(src.signatures)
    lists = {k: v for k, v in src.config_lists.items() if not _names_layers(k, v, depth)}
    indices = {k: set(v) for k, v in src.config_lists.items() if _names_layers(k, v, depth)}
    return [
        (src.signatures[i], tuple((k, _hashable(v[i])) for k, v in sorted(lists.items())),
         tuple(sorted(k for k, members in indices.items() if i in members and len(members) < depth)))
        for i in range(depth)
    ]


def _hashable(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def layer_problems(src: SourceModel, out_cfg_dict: dict, kept: list[int]) -> list[str] | str:
    """What the output config builds differently from the kept source layers (empty: exact),
    or a string when it does not build at all."""
    try:
        with _quiet():
            cfg, model = src.builder.build(out_cfg_dict)
    except Exception as exc:
        return f"transformers cannot build {src.class_name} from the output config ({_first_line(exc)})"
    problems = []
    try:
        layers = model.get_submodule(src.stack_path)
    except AttributeError:
        return f"the output model has no {src.stack_path}"
    if len(layers) != len(kept):
        problems.append(f"the output config builds {plural(len(layers), 'text layer')}, {len(kept)} {'is' if len(kept) == 1 else 'are'} kept")
    for j, i in enumerate(kept[: len(layers)]):
        got = module_signature(layers[j])
        if got != src.signatures[i]:
            problems.append(f"output layer {j} differs from source layer {i}: {_describe_difference(src.signatures[i], got)}")
    out_lists = _text_dict(cfg)
    mapping = {old: new for new, old in enumerate(kept)}
    depth = len(src.signatures)
    for k, values in src.config_lists.items():
        if _names_layers(k, values, depth):  # layer indices, compared renumbered
            want = [mapping[v] for v in values if v in mapping]
        else:
            want = [values[i] for i in kept]
        if out_lists.get(k) != want:
            problems.append(f"config {k} reads {_short(out_lists.get(k))} at the new indices, the kept layers have {_short(want)}")
    outside = _outside(model, src.stack_path)
    if outside != src.outside:
        diff = sorted(set(src.outside.items()) ^ set(outside.items()))
        problems.append(f"outside the text layers, {len(diff)} parameter(s) change, e.g. {diff[0][0]}")
    return problems


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_difference(want: tuple, got: tuple) -> str:
    """The first module or parameter where an output layer differs from its source layer."""
    want_classes, got_classes = dict(want[0]), dict(got[0])
    for name in sorted(set(want_classes) | set(got_classes), key=len):
        a, b = want_classes.get(name), got_classes.get(name)
        if a != b:
            where = f"{name!r}" if name else "the layer"
            if a is None:
                return f"it has an extra {b} at {where}"
            if b is None:
                return f"it lacks the {a} at {where}"
            return f"{where} is a {b}, not a {a}"
    want_params, got_params = dict(want[1]), dict(got[1])
    for name in sorted(set(want_params) | set(got_params)):
        a, b = want_params.get(name), got_params.get(name)
        if a != b:
            if a is None:
                return f"it has an extra parameter {name} {list(b)}"
            if b is None:
                return f"it lacks the parameter {name} {list(a)}"
            return f"{name} is {list(b)}, not {list(a)}"
    return "another structure"


# --- solving ----------------------------------------------------------------------------
def _text_path(inv) -> tuple:
    text = inv.submodels.get("text")
    path = text.config_path if text else ""
    return tuple(path.split(".")) if path else ()


def _get(d: dict, path: tuple):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _with(d: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(d)
    node = out
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    return out


def _candidates(text_cfg: dict, kept: list[int], depth: int) -> list[tuple[str, list]]:
    """(field, values to try): integer structure fields over 0..len(kept)+1, and short lists
    read cyclically (``block_types`` of RecurrentGemma) written out for the kept layers."""
    new_n = len(kept)
    out = []
    for k, v in text_cfg.items():
        if isinstance(v, list) and v and len(v) < depth and SOLVABLE_FIELD.search(k):
            if all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v):
                out.append((k, [[v[i % len(v)] for i in kept]]))
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not SOLVABLE_FIELD.search(k):
            continue
        values = list(range(0, new_n + 2))
        if v not in values:
            values.append(v)
        out.append((k, values))
    return out


def solve(src: SourceModel, out_cfg: dict, text_path: tuple, kept: list[int], max_rounds: int = 3):
    """Coordinate search over the text config's scalar structure fields for values that make
    the output build the kept layers. Returns (edits [(path, before, after)], problems left)."""
    problems = layer_problems(src, out_cfg, kept)
    if isinstance(problems, str) or not problems:
        return [], problems
    text_cfg = _get(out_cfg, text_path) if text_path else out_cfg
    if not isinstance(text_cfg, dict):
        return [], problems
    best_cfg, best = out_cfg, problems
    chosen: dict[tuple, object] = {}
    for _ in range(max_rounds):
        improved = False
        for key, values in _candidates(_get(best_cfg, text_path) if text_path else best_cfg, kept, len(src.signatures)):
            path = text_path + (key,)
            current = _get(best_cfg, path)
            for value in values:
                if value == current:
                    continue
                trial = _with(best_cfg, path, value)
                result = layer_problems(src, trial, kept)
                if isinstance(result, str):
                    continue
                if len(result) < len(best):
                    best_cfg, best, improved = trial, result, True
                    chosen[path] = value
                    current = value
                    if not best:
                        break
            if not best:
                break
        if not best or not improved:
            break
    edits = [(p, _get(out_cfg, p), v) for p, v in chosen.items() if _get(out_cfg, p) != v]
    return edits, best


def nearest_selection(src: SourceModel, check_cfg, kept: list[int], depth: int) -> list[int] | None:
    """A nearby selection whose output builds exactly: the dense-prefix form (every layer from
    0 up to the first kept one added) or the first len(kept) layers. ``check_cfg(keep)``
    returns the output config for a selection (or None)."""
    candidates = [
        sorted(set(kept) | {depth - 1}),  # rules about the last layer
        sorted(set(range(0, max(kept) + 1))),  # dense prefixes, periods counted from 0
        list(range(min(len(kept), depth))),
    ]
    for keep in candidates:
        if not keep or keep == kept:
            continue
        cfg = check_cfg(keep)
        if cfg is not None and layer_problems(src, cfg, keep) == []:
            return keep
    return None


# --- the tensors the output will hold, through transformers' loader ---------------------
def _loader_report(builder: Builder, cfg_dict: dict, shapes: dict[str, tuple], model=None) -> tuple[set, set, set]:
    """(missing, unexpected, mis-shaped) names when transformers' own loader (key conversions
    applied) loads tensors of these names and shapes into a model built from ``cfg_dict``
    (or into ``model``, already built from it)."""
    from .loader import load_with_transformers

    torch = builder.torch
    with _quiet():
        if model is None:
            _, model = builder.build(cfg_dict)
        feed = {n: torch.empty(s, dtype=torch.bfloat16, device="meta") for n, s in shapes.items()}
        missing, unexpected, mismatched, _ = load_with_transformers(model, feed)
    return set(missing), set(unexpected), {n for n, _, _ in mismatched}


def _renumber(names: set, patterns: list[re.Pattern], mapping: dict[int, int]) -> set:
    """Names with text-layer numbers mapped old -> new; names of layers not kept vanish."""
    out = set()
    for name in names:
        for pattern in patterns:
            m = pattern.match(name)
            if m:
                old = int(m.group(2))
                if old in mapping:
                    out.add(f"{m.group(1)}{mapping[old]}{name[m.end(2):]}")
                break
        else:
            out.add(name)
    return out


def tensor_problems(plan, src: SourceModel, out_cfg: dict, feeds: tuple[dict, dict]) -> list[str]:
    """Loader discrepancies the output has and the source had not. ``feeds``: name -> shape
    of the source's and the output's tensors (see _compared_tensors). Raises
    :class:`.loader.LoaderUnavailable` (or whatever the loader raises) when transformers'
    loader cannot be run here: the caller says *not checked*, never a mismatch."""
    kept = plan.kept.get("text", [])
    mapping = {old: new for new, old in enumerate(kept)}
    text = plan.inventory.submodels["text"]
    prefixes = {re.escape(src.stack_path + ".")} | {re.escape(l.prefix) for l in text.layers}
    patterns = [re.compile(rf"^({p})(\d+)(?=\.)") for p in prefixes]
    before = _loader_report(src.builder, plan.inventory.source.config, feeds[0], src.model)
    after = _loader_report(src.builder, out_cfg, feeds[1])
    problems = []
    for label, b, a in zip(("missing", "unexpected", "mis-shaped"), before, after):
        new = sorted(a - _renumber(b, patterns, mapping))
        if new:
            more = f" and {len(new) - 3} more" if len(new) > 3 else ""
            problems.append(f"{len(new)} {label} tensor(s) in the output that the source does not have: "
                            + ", ".join(new[:3]) + more)
    return problems


# --- the plan's check -------------------------------------------------------------------
_NUMBERS = re.compile(r"(?<=\.)\d+(?=\.)")


def _compared_tensors(plan) -> tuple[dict, dict]:
    """(source feed, output feed): name -> shape of the tensors given to the loader. The source
    gets every tensor but those of dropped text layers; the output, what the plan writes.
    Neither gets MTP heads (transformers builds none) nor quantization scales / packed
    weights (the model is built unquantized)."""
    from .structure import is_quant_side

    inv = plan.inventory
    mtp = inv.submodels.get("mtp")
    skip = {t for l in mtp.layers for t in l.tensors} | {t for p in mtp.parts for t in p.tensors} if mtp else set()
    kept = set(plan.kept.get("text", []))
    skip |= {t for l in inv.submodels["text"].layers if l.index not in kept for t in l.tensors}
    quantized = inv.quantization is not None
    source, output = {}, {}
    for t in inv.source.iter_tensors():
        if t.name not in skip and not (quantized and is_quant_side(t.name)):
            source[t.name] = tuple(t.shape)
    if inv.source.absent_shards and source:
        # Shards not on disk (a partial download): a tensor there takes the shape of a present
        # one named alike but for its numbers (another layer's, another expert's), so the
        # loader still sees whole layers; one without such a twin is left out of both feeds.
        twin = {_NUMBERS.sub("#", name): shape for name, shape in source.items()}
        for shard in inv.source.absent_shards.values():
            for name in shard.names:
                shape = twin.get(_NUMBERS.sub("#", name))
                if shape is not None and name not in skip and not (quantized and is_quant_side(name)):
                    source[name] = shape
    for old, new in plan.renames:
        if old in source:
            output[new] = source[old]
    return source, output


def check_plan(plan, *, solve_generic: bool = True):
    """(plan, TransformersCheck): the plan's output config built by transformers and compared
    with the kept source layers. For an architecture without a family module, scalar fields
    are solved first when the layers differ; the returned plan then carries those edits."""
    if plan.errors:
        return plan, TransformersCheck(NOT_CHECKED, "the plan has blocking errors")
    kept = plan.kept.get("text")
    if not kept:
        return plan, TransformersCheck(NOT_CHECKED, "no text layers kept")
    src = describe_source(plan.inventory)
    if isinstance(src, str):
        return plan, TransformersCheck(NOT_CHECKED, src)
    out_cfg = plan.new_documents.get("config.json", plan.inventory.source.config)
    generic = plan.inventory.family.key == "generic"
    solved: list = []
    if generic and solve_generic:
        solved, problems = solve(src, out_cfg, _text_path(plan.inventory), kept)
        if solved and not problems:
            plan = with_solution(plan, solved, src.class_name)
            out_cfg = plan.new_documents["config.json"]
        elif solved:
            solved = []
    else:
        problems = layer_problems(src, out_cfg, kept)
    if isinstance(problems, str):
        problems = [problems]
    if not problems:
        try:
            problems = tensor_problems(plan, src, out_cfg, _compared_tensors(plan))
        except Exception as exc:  # loader internals of another transformers version
            why = str(exc) if isinstance(exc, LoaderUnavailable) else f"transformers {src.builder.transformers.__version__}: {_first_line(exc)}"
            return plan, TransformersCheck(
                NOT_CHECKED, f"{src.class_name} built from the output config has exactly the kept layers; the tensor names "
                f"were not checked: transformers' loader could not be run ({why})", (), src.class_name, tuple(solved))
    if problems:
        who = "the family's rules and transformers disagree: " if not generic else ""
        return plan, TransformersCheck(MISMATCH, f"{who}{src.class_name} built from the output config differs from the kept layers",
                                       tuple(problems), src.class_name)
    how = f"; {len(solved)} field(s) solved against it" if solved else ""
    summary = f"{src.class_name} built from the output config has exactly the kept layers{how}"
    return plan, TransformersCheck(EXACT, summary, (), src.class_name, tuple(solved))


def with_solution(plan, solved, class_name: str):
    """The plan with the solver's edits added to its config rewrite."""
    import dataclasses

    from ..plan.build import CONFIG, set_edit
    from ..plan.config_edit import ConfigEdit, apply_edits, get_path

    edits = list(plan.edits)
    source = plan.inventory.source.config
    for path, _, after in solved:
        set_edit(edits, ConfigEdit(CONFIG, path, get_path(source, path), after, f"solved against transformers' {class_name}"))
    documents = dict(plan.new_documents)
    documents[CONFIG] = apply_edits(plan.inventory.source.config, [e for e in edits if e.file == CONFIG], CONFIG)
    return dataclasses.replace(plan, edits=edits, new_documents=documents)


def checked_plan(plan, *, force: bool = False):
    """The plan with transformers' verdict attached: a mismatch blocks it (an error naming the
    evidence and the nearest selection that builds exactly), or with ``force`` is a warning.
    An automatic selection that does not build exactly is widened to the shortest prefix of
    the stack that does (a prefix keeps every layer at its index and covers every kind)."""
    import dataclasses

    from ..plan.build import Issue, Selection, build_plan

    try:
        plan, check = check_plan(plan)
    except Exception as exc:  # transformers internals this version does not have, a class that raises
        from .loader import transformers_version

        check = TransformersCheck(NOT_CHECKED, f"the check could not run on transformers {transformers_version()} ({_first_line(exc)})")
    inv = plan.inventory
    if check.status == MISMATCH and plan.auto.get("text"):
        kept = plan.kept["text"]
        depth = len(inv.submodels["text"].layers)
        # the last layer added (a rule about the last layer: one boundary layer more), else
        # the shortest prefix that builds exactly (periods and dense prefixes counted from 0)
        tries = [sorted(set(kept) | {depth - 1})] if depth - 1 not in kept else []
        tries += [list(range(end)) for end in range(max(kept) + 2, min(depth + 1, max(kept) + 2 + WIDEN_TRIES))]
        for keep in tries:
            widened, wcheck = check_plan(build_plan(inv, Selection({"text": tuple(keep)}, _mtp_choice(plan))))
            if wcheck.status == EXACT:
                auto = dict(widened.auto, text=True)
                note = Issue("warning", f"the automatic selection was widened to layers {index_ranges(keep)}: {check.problems[0]}")
                return dataclasses.replace(widened, auto=auto, issues=widened.issues + [note], transformers_check=wcheck)
    if check.status == EXACT and plan.auto.get("text"):
        plan, check = _cover_every_signature(plan, check)
    return plan_with_check(plan, check, force)


def plan_with_check(plan, check, force: bool = False):
    """``plan`` carrying ``check``, with what its verdict adds to the issues: the index fields
    nothing checked when it did not run, the mismatch (an error, a warning with ``force``)."""
    import dataclasses

    from ..plan.build import Issue

    issues = list(plan.issues)
    if check.status == NOT_CHECKED:
        issues += _unchecked_fields_issue(plan, check)
    if check.status == MISMATCH:
        message = f"{check.summary}: {check.problems[0]}" + (f" (and {len(check.problems) - 1} more)" if len(check.problems) > 1 else "")
        if force:
            issues.append(Issue("warning", "written despite the check (--force): " + message))
        else:
            issues.append(Issue("error", message, _nearest_fix(plan)))
    return dataclasses.replace(plan, issues=issues, transformers_check=check)


def _unchecked_fields_issue(plan, check) -> list:
    """When the check did not run: the fields that may place layers by index and that no
    family rule re-derived (without the check nothing did), as one warning."""
    from ..plan.build import Issue, unchecked_index_fields

    fields = unchecked_index_fields(plan)
    if not fields:
        return []
    return [Issue("warning", f"{', '.join(fields)} may decide which layers are which by their index, and nothing checked "
                  "them after renumbering (no family module for this architecture, and transformers' check did not run: "
                  f"{check.summary}); the output may build other layers than the kept ones",
                  "run the plan where transformers is installed (--python, or pip install 'mxtrim-tui[checks]'), "
                  "or keep a prefix of the layers (0..n-1), which keeps every index")]


def _cover_every_signature(plan, check):
    """An automatic selection extended by the first layer of every signature transformers
    distinguishes (module structure, per-layer config entries) that it does not cover yet."""
    import dataclasses

    from ..plan.build import Issue, Selection, build_plan

    signatures = layer_signatures(plan.inventory)
    if signatures is None:
        return plan, check
    kept = plan.kept["text"]
    have = {signatures[i] for i in kept if i < len(signatures)}
    extra = []
    for i, sig in enumerate(signatures):
        if sig not in have:
            have.add(sig)
            extra.append(i)
    if not extra:
        return plan, check
    union = sorted(set(kept) | set(extra))
    depth = len(signatures)
    # the union, else the shortest prefix holding it (a prefix keeps every layer at its index)
    for keep in [union] + [list(range(end)) for end in range(max(union) + 1, min(depth, max(union) + 1 + WIDEN_TRIES))]:
        wider, wcheck = check_plan(build_plan(plan.inventory, Selection({"text": tuple(keep)}, _mtp_choice(plan))))
        if wcheck.status == EXACT:
            note = Issue("warning", f"layers {', '.join(map(str, extra))} added to the automatic selection"
                         + (f" (as layers {index_ranges(keep)})" if keep != union else "")
                         + ": transformers builds them differently from the kept ones")
            return dataclasses.replace(wider, auto=dict(wider.auto, text=True), issues=wider.issues + [note]), wcheck
    note = Issue("warning", f"the automatic selection does not cover layers {', '.join(map(str, extra))}, which transformers "
                 "builds differently, because no nearby selection with them builds exactly", "add them with --keep and --force")
    return dataclasses.replace(plan, issues=plan.issues + [note]), check


def _mtp_choice(plan):
    return plan.mtp_kept if plan.inventory.submodels.get("mtp") else None


def _nearest_fix(plan) -> str:
    """A selection near the asked one that builds exactly, as a --keep fix."""
    from ..plan.build import Selection, build_plan

    src = describe_source(plan.inventory)
    kept = plan.kept.get("text", [])
    if isinstance(src, str) or not kept:
        return ""
    depth = len(plan.inventory.submodels["text"].layers)

    def config_for(keep):
        candidate = build_plan(plan.inventory, Selection({"text": tuple(keep)}, _mtp_choice(plan)))
        return None if candidate.errors else candidate.new_documents.get("config.json")

    keep = nearest_selection(src, config_for, kept, depth)
    if keep is None:
        return "no nearby selection builds exactly; --force writes anyway and the report says so"
    return f"--keep {index_ranges(keep)} builds exactly"
