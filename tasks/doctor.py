"""`docmill doctor`: the configuration and the endpoint, checked before a big run.

Each check is one small call, so a problem costs cents instead of a night:
  models    the pinned models against the model table and the dated price table (no call)
  prices    the user's price overrides in force (DOCMILL_PRICES, DOCMILL_PRICES_FILE), when there are any
  key       one `count_tokens` (free): the key and the endpoint work
  model     each pinned model answers one tiny message (max_tokens 8); its cost is shown
  schema    each recipe's per-file and integration schema in one minimal structured call, so a schema
            the API refuses ("compiled grammar is too large", unsupported keywords) shows up here,
            not as a 400 on every document of a run
  cache     each recipe's per-file static prefix (counted with `count_tokens`, free) against the model's
            minimum cacheable length: below it a warning with the cost forgone per 1,000 documents
  limits    the `anthropic-ratelimit-*` headers of an answer (requests / input / output per minute)
Offline (no key) the same checks run against the emulator. `run_doctor` returns one `Check` per line;
the CLI exits 0 when all pass (warnings included), 2 with one line per failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docmill.errors import ConfigError
from docmill.models import min_cacheable_tokens
from docmill.prices import override_lines, priced_usd
from docmill.sdk import anthropic
from tasks.api.models import check_models, pinned_models
from tasks.api.retrying import describe
from tasks.request import recipe_parts, static_system

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.recipes import Recipe

PING: list[Any] = [{"role": "user", "content": "Reply with OK."}]
LIMIT_KINDS = (("requests", "requests"), ("input-tokens", "input tokens"), ("output-tokens", "output tokens"))


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    usd: float = 0.0
    warn: bool = False  # passed, with something to act on (a legacy or unpriced model): not an exit 2

    def line(self) -> str:
        cost = f" (${self.usd:.6f})" if self.usd else ""
        mark = "FAIL" if not self.ok else "warn" if self.warn else "ok  "
        return f"{mark} {self.name}: {self.detail}{cost}"


def rate_limits(headers: Any) -> str:
    """The `anthropic-ratelimit-*` headers in one line (what a pacer can plan with)."""
    parts = []
    for kind, label in LIMIT_KINDS:
        limit = headers.get(f"anthropic-ratelimit-{kind}-limit")
        if limit is not None:
            left = headers.get(f"anthropic-ratelimit-{kind}-remaining", "?")
            parts.append(f"{label} {limit}/min ({left} left)")
    return ", ".join(parts) or "the endpoint sent no anthropic-ratelimit-* headers"


def _call(name: str, model: str, create: Callable[..., Any], **extra: Any) -> tuple[Check, Any]:
    """One tiny Messages call as a check: (result, response headers or None)."""
    try:
        raw = create(
            model=model, max_tokens=8 if "output_config" not in extra else 16, messages=PING, **extra
        )
    except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
        detail = describe(e)
        if isinstance(e, anthropic.NotFoundError):  # names the model, not the key: the endpoint lacks it
            detail = f"the endpoint does not know the model {model} ({detail}): pin a model it serves"
        return Check(name, False, detail), None
    message = raw.parse()
    usage = message.usage.model_dump(mode="json")
    usd = priced_usd(model, usage) or 0.0
    return Check(name, True, f"answered by {message.model} ({message.stop_reason})", usd), raw.headers


def cache_check(settings: Settings, recipe: Recipe, sdk: anthropic.Anthropic) -> Check:
    """Whether the recipe's per-file static prefix (system prompt) reaches the model's minimum
    cacheable length. Below it the API caches nothing and says nothing: a warning with what caching
    would have saved per 1,000 documents. Counted with `count_tokens` (free; chars / 4 if it fails);
    the output schema is not counted (whether the API caches it is undocumented)."""
    model = settings.api.model
    minimum = min_cacheable_tokens(model, settings.api.cache_min_tokens)
    system = static_system(recipe)
    try:
        count = sdk.messages.count_tokens
        prefix = count(model=model, system=system, messages=PING).input_tokens
        prefix -= count(model=model, messages=PING).input_tokens
    except (anthropic.APIStatusError, anthropic.APIConnectionError):
        prefix = len(system) // 4
    uncached = priced_usd(model, {"input_tokens": prefix})
    read = priced_usd(model, {"cache_read_input_tokens": prefix})
    per_1000 = (
        f"${1000 * (uncached - read):.4f} per 1,000 documents"
        if uncached is not None and read is not None
        else "an unknown amount (no price)"
    )
    cached = prefix >= minimum
    verdict = f">= minimum {minimum:,} of {model}: cached ({per_1000} saved)"
    if not cached:
        verdict = f"< minimum {minimum:,} of {model}: not cached ({per_1000} forgone)"
    return Check(
        f"recipe {recipe.name} prompt cache", True, f"prefix {prefix:,} tokens {verdict}", warn=not cached
    )


def run_doctor(settings: Settings, sdk: anthropic.Anthropic, recipes: list[Recipe]) -> list[Check]:
    """Every check, in order; a failed one does not stop the others."""
    checks: list[Check] = []
    try:
        notes = check_models(settings, everything=True)  # each a warning of its own, never "ok"
        checks += [Check("models", True, note, warn=True) for note in notes]
        checks += [] if notes else [Check("models", True, "pinned models current and priced")]
    except ConfigError as e:
        checks.append(Check("models", False, e.message))
    try:
        overridden = override_lines()
    except ConfigError as e:  # an unreadable prices file
        checks.append(Check("prices", False, e.message))
    else:
        if overridden:  # the user's prices win over docmill's table: say which are in force
            checks.append(Check("prices", True, "; ".join(overridden)))
    api = settings.api
    try:
        counted = sdk.messages.count_tokens(model=api.model, messages=PING)
        checks.append(Check("key", True, f"accepted (count_tokens: {counted.input_tokens} input tokens)"))
    except anthropic.NotFoundError:  # the key got through; the model is what the endpoint lacks
        checks.append(Check("key", True, f"accepted (the model {api.model} is not known: see its check)"))
    except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
        checks.append(Check("key", False, describe(e)))
    create = sdk.messages.with_raw_response.create
    headers = None
    by_model = {model: setting for setting, model in reversed(pinned_models(settings))}  # first setting wins
    for model, setting in reversed(by_model.items()):
        check, got = _call(f"model {model} ({setting})", model, create)
        checks.append(check)
        headers = headers if headers is not None else got
    for recipe in recipes:
        schemas = (
            ("per-file", api.model, recipe_parts(recipe).schema),
            ("integration", api.integration_model, anthropic.transform_schema(recipe.integration_schema)),
        )
        for which, model, schema in schemas:
            fmt = {"format": {"type": "json_schema", "schema": schema}}
            check, _ = _call(f"recipe {recipe.name} {which} schema", model, create, output_config=fmt)
            if check.ok:
                check.detail = f"accepted by {model}"
            checks.append(check)
        checks.append(cache_check(settings, recipe, sdk))
    if headers is not None:
        checks.append(Check("limits", True, rate_limits(headers)))
    return checks
