"""Time and peak RSS (kernel plus DataLoader workers) of every lesson and assignment notebook.

Binder gives about 2 GB per user: every notebook must stay under it.

    .venv/bin/python benchmarks/notebook_memory.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.nbexec import NOTEBOOKS, execute

LIMIT_BYTES = 2 * 1024**3


def main() -> int:
    paths = sorted(NOTEBOOKS.glob("*.ipynb")) + sorted(
        NOTEBOOKS.glob("assignments/*_solution.ipynb")
    )
    worst = 0
    for path in paths:
        with tempfile.TemporaryDirectory() as workdir:
            run = execute(path, Path(workdir))
        worst = max(worst, run.peak_rss_bytes)
        print(
            f"{path.relative_to(NOTEBOOKS)!s:45s} {run.seconds:6.0f} s   peak RSS {run.peak_rss_bytes / 2**20:6.0f} MiB"
        )
    print(f"largest peak: {worst / 2**20:.0f} MiB (limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    return 0 if worst < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
