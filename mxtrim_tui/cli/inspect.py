"""`mxtrim inspect SRC`: what a model directory holds, read without loading weights."""

from __future__ import annotations

import json
import sys

from .arguments import hidden_debug


def register(sub) -> None:
    ins = sub.add_parser("inspect", help="describe a model directory without loading weights")
    ins.add_argument("source", metavar="SRC", help="Hugging Face-layout model directory, or hf://ORG/NAME[@REVISION] (the Hub, $HF_ENDPOINT) or ms://ORG/NAME[@REVISION] (ModelScope) "
                     "(read by range requests: each shard's header and the small files)")
    ins.add_argument("--json", action="store_true", help="print the inventory as JSON (schema mxtrim.inventory/1)")
    ins.add_argument("--tensors", action="store_true", help="with --json: list every tensor name per layer/part")
    hidden_debug(ins)
    ins.set_defaults(handler=run)


def run(args) -> int:
    from ..core.model.inventory import build_inventory
    from ..core.read.remote import parse_remote
    from ..core.read.source import open_source

    ref = parse_remote(args.source)
    if ref is not None:
        return _inspect_remote(args, ref)
    _show(args, build_inventory(open_source(args.source)))
    return 0


def _show(args, inv, source: str | None = None, remote: dict | None = None) -> None:
    """The inventory as --json or a table (``source``, ``remote``: where a remote one was read)."""
    if args.json:
        from ..core.model.inventory_json import inventory_to_json

        doc = inventory_to_json(inv, with_tensors=args.tensors)
        if source is not None:
            doc["source"], doc["remote"] = source, remote
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        from ..render import render_inventory

        render_inventory(inv, Console(), shown_as=source)


def _inspect_remote(args, ref) -> int:
    """``inspect hf://…`` (or ``ms://…``): the headers and small files read by ranges into a temporary mirror,
    removed after; the inventory says the commit it was read at and the bytes read."""
    import tempfile
    from pathlib import Path

    from ..core.model.inventory import build_inventory
    from ..core.read.remote import cached_snapshot, header_mirror, not_cached_offline, offline
    from ..core.read.remote_hubs import open_repo
    from ..core.read.source import open_source
    from ..core.units import human_bytes

    cached = cached_snapshot(ref) if ref.scheme == "hf" else None
    if cached is not None:
        local = open_source(cached)
        if offline() or local.state == "complete":
            source = f"hf://{ref.repo}@{cached.name}"
            print(f"{source}: read from huggingface_hub's cache ({cached}); nothing downloaded", file=sys.stderr)
            _show(args, build_inventory(local), source, {"cache": str(cached), "bytes_read": 0, "requests": 0})
            return 0
    if ref.scheme == "hf" and offline():
        raise not_cached_offline(ref)
    with tempfile.TemporaryDirectory(prefix="mxtrim-remote-") as tmp:
        report = header_mirror(open_repo(ref), Path(tmp) / ref.repo.rpartition("/")[2])
        print(f"{report.source}: read {human_bytes(report.bytes_read)} by {report.requests} range requests (every "
              f"shard's header, the small files) of a {human_bytes(report.repository_bytes)} repository", file=sys.stderr)
        _show(args, build_inventory(open_source(report.folder)), report.source,
              {"cache": None, "bytes_read": report.bytes_read, "requests": report.requests,
               "repository_bytes": report.repository_bytes, "shards_header_only": report.shards})
    return 0
