"""Per-model request rules and adaptive thinking, read from docmill's model table (the same dated
table the pipeline checks against; `thinking_types`, `effort`, `default_effort`, `thinking`).

- `check_model_params(body)`: 400, with the API's message, for a `thinking.type` the model does not
  accept (manual extended thinking and `disabled` where refused, e.g. Sonnet 5.5 and Opus 5.5), for
  `output_config.effort` on a model without effort (Haiku 4.5), for `disabled` above effort high where
  thinking can only be turned off at high or lower (Opus 5, Haiku 5.5), and on 5.x models for a
  non-default temperature / top_p / top_k under the old API version that still takes them (under
  2026-10-21 the generic validation refuses them outright).
- `thinking_tokens(body, table)`: the thinking tokens an answer spends (docmill.models.thinking_tokens
  with the `thinking_tokens_by_effort` knob): billed as output, before the text.
Called by `EmulatorState.validate` and `emulator.messages.answer`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from docmill.models import model_info
from docmill.models import thinking_tokens as table_thinking_tokens
from emulator.validation import invalid

OFF_AT_MOST = ("low", "medium", "high")  # `disabled` is accepted only at these efforts (Opus 5, Haiku 5.5)


def _effort(body: Mapping[str, Any]) -> Any:
    config = body.get("output_config")
    return config.get("effort") if isinstance(config, Mapping) else None


def check_model_params(body: Mapping[str, Any], *, legacy: bool = False) -> None:
    """Raise the API's 400 for a parameter `body["model"]` does not accept (models outside the table:
    no per-model rule)."""
    info = model_info(str(body.get("model")))
    if info is None:
        return
    effort = _effort(body)
    if effort is not None and not info.effort:  # an unknown level: refused by `validation` first
        raise invalid("output_config.effort: effort is not supported for this model")
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping):
        kind = thinking.get("type")
        if kind not in info.thinking_types:
            hint = (
                ' Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
                if info.thinks_by_default
                else ""
            )
            raise invalid(f'thinking.type: "thinking.type.{kind}" is not supported for this model.{hint}')
        if (
            kind == "disabled"
            and info.thinks_by_default
            and (effort or info.default_effort) not in OFF_AT_MOST
        ):
            raise invalid("thinking.type: thinking can be disabled only at effort high or lower")
    if legacy and info.thinks_by_default:
        for name, default in (("temperature", 1.0), ("top_p", 1.0)):
            if name in body and body[name] != default:
                raise invalid(f"{name}: non-default sampling parameters are not supported for this model")
        if "top_k" in body:
            raise invalid("top_k: non-default sampling parameters are not supported for this model")


def thinking_tokens(body: Mapping[str, Any], table: Mapping[str, int]) -> int:
    """Thinking tokens one answer to `body` spends (0 for models that do not think by default unless
    asked; 0 when turned off)."""
    thinking = body.get("thinking")
    return table_thinking_tokens(
        str(body.get("model")), thinking if isinstance(thinking, Mapping) else None, _effort(body), table
    )


def thinking_block(body: Mapping[str, Any]) -> dict[str, Any]:
    """The thinking block an answer starts with: display omitted (the 5.x default), so the text is
    empty and only a signature comes back; the tokens are billed all the same."""
    digest = hashlib.sha256(repr(sorted(body.items(), key=lambda kv: kv[0])).encode()).hexdigest()
    return {"type": "thinking", "thinking": "", "signature": "emu-sig-" + digest[:32]}
