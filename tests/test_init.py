"""The package's public names: each one what the docs say, however the submodules were loaded."""

from __future__ import annotations

import subprocess
import sys


def test_public_names_stay_themselves_after_every_submodule_is_imported() -> None:
    # Importing speedlab.X sets the package's attribute X to that module, so a submodule named
    # like a public function would turn speedlab.X(...) into "'module' object is not callable".
    code = (
        "import importlib, pkgutil, types, speedlab\n"
        "for info in pkgutil.walk_packages(speedlab.__path__, 'speedlab.'):\n"
        "    importlib.import_module(info.name)\n"
        "bad = [n for n in speedlab.__all__ if n != 'labs' and isinstance(getattr(speedlab, n), types.ModuleType)]\n"
        "print(bad, callable(speedlab.lint), callable(speedlab.autotune))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True", "True"]
