"""The doctor's rules on the step itself: per-step overhead (steps too short for the
framework's fixed work) and model-bound runs (the compute is the whole step), with what the
hardware the run measured can do about it."""

from __future__ import annotations

from speedlab.analysis.data import DATA_SHARE_WARN
from speedlab.analysis.findings import batch_size, device_name
from speedlab.analysis.launches import launch_waits, launches_first
from speedlab.analysis.utilisation import utilisation
from speedlab.measure.devices import device_for
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

MODEL_BOUND_DATA_SHARE = 0.05
"""data share below which the model's compute is the whole step."""
OVERHEAD_STEP_S = 0.008
"""Step time below which per-step overhead dominates. Lightning's fixed work per step
(hooks, logging, optimizer bookkeeping, zero_grad) and kernel launches cost about 1-3 ms, so
a step under 8 ms spends a large part of its time on them."""
OVERHEAD_STEP_CRITICAL_S = 0.004
"""Step time below which overhead is most of the step (critical)."""
BATCH_SIZE_FACTOR = 4
"""How much larger a batch the doctor suggests for an overhead-bound run."""
HIDDEN_LOADING_FACTOR = 2.0
HIDDEN_LOADING_MIN_S = 0.001
"""On an asynchronous device, the loading is hidden behind the device's work where the host
waited more than twice, and a millisecond more than, the time the device sat idle for input."""


def overhead_bound(run: RunResult) -> list[Finding]:
    """Steps that are mostly per-step overhead: on an asynchronous device, from its timeline
    (it waited on the host's launches); elsewhere, from the step's length."""
    waits = launch_waits(run)
    if waits is not None:
        return _launch_bound(run, *waits)
    step = run.step_time
    if not step < OVERHEAD_STEP_S:
        return []
    batch = batch_size(run)
    severity = "critical" if step < OVERHEAD_STEP_CRITICAL_S else "warn"
    evidence = (
        f"A step takes {fmt_ms(step)} for {batch} samples (data {fmt_ms(run.data_time)}, batch "
        f"{fmt_ms(run.batch_time)}); the framework's fixed work per step (hooks, logging, optimizer "
        "bookkeeping, kernel launches) is about 1-3 ms, so much of each step is overhead."
        + utilisation(run)
    )
    advice = (
        "A larger batch spreads that fixed cost over more samples, so samples/s rises until the "
        "hardware is busy. It changes the optimisation too: compare samples/s, and scale the "
        "learning rate if the loss suffers."
    )
    summary = f"Steps of {fmt_ms(step)} are mostly the framework's fixed work per step"
    return [_larger_batch(run, evidence, advice, severity, summary)]


def _launch_bound(run: RunResult, waits: bool, evidence: str) -> list[Finding]:
    data_waits = run.data_share >= DATA_SHARE_WARN
    if not waits or (data_waits and not launches_first(run)):
        return []  # not paced by the host, or limited by its data first
    if data_waits:
        evidence += (
            f" It also sat idle {fmt_ms(run.data_time)} a step ({run.data_share:.0%} of the step) for "
            "want of input: less than it waited for launches, so the launches come first."
        )
    advice = (
        "Give each launch more work: a larger batch costs the same launches for more samples; "
        "torch.compile fuses operations into fewer kernels (mode='reduce-overhead' also replays "
        "the compiled forward and backward as CUDA graphs on a GPU; the optimizer step, "
        "Lightning's own work and any graph breaks still launch one by one); fewer, larger "
        "tensor operations in the step (no Python loops over small tensors)."
    )
    summary = f"The {device_name(run)} waits on the host's launches"
    return [_larger_batch(run, evidence + utilisation(run), advice, "critical", summary)]


def _larger_batch(
    run: RunResult, evidence: str, advice: str, severity: str, summary: str
) -> Finding:
    """An ``overhead_bound`` finding, which tries a batch ``BATCH_SIZE_FACTOR`` times larger."""
    value = BATCH_SIZE_FACTOR * batch_size(run)
    return Finding("overhead_bound", evidence, advice, "batch_size", severity, value, summary)


def _overhead(run: RunResult) -> bool:
    """Whether per-step overhead, not the model's compute, sets the step's pace (the rules of
    ``overhead_bound``)."""
    waits = launch_waits(run)
    return run.step_time < OVERHEAD_STEP_S if waits is None else waits[0]


def hidden_loading(run: RunResult) -> str:
    """A sentence where the host waited for the loader while the device kept working ('' if not):
    the wait is hidden, so loading knobs cannot speed the run up."""
    host = run.host_data_time
    if not host > HIDDEN_LOADING_FACTOR * run.data_time + HIDDEN_LOADING_MIN_S:
        return ""
    return (
        f" The host waited {fmt_ms(host)} a step for the loader, but the {device_name(run)} sat "
        f"idle only {fmt_ms(run.data_time)}: the loading runs while the device works, so more "
        "workers or preloading would not make this run faster."
    )


