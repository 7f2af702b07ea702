"""Why a server failed, from its exit status and its log, in the trimming workflow's classes.
Each verdict quotes the lines it rests on and suggests only what those lines support; a
shutdown we asked for (its EngineDeadError included) is not a failure. A limit of the host or
its devices (NUMA nodes, GPUs, a device another process holds, the CPU build) is a class of its
own, never blamed on the trim; a failed request's own answer is read before the log (NaN / Inf
in an answer). ``classes()`` lists every class a verdict can have."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ..read.source import COMPLETE, CONFIG_ONLY, INDEX_ONLY, PARTIAL

CONFIGURATION = "trimming/configuration or missing dependency"
# the machine, not the trim nor the serve settings: a variable unset or wrong, a package replaced
ENVIRONMENT = "environment / missing dependency"
CHECKPOINT = "checkpoint mapping/completeness"
RESOURCES = "insufficient resources"
DUMMY_LIMIT = "dummy initialisation or quantization post-processing limitation"
QUANT_BUILD = "quantization / build limitation"
DEFECT = "implementation defect"
UNKNOWN = "unclassified"
# the host or its devices cannot give what the serve settings ask for (NUMA nodes, GPUs, a
# device another process holds, what the CPU build runs): the settings or the host, never the trim
HOST = "host or device limit"
# the served model computed NaN or infinity (vLLM cannot put it in its JSON answer)
NUMERICS = "numerics of the weights (NaN / Inf)"
# the server started and answered, but on another path than the output plans (its quantization
# dropped or changed by an override, another backend, a kept kind on a fallback): given by the
# effective configuration row (effective.py), from the start-up log, never by an error line
SERVED_PATH = "served path differs from the plan"

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

# --- specific failures, before the generic rules above --------------------------------------
# Each is tied to what raised it: a generic message (a TypeError about None) counts only where the
# traceback that raised it, or the log, shows the context that makes it this failure.
MACA_EXPORTS = ("MACA_PATH=/opt/maca, LD_LIBRARY_PATH=$MACA_PATH/lib:$MACA_PATH/mxgpu_llvm/lib:$MACA_PATH/ompi/lib:"
                "$LD_LIBRARY_PATH, MACA_CLANG_PATH=/opt/maca/mxgpu_llvm/bin")
# a vLLM-MetaX run: its platform plugin, its package, the MACA runtime or a MetaX torch build
METAX_LOG = re.compile(r"(?i)vllm_metax|platform plugin metax|\bmaca\b|backends[/\\]metax|\+metax|\bmetax\b")
# the MACA runtime's frames or variables in the traceback that raised a line
MACA_TRACEBACK = re.compile(r"(?i)triton[/\\]backends[/\\](?:metax|maca)[/\\]|MACA_PATH|maca_home|libmaca")
# torch's version as a log line gives it: "PyTorch version: 2.8.0+cu128", "torch==2.8.0+cu128", "torch 2.8.0"
TORCH_VERSION = re.compile(
    r"(?i)\b(?:PyTorch|torch)(?: version)?(?:\s*[:=]=?\s*|\s+)v?(\d+\.\d+(?:\.\d+)?(?:[a-z]+\d*)*(?:\+[\w.]+)?)")
# the utilisation the server ran at: mxtrim's command line, vLLM's "non-default args", a config repr
GPU_UTILISATION = re.compile(
    r"--gpu-memory-utilization[= ](\d*\.?\d+)|'gpu_memory_utilization': (\d*\.?\d+)|gpu_memory_utilization=(\d*\.?\d+)")


@dataclass
class Facts:
    """What the advice may quote besides the evidence: the log's lines, torch's version (from the
    environment passed in, else from a log line) and the environment's variables."""
    lines: list[str]
    torch: str | None = None
    torch_line: str | None = None  # the log line that gave it, quoted as evidence
    variables: dict = field(default_factory=dict)
    vllm: str | None = None  # vLLM's version, from the environment passed in
    # what the output's source held when it was trimmed (mxtrim-plan.json's source_state:
    # complete, partial, index only, config only): whether a real-weight trim can be advised
    source_state: str | None = None

    def anywhere(self, pattern: re.Pattern) -> re.Match | None:
        for raw in self.lines:
            m = pattern.search(raw)
            if m:
                return m
        return None

    def to_json(self) -> dict:
        if not self.torch:
            return {}
        return {"torch": self.torch, "torch_build": self.torch.partition("+")[2] or None}


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: re.Pattern
    advice: str | Callable[[list[str], Facts], str]  # a callable reads the evidence and the facts
    # what must surround a matching line: in the traceback that raised it (the line included), or,
    # with ``whole_log``, anywhere in the log
    context: re.Pattern | None = None
    whole_log: bool = False
    quotes_torch: bool = False  # the log line that gives torch's version is evidence too


