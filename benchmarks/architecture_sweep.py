"""Every causal-LM / image-text architecture of the installed transformers, trimmed and rebuilt.

For each architecture: a small config of its own class (narrow widths, 8 text layers, the
class regenerating its per-layer patterns), the model built on the ``meta`` device, a
checkpoint written with exactly that model's tensor names, shapes and dtypes (sparse data),
then mxtrim plans a non-contiguous keep set and the automatic set. Each plan is either
refused with a reason, or its output config is rebuilt by transformers on ``meta`` and
compared with the source model, independently of mxtrim's own checks:

* the text stack has exactly the kept layers, and each output layer j has the module classes
  and parameter shapes of source layer kept[j];
* everything outside the text stack is unchanged (names and shapes);
* the tensors mxtrim would write (its rename list) are exactly the output model's tensors;
* every per-layer list of the text config equals the source's entries at the kept indices.

Each architecture is built at several depths (6, 8, 12 text layers); a row per depth reports
the number of layer kinds transformers builds there and the automatic set's size.

Outcomes: ``exact`` (both selections build exactly the kept layers), ``refused`` (mxtrim said
no, or left layers out of the automatic set and said which, with a reason), ``MISMATCH`` (a
silent wrong output: the thing that must never happen), ``out of scope`` (encoder-decoder
models and the kinds listed in OUT_OF_SCOPE, with the reason), ``skipped`` (transformers
itself cannot build the architecture here).

Usage: python benchmarks/architecture_sweep.py [--only a,b] [--depths 6,8,12] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic checkpoints (tests/synth)

DEPTH = 8
DEPTHS = (6, 8, 12)  # several depths: a value whose length happens to equal one depth shows
# Non-contiguous; keeps layer 0 (dense prefixes), 5 (5:1 sliding patterns) and the parity of
# every index (alternating rules such as gpt-oss's, which vLLM hard-codes).
KEEP = (0, 1, 4, 5)
SMALL = {
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "ffn_hidden_size": 128, "d_model": 64, "n_embd": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "n_head": 4, "num_heads": 4,
    "head_dim": 16, "num_experts": 4, "num_local_experts": 4,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_topk": 2, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
    "v_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "mamba_d_state": 16,
    "state_size": 16, "mamba_n_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16,
    "embed_dim": 64, "projection_dim": 64, "image_size": 56, "patch_size": 14,
}

# Classes whose defaults do not build (they rely on a released config's values): the fields a
# released checkpoint sets, as a function of the text depth; applied to the text config.
def _every(depth: int, other: str, every: str, period: int, offset: int = 0) -> list[str]:
    """A per-layer type list: ``every`` at the layers ``offset`` modulo ``period``, else ``other``."""
    return [every if i % period == offset else other for i in range(depth)]


OVERRIDES = {
    "dbrx": lambda depth: {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0}},
    "hunyuan_v1_dense": lambda depth: {"head_dim": 16},
    "hunyuan_v1_moe": lambda depth: {"head_dim": 16},
    "hunyuan_vl": lambda depth: {"head_dim": 16},
    "ministral": lambda depth: {"head_dim": 16, "layer_types": _every(depth, "full_attention", "sliding_attention", 4, 0)},
    "nemotron": lambda depth: {"num_key_value_heads": 2},
    "dots1": lambda depth: {"n_shared_experts": 1, "first_k_dense_replace": 1},
    "lfm2_moe": lambda depth: {"layer_types": _every(depth, "conv", "full_attention", 4, 3), "num_dense_layers": 1},
    "deepseek_ocr2": lambda depth: {"mlp_layer_types": ["dense"] + ["sparse"] * (depth - 1)},
    "cohere_compass": lambda depth: {"rope_parameters": {t: {"rope_type": "default", "rope_theta": 10000.0}
                                                         for t in ("full_attention", "sliding_attention")}},
    "cohere_compass_text": lambda depth: {"rope_parameters": {t: {"rope_type": "default", "rope_theta": 10000.0}
                                                              for t in ("full_attention", "sliding_attention")}},
    "qwen4_exp": lambda depth: {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 64, "indexer_compress_ratio": 4},
    "qwen4_exp_text": lambda depth: {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 64, "indexer_compress_ratio": 4},
    "reformer": lambda depth: {"is_decoder": True},
    "xlstm": lambda depth: {"num_blocks": depth},
    "longcat_flash": lambda depth: {"num_layers": depth, "num_hidden_layers": 2 * depth},  # two sublayers per layer
    "diffusion_gemma": lambda depth: {"per_layer_config": {}, "moe_intermediate_size": 32},
}
# Model types outside what mxtrim trims, and why (the README's table says the same).
OUT_OF_SCOPE = {
    "musicgen": "audio generation: a text encoder conditions a decoder over parallel audio codebooks",
    "musicgen_melody": "audio generation: a text encoder conditions a decoder over parallel audio codebooks",
    "pi0": "robot action model: the language model is one branch of an action-expert pair",
    "pi05": "robot action model: the language model is one branch of an action-expert pair",
    "blt": "byte latent transformer: byte-level local encoder and decoder around a global stack, no single decoder list",
    "hrm_text": "hierarchical reasoning model: two stacks run in nested cycles, layer positions are not a list",
    "dory": "recurrent-depth model: input, recurrent and output blocks, the recurrent block runs several times",
    "diffusion_gemma": "block-diffusion model: an encoder and a decoder stack of the same depth, trimmed in lockstep",
    "gemma4_assistant": "a drafter whose every layer reads the target model's KV cache: trimmed with its target, not alone",
}
TOP_OVERRIDES = {  # fields of the top-level config of a multimodal model
    "chameleon": {"vocabulary_map": {"<image>": 3, **{f"IMGIMG{chr(65 + i)}Z": 10 + i for i in range(8)}}},
    "emu3": {"vocabulary_map": {"<|extra_200|>": 5, "<image>": 3, **{f"<|visual token {i:06d}|>": 10 + i for i in range(8)}}},
    "granite4_vision": {"deepstack_layer_map": [[0, 0], [1, 1]], "downsample_rate": "1/2"},
}
VISION_KEYS = ("vision_config", "audio_config", "vision_encoder_config", "speech_config")


@dataclass
class Case:
    selection: str
    outcome: str  # exact | refused | MISMATCH
    detail: str = ""
    kept: list[int] = field(default_factory=list)


@dataclass
class Row:
    model_type: str
    model_class: str
    depth: int = DEPTH
    kinds: int = 0  # distinct layer signatures transformers builds at this depth
    auto_size: int = 0  # layers in the automatic set (0: refused or not tried)
    outcome: str = "skipped"
    detail: str = ""
    cases: list[Case] = field(default_factory=list)
    seconds: float = 0.0


def architectures() -> list[tuple[str, str]]:
    """(model_type, class name): the causal-LM class, or the image-text one where the causal-LM
    class takes another config than the model type's (Qwen3.5, Llama 4: their text config)."""
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    def first(cls):
        return cls if isinstance(cls, str) else cls[0]

    seen: dict[str, str] = {}
    for model_type, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        seen[model_type] = first(cls)
        vlm = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type)
        if vlm is not None and model_type in CONFIG_MAPPING:
            try:
                takes = getattr(getattr(transformers, first(cls)), "config_class", None)
            except (AttributeError, ImportError):
                takes = None
            if takes is not None and takes is not CONFIG_MAPPING[model_type]:
                seen[model_type] = first(vlm)
    for model_type, cls in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.items():
        seen.setdefault(model_type, first(cls))
    return sorted(seen.items())


