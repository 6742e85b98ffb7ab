"""Static checks for per-step LightningModule code that slows training down.

`lint(model)` reads the source of `training_step`, the hooks that run every step and every
method of the same class they call on `self` (transitively, inherited ones included), and
reports each call that matches a rule in `RULES`: host-device syncs, needless copies, console
I/O. It reads source with `ast` only, so it runs nothing and needs no GPU.

Source is read per method rather than per class: `inspect.getsource(cls)` fails for classes
defined in an IPython/Jupyter cell, while the methods' source is in `linecache` there.
"""

from __future__ import annotations

import ast
import inspect
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["RULES", "LintError", "LintFinding", "Rule", "lint"]

STEP_METHODS = (
    "training_step",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "optimizer_step",
    "on_before_zero_grad",
    "optimizer_zero_grad",
)
"""Methods Lightning calls every training step: where linting starts."""

FRAMEWORK_PACKAGES = frozenset({"builtins", "torch", "lightning", "pytorch_lightning"})
"""Top-level packages whose classes are not the user's code and are never linted."""

HOST_FACTORIES = frozenset(
    {
        "tensor",
        "as_tensor",
        "zeros",
        "ones",
        "empty",
        "full",
        "eye",
        "arange",
        "linspace",
        "logspace",
        "rand",
        "randn",
        "randint",
        "randperm",
    }
)
"""`torch.<name>(...)` factories that build on the CPU unless given `device=`.

The `*_like` factories are left out: they already take the device of their input.
"""


Method = tuple[type, Callable[..., object]]
"""A method's defining class and its (unwrapped) function."""


class LintError(ValueError):
    """The model's source cannot be read, so it cannot be linted."""


@dataclass(frozen=True)
class LintFinding:
    """One line of per-step code that slows training down.

    Args:
        rule: id of the rule that matched (a key of `RULES`).
        line: line number in the file (or notebook cell) that defines `method`.
        message: what is wrong and why it is slow.
        fix: what to write instead.
        method: name of the method the line is in.
        code: the source line, stripped.
        file: the file (or IPython cell name) holding the line.
    """

    rule: str
    line: int
    message: str
    fix: str
    method: str
    code: str
    file: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message} Fix: {self.fix}"


@dataclass(frozen=True)
class Rule:
    """A pattern to flag: `match` returns the matched name (used in the texts) or None.

    `message` and `fix` are format strings with one field, `{name}`.
    """

    id: str
    match: Callable[[ast.Call], str | None]
    message: str
    fix: str


def _dotted(node: ast.expr) -> str:
    """`torch.cuda.synchronize` for that attribute chain; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _method_call(*names: str, no_args: bool = False) -> Callable[[ast.Call], str | None]:
    """Match `<anything>.<name>(...)` for one of `names` (only without arguments if `no_args`)."""

    def match(call: ast.Call) -> str | None:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in names:
            return None
        return None if no_args and (call.args or call.keywords) else func.attr

    return match


def _function_call(*names: str) -> Callable[[ast.Call], str | None]:
    """Match a call of one of the dotted `names`, e.g. `torch.cuda.synchronize`."""

    def match(call: ast.Call) -> str | None:
        dotted = _dotted(call.func)
        return dotted if dotted in names else None

    return match


def _is_device(node: ast.expr) -> bool:
    """Whether `node` names an accelerator: `self.device`, `device`, `'cuda'`, `torch.device()`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    if isinstance(node, ast.Name):
        return "device" in node.id.lower()
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith(("cuda", "mps", "xpu"))
    return isinstance(node, ast.Call) and _dotted(node.func) == "torch.device"


def _host_tensor(call: ast.Call) -> str | None:
    """Match `torch.<factory>(...).cuda()` and `torch.<factory>(...).to(<device>)`."""
    move = call.func
    if not (isinstance(move, ast.Attribute) and move.attr in ("cuda", "to")):
        return None
    made = _dotted(move.value.func) if isinstance(move.value, ast.Call) else ""
    package, _, factory = made.partition(".")
    if package != "torch" or factory not in HOST_FACTORIES:
        return None
    targets = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "device")]
    return made if move.attr == "cuda" or any(map(_is_device, targets)) else None


def _print(call: ast.Call) -> str | None:
    return "print" if isinstance(call.func, ast.Name) and call.func.id == "print" else None


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule(
            "item",
            _method_call("item", no_args=True),
            "`.item()` copies a value to the host, so the CPU waits for the GPU to finish"
            " all queued work, every step.",
            "log the tensor itself (`self.log('x', t)`) and let Lightning reduce it (with"
            " `prog_bar=True` it is converted to a number after every step, whatever the bar's"
            " refresh rate), or call `.item()` only every N steps.",
        ),
        Rule(
            "cpu",
            _method_call("cpu", "numpy", "tolist"),
            "`.{name}()` copies the tensor to host memory, which waits for the GPU (a sync)"
            " and then copies, every step.",
            "keep the tensor on the device; move it to the host outside the step or only"
            " every N steps.",
        ),
        Rule(
            "cuda_sync",
            _function_call("torch.cuda.synchronize"),
            "`torch.cuda.synchronize()` stops the CPU until the GPU has finished all queued"
            " work, which stalls the pipeline every step.",
            "remove it; to time GPU work use `torch.cuda.Event(enable_timing=True)` (or"
            " speedlab's SpeedProbe).",
        ),
        Rule(
            "empty_cache",
            _function_call("torch.cuda.empty_cache"),
            "`torch.cuda.empty_cache()` hands cached GPU memory back, so the next step must"
            " re-allocate it slowly.",
            "remove it; PyTorch's caching allocator reuses that memory.",
        ),
        Rule(
            "host_tensor",
            _host_tensor,
            "`{name}(...)` builds the tensor in CPU memory and then copies it to the device,"
            " every step.",
            "create it on the device directly: `{name}(..., device=self.device)`.",
        ),
        Rule(
            "print",
            _print,
            "`print()` in the step does slow console I/O every step (very slow in a notebook,"
            " where each line travels to the browser).",
            "log the value with `self.log(...)`, or print only every N steps"
            " (`if batch_idx % 100 == 0:`).",
        ),
        Rule(
            "nonzero_sync",
            _method_call("nonzero"),
            "`nonzero()` returns a tensor whose shape depends on the data, so the CPU waits"
            " for the GPU to learn its size.",
            "keep a fixed shape where the algorithm allows: `torch.where(mask, x, y)` or"
            " multiply by the mask.",
        ),
    )
}