def _maca_path_advice(evidence: list[str], facts: Facts) -> str:
    return ("MACA_PATH is not set where the server runs: triton's MetaX backend builds its launcher from "
            "$MACA_PATH/lib and $MACA_PATH/include. Export, in the environment `vllm serve` starts from: "
            f"{MACA_EXPORTS}. A non-interactive SSH shell (`ssh host cmd`, remote runners) does not read "
            "~/.bashrc: put the exports in the command itself or in a file it sources")


def _maca_clang_advice(evidence: list[str], facts: Facts) -> str:
    now = facts.variables.get("MACA_CLANG_PATH")
    said = f" (it is {now})" if now else ""
    return (f"MACA_CLANG_PATH must be the directory that holds mxcc, /opt/maca/mxgpu_llvm/bin, not the mxcc file "
            f"itself{said}: export MACA_CLANG_PATH=/opt/maca/mxgpu_llvm/bin (with MACA_PATH=/opt/maca) where the "
            "server starts; a non-interactive SSH shell does not read ~/.bashrc")


FP8_SETTINGS = re.compile(r"VLLM_METAX_\w*FP8\w*")


def _fp8_advice(evidence: list[str], facts: Facts) -> str:
    named: list[str] = []
    for raw in facts.lines:
        for name in FP8_SETTINGS.findall(raw):
            if name not in named:
                named.append(name)
    for name in ("VLLM_METAX_SUPPORTS_FP8", "VLLM_METAX_USE_FP8_WO_A"):
        if name not in named:
            named.append(name)
    return (f"this vLLM-MetaX build or device does not run the output's FP8 format (settings involved: "
            f"{', '.join(named)}; vllm_metax offers fp8 only with VLLM_METAX_SUPPORTS_FP8=1, and "
            "VLLM_METAX_USE_FP8_WO_A switches DeepSeek-V4's FP8 wo_a path). C500 parts without FP8 support cannot "
            "serve it with any setting: validate this output where FP8 runs (an FP8-capable part and build). "
            "The output keeps the source's FP8 format; its layout is not the cause")


def _device_advice(evidence: list[str], facts: Facts) -> str:
    metax = facts.anywhere(METAX_LOG) is not None
    if facts.torch and "+metax" not in facts.torch:
        tag = facts.torch.partition("+")[2]
        build = f"build tag +{tag}" if tag else "no build tag"
        return (f"torch {facts.torch} ({build}) is a public build, not MetaX's (whose version carries +metax, e.g. "
                "2.8.0+metax3.7.2.0), and sees no MetaX device (typically a pip install that pulled torch from a public "
                "index over the vendor's wheel). Reinstall MetaX's torch (and its triton) from the MACA "
                "release, then install other packages with the vendor's torch pinned (e.g. a constraints file)")
    if facts.torch:
        return (f"torch {facts.torch} is MetaX's build but sees no device: check the driver (mx-smi lists the "
                "GPUs), MACA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES (they must select existing GPUs, the same ones), "
                f"access to /dev/mxcd and /dev/dri (the video group), and the MACA exports ({MACA_EXPORTS})")
    if metax:
        return ("no MetaX device is visible to torch: check torch's build (`python -c 'import torch; "
                "print(torch.__version__)'` must show +metax; a public torch that replaced the vendor's sees none), "
                "the driver (mx-smi), MACA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES and the MACA exports")
    return ("no accelerator is visible to this torch: check its build (`python -c 'import torch; "
            "print(torch.__version__)'`: the device's own, not a CPU or another vendor's), the driver, and the "
            "visible-device variables (CUDA_VISIBLE_DEVICES, MACA_VISIBLE_DEVICES)")