def architectures_map() -> dict[str, str]:
    return dict(architectures())


def _depth_key(cfg_cls) -> str:
    return (getattr(cfg_cls, "attribute_map", None) or {}).get("num_hidden_layers", "num_hidden_layers")


def _old_depth(d: dict, cfg_cls) -> int | None:
    """The depth of a config dict: its depth field, else the length of its per-layer type list."""
    value = d.get(_depth_key(cfg_cls)) if cfg_cls is not None else d.get("num_hidden_layers")
    if isinstance(value, int):
        return value
    for key in ("layers_block_type", "layer_types", "block_types"):
        if isinstance(d.get(key), list) and d[key]:
            return len(d[key])
    return None


def _shrink(d: dict, depth: int | None, cfg_cls, narrow: bool, lists: str) -> dict:
    """Narrow widths (``narrow``); set the depth; per-layer lists dropped so the class
    regenerates them (``lists="drop"``) or cycled to the new depth (``"cycle"``)."""
    old_depth = _old_depth(d, cfg_cls)
    out = {}
    for k, v in d.items():
        if depth is not None and isinstance(old_depth, int) and isinstance(v, list) and len(v) == old_depth:
            if lists == "drop":
                continue
            v = [v[i % len(v)] for i in range(depth)]
        if narrow and k in SMALL and not isinstance(v, bool):
            if v is None and k in ("n_routed_experts", "num_experts", "num_local_experts"):
                v = SMALL[k]
            elif isinstance(v, int) and v > SMALL[k]:
                v = SMALL[k]
        out[k] = v
    if depth is not None and (_depth_key(cfg_cls) in d or not any(isinstance(x, list) and len(x) == depth for x in out.values())):
        out[_depth_key(cfg_cls) if cfg_cls is not None else "num_hidden_layers"] = depth
    return out


