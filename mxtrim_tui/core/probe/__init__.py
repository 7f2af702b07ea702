"""The machine: GPU occupancy (NVML / pymxml), the Python environment seen, and
``offline_probe.py``, the standalone script validation runs in the interpreter that holds vLLM."""
