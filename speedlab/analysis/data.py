"""The doctor's rules on waiting for data: data-bound runs split into I/O-bound (the loaders
wait for storage) and CPU-bound (decoding and augmenting keep them busy), the hand-over of
batches from workers that keep up, and workers oversubscribing the cores.

The split rests on how busy the loading processes were (``loader_busy``), so the rules, their
thresholds and the figures they read live together here.
"""

from __future__ import annotations

import statistics

from speedlab.analysis.compare import other_processes_cores, run_cores, run_cpu
from speedlab.analysis.findings import device_name, torch_threads
from speedlab.analysis.launches import launches_first
from speedlab.measure.devices import device_for
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

DATA_SHARE_WARN = 0.10
"""data_time over step_time from which a run is data-bound (a warning)."""
DATA_SHARE_CRITICAL = 0.20
"""data share from which data-bound is critical: a fifth of every step waits for data."""
LOADER_BUSY_MIN = 0.5
"""CPU each loading process keeps busy (in cores, see ``loader_busy``) below which a data-bound
run is I/O-bound (the loaders mostly wait) rather than CPU-bound (decoding and augmenting keep
them busy)."""
CONTENDED_CORES = 0.5
"""CPU (in cores) other processes must use during a run before the evidence says the machine
was shared: the run's CPU figures then understate what its processes wanted, and the I/O-vs-CPU
split is less certain."""
WORKERS_KEEP_UP = 0.5
"""Share of their time the workers spend making batches (from their stamps) below which they
keep up: a data wait is then the hand-over of batches to the main process, not the loading."""
IOWAIT_NOTABLE = 5.0
"""Machine iowait percent worth naming in the evidence (real disks; a simulated throttle sleeps
and shows none)."""
IN_MEMORY_DATASETS = frozenset({"TensorDataset"})
"""Datasets whose samples are tensors in memory: their loading cost is indexing and collation."""
COPY_SHARE = 0.5
"""Share of the device's wait for input taken by the host-to-device copy (where the device's
timeline shows it) from which the copy, not the loader, limits the run."""


def workers_making(run: RunResult) -> float | None:
    """Share of their time the workers spent making batches (their stamps), or None."""
    stamps = run.records.get("pipeline") or {}
    batches: dict[int, list[tuple[float, float]]] = {}
    for worker, start, end in zip(
        stamps.get("worker", []), stamps.get("start", []), stamps.get("end", []), strict=False
    ):
        batches.setdefault(worker, []).append((start, end))
    shares = []
    for made in batches.values():
        lived = max(end for _, end in made) - min(start for start, _ in made)
        if lived > 0:
            shares.append(sum(end - start for start, end in made) / lived)
    return statistics.fmean(shares) if shares else None


def loader_busy(run: RunResult) -> float | None:
    """The CPU each data-loading process kept busy, in cores (0-1); None without CPU figures.

    With workers: their measured CPU over the cores they could use (a worker runs one torch
    thread), per second spent making batches when their stamps say how long that was. Without
    workers the main process loads between steps, in the training thread: where the sampler
    measured that thread's CPU, loading is what it used beyond the compute part of the step.
    Otherwise the process's CPU is split by a model: on a CPU, the step computes on torch's
    threads (``torch_threads``, at most the cores), and while the main thread loads or waits,
    torch's other threads are taken to spin (OpenMP waits actively for a while), so they count
    as busy; loading's share is what is left. On a GPU the step keeps one core busy. All three
    assume the run had the cores to itself: when other processes take CPU, the main process
    gets less and loading looks idler than it was.
    """
    s = run.system
    if s.main_cpu_percent is None:
        return None
    cores, workers = run_cores(run), run.loader_workers()
    if workers > 0:
        if s.workers_cpu_percent is None:
            return None
        cpu = s.workers_cpu_percent / 100 / min(workers, cores)
        making = workers_making(run)
        return min(cpu / making if making else cpu, 1.0)
    share = run.data_share
    if not share > 0:
        return None
    thread = s.train_thread_cpu_percent
    if thread is not None:
        # The training thread is busy all through the compute part of the step; what it
        # used beyond that went to loading.
        return min(max((thread / 100 - (1 - share)) / share, 0.0), 1.0)
    main = s.main_cpu_percent / 100
    if run.device == "cpu":
        threads = min(torch_threads(run), cores)
        loading = main - (1 - share) * threads - share * (threads - 1)
    else:
        loading = main - (1 - share)
    return min(max(loading / share, 0.0), 1.0)