def lint(module_or_class: object) -> list[LintFinding]:
    """Find per-step code in a LightningModule that slows training down.

    Args:
        module_or_class: a LightningModule subclass or an instance of one.

    Returns:
        The findings, ordered by file and line; empty when the step code is clean.

    Raises:
        TypeError: `module_or_class` is not a LightningModule class or instance.
        LintError: the source of a method to check cannot be found (it was compiled by
            `exec()`, `python -c` or a cell magic such as `%%time`).

    Example:
        >>> for finding in speedlab.lint(MyModel):  # doctest: +SKIP
        ...     print(finding)
        line 42: `.item()` copies a value to the host, ... Fix: log the tensor itself ...
    """
    cls = _lightning_class(module_or_class)
    pending = [(name, found) for name in STEP_METHODS if (found := _resolve(cls, name))]
    seen: set[object] = set()
    findings: list[LintFinding] = []
    while pending:
        name, (owner, func) = pending.pop()
        if func in seen:
            continue
        seen.add(func)
        tree, lines, start = _parse(cls, name, func)
        for call in _calls(tree):
            code = lines[call.lineno - 1].strip()
            for rule in RULES.values():
                if (matched := rule.match(call)) is not None:
                    findings.append(
                        LintFinding(
                            rule=rule.id,
                            line=start + call.lineno - 1,
                            message=rule.message.format(name=matched),
                            fix=rule.fix.format(name=matched),
                            method=name,
                            code=code,
                            file=func.__code__.co_filename,
                        )
                    )
            if callee := _callee(call, cls, owner):
                pending.append(callee)
    return sorted(findings, key=lambda f: (f.file, f.line, f.rule))


def _is_framework(cls: type) -> bool:
    return cls.__module__.partition(".")[0] in FRAMEWORK_PACKAGES


def _lightning_class(value: object) -> type:
    """The LightningModule class of `value` (a class or an instance), found without importing
    Lightning; TypeError for anything else."""
    cls = value if isinstance(value, type) else type(value)
    if any(k.__name__ == "LightningModule" and _is_framework(k) for k in cls.__mro__):
        return cls
    got = f"class {cls.__qualname__}" if value is cls else cls.__qualname__
    raise TypeError(
        f"lint({reprlib.repr(value)}): expected a LightningModule class or instance, got {got}"
    )


def _resolve(cls: type, name: str, after: type | None = None) -> Method | None:
    """The user-written function that `cls().name` runs (or `super().name` inside `after`);
    None when it is Lightning's/torch's own, or not a plain function."""
    mro = cls.__mro__
    if after is not None:
        mro = mro[mro.index(after) + 1 :]
    owner = next((k for k in mro if name in vars(k)), None)
    if owner is None or _is_framework(owner):
        return None
    func = inspect.unwrap(vars(owner)[name])  # also unwraps staticmethod and classmethod
    return (owner, func) if inspect.isfunction(func) else None


def _callee(call: ast.Call, cls: type, owner: type) -> tuple[str, Method] | None:
    """The method a call in `owner`'s code runs: `self.f(...)`, `self(...)` (forward) and
    `super().f(...)`."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "self":
        name, after = "forward", None
    elif isinstance(func, ast.Attribute) and _dotted(func.value) == "self":
        name, after = func.attr, None
    elif (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and _dotted(func.value.func) == "super"
    ):
        name, after = func.attr, owner
    else:
        return None
    found = _resolve(cls, name, after)
    return (name, found) if found else None


def _parse(cls: type, name: str, func: Callable[..., object]) -> tuple[ast.AST, list[str], int]:
    """The parsed source of `func`, its original lines and the file line number of the first."""
    where = f"{cls.__qualname__}.{name}"
    try:
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError):
        raise LintError(
            f"cannot lint {where}: its source is not available (it was compiled from"
            f" {func.__code__.co_filename!r}, which keeps no source); define its methods in a"
            " file or a plain notebook cell, not with exec(), `python -c` or a magic like %%time"
        ) from None
    try:
        return ast.parse("".join(_dedent(lines))), lines, start
    except SyntaxError as exc:
        raise LintError(f"cannot lint {where}: its source does not parse ({exc})") from None


def _dedent(lines: list[str]) -> list[str]:
    """Remove the first line's indent from every line.

    Unlike `textwrap.dedent` this copes with less-indented lines inside multi-line strings
    (which only changes those strings, not the code).
    """
    indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
    return [
        line.removeprefix(indent) if line.startswith(indent) else line.lstrip(" \t")
        for line in lines
    ]


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    """Every call under `node`, skipping the bodies of `if <...%...>:`, which run every N steps."""
    if isinstance(node, ast.Call):
        yield node
    if isinstance(node, ast.If) and any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node.test)
    ):
        children: Iterator[ast.AST] = iter([node.test, *node.orelse])
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from _calls(child)
