"""Recipes: what to extract (schemas), how to ask (prompts), and a version, bundled.

A recipe is a frozen `Recipe`. Prompts live in `tasks/recipes/prompts/*.md` and are read at
import time; `prompt_hash()` and `schema_hash()` go into every idempotency key, so editing a
prompt or a schema (or bumping `version`) makes new results instead of reusing old ones.

`load_recipe(spec)` takes a built-in name (`invoices`, `code-review` / `code_review`) or
`path/to/module.py:NAME` for a user recipe. How to write one: docs/recipes.md.

Evidence fields are declared (`evidence_fields=("evidence",)`): the gate checks that every string
under a field of that name (at any depth of the file schema) occurs verbatim in the document. A
declared name the schema does not have is a `ConfigError` when the recipe is built. A recipe that
declares none gets the conventional names its schema has (`evidence`, `quote`, `excerpt`,
`*_evidence`, `*_quote`), listed in `recipe.evidence_fields` so nothing is checked silently.

`thinking` is the recipe's thinking / effort policy for the per-file call (`ThinkingPolicy`: effort
low by default; `tasks.recipes.thinking` turns it into parameters per model).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from dataclasses import field as dc_field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from checkpoints.keys import content_hash
from docmill.errors import ConfigError
from tasks.recipes.shape import PATTERN_HINT, SIBLING_SUFFIXES, schema_objects, shape_problems
from tasks.recipes.thinking import ThinkingPolicy
from tasks.source.readers import ALL_TYPES, NOT_READ

EVIDENCE_KEYS = frozenset({"evidence", "quote", "excerpt"})


def read_prompt(name: str) -> str:
    """The text of `tasks/recipes/prompts/<name>` (package data)."""
    return (resources.files(__package__ or "tasks.recipes") / "prompts" / name).read_text(encoding="utf-8")


def is_evidence_key(key: str) -> bool:
    """The naming convention used when a recipe declares no `evidence_fields`."""
    return key in EVIDENCE_KEYS or key.endswith(SIBLING_SUFFIXES)


def schema_fields(schema: type[BaseModel]) -> dict[str, set[str]]:
    """Every property name anywhere in `schema` (nested models, lists, unions), with the JSON types it
    may hold ("string", "array:string", "object", ...)."""
    found: dict[str, set[str]] = {}
    for _path, props, _defs in schema_objects(schema):
        for name, sub in props.items():
            found.setdefault(name, set()).update(_kinds(sub))
    return found


def _kinds(node: dict[str, Any]) -> set[str]:
    """The JSON types one property's schema allows (a reference is an object)."""
    if isinstance(node.get("$ref"), str):
        return {"object"}
    out: set[str] = set()
    for alt in node.get("anyOf") or node.get("oneOf") or []:
        out |= _kinds(alt)
    kind = node.get("type")
    if kind == "array":
        out |= {f"array:{k}" for k in _kinds(node.get("items") or {})}
    elif kind == "object" or "properties" in node:
        out.add("object")
    elif isinstance(kind, str):
        out.add(kind)
    elif "enum" in node or "const" in node:
        out.add("string")
    return out


_TEXT_KINDS = {"string", "null", "array:string", "array:null"}


def _evidence_fields(name: str, schema: type[BaseModel], declared: tuple[str, ...] | None) -> tuple[str, ...]:
    """The declared evidence fields, checked against the schema; or the conventional names it has."""
    fields = schema_fields(schema)
    if declared is None:
        return tuple(sorted(f for f in fields if is_evidence_key(f)))
    for field in declared:
        if field not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ConfigError(
                f"recipe {name!r}: evidence field {field!r} is not in the file schema (its fields: {known})",
                hint="name a field of file_schema in evidence_fields=(...)",
            )
        if not fields[field] <= _TEXT_KINDS or not fields[field] & {"string", "array:string"}:
            raise ConfigError(
                f"recipe {name!r}: evidence field {field!r} must hold text (a string or a list of strings), "
                f"not {'/'.join(sorted(fields[field]))}",
                hint="evidence is text copied verbatim from the document",
            )
    return tuple(declared)


