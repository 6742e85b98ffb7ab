"""The doctor's rule on notebook traps: DataLoader worker set-ups that fail in a notebook, or
work there only by accident (a dataset class defined in a cell, workers dying on a small
/dev/shm).

A class defined in the notebook is a fact of the run, not a sentence to look for: the run
records it in ``run.workload["notebook_class"]`` (``name``, ``start_method`` and ``forked``:
whether speedlab forked the workers for it, or refused the run). Only the errors of the
workers themselves, which come from outside speedlab, are read as text.
"""

from __future__ import annotations

from speedlab.results.findings import Finding
from speedlab.results.run import RunResult

_WORKERS_DIED = ("exited unexpectedly", "bus error", "shared memory", "shm")
_CANNOT_IMPORT = "Can't get attribute"  # pickle's own words, from a worker that could not import


def notebook_traps(run: RunResult) -> list[Finding]:
    findings = []
    notebook_class = run.workload.get("notebook_class")
    if notebook_class is not None and notebook_class["forked"]:
        findings.append(
            Finding(
                "notebook_trap",
                f"{notebook_class['name']} is defined in the notebook and workers start with "
                f"'{notebook_class['start_method']}' here, which cannot import it: speedlab "
                "started the workers with 'fork' instead.",
                "It ran here only because speedlab switched the workers to fork. Outside "
                "speedlab, or where fork is missing or unsafe (Windows, macOS), the workers "
                'fail with "Can\'t get attribute". Move the class into a .py file next to '
                "the notebook and import it from there.",
                None,
                "info",
                summary=f"{notebook_class['name']} is defined in the notebook, so its workers "
                "ran only because speedlab forked them; move it into a .py file",
            )
        )
    error = run.error or ""
    refused = notebook_class is not None and not notebook_class["forked"]
    if error and (refused or _CANNOT_IMPORT in error):
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
                "The run failed: the workers cannot import a dataset class defined in the notebook",
            )
        )
    elif any(word in error.lower() for word in _WORKERS_DIED):
        findings.append(
            Finding(
                "notebook_trap",
                f"The run failed: {error}",
                "DataLoader workers died. In Docker and on Binder the usual cause is a small "
                "/dev/shm (64 MB by default), through which workers hand batches over: use "
                "--workers 0, smaller batches, or a larger /dev/shm (docker run --shm-size=1g) "
                "(torch's 'file_system' sharing strategy uses /dev/shm too: it is for 'too many "
                "open files'). Other causes: a "
                'dataset class defined in the notebook under spawn ("Can\'t get attribute" in '
                "the log), or the memory limit (each worker is a whole process).",
                "workers",
                "critical",
                0,
                "The run failed: DataLoader workers died, most often of a small /dev/shm",
            )
        )
    return findings
