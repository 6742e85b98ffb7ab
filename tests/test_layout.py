"""The package's layout: small modules, each in its layer (the layers themselves: lint-imports)."""

from __future__ import annotations

from pathlib import Path

import speedlab

MAX_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    package = Path(speedlab.__file__).parent
    sizes = {p.relative_to(package): len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
