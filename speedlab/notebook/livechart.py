"""HTML and inline SVG for the notebook live view and the panel: cheap to build, no matplotlib.

A frame is one string: a header (progress, ETA, samples/s, MFU, phase, CPU, RSS) over a
stacked bar chart of data_time and batch_time per step. Each series is a single SVG ``<path>``,
so a frame of 120 steps is a few kilobytes and takes well under a millisecond to build. Text uses
``currentColor``, so the chart follows the notebook's light or dark theme.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from speedlab.notebook.plots import COLORS

if TYPE_CHECKING:
    from speedlab.run.watch import Snapshot

WIDTH, HEIGHT = 640, 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 10, 24, 30
_FONT = "font-family:var(--jp-code-font-family,monospace);font-size:12px;line-height:1.5"
PHASE_NAMES = {
    "setup": "setup",
    "preload": "preload",
    "compile": "compile",
    "epoch_start": "epoch start",
    "warmup": "warm-up",
    "steady": "steady",
    "validation": "validation",
}


def ms(seconds: float | None) -> str:
    """``0.01234`` -> ``'12.3 ms'``; a dash when missing."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds == 0:
        return "0 ms"
    value = seconds * 1e3
    digits = 0 if value >= 100 else 1 if value >= 1 else 2
    return f"{value:.{digits}f} ms"


def duration(seconds: float | None) -> str:
    """``75`` -> ``'1 min 15 s'``; a dash when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def mfu_shown(share: float | None) -> list[str]:
    """``0.046`` -> ``['MFU 4.6%']``, as the table rounds it; nothing while it is unknown."""
    return [] if share is None else [f"MFU {share:.1%}"]


def megabytes(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f} MB"


def _nice_ceiling(x: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= x."""
    if x <= 0 or not math.isfinite(x):
        return 1e-3
    power = 10 ** math.floor(math.log10(x))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= x * (1 - 1e-9))


def bars_svg(
    data: Sequence[float],
    batch: Sequence[float],
    *,
    first_step: int,
    slots: int,
    last_step: int | None = None,
    x_title: str = "training step",
) -> str:
    """Stacked bars of data_time (bottom) and batch_time per step, ``slots`` bars wide.

    The y axis is scaled to the typical steps; a rare spike (an epoch start, a compile) is cut
    at the top and marked with a small triangle, and the largest one's value is written at the
    top right, instead of flattening every other bar.
    """
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    totals = [d + b for d, b in zip(data, batch, strict=True)]
    typical = statistics.quantiles(totals, n=4)[-1] if len(totals) >= 4 else max(totals, default=0)
    top = _nice_ceiling(min(max(totals, default=0.0), 3 * typical) or 1e-3)
    slot = plot_w / max(slots, 1)
    base = _TOP + plot_h
    # Bars in integer units (tenths of a slot across, tenths of a pixel up), placed by one
    # transform: formatting integers keeps a frame cheap to build.
    scale = 10 * plot_h / top
    cap = 10 * plot_h
    data_path, batch_path, spikes = [], [], []
    for i, (d, b) in enumerate(zip(data, batch, strict=True)):
        h_data = min(int(d * scale), cap)
        h_total = min(int((d + b) * scale), cap)
        x = 10 * i
        data_path.append(f"M{x} 0h8v{h_data}h-8z")
        if h_total > h_data:
            batch_path.append(f"M{x} {h_data}h8v{h_total - h_data}h-8z")
        if h_total == cap and d + b > top:
            spikes.append(f"M{_LEFT + (i + 0.4) * slot:.1f} {_TOP - 5}l3 4h-6z")
    transform = f"translate({_LEFT} {base}) scale({slot / 10:.4f} -0.1)"
    parts = [
        f'<path d="{"".join(path)}" fill="{COLORS[kind]}" transform="{transform}"/>'
        for kind, path in (("data", data_path), ("batch", batch_path))
        if path
    ]
    if spikes:
        parts.append(
            f'<path d="{"".join(spikes)}"/><text x="{WIDTH - _RIGHT}" y="15" text-anchor="end">'
            f"&#9650; cut, up to {ms(max(totals))}</text>"
        )
    ticks = []
    for frac in (0.0, 0.5, 1.0):
        y = base - frac * plot_h
        ticks.append(
            f'<line x1="{_LEFT - 4}" x2="{WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" stroke-opacity="{0.5 if frac == 0 else 0.12}"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{ms(frac * top)}</text>'
        )
    if last_step is None:
        last_step = first_step + len(totals) - 1
    x_labels = (
        f'<text x="{_LEFT}" y="{base + 14}">{first_step}</text>'
        f'<text x="{_LEFT + (len(totals) - 0.2) * slot:.1f}" y="{base + 14}" '
        f'text-anchor="end">{last_step}</text>'
        if totals
        else ""
    )
    legend = (
        f'<rect x="{_LEFT}" y="6" width="10" height="10" fill="{COLORS["data"]}"/>'
        f'<text x="{_LEFT + 14}" y="15">data_time (waiting for data)</text>'
        f'<rect x="{_LEFT + 190}" y="6" width="10" height="10" fill="{COLORS["batch"]}"/>'
        f'<text x="{_LEFT + 204}" y="15">batch_time (fwd + bwd + step)</text>'
    )
    axis_titles = (
        f'<text x="{_LEFT + plot_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
        f"{html.escape(x_title)}</text>"
        f'<text transform="translate(12 {_TOP + plot_h / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">ms per step</text>'
    )
    return (
        f'<svg class="speedlab-chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-size="10" fill="currentColor" '
        'xmlns="http://www.w3.org/2000/svg">'
        f"{legend}{''.join(ticks)}{''.join(parts)}{x_labels}{axis_titles}</svg>"
    )


