"""One ``trainer.fit`` seen during a run: what was done to it, and undone when it ends.

The knobs change the user's own objects for a fit (a stand-in ``train_dataloader`` on the
model, callbacks on a Trainer built before the run, the validation Stop skips): each change is
kept here with the way to put it back, and ``undo`` puts them all back as the fit ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from speedlab.measure.probe import SpeedProbe
from speedlab.run.compiling import CompiledStep
from speedlab.run.forking import CudaBeforeForkError
from speedlab.run.loaders import NotebookClass, NotebookClassError
from speedlab.run.preload import ram_cache


@dataclass
class FitRecord:
    """One ``trainer.fit`` call seen during a run.

    It keeps the notes of what was done to the fit (``note``): the session hands it what
    each step returned.
    """

    trainer: Any
    probe: SpeedProbe
    notes: list[str] = field(default_factory=list)
    preload_s: float = 0.0
    model: Any = None
    exception: BaseException | None = None
    compiled: CompiledStep | None = None
    # measure.dataset.fingerprint of the training data, where the run asked for it
    data: dict[str, Any] | None = None
    notebook_class: NotebookClass | None = None  # a class the loader's workers were forked for
    ended: bool = False  # the fit has returned or raised, and what it changed is put back
    stopped: bool = False  # a stop was asked for (the panel's Stop) before the fit ended
    prebuilt: bool = False  # the Trainer was built before the run: the knobs on it did not act
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, *notes: str | None) -> None:
        """Keep these notes on the fit (``None``: nothing to say)."""
        self.notes += [n for n in notes if n]

    def attach(self, first: Any, last: Any) -> None:
        """Put two callbacks first and last on a Trainer the cell built before the run, until
        the fit ends (``undo``)."""
        callbacks = self.trainer.callbacks
        callbacks.insert(0, first)
        callbacks.append(last)

        def detach() -> None:
            for callback in (first, last):
                if callback in callbacks:
                    callbacks.remove(callback)

        self._undo.append(detach)

    def set_attribute(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name`` (an instance attribute, over its class's) until the fit ends;
        nothing once it has ended (the panel's Stop comes from another thread)."""
        with self._lock:
            if self.ended:
                return
            had, before = name in vars(owner), vars(owner).get(name)
            setattr(owner, name, value)

            def put_back() -> None:
                if had:
                    setattr(owner, name, before)
                else:
                    vars(owner).pop(name, None)

            self._undo.append(put_back)

    def undo(self) -> None:
        """Put back what the fit changed on the user's objects, latest first."""
        with self._lock:
            self.ended = True
            with contextlib.ExitStack() as stack:
                for step in self._undo:
                    stack.callback(step)
                self._undo.clear()

    def train_dataset(self) -> Any:
        """The dataset of the fit's training DataLoader, or None."""
        return getattr(getattr(self.trainer, "train_dataloader", None), "dataset", None)

    def workload(self) -> dict[str, Any]:
        """What was trained: the model's class and size, how many training samples it had and
        what ``--preload ram`` would cache of them (``preload.ram_cache``), the fingerprint of its
        data (where the run reads it) and, when compiled, whether inductor's cache was cold or
        warm.

        ``notebook_class``: a class defined in the notebook that the workers could not import
        (``NotebookClass.fact()``): forked for, or why the fit was refused.
        ``cuda_before_fork``: the fit was refused because CUDA was initialised before a fork-based
        launch (``{"start_method": ...}``).
        """
        out: dict[str, Any] = {}
        if self.model is not None:
            out["model"] = type(self.model).__qualname__
            out["parameters"] = sum(p.numel() for p in self.model.parameters())
        if self.compiled is not None and self.compiled.cache is not None:
            out["compile_cache"] = self.compiled.cache
        dataset = self.train_dataset()
        if dataset is not None and hasattr(dataset, "__len__"):
            out["dataset"] = type(dataset).__qualname__
            out["dataset_len"] = len(dataset)
            out["ram_cache"] = ram_cache(dataset)
        if self.data is not None:
            out["data"] = self.data
        refused = self.exception if isinstance(self.exception, NotebookClassError) else None
        notebook_class = refused.notebook_class if refused is not None else self.notebook_class
        if notebook_class is not None:
            out["notebook_class"] = notebook_class.fact()
        if isinstance(self.exception, CudaBeforeForkError):
            out["cuda_before_fork"] = {"start_method": self.exception.start_method}
        return out