def _check_doc_types(name: str, doc_types: frozenset[str]) -> None:
    """A recipe may list only types docmill reads: refused at load, never skipped file by file."""
    bad = sorted(doc_types - ALL_TYPES)
    if bad:
        why = "; ".join(NOT_READ.get(t, f"no reader for {t!r}") for t in bad)
        raise ConfigError(
            f"recipe {name!r} lists file types docmill cannot read: {', '.join(bad)} ({why})",
            hint="remove them from doc_types; docs/formats.md lists what docmill reads",
        )


@dataclass(frozen=True)
class Recipe:
    """Per-file schema + prompt, integration schema + prompt, and the version of the bundle."""

    name: str
    version: str
    file_schema: type[BaseModel]
    file_prompt: str
    integration_schema: type[BaseModel]
    integration_prompt: str
    doc_types: frozenset[str]
    key_fields: tuple[str, ...] = ()
    evidence_fields: tuple[str, ...] | None = None  # None: the conventional names (see the module doc)
    pdf_mode: str = "auto"  # how PDFs are sent: auto (settings.formats.pdf_send_as), text, or pdf
    # per-file thinking / effort (tasks.recipes.thinking)
    thinking: ThinkingPolicy = dc_field(default_factory=ThinkingPolicy)

    def __post_init__(self) -> None:
        for attr in ("file_schema", "integration_schema"):
            schema = getattr(self, attr)
            if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
                raise ConfigError(f"recipe {self.name!r}: {attr} must be a pydantic BaseModel class")
        for attr in ("name", "version", "file_prompt", "integration_prompt"):
            if not str(getattr(self, attr)).strip():
                raise ConfigError(f"recipe {self.name!r}: {attr} is empty")
        object.__setattr__(self, "doc_types", frozenset(self.doc_types))
        _check_doc_types(self.name, self.doc_types)
        if self.pdf_mode not in ("auto", "text", "pdf"):
            raise ConfigError(
                f"recipe {self.name!r}: pdf_mode {self.pdf_mode!r}", hint="use auto, text or pdf"
            )
        object.__setattr__(self, "key_fields", tuple(self.key_fields))
        if isinstance(self.evidence_fields, str):
            raise ConfigError(
                f"recipe {self.name!r}: evidence_fields must be a tuple of names",
                hint=f"evidence_fields=({self.evidence_fields!r},)",
            )
        declared = None if self.evidence_fields is None else tuple(self.evidence_fields)
        evidence = _evidence_fields(self.name, self.file_schema, declared)
        object.__setattr__(self, "evidence_fields", evidence)
        problems = shape_problems(self.file_schema, evidence)
        if problems:
            more = f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""
            fix = "add 'evidence' to evidence_fields" if "never be checked" in problems[0] else PATTERN_HINT
            raise ConfigError(f"recipe {self.name!r}: {problems[0]}{more}", hint=fix)

    def prompt_hash(self) -> str:
        """Hash of both prompt texts and the version."""
        return content_hash(
            {"version": self.version, "file": self.file_prompt, "integration": self.integration_prompt}
        )

    def schema_hash(self) -> str:
        """Hash of both JSON schemas."""
        return content_hash(
            {
                "file": self.file_schema.model_json_schema(),
                "integration": self.integration_schema.model_json_schema(),
            }
        )

    def evidence(self, output: Any) -> list[tuple[str, str]]:
        """(json path, excerpt) for every non-empty string under one of the recipe's evidence fields,
        at any depth; a list of strings under such a key gives one entry per string. Paths look like
        `$.line_items[0].evidence`."""
        found: list[tuple[str, str]] = []
        names = frozenset(self.evidence_fields or ())

        def walk(node: Any, path: str, under_evidence: bool) -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, f"{path}.{k}", k in names)
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{path}[{i}]", under_evidence and isinstance(v, str))
            elif under_evidence and isinstance(node, str) and node.strip():
                found.append((path, node))

        walk(output, "$", False)
        return found


