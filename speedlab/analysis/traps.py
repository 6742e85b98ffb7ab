"""The doctor's rule on notebook traps: DataLoader worker set-ups that fail in a notebook, or
work there only by accident (a dataset class defined in a cell, workers dying on a small
/dev/shm)."""

from __future__ import annotations

from speedlab.analysis.findings import Finding
from speedlab.results.run import RunResult

_WORKERS_DIED = ("exited unexpectedly", "bus error", "shared memory", "shm")


def notebook_traps(run: RunResult) -> list[Finding]:
    findings = []
    for note in run.notes:
        if "is defined in the notebook" in note:
            findings.append(
                Finding(
                    "notebook_trap",
                    note,
                    "It ran here only because speedlab switched the workers to fork. Outside "
                    "speedlab, or where fork is missing or unsafe (Windows, macOS), the workers "
                    'fail with "Can\'t get attribute". Move the class into a .py file next to '
                    "the notebook and import it from there.",
                    None,
                    "info",
                )
            )
    error = run.error or ""
    if "is defined in the notebook" in error or "Can't get attribute" in error:
        findings.append(
            Finding(
                "notebook_trap",
                f"The run failed: {error}",
                "Workers started with spawn or forkserver import the dataset's class by name, and "
                "a class defined in a notebook cell cannot be imported. Move it into a .py file "
                "next to the notebook and import it, or use --workers 0.",
                "workers",
                "critical",
                0,
            )
        )
    elif any(word in error.lower() for word in _WORKERS_DIED):
        findings.append(
            Finding(
                "notebook_trap",
                f"The run failed: {error}",
                "DataLoader workers died. In Docker and on Binder the usual cause is a small "
                "/dev/shm (64 MB by default), through which workers hand batches over: use "
                "--workers 0, smaller batches, a larger /dev/shm (docker run --shm-size=1g) or "
                "torch.multiprocessing.set_sharing_strategy('file_system'). Other causes: a "
                'dataset class defined in the notebook under spawn ("Can\'t get attribute" in '
                "the log), or the memory limit (each worker is a whole process).",
                "workers",
                "critical",
                0,
            )
        )
    return findings
