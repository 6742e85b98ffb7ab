"""speedlab.results.table: a table as text, HTML and CSV, and what its columns show."""

from __future__ import annotations

import re

from speedlab.results.table import Table

DESCRIBED = Table(
    ["run", "samples/s", "notes"],
    [["baseline", "25.0", ""], ["workers=2", "50.0", "a <note>"]],
    caption="workers",
    descriptions={"samples/s": 'samples per second, "steady"', "run": "the knobs"},
)


def test_the_legend_says_what_each_described_column_shows_in_the_tables_order() -> None:
    assert DESCRIBED.legend() == 'run        the knobs\nsamples/s  samples per second, "steady"'
    assert Table(["run"], [["baseline"]]).legend() == ""


def test_each_described_heading_carries_its_description_as_hover_text() -> None:
    html = DESCRIBED._repr_html_()
    headings = re.findall(r"<th ([^>]*)>([^<]*)</th>", html)
    titles = {name: re.search(r'title="([^"]*)"', attrs) for attrs, name in headings}
    assert titles["run"][1] == "the knobs"
    assert titles["samples/s"][1] == "samples per second, &quot;steady&quot;"
    assert titles["notes"] is None
    assert "a &lt;note&gt;" in html


def test_the_text_is_unchanged_by_descriptions() -> None:
    plain = Table(DESCRIBED.columns, DESCRIBED.rows, caption="workers")
    assert str(DESCRIBED) == str(plain)
    assert str(DESCRIBED).splitlines()[1].split() == ["run", "samples/s", "notes"]