def _variant(cfg_cls, base: dict, text_key: str | None, subs: dict, depth: int | None, narrow: bool, lists: str) -> dict:
    from transformers import CONFIG_MAPPING

    d = dict(base)
    for key, sub_cls in subs.items():
        value = base.get(key)
        if not isinstance(value, dict):
            continue
        sub_real = sub_cls if isinstance(sub_cls, type) else CONFIG_MAPPING.get(value.get("model_type"))
        if key == text_key:
            d[key] = _shrink(value, depth, sub_real, narrow, lists)
        elif narrow:
            d[key] = _shrink(value, None, None, narrow, lists)
    if text_key is None:
        d = _shrink(d, depth, cfg_cls, narrow, lists)
    elif narrow:
        d = {k: (SMALL[k] if k in SMALL and isinstance(v, int) and not isinstance(v, bool) and v > SMALL[k] else v) for k, v in d.items()}
    d.pop("model_type", None)
    d.pop("transformers_version", None)
    return d


def variants(depth: int) -> list[tuple]:
    return [(depth, True, "drop"), (depth, True, "cycle"), (depth, False, "drop"), (depth, False, "cycle"),
            (None, True, "drop"), (None, False, "drop")]


def small_config(model_type: str, cls_name: str | None = None, depth: int = DEPTH):
    """(config, text sub-config key or None, text depth): the narrowest variant the class
    accepts and builds on meta (narrow with 8 layers, per-layer lists regenerated or cycled;
    full width; its own depth), at least 6 text layers deep."""
    import torch
    import transformers
    from transformers import CONFIG_MAPPING

    cfg_cls = CONFIG_MAPPING[model_type]
    base = cfg_cls().to_dict()
    subs = getattr(cfg_cls, "sub_configs", None) or {}
    text_key = next((k for k in ("text_config", "language_config", "llm_config", "thinker_config") if k in subs), None)
    error = None
    for want, narrow, lists in variants(depth):
        try:
            fields = _variant(cfg_cls, base, text_key, subs, want, narrow, lists)
            if model_type in OVERRIDES:
                text = fields[text_key] if text_key else fields
                text.update(OVERRIDES[model_type](want or _old_depth(text, None) or depth))
            fields.update(TOP_OVERRIDES.get(model_type, {}))
            if want and isinstance(fields.get("decoder_layers"), int):  # a seq2seq decoder used alone (BartForCausalLM)
                fields["decoder_layers"] = want
            cfg = cfg_cls(**fields)
            text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
            n = getattr(text, "num_hidden_layers", None)
            if not (isinstance(n, int) and n >= 6):
                raise ValueError(f"{n} text layers")
            if cls_name is not None:
                build_meta(transformers, torch, cls_name, cfg)
        except Exception as exc:
            error = error or exc
            continue
        return cfg, text_key, n
    raise error


def build_meta(transformers, torch, cls_name: str, cfg):
    cls = getattr(transformers, cls_name)
    with torch.device("meta"):
        return cls._from_config(cfg)


def state_entries(model) -> dict[str, tuple[str, tuple]]:
    """Checkpoint name -> (safetensors dtype, shape), tied duplicates once."""
    names = {}
    seen = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        names[name] = ("BF16" if tensor.is_floating_point() else "I64", tuple(tensor.shape))
    return names


