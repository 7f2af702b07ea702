"""`mxtrim leftovers [--stop]`: the servers an mxtrim that was killed left running."""

from __future__ import annotations

import sys

from .arguments import hidden_debug


def register(sub) -> None:
    lo = sub.add_parser("leftovers", help="servers left running by an mxtrim that was killed: list them (--stop stops them)")
    lo.add_argument("--stop", action="store_true", help="stop them: SIGTERM to each server's process group, SIGKILL after 5 s")
    hidden_debug(lo)
    lo.set_defaults(handler=run)


def run(args) -> int:
    """`mxtrim leftovers [--stop]`: the servers whose mxtrim was killed before it could stop
    them (pid records in $XDG_STATE_HOME/mxtrim/servers)."""
    from ..core.validate import leftovers

    found = leftovers.scan()
    if not found:
        print("no server left running by an earlier mxtrim")
        return 0
    failed = 0
    for item in found:
        if not args.stop:
            print(f"{leftovers.describe(item)}\n  $ {' '.join(item.record.command)}")
            continue
        survivors = leftovers.stop(item)
        if survivors:
            failed += 1
            print(f"could not stop pid(s) {', '.join(map(str, survivors))} (serving {item.record.output})", file=sys.stderr)
        else:
            print(f"stopped pid {item.record.pid} (serving {item.record.output}): {len(item.pids)} process(es)")
    if not args.stop:
        print("stop them with: mxtrim leftovers --stop")
    return 1 if failed else 0
