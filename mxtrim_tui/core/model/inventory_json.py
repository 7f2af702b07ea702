"""The ``mxtrim inspect --json`` document (schema ``mxtrim.inventory/1``, see README)."""

from __future__ import annotations

from .inventory import Inventory

SCHEMA = "mxtrim.inventory/1"


def inventory_to_json(inv: Inventory, *, with_tensors: bool = False) -> dict:
    src = inv.source
    q = inv.quantization
    return {
        "schema": SCHEMA,
        "source": src.origin or str(src.root),
        "model": {
            "name": inv.model_name,
            "model_type": src.model_type,
            "architectures": src.architectures,
            "family": inv.family.key,
            "family_name": inv.family.display,
        },
        "totals": {
            "tensors": inv.total_tensors,
            "bytes": inv.total_bytes,
            "bytes_present": src.present_tensor_bytes,
            "shards": len(src.shards),
            "shards_listed": len(src.all_headers),
            "indexed": src.index_file is not None,
        },
        "source_state": {"state": src.state, "detail": src.state_detail, "absent_shards": list(src.absent_shards)},
        "submodels": [
            {
                "name": sm.name,
                "role": sm.role,
                "config_path": sm.config_path,
                "declared_depth": sm.declared_depth,
                "layers_found": len(sm.layers),
                "bytes": _known(sm.nbytes, sm.bytes_known),
                "tensors": sm.tensor_count,
                "strip": inv.strip(sm.name),
                "layers": [l.to_json(with_tensors) for l in sm.layers],
                "parts": [
                    {"label": p.label, "tensors": len(p.tensors), "bytes": _known(p.nbytes, p.bytes_known)}
                    | ({"tensor_names": p.tensors} if with_tensors else {})
                    for p in sm.parts
                ],
            }
            for sm in inv.submodels.values()
        ],
        "groups": [
            {
                "id": g.id,
                "symbol": g.symbol,
                "submodel": g.submodel,
                "kind": g.kind.to_json(),
                "layers": g.layers,
                "count": len(g.layers),
                "bytes": _known(g.nbytes, g.bytes_known),
            }
            for g in inv.groups
        ],
        "shared": [
            {"label": p.label, "tensors": len(p.tensors), "bytes": _known(p.nbytes, p.bytes_known)}
            | ({"tensor_names": p.tensors} if with_tensors else {})
            for p in inv.shared
        ],
        "quantization": None
        if q is None
        else {
            "method": q.method,
            "location": q.location,
            "summary": q.summary(),
            "module_entries": [{"path": list(e.path), "value": e.value, "regex": e.is_regex} for e in q.entries],
        },
        "files": [
            {
                "path": f.path,
                "kind": f.kind.value,
                "bytes": f.size,
                "detail": f.detail,
                "symlink_target": f.symlink_target,
            }
            for f in src.files
        ],
        "unassigned": inv.unassigned,
        "warnings": inv.warnings,
    }


def _known(nbytes: int, known: bool) -> int | None:
    """Bytes, or None where tensors of shards not on disk make the figure unknown."""
    return nbytes if known else None