def _bursty(run: RunResult) -> bool:
    """Whether the waits come in bursts: the run's data share well above the typical step's
    (workers that cannot keep up hand over several batches at once, then make the loop wait)."""
    return run.data_share > run.steady.typical_share + DATA_SHARE_WARN / 2


def data_bound(run: RunResult) -> list[Finding]:
    share = run.data_share
    if not share >= DATA_SHARE_WARN or launches_first(run):
        return []  # not waiting for data, or waiting on launches longer (``overhead_bound``)
    severity = "critical" if share >= DATA_SHARE_CRITICAL else "warn"
    workers, cores, threads = run.loader_workers(), run_cores(run), torch_threads(run)
    head = (
        f"Each step waits {fmt_ms(run.data_time)} for data and computes {fmt_ms(run.batch_time)}: "
        f"data is {share:.0%} of the step."
    )
    if _bursty(run):
        head = (
            f"Steps wait {fmt_ms(run.data_time)} for data on average, in bursts (the typical step "
            f"waits {fmt_ms(run.steady.typical_data)}), and compute {fmt_ms(run.batch_time)}: "
            f"data is {share:.0%} of the step."
        )
    copy = run.copy_time
    if copy is not None and copy >= COPY_SHARE * run.data_time:
        return [_copy_bound(run, head, copy, severity)]
    making = workers_making(run) if workers else None
    if making is not None and making < WORKERS_KEEP_UP:
        return [_handover(run, head, making, severity)]
    if run.workload.get("dataset") in IN_MEMORY_DATASETS and run.ran.get("preload") in (
        None,
        "off",
    ):
        return [_in_memory(run, head, severity)]
    busy = loader_busy(run)
    if busy is None:
        return [
            Finding(
                "cpu_bound",
                head + " No CPU figures were sampled, so I/O and CPU cannot be told apart.",
                "Try DataLoader workers and --preload ram "
                "(%speedlab explain workers says when each helps).",
                "workers",
                severity,
                max(1, cores - _training_cores(run)),
                summary=f"Waiting for data takes {share:.0%} of each step, and without CPU "
                "figures its cause is unknown",
            )
        ]
    if workers:
        who = (
            f"The {workers} worker(s) used {run.system.workers_cpu_percent:.0f}% of a core "
            "together"
            + (f" while making batches {making:.0%} of the time" if making is not None else "")
            + f": each kept about {busy:.0%} of a core busy"
        )
    elif run.system.train_thread_cpu_percent is not None:
        who = (
            "Loading runs in the training thread (workers=0), which was busy "
            f"{run.system.train_thread_cpu_percent:.0f}% of the time: loading kept it busy "
            f"about {busy:.0%} of its data wait"
        )
    else:
        who = (
            f"Loading runs in the main process (workers=0), which used "
            f"{run.system.main_cpu_percent:.0f}% of a core with torch's {threads} thread(s); "
            f"loading kept it busy about {busy:.0%} of its data wait"
        )
    iowait = run.system.iowait_percent
    who += (
        f"; the machine's iowait was {iowait:.0f}%." if iowait and iowait >= IOWAIT_NOTABLE else "."
    )
    others = other_processes_cores(run)
    who += _contention(run)
    preload = run.ran.get("preload")
    if preload in ("ram", "shm"):
        who += (
            f" With preload={preload} the data is read from memory, so the wait is CPU work "
            "(decoding or the per-step transform, and the hand-over), not storage."
        )
    elif busy < LOADER_BUSY_MIN and others >= CONTENDED_CORES:
        return [_storage_or_contention(run, head + " " + who)]
    elif busy < LOADER_BUSY_MIN:
        return [_io_bound(run, head + " " + who, severity)]
    return [_cpu_bound(run, head + " " + who, severity)]


