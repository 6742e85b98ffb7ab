"""Matplotlib charts of results: the sweep comparison and a run's pipeline timeline.

Figures are built with ``matplotlib.figure.Figure`` directly, never through pyplot, so they
render with the Agg backend anywhere (scripts, tests, notebooks) and leave no global figure
state behind. Matplotlib loads on the first chart, not on ``import speedlab``.

A figure made outside pyplot shows in a notebook only as ``<Figure size ... with 2 Axes>``
unless IPython's inline backend registered its image printer for ``Figure`` (``%matplotlib
inline``, or once pyplot loaded its backend). So the charts are a ``Chart``: a ``Figure`` whose
``_repr_png_`` draws it, which IPython's PNG formatter calls when no printer is registered for
figures. When one is, that printer wins over ``_repr_png_`` and draws it instead: one image
either way, and none twice, as pyplot's end-of-cell display only shows pyplot's own figures.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from speedlab.results.run import RunResult
    from speedlab.results.sweep import SweepResult

#: One colour per kind of time, shared with the live chart.
COLORS = {"data": "#f28e2b", "batch": "#4e79a7", "worker": "#59a14f", "rate": "#76b7b2"}
LABELS = {
    "data": "data_time: waiting for the batch",
    "batch": "batch_time: forward + backward + optimizer step",
    "worker": "a worker makes a batch",
    "ready": "the batch waits for the main process",
    "taken": "the main process takes it",
}

Span = tuple[float, float]


def worker_spans(records: Mapping[str, Any]) -> dict[int, list[Span]]:
    """Per worker id, the (start, end) of every batch it made, in order of start."""
    log = records.get("pipeline") or {}
    spans: dict[int, list[Span]] = {}
    for worker, start, end in zip(
        log.get("worker", []), log.get("start", []), log.get("end", []), strict=False
    ):
        spans.setdefault(worker, []).append((start, end))
    return {worker: sorted(spans[worker]) for worker in sorted(spans)}


def main_spans(records: Mapping[str, Any]) -> tuple[list[Span], list[Span]]:
    """The main process's (start, end) spans per step: waiting for data, then training."""
    waits, trains = [], []
    for t, data, batch in zip(
        records["t"], records["data_time"], records["batch_time"], strict=False
    ):
        waits.append((t, t + data))
        trains.append((t + data, t + data + batch))
    return waits, trains


def epoch_starts(records: Mapping[str, Any]) -> list[tuple[int, float]]:
    """(epoch, time) where each epoch's first step began waiting for its batch."""
    starts, previous = [], None
    for epoch, t in zip(records["epoch"], records["t"], strict=False):
        if epoch != previous:
            starts.append((epoch, t))
            previous = epoch
    return starts


def overlap(a: list[Span], b: list[Span]) -> float:
    """Seconds during which a span of ``a`` and a span of ``b`` run at the same time."""
    a, b = sorted(a), sorted(b)
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += max(0.0, min(end, b[k][1]) - max(start, b[k][0]))
            k += 1
    return total


def _new_figure(width: float, height: float) -> Figure:
    return _chart_class()(figsize=(width, height), layout="constrained")


def _chart_class() -> type[Figure]:
    """The ``Chart`` class, defined on the first chart so that matplotlib loads only then."""
    chart = globals().get("Chart")
    if chart is not None:
        return chart
    from matplotlib.figure import Figure

    class Chart(Figure):
        """A matplotlib ``Figure`` that a notebook shows as an image, without ``%matplotlib``."""

        def _repr_png_(self) -> bytes | None:
            """The figure as PNG, drawn as the inline backend draws figures (tight bounding box)."""
            if not self.axes:
                return None
            buffer = io.BytesIO()
            self.savefig(buffer, format="png", dpi=self.dpi, bbox_inches="tight")
            return buffer.getvalue()

    Chart.__qualname__ = "Chart"  # where pickle finds it (in a fresh process: via __getattr__)
    globals()["Chart"] = Chart
    return Chart


def __getattr__(name: str) -> Any:
    if name == "Chart":
        return _chart_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ms(seconds: float) -> float:
    return seconds * 1e3 if math.isfinite(seconds) else 0.0


