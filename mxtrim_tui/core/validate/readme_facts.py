"""What a hand-made example's README says of itself, read as text: the files it lists as
required (a table in a "Files" / "文件" section, or a sentence saying "required" / "必须"), and
the results it records (a "Validation" / "Results" / "验证" / "测试" section, or sentences saying
a thing passed or failed) with the dates and the environment they name.

Those results are history: nothing here reruns them, and they are shown as such.
"""

from __future__ import annotations

import re

HISTORICAL = "historical, not rechecked"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FILES_HEADING = re.compile(r"(?i)file|asset|requir|文件|资产|依赖|需求")
_RESULTS_HEADING = re.compile(r"(?i)validat|result|test|verif|status|验证|测试|结果|状态|记录")
# a file name in backticks: a name with an extension, no glob, not absolute, not an option
_FILE = re.compile(r"(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]{1,10}")
_TICKED = re.compile(r"`([^`\n]+)`")
_ROW = re.compile(r"^\s*\|\s*`([^`|]+)`\s*\|(.*)\|\s*$")
_REQUIRED = re.compile(r"(?i)\brequired\b|\bmust\b|必须|必需|需要")
_NOT_REQUIRED = re.compile(r"(?i)\bnot (?:required|needed)\b|\bunused\b|\bremoved\b|\bdeleted\b|\boptional\b|不需要|无需|不必|可省略|可选|删除")
_OPTIONAL = re.compile(r"(?i)\boptional\b|\bmay be omitted\b|\bcan be omitted\b|可省略|可选|可不")
_OUTCOME = re.compile(r"(?i)\b(?:failed|fails|passed|passes|succeeded|worked|untested|not (?:been )?(?:re)?(?:checked|tested))\b|通过|失败|成功|未测试|未验证")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[\"'])|(?<=[。！？；])")
_DATE = re.compile(r"\b(20\d\d-[01]\d-[0-3]\d)\b")
_PACKAGE = re.compile(
    r"(?i)(?<![\w/])(vllm[-_ ]metax|vllm|transformers|torchaudio|torchvision|torch|maca|python|cuda)(?![\w])"
    r"(?:[-_ ]v?(\d+(?:\.\d+){1,3}))?")
_PRETTY = {"vllm": "vLLM", "vllm-metax": "vLLM-MetaX", "vllm_metax": "vLLM-MetaX", "vllm metax": "vLLM-MetaX",
           "maca": "MACA", "python": "Python", "cuda": "CUDA"}
SENTENCE_LIMIT = 240
RESULTS_LIMIT = 12


def sections(readme: str) -> list[tuple[str, list[str]]]:
    """(heading, lines) of a Markdown text, fenced code blocks left out; text before the first
    heading under ""."""
    out: list[tuple[str, list[str]]] = [("", [])]
    fence = None
    for line in readme.splitlines():
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        m = re.match(r"(```+|~~~+)", stripped)
        if m:
            fence = m.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            out.append((heading.group(2), []))
        else:
            out[-1][1].append(line)
    return out


def sentences(lines: list[str]) -> list[str]:
    """The sentences of prose lines (tables and list markers kept as their own lines)."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", "\n".join(l for l in lines if not l.lstrip().startswith("|"))):
        text = " ".join(l.strip().lstrip("-*").strip() for l in para.splitlines() if l.strip())
        out += [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    return out


def _files_in(text: str) -> list[str]:
    return [t for t in _TICKED.findall(text) if _FILE.fullmatch(t)]


def required_assets(readme: str) -> list[dict]:
    """The files the README lists as needed: {"file", "required": bool (False: it says optional),
    "note": its own words}, table rows of a files section first, then "required" sentences."""
    found: dict[str, dict] = {}
    for heading, lines in sections(readme):
        if _FILES_HEADING.search(heading):
            for line in lines:
                row = _ROW.match(line)
                if row and _FILE.fullmatch(row.group(1).strip()):
                    note = " ".join(c.strip() for c in row.group(2).split("|") if c.strip())
                    if _NOT_REQUIRED.search(note) and not _OPTIONAL.search(note):
                        continue
                    found.setdefault(row.group(1).strip(), {"file": row.group(1).strip(), "required": not _OPTIONAL.search(note),
                                                            "note": note[:SENTENCE_LIMIT]})
        for sentence in sentences(lines):
            if _REQUIRED.search(sentence) and not _NOT_REQUIRED.search(sentence):
                for name in _files_in(sentence):
                    found.setdefault(name, {"file": name, "required": True, "note": sentence[:SENTENCE_LIMIT]})
    return list(found.values())


def _environment(texts: list[str]) -> list[dict]:
    """The packages the texts name: {"name", "version" (None: none given)}, each once (a
    versioned mention wins)."""
    seen: dict[str, dict] = {}
    for text in texts:
        for m in _PACKAGE.finditer(text):
            raw = m.group(1).lower()
            name = _PRETTY.get(raw, raw)
            if m.group(2) or name not in seen:
                seen[name] = {"name": name, "version": m.group(2) or (seen.get(name) or {}).get("version")}
    return list(seen.values())


def recorded_results(readme: str) -> dict | None:
    """The results the README records, as history: {"status": "historical, not rechecked",
    "sections": the headings they are under, "results": the sentences, "dates", "environment":
    the packages named (with versions where given; those of the whole README, and those the
    results name)}. None: it records none."""
    results: list[str] = []
    where: list[str] = []
    for heading, lines in sections(readme):
        said = sentences(lines)
        if heading and _RESULTS_HEADING.search(heading):
            picked = said
        else:
            picked = [s for s in said if _OUTCOME.search(s)]
        if picked:
            where.append(heading or "(top)")
            results += [s if len(s) <= SENTENCE_LIMIT else s[:SENTENCE_LIMIT - 1] + "…" for s in picked]
    if not results:
        return None
    versioned = [e for e in _environment([readme]) if e["version"]]
    named = _environment(results)
    environment = {e["name"]: e for e in named}
    environment.update({e["name"]: e for e in versioned})
    return {"status": HISTORICAL, "sections": where, "results": results[:RESULTS_LIMIT],
            "more": max(0, len(results) - RESULTS_LIMIT), "dates": sorted(set(_DATE.findall(readme))),
            "environment": list(environment.values())}
