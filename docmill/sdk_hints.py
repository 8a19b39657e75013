"""The installed `anthropic` SDK's own end-of-life list, read defensively as an extra warning source.

The SDK keeps it in a private module (`anthropic._data`) whose name, shape and content change between
releases (2.15.0 dropped the retired claude-sonnet-4-5). docmill's model table decides; this only adds
a warning when the SDK knows an end of life the table does not (or an earlier one). A missing module, a
changed shape or an unparseable date gives no hint, never an error. The one place product code touches
a private SDK module.

Every run asks at start, and importing the SDK costs over a second a run that sends nothing does not
otherwise pay (docmill.sdk): so unless the module is imported already, the list is read from the
module's source, without running it (`listed_in_source`: the literal assigned to the name, in the
module's file or, for a package, in one of its files).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)\b")


def parse_sdk_date(text: str) -> date | None:
    """'November 30th, 2026' (or an ISO date) -> date; None when it reads as neither."""
    if not isinstance(text, str):
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        pass
    plain = _ORDINAL.sub(r"\1", text).replace(",", "").strip()
    try:
        return datetime.strptime(plain, "%B %d %Y").date()
    except ValueError:
        return None


def sdk_end_of_life(module: str = "anthropic._data", name: str = "DEPRECATED_MODELS") -> dict[str, date]:
    """model -> end-of-life date as the installed SDK lists it; {} when it lists nothing readable."""
    try:
        loaded = sys.modules.get(module)
        listed = getattr(loaded, name) if loaded is not None else listed_in_source(module, name)
    except Exception:
        return {}
    if not isinstance(listed, Mapping):
        return {}
    out: dict[str, date] = {}
    for model, when in listed.items():
        day = parse_sdk_date(when) if isinstance(model, str) else None
        if day is not None:
            out[model] = day
    return out


def listed_in_source(module: str, name: str) -> Any:
    """The literal assigned to `name` at the top of `module`'s source (a package: any of its files),
    found without importing the module or its package; raises when there is none."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"no package {top}")
    base = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    files = [base.with_suffix(".py")] if base.with_suffix(".py").is_file() else sorted(base.glob("*.py"))
    for path in files:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return ast.literal_eval(value)
    raise LookupError(f"{module} assigns no {name}")
