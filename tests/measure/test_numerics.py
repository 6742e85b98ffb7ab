"""speedlab.measure.numerics: what each matmul level sets, read back from torch, and what amp
picks. The CUDA read-back is torch's own setting (it needs no GPU); the GPU's effect is the
gpu tests'."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from speedlab.measure.numerics import (
    MATMUL_LEVELS,
    MATMUL_MODES,
    amp_choice,
    cpu_flags,
    cpu_math,
    cpu_math_text,
    cpu_matmul_changes,
    cuda_capability_text,
    cuda_math,
    matmul_effect,
    matmul_kept,
    matmul_modes,
    matmul_precision,
)

NEWER_API = pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
    reason="torch before 2.9 has no fp32_precision settings",
)


@pytest.mark.parametrize("level", MATMUL_LEVELS)
def test_each_level_sets_what_the_table_says_for_cuda_and_onednn_and_is_restored(
    level: str,
) -> None:
    before = torch.get_float32_matmul_precision()
    assert matmul_modes(level) == MATMUL_MODES[level]
    assert torch.get_float32_matmul_precision() == before


@NEWER_API
def test_settings_made_with_torchs_newer_api_come_back_whole_and_are_read_as_a_level() -> None:
    """Once a backend's fp32_precision is set, torch refuses to say the level, and setting one
    changes every backend: what was set must come back, the level read as the nearest."""
    backends = torch.backends
    try:
        backends.cuda.matmul.fp32_precision = "tf32"
        assert matmul_precision() == "high"
        with matmul_kept():
            torch.set_float32_matmul_precision("medium")
            assert backends.mkldnn.matmul.fp32_precision == "bf16"
            assert matmul_precision() == "medium"
        assert backends.cuda.matmul.fp32_precision == "tf32"
        assert backends.mkldnn.matmul.fp32_precision == "none"
        backends.mkldnn.matmul.fp32_precision = "bf16"
        assert matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")
        backends.cuda.matmul.fp32_precision = backends.mkldnn.matmul.fp32_precision = "none"
    with matmul_kept():  # the level alone, where nothing else was set
        torch.set_float32_matmul_precision("high")
    assert torch.get_float32_matmul_precision() == "highest" == matmul_precision()


def test_highest_never_changes_a_cpu_matmul_and_medium_changes_one_exactly_on_bf16_cpus() -> None:
    assert not cpu_matmul_changes("highest")
    if cpu_flags() is None:
        pytest.skip("no x86 CPU flags to compare with")
    assert cpu_matmul_changes("medium") == cpu_math()["bf16"]


@pytest.mark.parametrize(
    ("flags", "math", "text"),
    [
        (
            "",
            {"avx512": False, "bf16": False, "amx": False},
            "AVX-512 no, bf16 no (no avx512_bf16 or amx_bf16), AMX no",
        ),
        (
            "avx512f avx512bw",  # Skylake-SP: AVX-512 without bf16
            {"avx512": True, "bf16": False, "amx": False},
            "AVX-512 yes, bf16 no (no avx512_bf16 or amx_bf16), AMX no",
        ),
        (
            "avx512f avx512_bf16",  # Cooper Lake, Zen 4
            {"avx512": True, "bf16": True, "amx": False},
            "AVX-512 yes, bf16 yes, AMX no",
        ),
        (
            "avx512f avx512_bf16 amx_bf16 amx_tile amx_int8",  # Sapphire Rapids
            {"avx512": True, "bf16": True, "amx": True},
            "AVX-512 yes, bf16 yes, AMX yes",
        ),
        (
            None,
            {"avx512": None, "bf16": None, "amx": None},
            "unknown (no x86 flags in /proc/cpuinfo)",
        ),
    ],
)
def test_the_cpus_math_is_read_from_its_flags_and_said_in_plain_words(
    fake_cpu_flags, flags: str | None, math: dict, text: str
) -> None:
    fake_cpu_flags(flags)
    assert cpu_math() == math
    assert cpu_math_text(math) == text


def test_a_cpu_without_proc_cpuinfo_is_unknown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import speedlab.measure.numerics

    monkeypatch.setattr(speedlab.measure.numerics, "CPUINFO", tmp_path / "missing")
    assert cpu_flags() is None and set(cpu_math().values()) == {None}


def test_this_cpus_math_agrees_with_its_proc_cpuinfo() -> None:
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.exists() else ""
    line = next((x for x in text.splitlines() if x.split(":", 1)[0].strip() == "flags"), None)
    if line is None:
        pytest.skip("no x86 CPU flags here")
    flags = set(line.split(":", 1)[1].split())
    assert cpu_math() == {
        "avx512": "avx512f" in flags,
        "bf16": bool({"avx512_bf16", "amx_bf16"} & flags),
        "amx": "amx_tile" in flags,
    }
    assert cpu_math_text(cpu_math()).startswith("AVX-512 ")


@pytest.mark.parametrize(
    ("capability", "text"),
    [
        ((9, 0), "compute capability 9.0 (bf16 and TF32 native)"),
        ((8, 6), "compute capability 8.6 (bf16 and TF32 native)"),
        ((7, 5), "compute capability 7.5 (fp16 tensor cores, no native bf16 or TF32)"),
        ((6, 1), "compute capability 6.1 (no tensor cores)"),
    ],
)
def test_a_gpus_compute_capability_says_what_math_it_has(
    capability: tuple[int, int], text: str
) -> None:
    assert cuda_capability_text(*capability) == text


def test_the_cpu_note_follows_the_measurement() -> None:
    assert "changes nothing measurable on this CPU" in matmul_effect("high", None, False)
    assert "full float32" in matmul_effect("highest", None, False)
    reduced = matmul_effect("medium", None, True)
    assert "in bf16" in reduced and "2 to 3 of float32's 7" in reduced
    # it says what changed, not that it was faster: the verdict says that (on the CPU of lesson
    # 04, medium's bf16 matmuls were slower for its small MLP)
    assert (
        ": faster" not in reduced and "whether that was faster, the run's verdict says" in reduced
    )


def test_the_gpu_note_says_tf32_only_from_ampere_and_names_convolutions() -> None:
    ampere = matmul_effect("high", ("A100", True, True), False)
    assert "TF32 on A100" in ampere and "Convolutions are not affected" in ampere
    assert "changes nothing on T4" in matmul_effect("medium", ("T4", False, False), False)
    assert "full float32 on A100" in matmul_effect("highest", ("A100", True, True), False)


@pytest.mark.parametrize(
    ("cuda", "native_bf16", "chosen"),
    [(True, True, "bf16-mixed"), (True, False, "16-mixed"), (False, False, "bf16-mixed")],
)
def test_amp_never_picks_emulated_bf16(cuda: bool, native_bf16: bool, chosen: str) -> None:
    assert amp_choice(cuda, native_bf16) == chosen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_on_this_gpu_amp_and_the_matmul_note_follow_its_capability() -> None:
    name, tf32, native_bf16 = cuda_math(torch)
    assert native_bf16 == torch.cuda.is_bf16_supported(including_emulation=False)
    assert tf32 == (torch.cuda.get_device_capability()[0] >= 8)
    assert amp_choice(True, native_bf16) == ("bf16-mixed" if native_bf16 else "16-mixed")
    assert name in matmul_effect("high", (name, tf32, native_bf16), False)