def _progress_bar(fraction: float | None) -> str:
    if fraction is None:
        return ""
    pct = max(0.0, min(1.0, fraction)) * 100
    return (
        '<div style="width:320px;height:6px;background:rgba(128,128,128,.25);'
        'border-radius:3px;margin:2px 0 4px">'
        f'<div style="width:{pct:.1f}%;height:100%;background:{COLORS["batch"]};'
        'border-radius:3px"></div></div>'
    )


def live_html(s: Snapshot, label: str, frame: int) -> str:
    """One live frame: where the run is, how fast, what the machine does, and the chart."""
    of = f" / {s.total_steps}" if s.total_steps else ""
    fraction = s.steps / s.total_steps if s.total_steps else None
    if fraction is None and s.time_limit:
        fraction = s.elapsed / s.time_limit
    system = []
    if s.cpu_percent is not None:
        system.append(f"CPU {s.cpu_percent:.0f}%")
    if s.rss_bytes is not None:
        system.append(f"RSS {megabytes(s.rss_bytes)}")
    if s.workers:
        system.append(f"{s.workers} worker process{'es' if s.workers > 1 else ''}")
    rate = f"{s.samples_per_s:,.0f} samples/s" if math.isfinite(s.samples_per_s) else "- samples/s"
    lines = [
        f"<b>{html.escape(label)}</b> &middot; phase <b>{PHASE_NAMES.get(s.phase, s.phase)}</b>",
        _progress_bar(fraction)
        + f"step {s.steps}{of} &middot; elapsed {duration(s.elapsed)}"
        + (f" of {duration(s.time_limit)}" if s.time_limit else "")
        + " &middot; "
        f"ETA {duration(s.eta)}",
        " &middot; ".join([rate, *mfu_shown(s.mfu)])
        + f" &middot; data {ms(s.data_time)} &middot; batch {ms(s.batch_time)}"
        + (f" &middot; {' &middot; '.join(system)}" if system else ""),
    ]
    if s.device_split is not None:
        lines.append(f"device: {html.escape(s.device_split.text())}")
    chart = bars_svg(s.data_window, s.batch_window, first_step=s.first_step, slots=s.slots)
    return (
        f'<div class="speedlab-live" data-frame="{frame}" data-step="{s.steps}" '
        f'data-phase="{html.escape(s.phase)}" style="{_FONT}">'
        + lines[0]
        + "".join(f"<div>{line}</div>" for line in lines[1:])
        + chart
        + "</div>"
    )


def _bucketed(values: Sequence[float], buckets: int) -> list[float]:
    """Means of ``buckets`` consecutive groups (the whole run drawn in a fixed width)."""
    n = len(values)
    if n <= buckets:
        return list(values)
    edges = [round(i * n / buckets) for i in range(buckets + 1)]
    return [statistics.fmean(values[a:b]) for a, b in pairwise(edges) if b > a]


def run_html(result: Any, label: str, *, timeline_png: str | None = None) -> str:
    """A finished run: its summary, phases, notes, the whole run's chart and its timeline."""
    esc = html.escape
    parts = [f"<b>{esc(label)}</b>: {esc(result.summary_line())}"]
    phases = ", ".join(
        f"{PHASE_NAMES.get(k, k)} {duration(v)}" for k, v in result.phases.items() if v > 0.0005
    )
    if phases:
        parts.append(f"phases: {esc(phases)}")
    system = result.system
    if system.sampled:
        parts.append(
            f"CPU {system.cpu_percent or 0:.0f}% of the machine &middot; peak RSS "
            f"{megabytes(system.peak_rss_bytes)}"
        )
    if (split := result.device_split) is not None:
        parts.append(f"device: {esc(split.text())}")
    parts += [f"<small>note: {esc(n)}</small>" for n in result.notes]
    if result.error:
        parts.append(f"<small>error: {esc(result.error)}</small>")
    body = "".join(f"<div>{p}</div>" for p in parts)
    r = result.records
    if result.steps:
        buckets = 120
        data, batch = _bucketed(r["data_time"], buckets), _bucketed(r["batch_time"], buckets)
        title = f"training step (all {result.steps} steps"
        title += ", means of groups of steps)" if result.steps > buckets else ")"
        body += bars_svg(
            data, batch, first_step=1, last_step=result.steps, slots=len(data), x_title=title
        )
    if timeline_png:
        body += (
            '<details><summary style="display:list-item;cursor:pointer">Pipeline timeline: when '
            "each worker made each batch, when the main process waited and trained</summary>"
            f'<img src="data:image/png;base64,{timeline_png}" style="max-width:100%"></details>'
        )
    return f'<div class="speedlab-run" data-steps="{result.steps}" style="{_FONT}">{body}</div>'