def _autotune_oom_advice(evidence: list[str], facts: Facts) -> str:
    now = None
    m = facts.anywhere(GPU_UTILISATION)
    if m:
        now = float(next(g for g in m.groups() if g))
    used = now if now is not None else 0.9  # vLLM's default
    lower = 0.8 if used > 0.8 else max(round(used - 0.1, 2), 0.1)
    return (f"start-up ran out of device memory while torch.compile autotuned kernels, in what the KV cache "
            f"left at --gpu-memory-utilization {used:g}: leave room with --gpu-memory-utilization {lower:g}, or "
            "serve with --enforce-eager (no compilation, no autotuning)")


KV_TOO_SMALL = re.compile(r"max seq len \((\d+)\).*?estimated maximum model length is (\d+)")


def _kv_advice(evidence: list[str], facts: Facts) -> str:
    for line in evidence:
        m = KV_TOO_SMALL.search(line)
        if m:
            wanted, fits = int(m.group(1)), int(m.group(2))
            return (f"the KV cache budget cannot hold one sequence of {wanted} tokens; the largest context that fits "
                    f"is {fits} tokens: serve with --max-model-len {fits}, or give the KV cache more memory "
                    "(--gpu-memory-utilization, or --kv-cache-memory-bytes on CPU)")
    return RESOURCES_ADVICE


def _shards_advice(evidence: list[str], facts: Facts) -> str:
    return ("vLLM-MetaX's compile-mode path (vllm_metax 0.17) rejects this fused GPTQ layer, which vLLM serves in "
            "eager mode: a defect of the runtime, not of the checkpoint. Serve with --enforce-eager; if the error "
            "stays, compare the quantization of the layer's shards (q/k/v, gate/up) in the checkpoint")


# the generic RESOURCES advice, for a KV message without vLLM's estimate
RESOURCES_ADVICE = next(advice for category, _, advice in RULES if category == RESOURCES)
OOM = re.compile(r"OutOfMemoryError: (?:CUDA |MACA |HIP )?out of memory|CUDA error: out of memory|"
                 r"(?<!\w)out of memory\. Tried to allocate")

NOT_THE_TRIM = "a limit of this host and these serve settings, not of the trim"


def _numa_advice(evidence: list[str], facts: Facts) -> str:
    m = next((NUMA.search(line) for line in evidence if NUMA.search(line)), None)
    ranks = f"{m.group(1)} workers" if m else "a worker per rank"
    return (f"vLLM's CPU build binds each of the server's {ranks} (TP x PP) to a NUMA node of its own, and this host "
            "allows fewer (the quoted line lists them): leave VLLM_CPU_OMP_THREADS_BIND unset (mxtrim then gives each "
            "worker cores of its own) or set one CPU list per rank yourself (e.g. 0|1), validate with --tp 1 --pp 1 "
            f"here, or check the parallel layout on a host with enough NUMA nodes or on GPUs; {NOT_THE_TRIM}")


def _devices_advice(evidence: list[str], facts: Facts) -> str:
    return ("the server asked for more devices than it can see (its world size is TP x PP): lower --tp / --pp to "
            "the devices visible, or make more visible (--gpus, CUDA_VISIBLE_DEVICES / MACA_VISIBLE_DEVICES, the "
            f"container's devices); {NOT_THE_TRIM}")


def _busy_advice(evidence: list[str], facts: Facts) -> str:
    return ("another process holds the device or the memory it was to use: validate on idle devices (--gpus, or "
            "let validate pick idle ones), wait for the other workload to end, or lower --gpu-memory-utilization to "
            f"the share that is free; {NOT_THE_TRIM}")


def _port_advice(evidence: list[str], facts: Facts) -> str:
    return ("another process took the port the server was to listen on (or one vLLM opens for its own workers) "
            "before the server bound it, again on each fresh port tried: look for what is opening ports on this "
            f"host (ss -ltnp), set VLLM_PORT to a free range for vLLM's own sockets, and validate again; {NOT_THE_TRIM}")