def sweep_figure(sweep: SweepResult) -> Figure:
    """Per run: a stacked bar of data_time and batch_time (ms per step) and samples/s.

    Steady-state averages (speedlab.results.steady). samples/s carries its spread as an error bar (the interquartile range
    over the steps, or over the repeats with ``--repeat``) and the speedup over the baseline as
    text.
    """
    runs = sweep.runs
    labels = [run.label(sweep.baseline) for run in runs]
    fig = _new_figure(11, 1.6 + 0.45 * len(runs))
    times, rates = fig.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    rows = list(range(len(runs)))
    data = [_ms(run.data_time) for run in runs]
    batch = [_ms(run.batch_time) for run in runs]
    times.barh(rows, data, color=COLORS["data"], label=LABELS["data"])
    times.barh(rows, batch, left=data, color=COLORS["batch"], label=LABELS["batch"])
    times.set_yticks(rows, labels)
    times.invert_yaxis()
    times.set_xlabel("time per step (ms, average of steady-state steps)")
    times.set_title("Where a step's time goes")

    speeds = [run.samples_per_s if math.isfinite(run.samples_per_s) else 0.0 for run in runs]
    low, high = [], []
    for speed, run in zip(speeds, runs, strict=True):
        spread = run.throughput_summary
        low.append(max(0.0, speed - spread.q1) if math.isfinite(spread.q1) else 0.0)
        high.append(max(0.0, spread.q3 - speed) if math.isfinite(spread.q3) else 0.0)
    rates.barh(rows, speeds, xerr=[low, high], color=COLORS["rate"], ecolor="0.3", capsize=3)
    for row, run, speed, up in zip(rows, runs, speeds, high, strict=True):
        text = "failed" if not run.steps else f"{speed:,.0f}"
        if run.speedup is not None and run is not sweep.baseline:
            text += f"  ({run.speedup:.2f}x)"
        rates.annotate(
            text,
            (speed + up, row),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    rates.set_xlabel("throughput (samples/s, steady state; bar: IQR)")
    rates.set_title("Throughput (speedup over the baseline)")
    reach = [speed + up for speed, up in zip(speeds, high, strict=True)]
    rates.set_xlim(0, max([*reach, 1.0]) * 1.3)
    if sweep.name:
        fig.suptitle(sweep.name)
    fig.legend(loc="outside lower center", ncols=2, frameon=False, fontsize=8)
    return fig


def timeline_figure(
    run: RunResult, *, start: float | None = None, end: float | None = None, steps: int = 60
) -> Figure:
    """Gantt chart of the input pipeline: workers making batches, the main process waiting/training.

    One row per DataLoader worker: a bar while it makes a batch, then a thin line while the
    batch waits for the main process, up to a tick when the main process takes it. One row for
    the main process: orange while it waits for data, blue while it trains. Dashed lines mark
    epoch starts.

    Args:
        run: a RunResult with step records (and worker stamps, for the worker rows).
        start, end: the time window, in seconds since the fit started.
        steps: without ``start``/``end``, show about this many steps: around the second
            epoch's start when there is one (to show the epoch-start gap), else the first ones.
    """
    records = run.records
    workers = worker_spans(records)
    waits, trains = main_spans(records)
    first, last = _step_window(records, steps)
    if start is None:
        start = waits[first][0] if waits else 0.0
    if end is None:
        ends = [e for _, e in trains[: last + 1]] or [1.0]
        end = max(ends)
    fig = _new_figure(11, 1.9 + 0.45 * (len(workers) + 1))
    ax = fig.subplots()
    main_row = len(workers)
    bar = (main_row - 0.35, 0.7)
    shown = _within(start, end)
    ax.broken_barh(_widths(shown(waits)), bar, color=COLORS["data"], label=LABELS["data"])
    ax.broken_barh(_widths(shown(trains)), bar, color=COLORS["batch"], label=LABELS["batch"])
    log = records.get("pipeline") or {}
    for row, (worker, spans) in enumerate(workers.items()):
        first_row = row == 0
        ax.broken_barh(
            _widths(shown(spans)),
            (row - 0.3, 0.6),
            color=COLORS["worker"],
            edgecolor="white",
            linewidth=0.5,
            label=LABELS["worker"] if first_row else None,
        )
        ready = shown(
            [
                (e, t)
                for w, e, t in zip(log["worker"], log["end"], log["taken"], strict=True)
                if w == worker
            ]
        )
        ax.hlines(
            [row] * len(ready),
            [e for e, _ in ready],
            [t for _, t in ready],
            color=COLORS["worker"],
            alpha=0.6,
            linewidth=1.5,
            label=LABELS["ready"] if first_row else None,
        )
        ax.plot(
            [t for _, t in ready],
            [row] * len(ready),
            "|",
            color="0.2",
            markersize=7,
            markeredgewidth=1,
            label=LABELS["taken"] if first_row else None,
        )
    for epoch, t in epoch_starts(records):
        ax.axvline(t, color="0.4", linestyle="--", linewidth=0.8)
        if start <= t <= end:
            ax.annotate(
                f"epoch {epoch} starts",
                (t, -0.85),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=8,
                color="0.3",
                va="top",
            )
    ax.set_yticks(range(main_row + 1), [f"worker {w}" for w in workers] + ["main process"])
    ax.set_ylim(main_row + 0.6, -0.9)
    ax.set_xlim(start, end)
    ax.set_xlabel("time since the fit started (s)")
    title = f"Input pipeline: {run.label()}" if run.knobs else "Input pipeline"
    if trains:
        title += f" (steps {first + 1}-{last + 1} of {len(trains)})"
    if not workers:
        title += "\nno DataLoader workers: the main process loads each batch itself (orange)"
    ax.set_title(title, fontsize=10)
    fig.legend(loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    return fig


def _step_window(records: Mapping[str, Any], steps: int) -> tuple[int, int]:
    """First and last step index to show: around the second epoch's start, else from the start."""
    n = min(len(records["t"]), len(records["epoch"]))
    if n <= steps:
        return 0, max(0, n - 1)
    epochs = records["epoch"]
    second = next((i for i in range(1, n) if epochs[i] != epochs[i - 1]), None)
    first = 0 if second is None else max(0, second - steps // 3)
    return first, min(n - 1, first + steps - 1)


def _within(start: float, end: float) -> Callable[[list[Span]], list[Span]]:
    """A filter keeping the spans that reach into [start, end] (long runs draw only those)."""
    return lambda spans: [(s, e) for s, e in spans if e >= start and s <= end]


def _widths(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) spans as the (start, width) pairs ``broken_barh`` takes."""
    return [(s, e - s) for s, e in spans]


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG (rendered with Agg)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def figure_bundle(fig: Any, dpi: int = 80) -> dict[str, str]:
    """A display bundle (``text/plain`` and base64 ``image/png``) for ``display(..., raw=True)``."""
    import base64

    return {
        "image/png": base64.b64encode(png_bytes(fig, dpi)).decode(),
        "text/plain": f"<speedlab chart: {fig.axes[0].get_title() if fig.axes else ''}>",
    }