class BuiltIn(StrEnum):
    INVOICES = "invoices"
    CODE_REVIEW = "code-review"


_ALIASES = {"code_review": BuiltIn.CODE_REVIEW, "codereview": BuiltIn.CODE_REVIEW}


# the module whose RECIPE each built-in is (imported when asked for)
BUILTINS: dict[BuiltIn, str] = {
    BuiltIn.INVOICES: "tasks.recipes.invoices",
    BuiltIn.CODE_REVIEW: "tasks.recipes.code_review",
}


def _from_file(spec: str) -> Recipe:
    path_text, _, attr = spec.rpartition(":")
    path = Path(path_text).expanduser()
    if not attr:
        raise ConfigError(f"recipe {spec!r} names no object", hint="use path/to/module.py:NAME")
    if not path.is_file():
        raise ConfigError(f"recipe file {path_text!r} does not exist", hint="use path/to/module.py:NAME")
    module_name = "docmill_recipe_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        mod_spec = importlib.util.spec_from_file_location(module_name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ConfigError(f"recipe file {path_text!r} is not a Python module", hint="name a .py file")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[module_name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[module_name]
            if isinstance(e, ConfigError):  # a Recipe(...) in the file refused itself: its reason, as it is
                raise ConfigError(f"recipe file {path_text!r}: {e.message}", hint=e.hint) from e
            first = (str(e).splitlines() or [""])[0]
            raise ConfigError(
                f"recipe file {path_text!r} failed to import: {type(e).__name__}: {first}"
            ) from e
    if not hasattr(module, attr):
        raise ConfigError(f"recipe file {path_text!r} has no attribute {attr!r}")
    recipe = getattr(module, attr)
    if callable(recipe) and not isinstance(recipe, (Recipe, type)):
        recipe = recipe()
    if not isinstance(recipe, Recipe):
        raise ConfigError(
            f"{spec!r} is a {type(recipe).__name__}, not a Recipe",
            hint="build it with tasks.recipes.Recipe(...)",
        )
    return recipe


def _names_in(path: Path) -> list[str]:
    """The module-level names a recipe file binds to a `Recipe(...)` (read, not run)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) == "Recipe":
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def load_recipe(spec: str | Recipe) -> Recipe:
    """A built-in recipe by name, or `path/to/module.py:NAME` (a Recipe or a function returning one)."""
    if isinstance(spec, Recipe):
        return spec
    name = spec.strip()
    if ":" in name and not Path(name).is_file():
        return _from_file(name)
    if name.endswith(".py") or Path(name).expanduser().is_file():  # a file without `:NAME`
        if not Path(name).expanduser().is_file():
            raise ConfigError(f"recipe file {spec!r} does not exist", hint="use path/to/module.py:NAME")
        found = _names_in(Path(name).expanduser())
        example = f"{name}:{found[0]}" if found else f"{name}:NAME"
        defines = f" (it defines {', '.join(found)})" if found else ""
        raise ConfigError(
            f"recipe {spec!r} is a file but names no Recipe in it{defines}",
            hint=f"use --recipe {example}: the file, a colon, and the name of the Recipe",
        )
    try:
        key = _ALIASES.get(name.lower()) or BuiltIn(name.lower())
    except ValueError:
        known = ", ".join(b.value for b in BuiltIn)
        raise ConfigError(
            f"unknown recipe {spec!r}", hint=f"use one of {known}, or path/to/module.py:NAME"
        ) from None
    recipe: Recipe = importlib.import_module(BUILTINS[key]).RECIPE
    return recipe


__all__ = ["BUILTINS", "Recipe", "is_evidence_key", "load_recipe", "read_prompt", "schema_fields"]
