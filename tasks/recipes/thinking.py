"""A recipe's thinking policy and the request parameters it becomes for a model.

5.x models think adaptively by default: thinking blocks come before the answer and are billed as
output tokens, at the depth `output_config.effort` asks for (the API's default effort is high on
most). Extraction rarely needs deep thinking, so a recipe says how much it wants:

- `effort`: sent as `output_config.effort` where the model accepts it (docmill's model table says
  which do; Haiku 4.5 does not). None: the model's default.
- `thinking`: "adaptive" lets the model decide at that effort; "off" asks for the lowest the model
  allows on top: `disabled` (Sonnet 5, Opus 5, Haiku 5.5), `between_tools` (Sonnet 5.5: no up-front
  thinking, and docmill's requests use no tools), nothing where thinking is always on (Opus 5.5,
  Fable 5.x: effort is the only control). Manual extended thinking (`enabled` + budget_tokens) is
  never sent: 5.x models answer it 400.
Models that do not think by default (4.x) get nothing: no thinking parameter in their requests or
idempotency keys. `thinking_params` is the one place the policy becomes parameters (the per-file request and
`estimate` read it; the key hashes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from docmill.models import model_info

Effort = Literal["low", "medium", "high", "xhigh", "max"]


@dataclass(frozen=True)
class ThinkingPolicy:
    """How much a recipe's per-file call may think."""

    effort: Effort | None = "low"
    thinking: Literal["adaptive", "off"] = "adaptive"


OFF_TYPES = ("disabled", "between_tools")


def thinking_params(model: str, policy: ThinkingPolicy) -> dict[str, Any]:
    """`{"thinking": {...}}` and / or `{"effort": ...}` (for output_config) for `model`; {} for a model
    outside docmill's table or one that does not think by default (nothing model-specific is sent)."""
    info = model_info(model)
    if info is None or not info.thinks_by_default:
        return {}
    out: dict[str, Any] = {}
    if policy.effort is not None and info.effort:
        out["effort"] = policy.effort
    if policy.thinking == "off":
        kind = next((k for k in OFF_TYPES if k in info.thinking_types), None)
        if kind is not None:
            out["thinking"] = {"type": kind}
    return out


def effort_config(model: str, policy: ThinkingPolicy) -> dict[str, Any]:
    """`{"effort": ...}` to merge into `output_config` of the recipe's other calls (long-document turns,
    integration), so thinking never eats their max_tokens at the model's default effort; {} where
    nothing is sent."""
    effort = thinking_params(model, policy).get("effort")
    return {} if effort is None else {"effort": effort}