def _cpu_build_advice(evidence: list[str], facts: Facts) -> str:
    return ("vLLM's CPU build does not run what the quoted line names (the source's own attention or parallel "
            "layout, which the trim keeps): validate this output with a GPU build; a limit of the build and "
            "device, not of the trim")


def _numerics_advice(evidence: list[str], facts: Facts) -> str:
    return ("the model computed NaN or infinite numbers (its logits or log-probabilities), which vLLM cannot put "
            "in a JSON answer. Dummy weights (--load-format dummy) are random and can produce this on their own, "
            "which says nothing of the trim; with real weights, check the weights (manifest.json against the "
            "source, a tensor holding NaN / Inf), serve in another dtype (float16 overflows where bfloat16 and "
            "float32 do not), and compare with the original (validate --equivalence)")


# vLLM's Ray executor (vllm/v1/executor/ray_utils.py, ray_executor.py) and Ray itself
RAY_PLACEMENT = re.compile(
    r"Cannot provide a placement group|The number of required \w+s exceeds the total number of available \w+s|"
    r"Current node has no \w+ available")
RAY_MISSING = re.compile(
    r"Failed to import Ray|Ray version [\d.]+ is required, but found|Version mismatch: The cluster was started with")
# a Ray worker of vLLM on another node that cannot load this vLLM's code (another version, or none)
RAY_WORKER_CODE = re.compile(
    r"\((?:RayWorkerWrapper|RayWorkerProc|raylet)\b[^)]*\).*(?:No module named '?vllm|Can't get attribute|ImportError|"
    r"AttributeError: module 'vllm)")


def _ray_placement_advice(evidence: list[str], facts: Facts) -> str:
    return ("vLLM's Ray executor could not place its TP x PP workers (one GPU each, the first on the node that starts "
            "the server): the cluster lacks free GPUs, or the node it starts on has none. `ray status` and `ray list "
            "nodes` show what each node holds and what other jobs took; free GPUs, add a node, lower --tp / --pp, or "
            f"start from a node with a GPU; {NOT_THE_TRIM}")


def _ray_missing_advice(evidence: list[str], facts: Facts) -> str:
    return ("the server's environment cannot use the Ray cluster: Ray is missing from the vLLM environment, or its "
            "version (or Python's) differs from the cluster's. Install the same Ray version as the cluster in the "
            "vLLM environment of every node (pip install 'ray==<the cluster's version>'); a limit of the "
            "environment, not of the trim")


def _ray_worker_code_advice(evidence: list[str], facts: Facts) -> str:
    return ("a Ray worker on another node could not load this vLLM's code (the quoted line names the node): that "
            "node has another vLLM version, or none, in the environment its Ray workers run. Install the same vLLM "
            "(and the same plugins, e.g. vllm_metax) on every node of the cluster; a limit of the environment, not "
            "of the trim")


# a listening port another process took first (the socket's bind, in Python's and C's words)
PORT_TAKEN = re.compile(r"\[Errno 98\] Address already in use|\bEADDRINUSE\b")
# vLLM's CPU workers: one NUMA node each (vllm/utils/ompmultiprocessing.py)
NUMA = re.compile(r"Not enough allowed NUMA nodes to bind threads of (\d+) local CPUWorkers")
# what a JSON encoder says of NaN / Inf (Python's json, with allow_nan=False), which vLLM
# returns as HTTP 400 (vllm/entrypoints/serve/exception_handling/error_response.py)
NON_FINITE = re.compile(r"Out of range float values are not JSON compliant")

# vLLM 0.26.0's DeepSeek-V4 GPU model (models/deepseek_v4/nvidia/model.py) sets its first layer's
# mHC broadcast weights in load_weights only, which --load-format dummy never calls (0.32.0 runs
# it after any load); and its KV grouping (v1/core/kv_cache_utils.py) asserts that no
# sliding-window group has a page larger than the compressed layers' (seen on an H100 for a kept
# ratio-128 layer without a ratio-4 one)
BARE_ASSERTION = re.compile(r"AssertionError\s*$")  # an assert without a message: its statement is the reason
V4_DUMMY_MHC = re.compile(r"assert self\.hc_attn_fn_broadcast is not None")
V4_PAGE_GROUPS = re.compile(r"assert max\(sm_page_sizes\) <= max\(all_page_sizes\)")
NEWER_V4_VLLM = "a vLLM that finishes the dummy load (0.32.0 does)"


