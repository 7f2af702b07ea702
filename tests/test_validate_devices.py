"""Which devices a validation server gets: idle ones only, never a device another workload
uses. The probes are the figures an 8-GPU box returns (two devices busy)."""

from __future__ import annotations

from mxtrim_tui.core.probe.gpu import GpuInfo, GpuProbe, GpuProcess
from mxtrim_tui.core.validate.devices import choose_devices

H200 = 150754820096


def box(busy: dict[int, str], vendor: str = "nvidia", n: int = 8) -> GpuProbe:
    gpus = tuple(
        GpuInfo(i, "NVIDIA H200", H200, 9 * 2**30 if i in busy else 0, H200, 0,
                (GpuProcess(4000 + i, busy[i], 9 * 2**30),) if i in busy else ())
        for i in range(n)
    )
    return GpuProbe(vendor, True, "", gpus, "580.159.04")


NONE = GpuProbe("none", False, "NVML unavailable")


def test_auto_takes_idle_gpus_and_leaves_busy_ones_alone():
    choice = choose_devices("auto", box({0: "python", 1: "vllm"}), count=2)
    assert choice.refused is None and choice.device == "cuda" and choice.gpus == "2,3"
    assert "2 busy left alone" in choice.note


def test_auto_without_a_gpu_is_the_cpu():
    choice = choose_devices("auto", NONE, count=1)
    assert choice.device == "cpu" and choice.gpus is None and "no GPU visible" in choice.note


def test_explicit_busy_gpu_is_refused_naming_the_process():
    choice = choose_devices("cuda", box({1: "train.py"}), count=2, gpus="0,1")
    assert choice.refused and "GPU 1 is in use by train.py[4001]" in choice.refused


def test_not_enough_idle_gpus_is_refused():
    choice = choose_devices("auto", box({i: "job" for i in range(7)}), count=2)
    assert choice.refused and choice.refused.startswith("1 idle GPU of 8, 2 needed")


def test_metax_devices_are_maca():
    choice = choose_devices("auto", box({}, vendor="metax", n=2), count=1)
    assert choice.device == "maca" and choice.gpus == "0"


def test_cuda_asked_without_a_gpu_is_refused():
    choice = choose_devices("cuda", NONE, count=1)
    assert choice.refused and "no GPU visible" in choice.refused


def test_auto_keeps_to_the_users_visible_devices():
    """NVML lists all 8 GPUs; CUDA_VISIBLE_DEVICES=4,5,6 (recorded by the probe) leaves the
    choice among those, busy ones still left alone; MACA_VISIBLE_DEVICES the same on MetaX."""
    import dataclasses

    for vendor in ("nvidia", "metax"):
        probe = dataclasses.replace(box({4: "job"}, vendor=vendor), visible_devices="4,5,6")
        choice = choose_devices("auto", probe, count=2)
        assert (choice.refused, choice.gpus) == (None, "5,6")
        assert choose_devices("auto", probe, count=3).refused  # only two of the three are idle
        # an explicit --gpus outside them is refused, not taken
        assert "no GPU 0 among the visible ones" in choose_devices("auto", probe, count=1, gpus="0").refused
    env_hides_all = dataclasses.replace(box({}), visible_devices="")
    choice = choose_devices("auto", env_hides_all, count=1)
    assert choice.device == "cpu" and "CUDA_VISIBLE_DEVICES= names no GPU" in choice.note
    assert choose_devices("cuda", env_hides_all, count=1).refused
    # UUIDs and MIG names are the runtime's business: every idle GPU stays a candidate
    uuids = dataclasses.replace(box({}), visible_devices="GPU-8f2c1a6e-0000-0000-0000-000000000000")
    assert choose_devices("auto", uuids, count=1).gpus == "0"



def test_a_ray_clusters_gpu_count_reads_as_a_person_writes_it():
    """One worker placed by vLLM's Ray executor is "1 GPU", not "1 GPUs"."""
    from mxtrim_tui.core.validate.devices import across_ray_cluster

    assert across_ray_cluster("auto", box({}), 1).note.startswith("1 GPU across the Ray cluster")
    assert across_ray_cluster("cuda", box({}), 4).note.startswith("4 GPUs across the Ray cluster")
