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

    if parse_remote(args.source) is not None:
        return _inspect_remote(args)
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


def _inspect_remote(args) -> int:
    """``inspect hf://…`` (or ``ms://…``): the headers and small files read by ranges into a
    temporary mirror, removed after (or a complete snapshot of huggingface_hub's cache read
    there); the inventory says the commit it was read at and the bytes read."""
    from ..core.model.inventory import build_inventory
    from ..core.read.source import open_source
    from ..core.write.remote_source import RemoteSources

    remote = RemoteSources()
    try:
        inv = build_inventory(open_source(remote.local(args.source)))
        if remote.cache is not None:
            read = {"cache": str(remote.cache), "bytes_read": 0, "requests": 0}
        else:
            record = remote.record()
            read = {"cache": None, "bytes_read": record["bytes_read"], "requests": record["requests"],
                    "repository_bytes": record["repository_bytes"], "shards_header_only": record["shards_header_only"]}
        _show(args, inv, remote.shown, read)
    finally:
        remote.close(written=False)
    return 0