def _v4_dummy_advice(evidence: list[str], facts: Facts) -> str:
    """What can be done: a real-weight trim only where the source has weights to copy."""
    which = f"vLLM {facts.vllm}" if facts.vllm else "This vLLM"
    why = (f"{which} cannot start a dummy DeepSeek-V4 output: its GPU model finishes the first layer's mHC weights "
           "only while real weights load (vLLM 0.26.0: finalize_mhc_broadcast_weights runs in load_weights, which "
           "--load-format dummy skips; 0.32.0 runs it after any load). ")
    if facts.source_state == COMPLETE:
        return why + f"Validate a real-weight trim of this source (--mode weights), or validate this output with {NEWER_V4_VLLM}"
    if facts.source_state == PARTIAL:
        return (why + "Validate a real-weight trim (--mode weights) once the source holds the kept layers' shards "
                f"(`mxtrim plan SRC --keep LAYERS --fetch-list` names them), or validate this output with {NEWER_V4_VLLM}")
    if facts.source_state in (CONFIG_ONLY, INDEX_ONLY):
        return (why + f"The source holds no weights ({facts.source_state}), so no real-weight trim can be made from it: "
                f"validate this output with {NEWER_V4_VLLM}, or trim a copy of the model that has its weights "
                "(--mode weights)")
    return why + f"Validate with {NEWER_V4_VLLM}, or a real-weight trim (--mode weights) of a source that has the weights"


V4_PAGE_ADVICE = ("this vLLM's DeepSeek-V4 KV grouping (vLLM 0.26.0 v1/core/kv_cache_utils.py) needs the compressed "
                  "layers' pages to be at least as large as every sliding-window group's: a kept ratio-128 layer "
                  "without a ratio-4 (indexer) layer fails it. Keep a layer with compress ratio 4 beside it (the "
                  "automatic set does), or validate with a vLLM that pads the groups (0.32.0)")

