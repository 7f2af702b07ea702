"""The machine: GPU occupancy (NVML / pymxml), the Python environment seen, and
``offline_probe.py``, the standalone script validation runs in the interpreter that holds vLLM."""

from pathlib import Path

# run by another interpreter as a script (python -I OFFLINE_PROBE ...), never imported there
OFFLINE_PROBE = Path(__file__).with_name("offline_probe.py")
