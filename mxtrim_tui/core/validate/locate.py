"""Which interpreter holds vLLM: the rule lives in :mod:`..probe.vllm_python` (the output's
report names the environment validation will use, and writing comes before validating);
imported from here by the CLI and the wizard."""

from __future__ import annotations

from ..probe.vllm_python import (  # noqa: F401
    ENV_VAR, HOW, PROBE, SETTING, VENV, VllmNotFound, VllmPython, absolute_interpreter, checkout_root, find_vllm_python,
    local_places, probe, script_interpreter,
)
