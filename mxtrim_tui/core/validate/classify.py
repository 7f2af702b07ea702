"""Why a server failed, from its exit status and its log, in the trimming workflow's classes.
Each verdict quotes the lines it rests on and suggests only what those lines support; a
shutdown we asked for (its EngineDeadError included) is not a failure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CONFIGURATION = "trimming/configuration or missing dependency"
CHECKPOINT = "checkpoint mapping/completeness"
RESOURCES = "insufficient resources"
DUMMY_LIMIT = "dummy initialisation or quantization post-processing limitation"
QUANT_BUILD = "quantization / build limitation"
DEFECT = "implementation defect"
UNKNOWN = "unclassified"

# (class, pattern, advice) in order of precedence: the first class with evidence wins.
RULES: list[tuple[str, re.Pattern, str]] = [
    # the parallel layout cuts a block-quantized layer between quantization blocks (vLLM's
    # ``validate_fp8_block_shape`` and its FP8 MoE method): the serve settings, not the trim
    (CONFIGURATION, re.compile(
        r"(?i)is not divisible by weight quantization block|not divisible by (?:the )?(?:weight )?(?:quantization )?block_[nk]"),
     "the tensor-parallel size splits a block-quantized layer into pieces that are not whole quantization blocks: "
     "serve with a smaller --tensor-parallel-size (experts: or --enable-expert-parallel); `mxtrim plan SRC --tp N` "
     "names each layer that would not split"),
    # this vLLM build (its platform, its kernels, the dtype it serves) cannot run the output's
    # quantization: the trim is not at fault, and no change to it would help
    (QUANT_BUILD, re.compile(
        r"(?i)is not supported for quantization method|"
        r"quantization method [\w'\"]+ is not supported|"
        r"Failed to find a kernel that can implement|"
        r"\w*(?:Fp8|FP8|Int8|W8A8|Marlin|Awq|AWQ|Gptq|GPTQ)\w*Kernel requires|"
        r"requires AMX|"
        r"(?:fp8|FP8)[^\n]{0,60}(?:not supported|unsupported) on|"
        r"compute capability[^\n]{0,60}(?:not supported|required|too low)|"
        r"(?:Minimum|minimum) capability|"
        # no attention kernel in this build for the model's head sizes (e.g. MLA prefill on
        # FlashAttention needs DeepSeek's own dimensions): the sizes come from the source
        r"No valid (?:MLA prefill |attention |MLA )?backend|does not have supported MLA dimensions|"
        r"No (?:valid|suitable) attention backend"),
     "this vLLM build has no kernel for the output's quantization or head sizes on this device (the trim is "
     "not the cause: it keeps the source's formats and sizes): validate where they run (a GPU build, or a CPU "
     "with the instructions the quoted line names), or trim a source whose sizes the kernels support"),
    (CHECKPOINT, re.compile(
        r"(?i)(missing|unexpected)[^\n]{0,40}(key|weight|tensor|parameter)s?\b|"
        r"no such tensor|KeyError: '[\w.]+\.(weight|bias|scale\w*)'|"
        r"(?:weights?|parameters?) [^\n]{0,40}not (?:initialized|loaded)|"
        r"safetensors_rust\.SafetensorError|checkpoint[^\n]{0,40}(?:missing|incomplete)|"
        r"There is no module or parameter named|"
        r"shape mismatch|size mismatch"),
     "the checkpoint does not hold what the config makes vLLM build: compare the tensor names and shapes "
     "in the error with manifest.json and the layer mapping in README.md"),
    (RESOURCES, re.compile(
        r"(?i)out of memory|CUDA error: out of memory|OutOfMemoryError|"
        r"KV cache is needed, which is larger than the available KV cache memory|"
        r"(?:larger|more) than the available KV cache|No available memory for the cache blocks|"
        r"max(?:imum)? (?:number of )?tokens? that can be stored in KV cache|"
        r"Available memory on node \d+ .* less than desired|insufficient memory|Cannot allocate memory"),
     "give the server more memory or ask for less: lower --max-model-len / --max-num-seqs, raise the KV cache "
     "budget (--gpu-memory-utilization, or --kv-cache-memory-bytes on CPU), or use free devices"),
    (CONFIGURATION, re.compile(
        r"(?i)ModuleNotFoundError|ImportError|No module named|"
        r"not supported|is not supported|unsupported|"
        r"Sliding window for some but all layers|"
        r"(?:Model|model) architectures? \[?'?[\w]+'?\]? (?:are|is) not supported|"
        r"ValidationError|Value error,|pydantic|"
        r"does not divide|must be divisible|"
        r"Invalid (?:config|configuration|value)|AssertionError"),
     "the configuration or the environment is not one this runtime accepts: read the quoted lines; "
     "change the trim (kept layers, fields) or install what is missing"),
    (DUMMY_LIMIT, re.compile(r"(?i)process_weights_after_loading|dummy[^\n]{0,40}(?:init|weights)|quant[^\n]{0,40}post"),
     "dummy weights cannot go through this quantization's post-processing: validate with real weights"),
]

NOISE = re.compile(
    r"EngineDeadError|Engine core proc .* died unexpectedly|shutting down|Shutting down|"
    r"\.py:\d+: \w*Warning:|^\s*warnings\.warn\("  # Python warnings are not errors
)
# "(EngineCore pid=1) ERROR 12-02 20:23:16 [core.py:1510] message": the level and the message
LOG_LINE = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\]\s?(.*)$")
EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit)\b(?::|$)")
# errors that wrap their cause in indented lines ("1 validation error for VllmConfig" and,
# below it, "  Value error, torch.float32 is not supported for quantization method fp8 ...")
WRAPPER = re.compile(r"ValidationError: \d+ validation errors? for")
ROOT_IN_WRAPPER = re.compile(r"^(?:Value error|Assertion failed|Input should|Field required|\w+ error),? ")


@dataclass
class Verdict:
    category: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    advice: str = ""

    def to_json(self) -> dict:
        return {"class": self.category, "summary": self.summary, "evidence": self.evidence, "advice": self.advice}


def error_content(lines: list[str]) -> tuple[list[str], list[str]]:
    """(exception lines, other error lines): INFO/WARNING/DEBUG log lines are left out (a
    deprecation warning that says "unsupported" is not evidence), and so are traceback frames
    (a frame named process_weights_after_loading is where an error passed, not what it was)
    and the shutdown noise."""
    exceptions, others = [], []
    wrapper_at = None  # a pydantic ValidationError: its cause is on the indented lines below it
    for raw in lines:
        m = LOG_LINE.match(raw.strip())
        if m and m.group(1) not in ("ERROR", "CRITICAL"):
            wrapper_at = None
            continue
        content = m.group(2) if m else raw
        text = content.strip()
        if not text or NOISE.search(text):
            continue
        if wrapper_at is not None and content.startswith((" ", "\t")):
            if ROOT_IN_WRAPPER.match(text):
                # the root line goes before its wrapper: it is what the evidence quotes
                exceptions.insert(wrapper_at, text[:400])
                wrapper_at += 1
            continue
        wrapper_at = None
        if EXCEPTION.match(text):
            if WRAPPER.search(text):
                wrapper_at = len(exceptions)
            exceptions.append(text[:400])
        elif not content.startswith((" ", "\t")) and not text.startswith(("File \"", "Traceback", "^", "~")):
            others.append(text[:400])
    return exceptions, others


def _matches(lines: list[str], pattern: re.Pattern, limit: int = 4) -> list[str]:
    found = []
    for text in lines:
        if pattern.search(text) and text not in found:
            found.append(text)
    return found[:limit]


def classify(lines: list[str], returncode: int | None, stopped_by_us: bool, reason: str = "", *, dummy: bool = True) -> Verdict | None:
    """None when nothing failed (a requested stop included). ``dummy``: the server loaded dummy
    weights (only then can a dummy-initialisation limit be the cause)."""
    if stopped_by_us and not reason:
        return None
    summary = reason or f"exit status {returncode}"
    exceptions, others = error_content(lines)
    # the exceptions first (the root cause is raised there), then any other error line
    for candidates in (exceptions, others):
        for category, pattern, advice in RULES:
            if category == DUMMY_LIMIT and not dummy:
                continue
            evidence = _matches(candidates, pattern)
            if evidence:
                # the lines a multi-line message continues with (e.g. each kernel's reason)
                more = [line for line in _matches(others, pattern) if line not in evidence]
                return Verdict(category, summary, (evidence + more)[:4], advice)
    if exceptions:
        return Verdict(DEFECT, summary, exceptions[:3],
                       "an error this tool does not recognise as a trimming, checkpoint or resource problem: "
                       "report it with logs/serve.log")
    return Verdict(UNKNOWN, summary, [l.strip()[:400] for l in lines[-3:]], "no error line in the log: read logs/serve.log")
