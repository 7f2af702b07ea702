"""The README is a front page and docs/ its reference: every relative link and image of
README.md and docs/*.md resolves to a file of the checkout, every #anchor to a heading of its
target (GitHub's slugs), the README stays short and starts with the two commands, and every
docs page is reachable from it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_REF = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.IGNORECASE)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, HTML comments removed."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation other than hyphens
    and underscores removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    targets = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        line = INLINE_CODE.sub("", line)
        targets += LINK.findall(line) + HTML_REF.findall(line)
    return targets


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)) or target.startswith("//")


def test_pages_exist():
    assert README.is_file()
    assert len(PAGES) > 1, "docs/*.md: the reference pages"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    problems = []
    for target in links(page):
        if is_external(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if not dest.resolve().is_relative_to(ROOT):
            problems.append(f"{target}: outside the checkout")
            continue
        if anchor:
            if dest.suffix != ".md" or dest.is_dir():
                problems.append(f"{target}: an anchor into a file that is not Markdown")
            elif unquote(anchor) not in anchors(dest):
                problems.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_links_are_found():
    """The link reader sees the README's images and anchors (a broken reader would pass the
    test above with nothing checked)."""
    targets = links(README)
    assert any(t.endswith(".png") for t in targets)
    assert any("#" in t and t.split("#")[0].startswith("docs/") for t in targets)


def test_slugs_follow_github():
    assert slug("Validation (`mxtrim validate`)") == "validation-mxtrim-validate"
    assert slug("Plan file schema (`mxtrim.plan-file/1`)") == "plan-file-schema-mxtrimplan-file1"
    assert slug('What "strict" means for safetensors') == "what-strict-means-for-safetensors"
    assert slug("`mxtrim inspect --json` schema (`mxtrim.inventory/1`)") == "mxtrim-inspect---json-schema-mxtriminventory1"
    assert slug("Tests: which command when") == "tests-which-command-when"


def test_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250, "README.md is the front page: the reference goes in docs/"
    block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert block, "README.md has no code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"], commands
    # nothing but the title and one paragraph before the two commands
    before = [line for line in text[: block.start()].splitlines() if line.strip()]
    assert before[0].startswith("# ") and not any(line.startswith("#") for line in before[1:])


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if not is_external(t) and t.partition("#")[0]}
    unlinked = [str(p.relative_to(ROOT)) for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages no link of README.md reaches: {unlinked}"
