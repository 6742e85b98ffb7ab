"""Generate the lab datasets the lessons use, ahead of time (Binder's postBuild runs this).

python -m speedlab.labs.prepare
"""

from __future__ import annotations

import time

from speedlab.labs.images import make_shapes
from speedlab.labs.tabular import make_tabular

#: The image datasets the lesson notebooks open: the default lab, and its larger-image variant.
IMAGE_SETS = ({}, {"size": 128})


def prepare() -> list[str]:
    """Generate (or find cached) every lesson dataset; returns what was made, one line each."""
    lines = []
    for params in IMAGE_SETS:
        start = time.perf_counter()
        folder = make_shapes(**params)
        lines.append(f"{folder} ({time.perf_counter() - start:.1f} s)")
    make_tabular()  # generated in memory: this only warms the import
    return lines


if __name__ == "__main__":
    for line in prepare():
        print(line)