def model_bound(run: RunResult) -> list[Finding]:
    if not run.data_share < MODEL_BOUND_DATA_SHARE or _overhead(run):
        return []
    evidence = (
        f"Data is {run.data_share:.0%} of the step: the model's compute ({fmt_ms(run.batch_time)} "
        "per step) is the bottleneck." + hidden_loading(run) + utilisation(run)
    )
    summary = f"The model's compute takes {1 - run.data_share:.0%} of each step"
    k = run.knobs
    compiled = k.get("compile") not in (None, "off") or run.phases.get("compile", 0) > 0
    if run.device != "cpu":
        return [_device_bound(run, evidence, summary, compiled)]
    math = run.workload.get("math", {})  # the facts of the CPU the run trained on
    bf16 = math.get("bf16")
    medium = (
        "on its bf16 units"
        if bf16
        else "through oneDNN's bf16 path, which without bf16 units (AVX512-BF16, AMX) changes "
        "the results but is rarely faster"
    )
    high = (
        "--matmul high runs them in TF32 (this CPU has AMX-FP16)"
        if math.get("matmul_high")
        else "--matmul high changes nothing (no TF32 on this CPU)"
    )
    matmul = {
        True: f"--matmul medium runs all but its tiny float32 matmuls in bf16 {medium}, {high}; ",
        False: "--matmul changes nothing (oneDNN has no TF32 or bf16 path on this CPU); ",
    }.get(math.get("matmul_medium"), "")
    advice = (
        "On this CPU: "
        + matmul
        + (
            "this CPU has bf16 instructions, so --precision bf16-mixed may help. "
            if bf16
            else "it has no bf16 instructions (AVX512-BF16/AMX), so bf16-mixed is usually slower. "
            if bf16 is False
            else ""
        )
        + "--compile on can trim some time per step but costs compiling first (seconds for a "
        "small model, minutes for a large one) "
        "(compile_payback in a sweep with --compile off,on says when it pays). Beyond that: a "
        "smaller model or a GPU."
    )
    if bf16 and k.get("precision") in (None, "32-true"):
        return [
            Finding("model_bound", evidence, advice, "precision", "info", "bf16-mixed", summary)
        ]
    if not compiled:
        return [Finding("model_bound", evidence, advice, "compile", "info", "on", summary)]
    summary += "; a smaller model or faster hardware would help, no knob here does"
    return [Finding("model_bound", evidence, advice, None, "info", summary=summary)]


def _device_bound(run: RunResult, evidence: str, summary: str, compiled: bool) -> Finding:
    """A model-bound run on a device other than the CPU: what may speed its compute up there,
    and the first knob of those not tried yet; never one the device refuses, nor a --matmul
    level that changes nothing there. Tensor cores and TF32 are named only on a CUDA GPU."""
    device, k = device_for(run.device), run.knobs
    amp = device.refusal("precision", "amp") is None
    compiles = device.refusal("compile", "on") is None
    notes = "" if compiles else f" --compile does not apply on the {device.name}."
    if run.device == "cuda":
        # cuBLAS's TF32, from Ampere on; inert where the run's own level changed nothing.
        acts = run.workload.get("matmul_changes") is not False or k.get("matmul") == "highest"
        levers = [
            "mixed precision (--precision amp) uses the tensor cores (Volta and newer)"
            if amp
            else "",
            "--compile on fuses kernels" if compiles else "",
            "--matmul high runs float32 matmuls (Linear layers) in TF32 on Ampere and newer; it "
            "does not touch convolutions, which cuDNN runs in TF32 already"
            if acts
            else "",
        ]
    else:
        note, acts = device.matmul("high")
        levers = [
            f"--precision amp computes in a 16-bit format where the {device.name} can"
            if amp
            else "",
            "--compile on fuses kernels" if compiles else "",
            "--matmul high may change float32 matmuls there (the run's verdict says whether it "
            "was faster)"
            if acts
            else "",
        ]
        notes += "" if acts else f" {note}"
    said = [lever for lever in levers if lever]
    advice = (
        "Speed up the compute: "
        + (", ".join(said[:-1]) + ", and " if len(said) > 1 else "")
        + (said[-1] if said else "no knob does it here; a smaller model or faster hardware would")
        + "."
        + notes
    )
    if amp and k.get("precision") in (None, "32-true", "64-true"):
        return Finding("model_bound", evidence, advice, "precision", "info", "amp", summary)
    if compiles and not compiled:
        return Finding("model_bound", evidence, advice, "compile", "info", "on", summary)
    if acts and k.get("matmul") in (None, "highest"):
        return Finding("model_bound", evidence, advice, "matmul", "info", "high", summary)
    summary += "; a smaller model or faster hardware would help, no knob here does"
    return Finding("model_bound", evidence, advice, None, "info", summary=summary)