def text_stack(model, depth: int) -> str | None:
    """Qualified name of the text decoder's layer list."""
    import torch

    found = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) != depth:
            continue
        lowered = name.lower()
        if any(w in lowered for w in ("vision", "visual", "audio", "vit", "image", "mtp")):
            continue
        found.append(name)
    plain = [n for n in found if "encoder." not in n.lower()]
    return (plain or found or [None])[0]


def layer_signature(module) -> tuple:
    mods = tuple((n, type(m).__name__) for n, m in module.named_modules())
    params = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
    return mods, params


def _text_dict(cfg_dict: dict, text_key: str | None) -> dict:
    return cfg_dict.get(text_key, {}) if text_key else cfg_dict


def compare(src_model, out_model, src_stack: str, kept: list[int], renames, src_cfg: dict, out_cfg: dict, text_key, depth: int) -> list[str]:
    problems = []
    out_layers = out_model.get_submodule(src_stack) if _has(out_model, src_stack) else None
    src_layers = src_model.get_submodule(src_stack)
    if out_layers is None:
        return [f"output model has no {src_stack}"]
    if len(out_layers) != len(kept):
        problems.append(f"output builds {len(out_layers)} text layers, {len(kept)} kept")
    for j, i in enumerate(kept[: len(out_layers)]):
        a, b = layer_signature(src_layers[i]), layer_signature(out_layers[j])
        if a != b:
            diff = sorted(set(a[0]) ^ set(b[0]))[:2] or sorted(set(a[1]) ^ set(b[1]))[:2]
            problems.append(f"output layer {j} differs from source layer {i}: {diff}")
    prefix = src_stack + "."
    src_rest = {n: s for n, s in state_entries(src_model).items() if not n.startswith(prefix)}
    out_entries = state_entries(out_model)
    out_rest = {n: s for n, s in out_entries.items() if not n.startswith(prefix)}
    if src_rest != out_rest:
        diff = sorted(set(src_rest.items()) ^ set(out_rest.items()))[:3]
        problems.append(f"outside the text stack: {diff}")
    src_entries = state_entries(src_model)
    written = {new: src_entries[old][1] for old, new in renames if old in src_entries}
    built = {n: s[1] for n, s in out_entries.items()}
    if written != built:
        missing = sorted(set(built) - set(written))[:3]
        extra = sorted(set(written) - set(built))[:3]
        shapes = sorted(n for n in set(written) & set(built) if written[n] != built[n])[:3]
        problems.append(f"written tensors vs output model: missing {missing}, unexpected {extra}, shapes {shapes}")
    s, o = _text_dict(src_cfg, text_key), _text_dict(out_cfg, text_key)
    position = {old: new for new, old in enumerate(kept)}
    for k, v in s.items():
        if k == "architectures" or not isinstance(v, list):
            continue
        if v and all(type(x) is int for x in v) and v == sorted(set(v)) and (len(v) == depth and v == list(range(depth)) or k.endswith("layers")):
            want = [position[i] for i in v if i in position]  # layer indices, renumbered
            if o.get(k) != want:
                problems.append(f"config {k}: {o.get(k)} != source indices renumbered {want}")
        elif len(v) == depth:
            want = [v[i] for i in kept]
            if o.get(k) != want:
                problems.append(f"config {k}: {o.get(k)} != source entries {want}")
    return problems


def layer_kinds(src_model, stack: str, text_cfg: dict, depth: int) -> list[str]:
    """Each source layer's signature as transformers builds it (module classes, parameter
    shapes) with its per-layer config entries; equal strings are one kind."""
    layers = src_model.get_submodule(stack)
    lists = {k: v for k, v in text_cfg.items() if isinstance(v, list) and len(v) == depth and k != "architectures"
             and not _index_list(k, v, depth)}
    return [json.dumps([layer_signature(layers[i]), {k: v[i] for k, v in lists.items()}], sort_keys=True, default=str)
            for i in range(min(depth, len(layers)))]


def _index_list(key: str, values: list, depth: int) -> bool:
    """A list of layer indices that happens to be as long as the depth (mllama's
    cross_attention_layers at 8 layers, a list naming every layer): membership, not one value
    per layer."""
    if not all(type(x) is int for x in values) or values != sorted(set(values)):
        return False
    return values == list(range(depth)) or re.search(r"(layers|ids|idxs?|indices|indexes)$", key) is not None