def _copy_bound(run: RunResult, head: str, copy: float, severity: str) -> Finding:
    pinned = run.ran.get("pin_memory") is True
    summary = (
        f"Copying batches to the {device_name(run)} takes {copy / run.step_time:.0%} of each step"
    )
    evidence = (
        f"{head} Of that wait, {fmt_ms(copy)} is the copy of the batch to the {device_name(run)}: "
        "the time goes to the copy, not to storage or decoding."
    )
    if pinned or not device_for(run.device).pins_memory:
        why = (
            "The batches are pinned already"
            if pinned
            else f"Pinned memory does not act on the {device_name(run)}'s copies"
        )
        advice = (
            f"{why}: copy fewer bytes (uint8 images, converted and normalised on the device), "
            "or overlap the copy with the previous step's work."
        )
        summary += ", pinned already; copy fewer bytes" if pinned else "; copy fewer bytes"
        return Finding("copy_bound", evidence, advice, None, severity, summary=summary)
    advice = (
        "A copy from pageable memory makes the host wait for the device's earlier work and for "
        "the copy itself. From pinned (page-locked) batches the copy is faster (direct memory "
        "access) and Lightning's non-blocking copy returns at once, so the host can queue the "
        "next work; the copy still runs after the step's earlier kernels, in the same stream "
        "(overlapping it with compute needs a separate CUDA stream). Measure it, as pinning "
        "costs the loader time too."
    )
    return Finding("copy_bound", evidence, advice, "pin_memory", severity, True, summary)


def _contention(run: RunResult) -> str:
    """A sentence on other processes' use of the cores, where it slowed the run ('' if not)."""
    others = other_processes_cores(run)
    if others < CONTENDED_CORES:
        return ""
    cpu = run_cpu(run)
    of = f"the {cpu:g} cores of its CPU quota" if cpu < run_cores(run) else f"its {cpu:g} cores"
    return (
        f" Other processes used about {others:.1f} of {of} meanwhile: this run's figures are "
        "slower than on a quiet machine."
    )


def _in_memory(run: RunResult, head: str, severity: str) -> Finding:
    """A wait for samples that are tensors in memory already: CPU work, never storage."""
    where = (
        f"in {run.loader_workers()} worker(s)" if run.loader_workers() else "in the main process"
    )
    evidence = (
        f"{head} The samples are tensors in memory ({run.workload['dataset']}): nothing is read "
        f"from storage, so the wait is CPU work {where}, indexing one row at a time and "
        "collating the rows into a batch." + _contention(run)
    )
    advice = (
        "Neither --preload ram nor workers removes the per-row overhead: the rows are in "
        "memory already (preloading would cache the same tensors), and workers only share the "
        "per-row Python work out among processes. Index whole batches at once: "
        "DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), batch_size, drop_last=False), "
        "batch_size=None) makes the dataset gather each batch in one operation; a larger "
        "--batch-size spreads the rest."
    )
    summary = (
        f"Indexing in-memory tensors one row at a time takes {run.data_share:.0%} of each step; "
        "index whole batches at once"
    )
    return Finding("cpu_bound", evidence, advice, None, severity, summary=summary)


def _handover(run: RunResult, head: str, making: float, severity: str) -> Finding:
    evidence = (
        f"{head} The {run.loader_workers()} worker(s) spent only {making:.0%} of their time making "
        "batches: they keep up, and the wait is the hand-over, the main process receiving each "
        "batch from a worker (through shared memory)."
    )
    advice = (
        "More workers will not shorten it. The hand-over costs per byte: smaller batches in "
        "memory (uint8 images, normalised on the device) shrink it; --workers 0 avoids it when "
        "loading itself is cheap (compare both)."
    )
    summary = (
        f"Receiving batches from the workers takes {run.data_share:.0%} of each step; smaller "
        "batches in memory shrink it"
    )
    return Finding("cpu_bound", evidence, advice, None, severity, summary=summary)


