"""The panel's results where its widgets are drawn and where they are not, in real Chromium.

An ``nbconvert --to html --execute`` export (default settings: the widgets' state is stored)
opened with scripts blocked, with scripts but offline (the widget libraries come from a CDN),
and with the widget libraries served: the results table shows exactly once in each. In each
live front end (JupyterLab, Notebook 7, nbclassic) the static copy beside the widgets stays
hidden, before and after a run, and takes no room.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbclassic
import nbformat
import pytest

from tests.browser.test_notebook import Notebook
from tests.notebook.test_panel import EXPORTED

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

# What the export's page loads to draw the widgets: require.js (nbclassic ships the real one)
# and the html-manager, from npm: unpkg.com serves the same package.
REQUIRE_JS = Path(nbclassic.__file__).parent / "static/components/requirejs/require.js"
HTML_MANAGER = Path(__file__).parents[2] / ".browser/html-manager/dist"  # make browser-deps
TABLE = "table.speedlab-table"
STATIC = "[class^=speedlab-static-]"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The panel's notebook (one baseline run of 20 steps) as nbconvert exports it by default."""
    folder = tmp_path_factory.mktemp("export")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in EXPORTED])
    nbformat.write(notebook, folder / "panel.ipynb")
    jupyter = str(Path(sys.executable).parent / "jupyter")
    done = subprocess.run(
        [jupyter, "nbconvert", "--to", "html", "--execute", "panel.ipynb"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "panel.html"


@pytest.fixture(scope="module")
def html_manager() -> Path:
    """The folder of the widgets' HTML manager (``embed-amd.js`` and what it loads), which
    ``make browser-deps`` unpacks from the npm registry: nothing is fetched while tests run."""
    if not HTML_MANAGER.is_dir():
        pytest.skip(f"{HTML_MANAGER} is missing: `make browser-deps` fetches it (needs npm)")
    return HTML_MANAGER


def open_export(browser, page_path: Path, *, scripts: bool, widgets: Path | None):
    """The exported page in a fresh context; with ``widgets``, the page's require.js and
    html-manager come from this machine, and nothing else from the network."""
    context = browser.new_context(
        java_script_enabled=scripts, viewport={"width": 1400, "height": 1100}
    )

    def serve(route) -> None:
        url = route.request.url
        if url.startswith("file:"):
            route.continue_()
        elif widgets is not None and url.endswith("/require.min.js"):
            route.fulfill(path=REQUIRE_JS, content_type="application/javascript")
        elif widgets is not None and "/@jupyter-widgets/html-manager@" in url:
            route.fulfill(path=widgets / url.rsplit("/", 1)[1])
        else:
            route.abort()  # offline, as a grader's machine may be

    context.route("**/*", serve)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(page_path.as_uri())
    return context, page


def results_shown(page) -> list[str]:
    """The text of each results table a reader sees."""
    return [table.inner_text() for table in page.locator(TABLE).all() if table.is_visible()]


def test_an_export_shows_the_results_once_without_scripts_offline_or_with_the_widgets(
    browser, exported: Path, html_manager: Path, artifacts: Path
) -> None:
    for scripts, widgets, name in [
        (False, None, "scripts-blocked"),
        (True, None, "offline"),
        (True, html_manager, "widgets"),
    ]:
        context, page = open_export(browser, exported, scripts=scripts, widgets=widgets)
        try:
            if widgets is not None:
                page.locator(".widget-vbox button", has_text="Run").wait_for()
            [table] = results_shown(page)
            assert "baseline" in table and "20\tok" in table, (name, table)
            static = page.locator(STATIC)
            assert static.is_visible() == (widgets is None), name
            if widgets is None:
                assert "Diagnosis" in static.inner_text(), name
            page.screenshot(path=artifacts / f"export-{name}.png", full_page=True)
        finally:
            context.close()


@pytest.fixture
def notebook(page, server, artifacts: Path) -> Notebook:
    return Notebook(page, server.frontend, artifacts)


def test_live_the_static_copy_stays_hidden_before_and_after_a_run(server, notebook) -> None:
    notebook.open(server.notebook("export.ipynb", EXPORTED))
    notebook.run(1)
    notebook.wait_done(1)
    cell = notebook.cell(1)
    cell.locator(".widget-vbox button", has_text="Run").wait_for()
    static = cell.locator(STATIC)
    static.wait_for(state="attached")
    assert not static.is_visible()
    # The static copy's whole output is hidden: the widgets are all the cell shows.
    outputs = cell.locator(notebook.ui.output)  # shown or not
    assert [o.is_visible() for o in outputs.all()] == [True, False]
    notebook.run(2)
    notebook.wait_done(2)
    cell.locator(f"{STATIC} {TABLE}").wait_for(state="attached")  # updated as the run ended
    assert len(results_shown(cell)) == 1
    assert [o.is_visible() for o in outputs.all()] == [True, False]
    notebook.screenshot("export-live.png", index=1)
