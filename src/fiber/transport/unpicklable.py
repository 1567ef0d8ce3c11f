"""Saying which object could not be pickled.

``pickle`` says *what* failed (``cannot pickle '_thread.lock' object``) but not *where*:
in a pool task of fifty arguments, a nested dict or an object's attribute. `explain`
pickles the parts of a value one by one to find the first one that fails, and
`reraise` raises the error again, of the same type (``except TypeError`` still
works), naming the argument and the path to the object inside it.
"""

from __future__ import annotations

import pickle
from typing import List, NoReturn, Optional, Tuple

from .serialization import Frame, dumps, pickles

__all__ = ["explain", "explained", "reraise", "dumps_explained", "PICKLING_ERRORS"]

#: What pickling raises for an object it cannot pickle.
PICKLING_ERRORS = (pickle.PicklingError, TypeError, AttributeError)

_MAX_DEPTH = 6
_MAX_ITEMS = 1000


def _fails(obj: object) -> bool:
    return not pickles(obj)


def _describe(obj: object) -> str:
    return f"a {type(obj).__module__}.{type(obj).__qualname__}".replace(" builtins.", " ")


def explain(obj: object, path: str = "", depth: int = 0) -> Optional[str]:
    """``path`` extended to the innermost part of ``obj`` that cannot be pickled, with
    what it is (``args[1]['env'].lock: a _thread.lock``); None if ``obj`` pickles."""
    if not _fails(obj):
        return None
    if depth < _MAX_DEPTH:
        parts: List[Tuple[str, object]] = []
        if isinstance(obj, (list, tuple)):
            parts = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:_MAX_ITEMS])]
        elif isinstance(obj, dict):
            parts = [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:_MAX_ITEMS]]
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            parts = [(f"{path}.{k}", v) for k, v in list(vars(obj).items())[:_MAX_ITEMS]]
        for sub_path, value in parts:
            found = explain(value, sub_path, depth + 1)
            if found is not None:
                return found
    return f"{path or 'the object'}: {_describe(obj)}"


def explained(error: BaseException, what: str, obj: object, path: str = "") -> BaseException:
    """``error`` (a failure to pickle ``obj``) saying that ``what`` failed and where in
    ``obj`` the culprit is: pickle's own errors (PicklingError, TypeError,
    AttributeError) as a new exception of their type with that message; any other
    (raised by an object's own ``__reduce__``) unchanged, with it as a note."""
    where = explain(obj, path) or f"{path or 'the object'}: {_describe(obj)}"
    text = f"{what} cannot be pickled ({where})"
    if type(error) in PICKLING_ERRORS:
        new = type(error)(f"{text}: {error}")
        return new.with_traceback(error.__traceback__)
    note = f"fiber: {text}"
    try:
        error.add_note(note)  # type: ignore[attr-defined]
    except AttributeError:  # Python < 3.11: kept where 3.11 keeps notes
        error.__notes__ = [*getattr(error, "__notes__", ()), note]  # type: ignore[attr-defined]
    return error


def reraise(error: BaseException, what: str, obj: object, path: str = "") -> NoReturn:
    """Raise `explained` ``error``."""
    raise explained(error, what, obj, path) from None


def dumps_explained(obj: object, what: str, path: str = "") -> List[Frame]:
    """``dumps(obj)``, whose failure says that ``what`` failed, and where in ``obj``.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: as ``dumps``, explained.
    """
    try:
        return dumps(obj)
    except PICKLING_ERRORS as e:
        reraise(e, what, obj, path)