def _storage_or_contention(run: RunResult, evidence: str) -> Finding:
    """Idle loaders on a shared machine: a wait for storage and a wait for a core look alike."""
    advice = (
        "The loading was mostly idle while the step waited, as when it waits for storage; but "
        "with other processes on the cores it may have waited for a core instead, and these "
        "figures cannot tell the two apart. Measure again on a quieter machine (or with "
        "--repeat 3) before changing a knob: if the wait stays, DataLoader workers keep reads "
        "in flight and --preload ram removes them; if it goes, it was the other work."
    )
    summary = (
        f"Waiting for data takes {run.data_share:.0%} of each step, for storage or for busy "
        "cores; measure again on a quieter machine"
    )
    return Finding("io_bound", evidence, advice, None, "warn", summary=summary)


def _io_bound(run: RunResult, evidence: str, severity: str) -> Finding:
    workers, cores = run.loader_workers(), run_cores(run)
    summary = f"Waiting for storage takes {run.data_share:.0%} of each step"
    if workers == 0:
        advice = (
            "The loader waits for storage, not for the CPU. DataLoader workers keep several reads "
            "in flight while the model trains, and waiting costs no CPU; what they decode and "
            "augment still takes cores from torch's threads, so on a few cores measure them "
            "(--workers 0,N). If the data fits in memory, --preload ram reads it once before "
            "training and removes the reads from every step."
        )
        return Finding("io_bound", evidence, advice, "workers", severity, max(2, cores), summary)
    advice = (
        f"{workers} worker(s) already wait in parallel and the step still waits. "
        "--preload ram reads every file once, before training (the preload phase), if the "
        "data fits in memory; otherwise more workers put more reads in flight."
    )
    return Finding("io_bound", evidence, advice, "preload", severity, "ram", summary)


_DECODER = (
    "Decoding JPEGs costs less with a faster decoder (simplejpeg, pillow-simd) or by decoding "
    "at reduced size (Pillow's Image.draft), where images are stored larger than the model "
    "trains on; lesson 03 measures them."
)


def _ram_keeps(run: RunResult) -> str:
    """What ``--preload ram`` would leave to each step of the run's dataset (``ram_cache``)."""
    if run.workload.get("ram_cache") == "loads":
        return "its load/transform split keeps augmentation running each step"
    return (
        "a dataset without a load/transform split is cached whole: a random augmentation is "
        "drawn once, then frozen"
    )


def _training_cores(run: RunResult) -> int:
    """Cores the training process keeps busy: torch's threads where the model trains on them (a
    synchronous device: the CPU); about one on an asynchronous device, whose threads mostly sit
    idle while it computes."""
    return torch_threads(run) if not device_for(run.device).asynchronous else 1


def _cpu_bound(run: RunResult, evidence: str, severity: str) -> Finding:
    workers, cores, threads = run.loader_workers(), run_cores(run), torch_threads(run)
    on_threads = not device_for(run.device).asynchronous  # the model computes on torch's threads
    spare = cores - _training_cores(run) - workers
    preload = run.ran.get("preload", "off")
    summary = f"Building batches on the CPU takes {run.data_share:.0%} of each step"
    tight = (
        f"This machine has {cores} cores and "
        + (
            f"torch computes on {threads} thread(s) (torch.get_num_threads()), so "
            if on_threads
            else f"the model computes on the {device_name(run)} while the training process "
            "keeps about one core busy, so "
        )
        + (
            f"workers would take CPU from the {'model' if on_threads else 'training process'}. "
            if spare <= 0
            else f"{spare} core(s) are free. "
        )
    )
    if preload in (None, "off"):
        advice = (
            "Building batches keeps the loader's CPU busy: reading and decoding the samples, "
            "augmenting them, collating them. "
            + tight
            + f"--preload ram decodes every sample once, before training ({_ram_keeps(run)}); "
            "DataLoader workers (--workers N) decode in parallel and pay off when cores are free. "
            + _DECODER
        )
        if spare > 0:
            return Finding(
                "cpu_bound", evidence, advice, "workers", severity, workers + spare, summary
            )
        return Finding("cpu_bound", evidence, advice, "preload", severity, "ram", summary)
    if preload == "shm":
        advice = (
            "preload=shm took the reads off storage, but every step still decodes the files. "
            f"--preload ram decodes each sample once, before training ({_ram_keeps(run)}), if "
            "the decoded samples fit in memory. " + _DECODER
        )
        return Finding("cpu_bound", evidence, advice, "preload", severity, "ram", summary)
    advice = (
        "The samples are already decoded in memory; what is left is the per-step transform "
        "(augmentation, collation). " + tight
    )
    if spare > 0:
        advice += f"Workers can run it beside the model: --workers {workers + spare}."
        return Finding("cpu_bound", evidence, advice, "workers", severity, workers + spare, summary)
    advice += "No knob frees CPU here: a lighter transform would" + (
        ", or fewer torch threads (torch.set_num_threads) for more workers."
        if on_threads
        else f", or augmenting on the {device_name(run)}."
    )
    summary += "; a lighter transform would help, no knob here does"
    return Finding("cpu_bound", evidence, advice, None, severity, summary=summary)


