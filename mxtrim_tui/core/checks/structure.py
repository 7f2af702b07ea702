"""Compare a written checkpoint with the reduced model transformers builds from its config.

The model is built on the ``meta`` device (no memory, no weights) from the *output*
``config.json``; the checkpoint is described to transformers' own loader by meta tensors
of the written names, dtypes and shapes, so its key renamings and fusions (per-expert
weights stacked into one parameter, ``language_model.model.`` → ``model.language_model.``)
apply exactly as in ``from_pretrained``. What remains is reported: parameters the model
expects but the checkpoint lacks (missing), checkpoint tensors the model has no place for
(unexpected) and shape mismatches.

Not fed to the loader, and said so:

* MTP / draft-head tensors: transformers builds no MTP module (it lists the original MTP
  index in ``_keys_to_ignore_on_load_unexpected``); vLLM loads them.
* quantization side tensors (scales, zero points) and packed weights (AWQ ``qweight``,
  MXFP4 ``*_blocks``): the model is built unquantized — transformers' quantizers need
  accelerator kernels or extra packages — so their parameters cannot be compared. Plain
  quantized weights with the logical shape (FP8, INT8) are compared by shape.

torch and transformers are imported only inside :func:`check_structure`, or in the check
child of :class:`StructureJob`, which checks the *planned* output (its config and the
names, dtypes and shapes of the planned shards) while the extraction copies it: the writer
verifies that the written headers equal the planned ones byte for byte, so the result holds
for the written checkpoint, and torch's memory goes back with the child.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..model.inventory import SCALE_SUFFIXES
from ..plan.build import TrimPlan
from .imports import import_torch_transformers, quiet_transformers
from .loader import LoaderUnavailable, load_with_transformers
from ..read.source import ModelSource, open_source

CHECKED = "checked"
PARTIAL = "partially checked"
NOT_CHECKED = "not checked"

# Leaves of packed quantized weights: the unquantized parameter is the name without them.
PACKED_WEIGHT_LEAVES = ("qweight", "weight_packed", "weight_shape")
PACKED_SUFFIXES = ("_blocks", "_scales")  # MXFP4 (gpt-oss): gate_up_proj_blocks / _scales
_ROTARY = re.compile(r"rotary_emb\.inv_freq$")


@dataclass(frozen=True)
class StructureResult:
    status: str  # CHECKED | PARTIAL | NOT_CHECKED
    summary: str  # one line
    details: tuple[str, ...] = ()
    model_class: str | None = None
    expected: int = 0  # parameters and persistent buffers of the reduced model
    compared: int = 0  # checkpoint tensors given to the loader
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    mismatched: tuple[tuple[str, tuple, tuple], ...] = ()  # (name, checkpoint shape, model shape)
    ignored: dict = field(default_factory=dict)  # reason -> count of tensors not compared
    config_loaded: bool = False  # AutoConfig read the output config offline
    judge: dict | None = None  # the transformers that judged (core/checks/judge.py)

    @property
    def problems(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.mismatched)

    @property
    def headline(self) -> str:
        """Status and outcome in a few words, for tables."""
        if self.status == NOT_CHECKED:
            return f"{NOT_CHECKED}: {self.summary}"
        if not self.problems:
            return f"{self.status}: no missing, unexpected or mis-shaped tensors"
        return (f"{self.status}: {len(self.missing)} missing, {len(self.unexpected)} unexpected, "
                f"{len(self.mismatched)} shape mismatch(es)")

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "summary": self.summary,
            "model_class": self.model_class,
            "expected": self.expected,
            "compared": self.compared,
            "missing": list(self.missing),
            "unexpected": list(self.unexpected),
            "mismatched": [[n, list(a), list(b)] for n, a, b in self.mismatched],
            "ignored": self.ignored,
            "config_loaded": self.config_loaded,
            "details": list(self.details),
            "judge": self.judge,
        }

    @classmethod
    def from_json(cls, doc: dict) -> "StructureResult":
        return cls(
            doc["status"], doc["summary"], tuple(doc.get("details", ())), doc.get("model_class"), doc.get("expected", 0),
            doc.get("compared", 0), tuple(doc.get("missing", ())), tuple(doc.get("unexpected", ())),
            tuple((n, tuple(a), tuple(b)) for n, a, b in doc.get("mismatched", ())), dict(doc.get("ignored", {})),
            bool(doc.get("config_loaded")), doc.get("judge"),
        )


def not_checked(reason: str, *, config_loaded: bool = False) -> StructureResult:
    return StructureResult(NOT_CHECKED, reason, config_loaded=config_loaded)


def _mtp_names(plan: TrimPlan) -> set[str]:
    """Output names of the MTP / draft-head tensors."""
    sm = plan.inventory.submodels.get("mtp")
    if sm is None or not plan.mtp_kept:
        return set()
    old = {t for layer in sm.layers for t in layer.tensors} | {t for part in sm.parts for t in part.tensors}
    return {new for o, new in plan.renames if o in old}


def is_quant_side(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf in SCALE_SUFFIXES or leaf in PACKED_WEIGHT_LEAVES or leaf.endswith(PACKED_SUFFIXES)


def _packed_param(name: str, packed: set[str]) -> bool:
    """A missing parameter whose checkpoint form is packed (X.weight ↔ X.qweight, X ↔ X_blocks)."""
    module, _, leaf = name.rpartition(".")
    if leaf == "weight" and any(f"{module}.{p}" in packed for p in PACKED_WEIGHT_LEAVES):
        return True
    return any(name + s in packed for s in PACKED_SUFFIXES)


def _torch_dtype(torch, dtype: str):
    table = {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
        "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
        "F32": "float32", "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
        "F8_E5M2FNUZ": "float8_e5m2fnuz",
    }
    # Sub-byte formats (F4, F6) have no plain torch dtype; only shapes matter here.
    return getattr(torch, table.get(dtype, "uint8"), torch.uint8)


def _model_class(transformers, cfg):
    """The architecture the config names, else the causal-LM / image-text auto class."""
    for arch in getattr(cfg, "architectures", None) or []:
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls, None
    for auto in ("AutoModelForCausalLM", "AutoModelForImageTextToText"):
        try:
            return getattr(transformers, auto), auto
        except AttributeError:  # pragma: no cover - older transformers
            continue
    return None, None


def check_structure(out_dir: str | Path, plan: TrimPlan, written: ModelSource | None = None) -> StructureResult:
    """Build the reduced model on ``meta`` from ``out_dir``'s config and load the written
    checkpoint's shapes into it with transformers' own key conversions. ``written``: the
    output already read (the writer's verification has it), else it is read here."""
    if written is None:
        written = open_source(out_dir)
    tensors = [(t.name, t.dtype, t.shape) for t in written.iter_tensors()]
    return _run_check(Path(out_dir), tensors, _plan_facts(plan))


def _run_check(out_dir: Path, tensors, facts: dict) -> StructureResult:
    """:func:`_check` with torch and transformers imported (quietly), or why not."""
    torch, transformers, unavailable = import_torch_transformers()
    if unavailable:
        return not_checked(unavailable)
    with quiet_transformers():
        return _check(torch, transformers, out_dir, tensors, facts)


def _plan_facts(plan: TrimPlan) -> dict:
    """What the check needs of the plan beyond the output's config and tensors."""
    return {
        "mtp": sorted(_mtp_names(plan)),
        "quantized": plan.inventory.quantization is not None,
        "auto_map": bool(plan.inventory.source.config.get("auto_map")),
    }


def _check(torch, transformers, out_dir: Path, tensors, facts: dict) -> StructureResult:
    """``tensors``: (name, dtype, shape) of the checkpoint; ``facts``: :func:`_plan_facts`."""
    try:
        # trust_remote_code=False: never run the model's own code, and never stop to ask
        # (transformers otherwise prompts on stdin for auto_map configs).
        cfg = transformers.AutoConfig.from_pretrained(out_dir, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises ValueError/KeyError/OSError for unknown types
        if facts["auto_map"]:
            return not_checked("the architecture needs the model's own code (auto_map), which mxtrim never executes")
        return not_checked(f"transformers cannot read the config ({type(exc).__name__}: {_first_line(exc)})")
    cls, auto = _model_class(transformers, cfg)
    if cls is None:
        return not_checked("transformers has no class for this architecture", config_loaded=True)
    # Built unquantized: quantizers would need accelerator kernels or extra packages.
    for holder in (cfg, getattr(cfg, "text_config", None)):
        if holder is not None and getattr(holder, "quantization_config", None) is not None:
            holder.quantization_config = None
            try:
                delattr(holder, "quantization_config")
            except AttributeError:
                pass
    try:
        with torch.device("meta"):
            model = cls.from_config(cfg) if auto else cls._from_config(cfg)
    except Exception as exc:
        return not_checked(f"transformers cannot build {getattr(cls, '__name__', cls)} from the output config "
                           f"({type(exc).__name__}: {_first_line(exc)})", config_loaded=True)
    name = type(model).__name__
    expected = model.state_dict()

    quantized = facts["quantized"]
    mtp = set(facts["mtp"])
    feed: dict = {}
    ignored: Counter = Counter()  # reason -> tensors not compared, in the order first met
    packed: set[str] = set()
    for t_name, t_dtype, t_shape in tensors:
        if t_name in mtp:
            ignored["MTP / draft heads (transformers builds none; vLLM loads them)"] += 1
        elif quantized and is_quant_side(t_name):
            packed.add(t_name)
            ignored["quantization scales / packed weights (model built unquantized)"] += 1
        elif _ROTARY.search(t_name):
            ignored["rotary inv_freq buffers (recomputed)"] += 1
        else:
            feed[t_name] = torch.empty(tuple(t_shape), dtype=_torch_dtype(torch, t_dtype), device="meta")

    try:
        missing, unexpected, mismatched, how = load_with_transformers(model, feed)
    except Exception as exc:  # loader internals differ in this transformers version
        missing, unexpected, mismatched, how = _compare_names(model, expected, feed)
        why = str(exc) if isinstance(exc, LoaderUnavailable) else f"transformers {transformers.__version__}: {type(exc).__name__}"
        how += f" (transformers' loader internals unavailable: {why})"

    # Parameters whose checkpoint form is packed are not comparable, not missing.
    packed_missing = sorted(m for m in missing if _packed_param(m, packed))
    missing = sorted(set(missing) - set(packed_missing))
    if packed_missing:
        ignored["unquantized parameters stored packed (not comparable)"] = len(packed_missing)
    unexpected = sorted(unexpected)

    partial_reasons = []
    if any(k.startswith(("quantization", "unquantized")) for k in ignored):
        partial_reasons.append("quantized tensors compared by shape only where stored unpacked; scales and packed weights not compared")
    if "loader internals unavailable" in how:
        partial_reasons.append("names compared without transformers' key conversions")
    status = PARTIAL if partial_reasons else CHECKED
    counts = f"{len(missing)} missing, {len(unexpected)} unexpected, {len(mismatched)} shape mismatch(es)"
    summary = f"{name} built on meta from the output config; {len(feed)} tensors compared {how}: {counts}"
    if partial_reasons:
        summary += " — " + "; ".join(partial_reasons)
    details = [f"{n} tensor(s) not compared: {reason}" for reason, n in ignored.items()]
    details += [f"missing: `{m}`" for m in missing[:20]] + ([f"... {len(missing) - 20} more missing"] if len(missing) > 20 else [])
    details += [f"unexpected: `{u}`" for u in unexpected[:20]] + ([f"... {len(unexpected) - 20} more unexpected"] if len(unexpected) > 20 else [])
    details += [f"shape mismatch: `{n}` checkpoint {list(a)} vs model {list(b)}" for n, a, b in mismatched[:20]]
    return StructureResult(
        status, summary, tuple(details), name, len(expected), len(feed),
        tuple(missing), tuple(unexpected), tuple(mismatched), dict(ignored), config_loaded=True,
    )


def _compare_names(model, expected: dict, feed: dict):
    """Fallback: plain name comparison, after a class-level ``_checkpoint_conversion_mapping``
    (transformers 4.x) when there is one."""
    conversion = getattr(model, "_checkpoint_conversion_mapping", None) or {}
    renamed = {}
    for k, v in feed.items():
        for pattern, repl in conversion.items():
            k2 = re.sub(pattern, repl, k)
            if k2 != k:
                k = k2
                break
        renamed[k] = v
    ignore = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    missing = {k for k in expected if k not in renamed}
    unexpected = {k for k in renamed if k not in expected and not any(p.search(k) for p in ignore)}
    mismatched = sorted((k, tuple(v.shape), tuple(expected[k].shape)) for k, v in renamed.items() if k in expected and tuple(v.shape) != tuple(expected[k].shape))
    return missing, unexpected, mismatched, "by name"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:200]


# --- the check of the planned output, in a child process ---------------------------------
def planned_request(config: dict, tensors, plan: TrimPlan) -> dict:
    """What the child needs: the output config, the planned (name, dtype, shape) of every
    tensor, and the plan's facts."""
    return {"config": config, "tensors": [[n, d, list(s)] for n, d, s in tensors], "facts": _plan_facts(plan)}


def check_planned(request: dict) -> StructureResult:
    """The structure check of a planned output (run in the child)."""
    with tempfile.TemporaryDirectory(prefix="mxtrim-structure-") as scratch:
        with open(os.path.join(scratch, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(request["config"], fh)
        return _run_check(Path(scratch), request["tensors"], request["facts"])


class StructureJob:
    """:func:`check_planned` in the run's check child (:mod:`.child`, torch imported
    once for both checks), asked before the copy starts; :meth:`result` waits for it."""

    def __init__(self, request: dict):
        from .child import CheckChild

        self.child = CheckChild.shared()
        self.sent = self.child.send(dict(request, op="structure"))
        self.failed = False  # the child failed or ran out of time: no verdict to remember
        self.cache_key = ""

    def result(self, limit: float | None = None, interrupt=None) -> StructureResult:
        from .child import LIMIT

        limit = LIMIT if limit is None else limit
        answer = self.child.receive(limit, interrupt) if self.sent else None
        from .judge import judge_record

        if answer is None:
            self.failed = True
            return not_checked(f"the structure check's process failed or took over {limit:g} s ({self.child.last_words()})")
        judge = judge_record(self.child.judge, answer.pop("judge", None))
        return StructureResult.from_json(dict(answer, judge=judge))

    def stop(self) -> None:
        self.child.close()
