"""The compile knob: compile what a training step runs, and put the model back after the fit.

``training_step`` itself is not compiled: ``self.log`` there breaks the graph. What the step
calls is: the model's own call (``self(x)``, through ``forward``) and each direct submodule that
holds weights (``self.net(x)``; the items of a ``ModuleList`` or ``ModuleDict``), whichever path
the step takes. A submodule called inside the compiled ``forward`` is traced into its graph.

Each module's call is compiled in place, through ``_compiled_call_impl`` as ``Module.compile``
does, but from a function of this module: ``Module.compile`` on a torch module (``nn.Linear``,
``nn.Sequential``) captures nothing, since dynamo skips torch's own frames. One function for all
of them also lets modules of one class share their compiled code (a stack of identical blocks
compiles once). Whether compiled code ran at all: the fit compiled graphs, or it called the
compiled modules where graphs were compiled before it (an earlier fit of the run, whose code a
second fit of the same model reuses).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


def _compiled_call(module: Any, mode: str | None, calls: list[int]) -> Any:
    """``module``'s call compiled; ``calls[0]`` counts the calls of it."""
    import torch

    def call(*args: Any, **kwargs: Any) -> Any:
        return module._call_impl(*args, **kwargs)

    compiled = torch.compile(call, mode=mode)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return compiled(*args, **kwargs)

    return counted


def forget_compiled() -> None:
    """Drop the compiled code of the compile knob's modules, so that no later run reuses it;
    code the cell compiled itself is kept (``torch._dynamo.reset()`` would drop that too)."""
    import torch

    torch._dynamo.reset_code(_CALL_CODE)


# Every module's compiled call is a closure of ``_compiled_call``: one code object, whose
# compiled entries dynamo keeps (each guarded on its module).
_CALL_CODE = next(
    c
    for c in _compiled_call.__code__.co_consts
    if isinstance(c, types.CodeType) and c.co_name == "call"
)


def _dynamo_counts() -> tuple[int, dict[str, int]]:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], dict(counters["graph_break"])


def _cache_counts() -> tuple[int, int]:
    """Inductor's compiled-graph cache so far in this process: (hits, misses)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def cache_state(hits: int, misses: int) -> str | None:
    """``cold`` (every graph compiled afresh), ``warm`` (every graph read from inductor's
    cache, on disk across processes), ``mixed``, or None where no graph was compiled."""
    if hits + misses == 0:
        return None
    return "warm" if misses == 0 else "cold" if hits == 0 else "mixed"


CACHE_TEXT = {
    "cold": "compiled every graph afresh (a cold cache: a later run of the same model reads "
    "them from inductor's cache on disk and compiles much faster)",
    "warm": "read every graph from inductor's cache on disk (a warm cache: a first compile of "
    "this model, on a new machine or after the cache is cleared, takes much longer)",
    "mixed": "compiled some graphs afresh and read the others from inductor's cache on disk",
}
"""What the compile phase measured, by the state of inductor's cache (``cache_state``)."""


def own_compile_note(value: str, names: list[str]) -> str:
    """What ``compile=value`` did beside the cell's own compile of ``names``."""
    did = "cannot undo that" if value == "off" else "compiles on top of it"
    return (
        f"The cell compiles {', '.join(names)} itself (torch.compile): compile={value} {did}, "
        "so these runs compare compiled code with compiled code, not with uncompiled."
    )


def step_modules(model: Any) -> dict[str, Any]:
    """The modules a training step may call, by name: the model, then its weighted children."""
    from torch import nn

    found: dict[str, Any] = {"forward": model}
    for name, child in model.named_children():
        items = (
            child.named_children()
            if isinstance(child, (nn.ModuleList, nn.ModuleDict))
            else [("", child)]
        )
        for item, module in items:
            if (
                next(module.parameters(), None) is not None
                or next(module.buffers(), None) is not None
            ):
                found[f"{name}.{item}" if item else name] = module
    return found


@dataclass
class CompiledStep:
    """The modules compiled for one fit; ``finish()`` undoes it and says what ran uncompiled."""

    value: str
    modules: dict[str, Any]
    previous: list[tuple[Any, Any]] = field(default_factory=list)
    graphs: int = 0
    breaks: dict[str, int] = field(default_factory=dict)
    cache_before: tuple[int, int] = (0, 0)
    cache: str | None = None
    acted: bool | None = None  # whether training ran compiled code; known after a trained fit
    calls: list[int] = field(default_factory=lambda: [0])  # of the compiled modules

    def finish(self, trained: bool) -> list[str]:
        """Run every module uncompiled again; notes on what the fit left uncompiled.

        ``trained``: whether training steps ran (a fit that failed before them says nothing).
        """
        for module, impl in reversed(self.previous):
            module._compiled_call_impl = impl
        self.previous.clear()
        graphs, breaks = _dynamo_counts()
        hits, misses = _cache_counts()
        self.cache = cache_state(hits - self.cache_before[0], misses - self.cache_before[1])
        if not trained:
            return []
        self.acted = graphs != self.graphs or (self.calls[0] > 0 and self.graphs > 0)
        notes = []
        if self.cache is not None:
            notes.append(f"compile={self.value}: the compile phase {CACHE_TEXT[self.cache]}.")
        if not self.acted:
            compiled = ", ".join(self.modules)
            notes.append(
                f"compile={self.value} ran nothing compiled: the training step called none of "
                f"the compiled modules ({compiled}). Work written in training_step itself (a "
                "step that computes x @ self.weight, say) is not compiled, as self.log there "
                "would break the graph: put it in forward or in a submodule to compile it."
            )
        new_breaks = {r: n - self.breaks.get(r, 0) for r, n in breaks.items()}
        new_breaks = {r: n for r, n in new_breaks.items() if n > 0}
        if new_breaks:
            reason = max(new_breaks, key=new_breaks.__getitem__)
            notes.append(
                f"compile={self.value}: the compiled code has graph breaks, where Python ran "
                f"uncompiled between compiled pieces (most often: {reason.splitlines()[0][:160]})."
            )
        return notes


def compile_step(model: Any, value: str) -> CompiledStep:
    """Compile the model's call and its weighted children in place, for ``compile=value``."""
    mode = None if value in ("on", "default") else value
    graphs, breaks = _dynamo_counts()
    compiled = CompiledStep(
        value, step_modules(model), graphs=graphs, breaks=breaks, cache_before=_cache_counts()
    )
    try:
        for module in compiled.modules.values():
            compiled.previous.append((module, module._compiled_call_impl))
            module._compiled_call_impl = _compiled_call(module, mode, compiled.calls)
    except BaseException:
        compiled.finish(trained=False)
        raise
    return compiled
