"""A stand-in of vLLM-MetaX's batch harness (``tools/batched_test``) as far as it starts
servers: how ``launch.py --model-config FILE`` reads the model list, and how an entry becomes
the ``vllm serve`` command line and environment of its server. ``launch.py`` is started in the
harness folder and its servers inherit that working directory, so a relative ``model_path`` is
read from there (the harness's README: "All the relative path are defaultly based on
`tools/batched_test` folder"); ``vllm serve`` gets ``model_path`` unchanged.

Written after MetaX-MACA/vLLM-metax at commit 3aadf0845da8045577ef6761c25c55265e7b5fde:
``tools/batched_test/launch.py`` (``Scheduler._load_yaml_config``: ``yaml.safe_load`` of the
file), ``tools/batched_test/model_worker.py`` (``ModelConfigManager.prepare_serve_cmd`` and
``prepare_extra_env``; the file as last changed in babccd0f1d5fdf48153d89a59433c4ee73198caf) and
``tools/batched_test/net_utils.py`` (``run_cmd``: ``subprocess.Popen(cmd, env=...)``, no ``cwd``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

HARNESS_HOST = "localhost"  # prepare_serve_cmd(host=None, ...) from InferWorker._launch_vllm_serve
RAY_FROM_GPUS = 8  # tp * pp * dp from which the harness serves with Ray whatever the entry says


def load_model_list(config: Path) -> list[dict]:
    """The entries of a model YAML, as ``launch.py`` loads them."""
    with open(config) as fh:
        return yaml.safe_load(fh)


def entry_named(config: Path, name: str) -> dict:
    return next(e for e in load_model_list(config) if e.get("name") == name)


def required_gpus(entry: dict) -> int:
    sc = entry.get("serve_config", {})
    return sc.get("tp", 1) * sc.get("pp", 1) * sc.get("dp", 1)


def serve_argv(entry: dict, port: int, host: str | None = None) -> list[str]:
    """The server command of ``entry``: ``vllm serve MODEL_PATH`` with the harness's own flags
    (always ``--trust-remote-code``; its defaults for what the entry leaves out), then
    ``extra_args`` in their order, a ``null`` value giving the switch alone."""
    sc = entry.get("serve_config", {})
    ray = sc.get("distributed_executor_backend") == "ray" or required_gpus(entry) >= RAY_FROM_GPUS
    argv = ["vllm", "serve", entry["model_path"],
            "--host", host if host is not None else HARNESS_HOST, "--port", str(port),
            "-tp", str(sc.get("tp", 1)), "-pp", str(sc.get("pp", 1)), "-dp", str(sc.get("dp", 1)),
            "--trust-remote-code",
            "--gpu-memory-utilization", str(sc.get("gpu_memory_utilization", 0.8)),
            "--max-model-len", str(sc.get("max_model_len", 4096)),
            "--distributed-executor-backend", "ray" if ray else "mp"]
    extra = sc.get("extra_args")
    if isinstance(extra, dict):
        for key, value in extra.items():
            argv.append(str(key))
            if value is not None:
                argv.append(str(value))
    elif isinstance(extra, list):
        argv += extra
    return argv


def serve_env(entry: dict, gpus: list[int] | None = None) -> dict[str, str]:
    """What the harness adds to its own environment for the server: the allocated GPUs (none
    here), then ``extra_env`` with every value as a string."""
    env: dict[str, str] = {}
    if gpus is not None:
        env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
    extra = entry.get("extra_env")
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    elif isinstance(extra, list):
        for item in extra:
            if isinstance(item, dict):
                env.update({str(k): str(v) for k, v in item.items()})
    return env