SPECIFIC_RULES: list[Rule] = [
    # what vLLM 0.26.0's DeepSeek-V4 path refuses (an AssertionError the generic rules would
    # give no reason for)
    Rule(DUMMY_LIMIT, BARE_ASSERTION, _v4_dummy_advice, context=V4_DUMMY_MHC),
    Rule(CONFIGURATION, BARE_ASSERTION, V4_PAGE_ADVICE, context=V4_PAGE_GROUPS),
    # host and device limits, before anything that would blame the trim
    Rule(HOST, NUMA, _numa_advice),
    # vLLM's Ray executor: its placement group, Ray or vLLM missing (or another version) on a node
    Rule(HOST, RAY_PLACEMENT, _ray_placement_advice),
    Rule(ENVIRONMENT, RAY_MISSING, _ray_missing_advice),
    Rule(ENVIRONMENT, RAY_WORKER_CODE, _ray_worker_code_advice),
    # more ranks than devices: vllm/config/parallel.py, vllm/platforms/interface.py; CUDA's own words
    # for an index past the devices
    Rule(HOST, re.compile(
        r"World size \(\d+\) is larger than the number of available GPUs|You don't have enough GPUs available|"
        r"visible device ordinal \d+ is out of range|CUDA error: invalid device ordinal"), _devices_advice),
    # a device another process holds: CUDA's words for a device in exclusive use; vLLM's start-up
    # check of free memory (vllm/v1/worker/utils.py) and its profiling (vllm/v1/worker/gpu_worker.py)
    Rule(HOST, re.compile(
        r"(?i)CUDA-capable device\(s\) is/are busy or unavailable|all CUDA-capable devices are busy or unavailable|"
        r"Free memory on device \S+ \([^)]*\) on startup is less than|Error in memory profiling"), _busy_advice),
    # a port taken between its choice and the bind (validate starts again on a fresh port first)
    Rule(HOST, PORT_TAKEN, _port_advice),
    # what the CPU build refuses (vllm/platforms/cpu.py, vllm/utils/cpu_triton_utils.py)
    Rule(HOST, re.compile(r"is not (?:yet )?supported on CPU\b"), _cpu_build_advice),
    # 1. MACA_PATH unset: triton's MetaX backend joins None with "lib"
    Rule(ENVIRONMENT, re.compile(
        r"TypeError: (?:expected str, bytes or os\.PathLike object, not NoneType|"
        r"stat: path should be string, bytes, os\.PathLike or integer, not NoneType)"),
        _maca_path_advice, context=MACA_TRACEBACK),
    # 2. MACA_CLANG_PATH naming the mxcc file: ".../bin/mxcc/mxcc" is not a path
    Rule(ENVIRONMENT, re.compile(
        r"(?:NotADirectoryError|FileNotFoundError)\b[^\n]*\bmxcc\b|"
        r"\bmxcc\b[^\n]{0,60}(?:not found|No such file|Not a directory|cannot be found)"),
        _maca_clang_advice, context=re.compile(r"MACA_CLANG_PATH|mxgpu_llvm"), whole_log=True),
    # 4. no device for torch: a public torch in place of MetaX's, no driver, devices hidden; or
    #    vLLM-MetaX's binaries built against another torch
    Rule(ENVIRONMENT, re.compile(
        r"No CUDA GPUs are available|Found no NVIDIA driver on your system|Failed to infer device type|"
        r"Torch not compiled with CUDA enabled|"
        r"(?:ImportError|OSError)\b[^\n]*(?:vllm_metax|mcoplib|metax)[^\n]*undefined symbol"),
        _device_advice, quotes_torch=True),
    # 3. FP8 on a MetaX part or build without it (vllm_metax lists fp8 only with
    #    VLLM_METAX_SUPPORTS_FP8=1; its platform refuses float8 dtypes)
    Rule(QUANT_BUILD, re.compile(
        r"(?i)\bfp8\w* quantization is (?:currently )?not supported in|FP8 is not supported on|"
        r"(?:fp8|float8)\w*[^\n]{0,80}(?:not supported|unsupported)"),
        _fp8_advice, context=METAX_LOG, whole_log=True),
    # 7. the KV cache cannot hold one max_model_len sequence: vLLM names the length that fits
    Rule(RESOURCES, re.compile(r"max seq len \(\d+\).*estimated maximum model length is \d+"), _kv_advice),
    # 5. out of memory while torch.compile autotunes, at start-up (the KV cache already allocated)
    Rule(RESOURCES, OOM, _autotune_oom_advice, context=re.compile(
        r"_inductor[/\\][^\n]*autotun|autotune_to_one_config|benchmark_all_configs|autotune_select_algorithm|"
        r"_inductor[/\\]select_algorithm")),
    # 6. vllm_metax's compile-mode check on fused GPTQ layers
    Rule(DEFECT, re.compile(r"Detected some but not all shards of \S+ are quantized"),
         _shards_advice, context=METAX_LOG, whole_log=True),
]


# what a failed request's answer says (the reason), before the log: the log of a server that
# answered an error holds no error line
REASON_RULES: list[Rule] = [Rule(NUMERICS, NON_FINITE, _numerics_advice)]


def classes() -> list[str]:
    """Every class a verdict can have: those of the tables (REASON_RULES, SPECIFIC_RULES,
    RULES), then those that no table names (a served path that differs from the plan, an error
    not recognised, no error line)."""
    found: list[str] = []
    named = [r.category for r in REASON_RULES + SPECIFIC_RULES] + [category for category, _, _ in RULES]
    for category in named + [SERVED_PATH, DEFECT, UNKNOWN]:
        if category not in found:
            found.append(category)
    return found


NOISE = re.compile(
    r"EngineDeadError|Engine core proc .* died unexpectedly|shutting down|Shutting down|"
    r"\.py:\d+: \w*Warning:|^\s*warnings\.warn\("  # Python warnings are not errors
)
# "(EngineCore pid=1) ERROR 12-02 20:23:16 [core.py:1510] message": the level and the message
LOG_LINE = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\]\s?(.*)$")
# the process tag vLLM puts before a line it did not log itself (a traceback printed to stderr):
# "(APIServer pid=1)   File ..." is a frame, "(APIServer pid=1) RuntimeError: ..." an exception
PROCESS_TAG = re.compile(r"^\([^()]*\bpid=\d+\) ?")
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
    facts: dict = field(default_factory=dict)  # e.g. torch's version and build tag, where they matter

    def to_json(self) -> dict:
        doc = {"class": self.category, "summary": self.summary, "evidence": self.evidence, "advice": self.advice}
        if self.facts:
            doc["facts"] = self.facts
        return doc


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
        content = m.group(2) if m else untagged(raw)
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


