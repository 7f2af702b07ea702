"""The tensors a config makes transformers build, read from a ``meta`` build: what a source
without safetensors headers for its kept layers would hold (core/plan/config_weights.py turns
the table into bytes per GPU, quantization included).

The table is made in the check child, beside the plan check (it builds the same output
config): one row per tensor of the output model's state dict (tied tensors once) as ``[name,
dtype, shape, role]``, role ``linear`` (an ``nn.Linear`` weight), ``experts`` (a fused
routed-expert tensor of three dimensions), ``embedding`` or ``other``. MTP / draft layers,
which transformers does not build, are built as the decoder layers that follow the backbone
(``num_hidden_layers`` raised by their count: what vLLM builds them as) and named
``mtp.{k}.…``; their extra projections are the family's (plan stage).
"""

from __future__ import annotations

import copy

_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32",
           "int8": "I8", "uint8": "U8", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3"}


def _rows(model, torch) -> list[list]:
    modules = dict(model.named_modules())
    rows, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        owner = modules.get(name.rsplit(".", 1)[0]) if "." in name else model
        shape = list(tensor.shape)
        if isinstance(owner, torch.nn.Embedding):
            role = "embedding"
        elif isinstance(owner, torch.nn.Linear) and name.endswith(".weight") and len(shape) == 2:
            role = "linear"
        elif len(shape) == 3 and ".experts." in name and tensor.is_floating_point():
            role = "experts"
        else:
            role = "other"
        rows.append([name, _DTYPES.get(str(tensor.dtype).replace("torch.", ""), "BF16"), shape, role])
    return rows


def config_tensor_table(builder, out_cfg: dict, text_path: tuple, depth: int, mtp_layers: int) -> dict:
    """``{"tensors": rows, "mtp": rows of the MTP layers or None, "mtp_problem": str}`` of the
    output config built on ``meta`` (``builder``: transformers_plan.Builder)."""
    _, model = builder.build(out_cfg)
    torch = builder.torch
    out = {"tensors": _rows(model, torch), "mtp": None, "mtp_problem": ""}
    del model
    if mtp_layers <= 0:
        return out
    deeper = copy.deepcopy(out_cfg)
    target = deeper
    for key in text_path:
        target = target[key]
    target["num_hidden_layers"] = depth + mtp_layers
    try:
        _, model = builder.build(deeper)
    except Exception as exc:  # noqa: BLE001 - a config that cannot build more layers: said, not counted
        out["mtp_problem"] = f"transformers could not build the MTP layers as layers {depth}.. ({type(exc).__name__})"
        return out
    mtp = []
    for name, dtype, shape, role in _rows(model, torch):
        for k in range(mtp_layers):
            marker = f"layers.{depth + k}."
            if marker in name:
                mtp.append([f"mtp.{k}." + name.split(marker, 1)[1], dtype, shape, role])
    out["mtp"] = mtp
    return out
