"""The core's fix hints speak the CLI (`omit --no-mtp`, `--keep 0-3`, `--mode dummy`); in the
wizard they name its keys instead. Only what the wizard shows is reworded: the plan file, the
report and the CLI keep the flags."""

from __future__ import annotations

import re

# (pattern, the wizard's words), tried in order; the first ones are whole phrases
_PHRASES: tuple[tuple[str, str], ...] = (
    (r"use --mtp or --no-mtp instead of --keep mtp=\.\.\.", "press m on step 3 to keep or drop them"),
    (r"omit --no-mtp to keep them", "press m on step 3 to keep them"),
    (r"\(--no-mtp\)", "(m on step 3)"),
    (r"\(e\.g\. --no-mtp\)", "(e.g. the MTP heads: m on step 3)"),
    (r"(?:trim with |use )?--mode dummy", "choose dummy (d on step 5)"),
    (r"add them with --keep and --force", "add them to the kept set (e on step 3)"),
    (r"--keep (\S+) builds exactly", r"keeping \1 (e on step 3) builds exactly"),
    (r"\(--keep\)", "(e on step 3)"),
    (r"--keep [\w.-]+=\.\.\.", "the kept set"),
    (r"--max-model-len", "the context (step 4)"),
    (r"--no-mtp", "m on step 3"),
    (r"--mtp\b", "m on step 3"),
    (r"--keep", "the kept set (e on step 3)"),
)
_COMPILED = tuple((re.compile(p), r) for p, r in _PHRASES)


def in_wizard_terms(text: str) -> str:
    """``text`` (an issue's message or fix) with the CLI's flags replaced by the wizard's keys."""
    if "--" not in text:
        return text
    for pattern, words in _COMPILED:
        text = pattern.sub(words, text)
    return text