def untagged(raw: str) -> str:
    return PROCESS_TAG.sub("", raw, count=1)


def tracebacks(lines: list[str]) -> dict[str, str]:
    """Each exception line (as ``error_content`` gives it) -> the frames of the traceback that
    raised it, chained causes included, read per process (tracebacks of several processes
    interleave). The frames are no evidence; they tell what a generic message is about."""
    frames: dict[str, list[str]] = {}
    chained: dict[str, bool] = {}
    wrapper: dict[str, str | None] = {}  # the wrapper whose indented root lines follow
    found: dict[str, list[str]] = {}
    for raw in lines:
        m = LOG_LINE.match(raw.strip())
        if m and m.group(1) not in ("ERROR", "CRITICAL"):
            continue
        stripped = raw.strip()
        tag_m = PROCESS_TAG.match(stripped)
        tag = tag_m.group(0).strip() if tag_m else ""
        content = m.group(2) if m else untagged(stripped if tag else raw)
        text = content.strip()
        block = frames.setdefault(tag, [])
        if text.startswith("Traceback (most recent call last)"):
            if not chained.get(tag):
                block.clear()
            chained[tag] = False
            wrapper[tag] = None
            continue
        if text.startswith(("The above exception was the direct cause", "During handling of the above exception")):
            chained[tag] = True
            continue
        if wrapper.get(tag) and content.startswith((" ", "\t")) and ROOT_IN_WRAPPER.match(text):
            found.setdefault(text[:400], []).append("\n".join(block))
            continue
        if EXCEPTION.match(text):
            found.setdefault(text[:400], []).append("\n".join(block))
            wrapper[tag] = text if WRAPPER.search(text) else None
            continue
        if content.startswith((" ", "\t")) or text.startswith('File "'):
            block.append(text)
    return {k: "\n".join(v) for k, v in found.items()}


def _torch_from_environment(environment: dict | None) -> str | None:
    """torch's version from the offline probe's record (``{"packages": {"torch": {"version": ...}}}``;
    a PackageInfo in place of the inner dict is read the same)."""
    if not environment:
        return None
    torch = (environment.get("packages") or {}).get("torch")
    version = torch.get("version") if isinstance(torch, dict) else getattr(torch, "version", None)
    return version if isinstance(version, str) and version else None


def _facts(lines: list[str], environment: dict | None, source_state: str | None = None) -> Facts:
    facts = Facts(lines=lines, variables=dict((environment or {}).get("variables") or {}), source_state=source_state)
    facts.torch = _torch_from_environment(environment)
    vllm = ((environment or {}).get("packages") or {}).get("vllm")
    version = vllm.get("version") if isinstance(vllm, dict) else getattr(vllm, "version", None)
    facts.vllm = version if isinstance(version, str) and version else None
    for raw in lines:
        m = TORCH_VERSION.search(raw)
        # the environment passed in is the server's own; a log line that says otherwise is not quoted
        if m and facts.torch in (None, m.group(1)):
            facts.torch, facts.torch_line = m.group(1), raw.strip()[:400]
            break
    return facts


def _specific(rule: Rule, candidates: list[str], raised: dict[str, str], facts: Facts) -> list[str]:
    """The candidate lines this rule claims: its pattern, and its context where it needs one."""
    found = []
    in_log = rule.context is not None and rule.whole_log and facts.anywhere(rule.context) is not None
    for text in candidates:
        if text in found or not rule.pattern.search(text):
            continue
        if rule.context is not None and not in_log and not rule.context.search(text + "\n" + raised.get(text, "")):
            continue
        found.append(text)
    return found[:4]


# a traceback frame as Python prints it: File "/path/model.py", line 882, in forward
FRAME = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


