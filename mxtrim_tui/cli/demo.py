"""`mxtrim demo [--fp8]`: build the bundled demo model if needed and print its path."""

from __future__ import annotations

from .arguments import hidden_debug


def register(sub) -> None:
    demo = sub.add_parser("demo", help="build the bundled demo model (if needed) and print its path")
    demo.add_argument("--fp8", action="store_true",
                      help="the block-FP8 demo instead (vLLM's CPU build serves it only with AMX; no GPU MLA kernel takes its sizes)")
    hidden_debug(demo)
    demo.set_defaults(handler=run)


def run(args) -> int:
    from ..demo.build import ensure_demo_model

    print(ensure_demo_model("fp8" if args.fp8 else None))
    return 0