def uncovered_kinds(kinds: list[str], kept: list[int]) -> list[int]:
    """Source layers whose kind no kept layer has."""
    if max(kept) >= len(kinds):
        return [i for i in kept if i >= len(kinds)]
    have = {kinds[i] for i in kept}
    return [i for i, kind in enumerate(kinds) if kind not in have]


def _has(model, name: str) -> bool:
    try:
        model.get_submodule(name)
        return True
    except AttributeError:
        return False


def make_source(model_type: str, root: Path, data: str = "sparse") -> Path:
    """A checkpoint directory of ``model_type`` as the sweep builds it (config.json and one
    safetensors file of the meta model's names, shapes and dtypes)."""
    import torch
    import transformers

    from synth.checkpoint import write_safetensors

    cls_name = dict(architectures())[model_type]
    cfg, _, _ = small_config(model_type, cls_name)
    model = build_meta(transformers, torch, cls_name, cfg)
    root.mkdir(parents=True)
    cfg.save_pretrained(root)
    write_safetensors(root / "model.safetensors", [(n, d, s) for n, (d, s) in state_entries(model).items()], data=data)
    return root


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def run_one(model_type: str, cls_name: str, workdir: Path, timeout: int = 120, depth: int = DEPTH) -> Row:
    import torch
    import transformers

    from mxtrim_tui.core.model.inventory import build_inventory
    from mxtrim_tui.core.read.source import open_source
    from synth.checkpoint import write_safetensors

    row = Row(model_type, cls_name, depth)
    if model_type in OUT_OF_SCOPE:
        row.outcome, row.detail = "out of scope", OUT_OF_SCOPE[model_type]
        return row
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        try:
            cfg, text_key, depth = small_config(model_type, cls_name, depth)
            src_model = build_meta(transformers, torch, cls_name, cfg)
        except Timeout:
            raise
        except ImportError as exc:
            row.detail = f"transformers needs a package not installed here: {exc.name or str(exc)[:80] or 'an optional dependency'}"
            return row
        except Exception as exc:
            row.detail = f"transformers cannot build it: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            return row
        if getattr(cfg, "is_encoder_decoder", False):
            row.outcome, row.detail = "out of scope", "encoder-decoder model: vLLM smoke tests of a decoder-only stack"
            return row
        stack = text_stack(src_model, depth)
        layers = getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "num_layers", None)
        if stack is None and isinstance(layers, int) and layers != depth:  # LongCat-Flash: 2 sublayers per layer
            stack = text_stack(src_model, layers)
            depth = layers if stack is not None else depth
        if stack is None:
            row.detail = f"no text layer list of depth {depth} in {type(src_model).__name__}"
            return row
        src_dir = workdir / model_type
        src_dir.mkdir(parents=True)
        cfg.save_pretrained(src_dir)
        entries = state_entries(src_model)
        write_safetensors(src_dir / "model.safetensors", [(n, d, s) for n, (d, s) in entries.items()], data="sparse")
        src_cfg = json.loads((src_dir / "config.json").read_text())
        try:
            inv = build_inventory(open_source(src_dir))
        except Exception as exc:
            row.outcome, row.detail = "refused", f"inventory: {exc}"
            return row
        kinds = layer_kinds(src_model, stack, _text_dict(src_cfg, text_key), depth)
        row.depth, row.kinds = depth, len(set(kinds))
        for spec in (",".join(map(str, KEEP)), "auto"):
            case = _case(transformers, torch, inv, spec, src_model, stack, src_cfg, text_key, kinds, cls_name, workdir / f"{model_type}-{spec}")
            row.cases.append(case)
            if spec == "auto" and case.outcome == "exact":
                row.auto_size = len(case.kept)
        outcomes = {c.outcome for c in row.cases}
        row.outcome = "MISMATCH" if "MISMATCH" in outcomes else "refused" if "refused" in outcomes else "exact"
        row.detail = "; ".join(f"{c.selection}: {c.detail}" for c in row.cases if c.detail)
        return row
    except Timeout:
        row.detail = f"timed out after {timeout} s"
        return row
    finally:
        signal.alarm(0)
        row.seconds = time.perf_counter() - t0