def oversubscribed(run: RunResult) -> list[Finding]:
    """Workers, or other processes, and torch's threads together over the cores, where the
    model trains on those threads (a synchronous device: the CPU); on a GPU they mostly sit idle
    while it computes."""
    if device_for(run.device).asynchronous:
        return []
    workers, cores, threads = run.loader_workers(), run_cores(run), torch_threads(run)
    if workers == 0 or workers + threads <= cores or _waits_on_storage(run):
        return _shared_with_others(run)
    severity = "critical" if workers + threads >= 2 * cores else "warn"
    fewer = max(0, cores - threads)
    fewer = fewer if fewer < workers else workers - 1
    used = (run.system.workers_cpu_percent or 0.0) / 100
    evidence = (
        f"{workers} worker(s) + {threads} torch thread(s) (torch.get_num_threads()) = "
        f"{workers + threads} threads on {cores} cores; the workers used {used:.2f} cores and "
        f"batch_time is {fmt_ms(run.batch_time)}." + _contention(run)
    )
    advice = (
        "Each time a worker runs it takes a core from one of torch's threads, and those wait "
        "for each other at every operation, so batch_time can grow as workers are added, even "
        "when they do little (compare it across --workers 0,N). Use fewer workers (with 0, "
        "loading runs between steps), or give torch fewer threads: "
        f"torch.set_num_threads({max(1, cores - workers)}) at the top of the cell."
    )
    summary = (
        f"{workers} worker(s) and {threads} torch thread(s) share {cores} cores, slowing the "
        "model's step"
    )
    return [Finding("oversubscribed", evidence, advice, "workers", severity, fewer, summary)]


def _shared_with_others(run: RunResult) -> list[Finding]:
    """Other processes' CPU and torch's threads together over the cores: each operation's
    threads wait for the one whose core another process holds."""
    cores, threads, others = run_cores(run), torch_threads(run), other_processes_cores(run)
    if others < CONTENDED_CORES or threads + others <= cores:
        return []
    left = max(1, int(cores - others))
    evidence = (
        f"Other processes used about {others:.1f} of the {cores} cores while the model trained "
        f"on {threads} torch thread(s) (torch.get_num_threads()); batch_time is "
        f"{fmt_ms(run.batch_time)}."
    )
    advice = (
        "torch's threads wait for each other at every operation, so while another process holds "
        "one of their cores, each operation waits for the scheduler to give it back (a time "
        "slice of a few milliseconds): a small step slows down far more than the CPU the others "
        "took. Train when the machine is quiet, or give torch only the cores left: "
        f"torch.set_num_threads({left}) at the top of the cell."
    )
    summary = (
        f"Other processes took about {others:.1f} of the {cores} cores torch's {threads} "
        f"thread(s) compute on; try torch.set_num_threads({left})"
    )
    return [Finding("oversubscribed", evidence, advice, None, "warn", summary=summary)]


def _waits_on_storage(run: RunResult) -> bool:
    """Whether the run is I/O-bound: its loaders mostly wait, so they take no cores."""
    return any(f.kind == "io_bound" for f in data_bound(run))