def _raising_statement(frames: str, context: re.Pattern | None = None) -> str | None:
    """"STATEMENT — FILE:LINE in FUNCTION" of the frame that raised, from the frames of its
    traceback (``tracebacks``): the last frame with its source line, or with ``context`` the last
    whose source line matches it. None when the traceback shows no source line."""
    found = None
    lines = frames.splitlines()
    for at, line in enumerate(lines):
        m = FRAME.match(line)
        statement = lines[at + 1] if m and at + 1 < len(lines) else ""
        if not m or not statement or FRAME.match(statement) or statement.startswith(("^", "~")):
            continue
        if context is None or context.search(statement):
            found = f"{statement} — {m.group('file')}:{m.group('line')} in {m.group('function')}"
    return found


def _quoted(evidence: list[str], raised: dict[str, str], context: re.Pattern | None = None) -> list[str]:
    """The evidence with each bare ``AssertionError`` (an assert without a message, which says
    nothing by itself) given the assert statement that raised it and its frame, from the
    traceback in the log: "AssertionError: assert x is not None — /path/model.py:882 in forward"."""
    quoted = []
    for text in evidence:
        statement = _raising_statement(raised.get(text, ""), context) if BARE_ASSERTION.search(text) else None
        line = f"{text.strip()}: {statement}"[:400] if statement else text
        if line not in quoted:
            quoted.append(line)
    return quoted


def _matches(lines: list[str], pattern: re.Pattern, limit: int = 4) -> list[str]:
    found = []
    for text in lines:
        if pattern.search(text) and text not in found:
            found.append(text)
    return found[:limit]


def classify(lines: list[str], returncode: int | None, stopped_by_us: bool, reason: str = "", *, dummy: bool = True,
             environment: dict | None = None, source_state: str | None = None) -> Verdict | None:
    """None when nothing failed (a requested stop included). ``dummy``: the server loaded dummy
    weights (only then can a dummy-initialisation limit be the cause). ``environment``: the
    offline probe's record of the server's environment (``{"packages": {"torch": {"version":
    ...}}, "variables": {...}}``), where the caller has it: an environment verdict then names
    torch's build. ``source_state``: what the output's source held (``mxtrim-plan.json``'s
    ``source_state.state``), where known: advice to trim real weights needs a source with them."""
    if stopped_by_us and not reason:
        return None
    summary = reason or f"exit status {returncode}"
    exceptions, others = error_content(lines)
    raised = tracebacks(lines)
    facts = _facts(lines, environment, source_state)
    for rule in REASON_RULES:
        answered = [part.strip()[:400] for part in reason.split("; ") if rule.pattern.search(part)]
        if answered:
            evidence = (answered + _matches(exceptions + others, rule.pattern))[:4]
            return Verdict(rule.category, summary, evidence, rule.advice(evidence, facts))
    # the exceptions first (the root cause is raised there), then any other error line
    for candidates in (exceptions, others):
        # the specific failures first: each rests on a line and on what raised it
        for rule in SPECIFIC_RULES:
            evidence = _specific(rule, candidates, raised, facts)
            if evidence:
                more = [line for line in _specific(rule, others, raised, facts) if line not in evidence]
                evidence = (evidence + more)[:4]
                advice = rule.advice(evidence, facts) if callable(rule.advice) else rule.advice
                known = facts.to_json() if rule.category == ENVIRONMENT else {}
                if rule.quotes_torch and facts.torch_line and facts.torch_line not in evidence:
                    evidence = evidence[:3] + [facts.torch_line]
                return Verdict(rule.category, summary, _quoted(evidence, raised, rule.context), advice, known)
        for category, pattern, advice in RULES:
            if category == DUMMY_LIMIT and not dummy:
                continue
            evidence = _matches(candidates, pattern)
            if evidence:
                # the lines a multi-line message continues with (e.g. each kernel's reason)
                more = [line for line in _matches(others, pattern) if line not in evidence]
                return Verdict(category, summary, _quoted((evidence + more)[:4], raised), advice)
    if exceptions:
        return Verdict(DEFECT, summary, _quoted(exceptions[:3], raised),
                       "an error this tool does not recognise as a trimming, checkpoint or resource problem: "
                       "report it with logs/serve.log")
    return Verdict(UNKNOWN, summary, [l.strip()[:400] for l in lines[-3:]], "no error line in the log: read logs/serve.log")