def _case(transformers, torch, inv, spec, src_model, stack, src_cfg, text_key, kinds, cls_name, out_dir: Path) -> Case:
    from mxtrim_tui.core.plan.build import Selection, build_plan

    from mxtrim_tui.core.checks.transformers_plan import checked_plan

    try:
        plan = checked_plan(build_plan(inv, Selection.parse([spec])))
    except Exception as exc:
        return Case(spec, "refused", f"{type(exc).__name__}: {exc}")
    if plan.errors:
        return Case(spec, "refused", plan.errors[0].message + (f" (fix: {plan.errors[0].fix})" if plan.errors[0].fix else ""))
    kept = plan.kept.get("text", [])
    out_dir.mkdir(parents=True)
    out_cfg = plan.new_documents.get("config.json", inv.source.config)
    (out_dir / "config.json").write_text(json.dumps(out_cfg))
    try:
        cfg = transformers.AutoConfig.from_pretrained(out_dir, local_files_only=True)
        out_model = build_meta(transformers, torch, cls_name, cfg)
    except Exception as exc:
        return Case(spec, "MISMATCH", f"output config does not build: {type(exc).__name__}: {str(exc)[:150]}")
    problems = compare(src_model, out_model, stack, kept, plan.renames, src_cfg, json.loads(cfg.to_json_string()), text_key, len(kinds))
    if spec == "auto":
        missed = uncovered_kinds(kinds, kept)
        said = next((i.message for i in plan.issues if "does not cover layers" in i.message), None)
        if missed and said and not problems:  # not silent: the plan says which layers it leaves out
            return Case(spec, "refused", f"kept {kept}: {said}", kept)
        if missed:
            problems.append(f"the automatic set misses the kind of source layers {missed}")
    if problems:
        return Case(spec, "MISMATCH", f"kept {kept}: " + " | ".join(problems)[:400], kept)
    return Case(spec, "exact", "" if spec != "auto" else f"auto kept {kept}", kept)


def sweep(only: list[str] | None = None, depths=DEPTHS) -> list[Row]:
    warnings.simplefilter("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mxtrim-sweep-") as tmp:
        for model_type, cls_name in architectures():
            if only and model_type not in only:
                continue
            for depth in depths:
                row = run_one(model_type, cls_name, Path(tmp) / str(depth), depth=depth)
                sizes = f"auto {row.auto_size}/{row.kinds} kinds" if row.auto_size else ""
                print(f"{row.outcome:9} {model_type:28} {row.depth:3} {row.seconds:5.1f}s {sizes:18} {row.detail[:300]}",
                      file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def minimality(rows: list[Row]) -> dict[str, list[Row]]:
    """Architectures whose automatic set is larger than their number of layer kinds at some
    depth (the set keeps a period or boundary layers), by model type."""
    larger: dict[str, list[Row]] = {}
    for r in rows:
        if r.auto_size and r.auto_size != r.kinds:
            larger.setdefault(r.model_type, []).append(r)
    return larger


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--depths", default=",".join(map(str, DEPTHS)))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",") if d]
    rows = sweep([s for s in args.only.split(",") if s] or None, depths)
    by_type: dict[str, set] = {}
    for r in rows:
        by_type.setdefault(r.model_type, set()).add(r.outcome)
    counts: dict[str, int] = {}
    for outcomes in by_type.values():  # an architecture counts by its worst outcome over the depths
        worst = next(o for o in ("MISMATCH", "refused", "exact", "out of scope", "skipped") if o in outcomes)
        counts[worst] = counts.get(worst, 0) + 1
    print(json.dumps(counts))
    equal = sum(1 for r in rows if r.auto_size and r.auto_size == r.kinds)
    print(f"automatic set == layer kinds: {equal} of {sum(1 for r in rows if r.auto_size)} exact automatic sets")
    for model_type, larger in sorted(minimality(rows).items()):
        print(f"  {model_type}: " + "; ".join(f"depth {r.depth}: {r.auto_size} layers for {r.kinds} kinds ({r.cases[-1].kept})"
                                             for r in larger))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ | {"cases": [c.__dict__ for c in r.cases]} for r in rows], indent=1))
    return 1 if counts.get("MISMATCH") else 0


if __name__ == "__main__":
    sys.exit(main())
