"""The machine: GPU occupancy (NVML / pymxml) and the Python environment seen."""
