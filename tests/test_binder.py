"""The Binder set-up agrees with pyproject, and its postBuild step runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"


def binder_requirements() -> dict[str, Requirement]:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    reqs = [Requirement(line) for line in lines if line and not line.startswith(("#", "-", "."))]
    return {r.name.lower(): r for r in reqs}


BINDER_EXTRAS = ("notebook", "decoders")
"""The optional extras a workshop needs: JupyterLab, and lesson 03's faster decoder."""


def project_requirements() -> dict[str, Requirement]:
    """The project's dependencies and those of ``BINDER_EXTRAS``, by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [d for extra in BINDER_EXTRAS for d in project["optional-dependencies"][extra]]
    return {Requirement(d).name.lower(): Requirement(d) for d in project["dependencies"] + extras}


def test_binder_installs_the_same_packages_at_compatible_versions() -> None:
    binder, project = binder_requirements(), project_requirements()
    assert set(binder) == set(project)
    for name, req in binder.items():
        (pin,) = req.specifier
        assert pin.operator == "==", f"{name}: pin an exact version for reproducible workshops"
        if name in project:
            assert project[name].specifier.contains(pin.version, prereleases=True), (name, pin)


def test_binder_installs_the_project_itself_and_a_cpu_torch() -> None:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    assert "." in lines  # repo2docker ignores the root pyproject once binder/ exists
    assert binder_requirements()["torch"].specifier.__str__().endswith("+cpu")
    assert any(line.startswith("--extra-index-url") and "/cpu" in line for line in lines)


def test_postbuild_generates_the_lesson_datasets(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="postBuild builds the datasets with the labs' torch code")
    env = {
        **os.environ,
        "SPEEDLAB_CACHE": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    out = subprocess.run(
        ["bash", str(BINDER / "postBuild")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert made == ["shapes-n2000-s128-q85-c4-seed0", "shapes-n2000-s64-q85-c4-seed0"]
    assert all((tmp_path / name / "manifest.json").exists() for name in made)


def test_the_readme_badge_launches_this_repository_with_the_quickstart_open() -> None:
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"][
        "Repository"
    ]
    owner_repo = repository.removeprefix("https://github.com/")
    readme = (ROOT / "README.md").read_text()
    badge = re.match(
        r"# speedlab\n\n\[!\[[^]]+\]\(https://mybinder.org/badge_logo.svg\)\]\((\S+)\)", readme
    )
    assert badge, "the README starts with the Binder badge"
    link = badge.group(1)
    assert link.startswith(f"https://mybinder.org/v2/gh/{owner_repo}/main?urlpath=lab/tree/")
    assert (ROOT / link.split("urlpath=lab/tree/")[1]).is_file()
    assert link.endswith("notebooks/00_quickstart.ipynb")
