"""What a stamp on the training path costs once a step's work has emptied the caches, by its
shape: the evidence behind the shapes of SpeedProbe's step path (``speedlab.measure.probe``).

Between two calls of the thing timed, the process walks ``--walk`` thousand small dicts (a
step's Python leaves the caches as cold as that), then times one call; each shape is drawn at
random for each call, and its figure is its median less the bare call's (a function that
returns a fresh dict, as Lightning's run of a batch does). Lightning is not imported: these are
the shapes alone.

- ``C stamp``: ``map(list.append, iter(perf_counter, None)).__next__``, the stamp the probe ran
  in the place of Lightning's fetch edges until 2026-12-01 (no Python frame);
- ``Python stamp``: ``def stamp(): begins(perf_counter())``, the probe's since;
- ``old wrapper``: the probe's wrapper of the training batch until 2026-12-01 (an activity
  check, an indirection for the warm-up, the batch sized, a tuple of five, the outputs kept,
  an after-step hook checked, the log's modulo);
- ``packed wrapper``: the probe's since on the CPU (a flag, two stamps, the outputs kept, a
  countdown), which took its arguments as ``*args`` until the evening of 2026-12-01;
- ``wrapper``: the same in the shape of what it wraps, ``run(optimizer, batch_idx, kwargs)``,
  the probe's since;
- ``two stamps``: the least a wrapper can do.

On 2026-12-01 (2-core VM, 60 thousand dicts walked, three runs): C stamp +6.6 to +7.1 us,
Python stamp +2.7 to +3.2, old wrapper +14.5 to +15.4, packed wrapper +6.8 to +7.3, two stamps
(then through ``*args``) +4.2 to +4.4. What a path touches that the step did not (the map and
iterator objects and their code, a builtin looked up, a list's far end, a tuple of five) costs
about a microsecond each, far more than its instructions: the Python frame that stamps is
cheaper than the C one. The same evening, three runs with the arms in their callee's shape:
packed wrapper +7.0 to +8.9, wrapper +4.7 to +6.2, two stamps +2.0 to +2.9: a wrapper that takes
``*args`` is called, and calls on, through a tuple and an evaluation loop of its own, where one
of its callee's shape is run inline by the caller's.

    .venv/bin/python benchmarks/probe_cold.py [--calls 4000] [--walk 60]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

_perf = time.perf_counter


def run_batch(optimizer: Any, batch_idx: int, kwargs: dict) -> dict:
    return {"loss": 1.0}


def shapes() -> dict[str, Callable[..., Any]]:
    begins: list[float] = []
    c_stamp = map(begins.append, iter(_perf, None)).__next__
    begin = begins.append

    def python_stamp() -> None:
        begin(_perf())

    def stamped(stamp: Callable[[], Any]) -> Callable[..., Any]:
        def step(optimizer: Any, batch_idx: int, kwargs: dict) -> Any:
            stamp()
            return run_batch(optimizer, batch_idx, kwargs)

        return step

    class Fetcher:
        done = False

    steps: list[tuple] = []
    record, fetched, moved, trained = steps.append, begins.__len__, [0.0], [None]
    fetcher, every, full, after, call = Fetcher(), 50, 8, None, [run_batch]

    class Probe:
        _active = True

    probe = Probe()

    def old_wrapper(*args: Any) -> Any:
        if not probe._active:
            return run_batch(*args)
        start = _perf()
        outputs = call[0](*args)
        end = _perf()
        samples = full if full and not fetcher.done else len(args)
        record((fetched(), moved[0], start, end, samples))
        if outputs:
            trained[0] = outputs
        if after is not None:
            after(end)
        if not len(steps) % every:
            pass
        return outputs

    stamps: list[float] = []
    stamp, on, left = stamps.append, True, every

    def packed_wrapper(*args: Any) -> Any:
        nonlocal left
        if not on:
            return run_batch(*args)
        stamp(_perf())
        outputs = run_batch(*args)
        stamp(_perf())
        if outputs:
            trained[0] = outputs
        left -= 1
        if not left:
            left = every
        return outputs

    def wrapper(optimizer: Any, batch_idx: int, kwargs: dict) -> Any:
        nonlocal left
        if not on:
            return run_batch(optimizer, batch_idx, kwargs)
        stamp(_perf())
        outputs = run_batch(optimizer, batch_idx, kwargs)
        stamp(_perf())
        if outputs:
            trained[0] = outputs
        left -= 1
        if not left:
            left = every
        return outputs

    def two_stamps(optimizer: Any, batch_idx: int, kwargs: dict) -> Any:
        stamp(_perf())
        outputs = run_batch(optimizer, batch_idx, kwargs)
        stamp(_perf())
        return outputs

    return {
        "bare": run_batch,
        "C stamp": stamped(c_stamp),
        "Python stamp": stamped(python_stamp),
        "old wrapper": old_wrapper,
        "packed wrapper": packed_wrapper,
        "wrapper": wrapper,
        "two stamps": two_stamps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--walk", type=int, default=60, help="thousand dicts walked per call")
    args = parser.parse_args()
    walk = [{"a": i, "b": [i]} for i in range(args.walk * 1000)]
    arms = shapes()
    times: dict[str, list[float]] = {name: [] for name in arms}
    kwargs = {"batch": None, "batch_idx": 0}
    for _ in range(args.calls):
        name = random.choice(list(arms))
        sum(d["a"] + len(d["b"]) for d in walk)
        call = arms[name]
        start = _perf()
        call(None, 0, kwargs)
        times[name].append(_perf() - start)
    bare = statistics.median(times["bare"])
    print(f"bare call {bare * 1e6:.2f} us; each shape's median over it, {args.calls} calls:")
    for name, each in times.items():
        if name != "bare":
            print(f"  {name:<14} +{(statistics.median(each) - bare) * 1e6:5.2f} us ({len(each)})")


if __name__ == "__main__":
    main()
