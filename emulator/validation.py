"""Request validation and the one error type the emulator raises.

Every problem becomes an `ApiError`, which the server turns into the API's error body
`{"type":"error","error":{"type","message","details"},"request_id"}` with the right status.
Messages follow the API's `"<path>: <problem>"` style.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from emulator import catalog, grammar, media
from emulator.tokens import as_blocks
from emulator.words import word_set


class ErrorType(StrEnum):
    INVALID_REQUEST = "invalid_request_error"
    AUTHENTICATION = "authentication_error"
    NOT_FOUND = "not_found_error"
    CONFLICT = "conflict_error"
    REQUEST_TOO_LARGE = "request_too_large"
    RATE_LIMIT = "rate_limit_error"
    API_ERROR = "api_error"
    OVERLOADED = "overloaded_error"


STATUS: dict[ErrorType, int] = {
    ErrorType.INVALID_REQUEST: 400,
    ErrorType.AUTHENTICATION: 401,
    ErrorType.NOT_FOUND: 404,
    ErrorType.CONFLICT: 409,
    ErrorType.REQUEST_TOO_LARGE: 413,
    ErrorType.RATE_LIMIT: 429,
    ErrorType.API_ERROR: 500,
    ErrorType.OVERLOADED: 529,
}


class ApiError(Exception):
    """An error response: status, error type, message, optional `error.details.error_code`."""

    def __init__(
        self,
        error_type: ErrorType,
        message: str,
        *,
        status: int | None = None,
        error_code: str | None = None,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status if status is not None else STATUS[error_type]
        self.error_code = error_code
        self.headers = dict(headers or {})
        self.details = dict(details or {})  # more `error.details` fields beside error_code

    def error_object(self) -> dict[str, Any]:
        details = {"error_code": self.error_code, **self.details} if self.error_code else None
        return {"type": str(self.error_type), "message": self.message, "details": details}

    def body(self, request_id: str | None) -> dict[str, Any]:
        return {"type": "error", "error": self.error_object(), "request_id": request_id}


def invalid(message: str, *, error_code: str | None = None) -> ApiError:
    return ApiError(ErrorType.INVALID_REQUEST, message, error_code=error_code)


CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
REMOVED_PARAMS = ("temperature", "top_p", "top_k")
ROLES = {"user", "assistant", "system"}
MAX_CACHE_BREAKPOINTS = 4
COMPACTION_BETA = "compact-2026-09-04"
# The body keys the API takes: the SDK's request TypedDicts (types/message_create_params.py,
# message_count_tokens_params.py, beta/...) less what the SDK sends as headers (betas, workspace_id,
# user_profile_id). tests/emulator/test_emulator_validation.py holds them equal to the SDK's.
CREATE_KEYS = word_set(
    "cache_control container diagnostics inference_geo max_tokens messages metadata model output_config "
    "service_tier speed stop_sequences stream system thinking tool_choice tools"
)
COUNT_KEYS = word_set("cache_control messages model output_config speed system thinking tool_choice tools")
BETA_CREATE_KEYS = word_set(
    "billing_policy compaction context_management fallback_credit_token fallbacks mcp_servers thread"
)
BETA_COUNT_KEYS = word_set("billing_policy compaction context_management mcp_servers")
OUTPUT_CONFIG_KEYS = frozenset({"format", "effort"})
EFFORTS = ("low", "medium", "high", "xhigh", "max")
TOOL_CHOICES = ("auto", "any", "tool", "none")


@dataclass(frozen=True)
class Rules:
    """What the emulator's API takes beyond the request's shape: its models and knobs."""

    models: Collection[str]
    retired: Callable[[str], str | None]
    grammar_limit: int | None
    system_message_models: Collection[str]
    allow_max_tokens_zero: bool


def validate_message_body(
    body: Any,
    *,
    rules: Rules,
    batch: bool = False,
    count_only: bool = False,
    betas: frozenset[str] = frozenset(),
    legacy: bool = False,
) -> None:
    """Raise `ApiError` for the first problem in a Messages (or count_tokens) body.

    `legacy` (anthropic-version 2023-06-01) still accepts temperature/top_p/top_k. Beta-only keys
    need an `anthropic-beta` header. `rules.retired(model)` gives the end-of-life date of a retired
    model (answered 404 like an unknown one); `rules.grammar_limit` refuses schemas over that
    complexity (see `grammar`; not for count_tokens); a model's output limit is docmill's table's.
    """
    if not isinstance(body, dict):
        raise invalid("body: Input should be an object")
    for name in () if legacy else REMOVED_PARAMS:
        if name in body:
            raise invalid(f"{name}: Extra inputs are not permitted")
    _check_keys(body, count_only=count_only, betas=betas, legacy=legacy)
    required = ("model", "messages") if count_only else ("model", "max_tokens", "messages")
    for name in required:
        if name not in body:
            raise invalid(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise invalid("model: Input should be a valid string")
    if not count_only:
        _check_max_tokens(body["max_tokens"], batch=batch, zero_ok=rules.allow_max_tokens_zero)
        if batch and body.get("stream"):
            raise invalid("stream: streaming is not supported in batches")
    if "compaction" in body and not count_only:
        if COMPACTION_BETA not in betas:
            raise invalid("compaction: Extra inputs are not permitted")
        _check_compaction_config(body["compaction"])
    _check_thinking(body.get("thinking"), body.get("max_tokens"))
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    _check_tool_choice(body)
    _check_output_config(body.get("output_config"))
    _check_messages(body["messages"])
    try:  # PDFs and images: valid, unencrypted, within the API's pages, bytes and pixels
        media.check_request(body["messages"])
    except media.MediaError as e:
        raise ApiError(
            ErrorType.INVALID_REQUEST, f"{e.field}: {e.message}", error_code=e.code, details=e.extra
        ) from e
    _check_system_messages(body["messages"], body["model"], rules.system_message_models)
    _check_breakpoints(body)
    if body["model"] not in rules.models:
        raise ApiError(ErrorType.NOT_FOUND, f"model: {body['model']}")
    ended = rules.retired(body["model"])
    if ended is not None:
        raise ApiError(ErrorType.NOT_FOUND, f"model: {body['model']} (end of life {ended})")
    limit = None if count_only else catalog.max_output_tokens(body["model"])
    if limit is not None and body["max_tokens"] > limit:
        raise invalid(
            f"max_tokens: {body['max_tokens']} > {limit}, which is the maximum allowed number of output "
            f"tokens for {body['model']}"
        )
    too_large = None if count_only else grammar.too_large(body, rules.grammar_limit)
    if too_large is not None:
        raise invalid(f"{too_large}: {grammar.TOO_LARGE}")


def _check_keys(body: Mapping[str, Any], *, count_only: bool, betas: frozenset[str], legacy: bool) -> None:
    """Unknown top-level keys are refused (the API's request models forbid extra inputs)."""
    known = COUNT_KEYS if count_only else CREATE_KEYS
    if betas:
        known = known | (BETA_COUNT_KEYS if count_only else BETA_CREATE_KEYS)
    _no_extra(body, known | frozenset(REMOVED_PARAMS) if legacy else known)


def _no_extra(obj: Mapping[str, Any], known: Collection[str], where: str = "") -> None:
    for name in obj:
        if name not in known:
            raise invalid(f"{where}{name}: Extra inputs are not permitted")


def _check_max_tokens(value: Any, *, batch: bool, zero_ok: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid("max_tokens: Input should be a valid integer")
    floor = 0 if zero_ok and not batch else 1
    if value < floor:
        raise invalid(f"max_tokens: Input should be greater than or equal to {floor}")


def _check_tool_choice(body: Mapping[str, Any]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICES:
        raise invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
        raise invalid("tool_choice.name: Field required")
    if not body.get("tools"):
        raise invalid("tool_choice: tool_choice may only be specified while providing tools.")


def _check_output_config(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise invalid("output_config: Input should be an object")
    _no_extra(config, OUTPUT_CONFIG_KEYS, "output_config.")
    effort = config.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise invalid(f"output_config.effort: Input should be {', '.join(repr(e) for e in EFFORTS)}")
    fmt = config.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise invalid("output_config.format: Input should be an object")
    _no_extra(fmt, ("type", "schema"), "output_config.format.")
    if fmt.get("type") != "json_schema":
        raise invalid("output_config.format.type: Input should be 'json_schema'")
    if not isinstance(fmt.get("schema"), dict):
        raise invalid("output_config.format.schema: Input should be a valid dictionary")


def _check_system_messages(messages: list[Any], model: str, allowed: Collection[str]) -> None:
    """`role: system` in messages: never the first message (the top-level `system` parameter is the
    initial system prompt), elsewhere only on a model that takes mid-conversation system messages
    (knob `system_message_models`; none by default, the harsher case), text only."""
    for i, msg in enumerate(messages):
        if msg.get("role") != "system":
            continue
        if i == 0:
            raise invalid("messages.0: use the top-level 'system' parameter for the initial system prompt")
        if model not in allowed:
            raise invalid(
                f'messages.{i}.role: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
            )
        for j, block in enumerate(as_blocks(msg["content"])):
            if block.get("type") != "text":
                raise invalid(f"messages.{i}.content.{j}: system messages take text blocks only")


def _check_thinking(thinking: Any, max_tokens: Any) -> None:
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        raise invalid("thinking.budget_tokens: Input should be greater than or equal to 1024")
    if isinstance(max_tokens, int) and budget >= max_tokens:
        raise invalid("thinking.budget_tokens: must be less than max_tokens")


def _check_compaction_config(value: Any) -> None:
    if not isinstance(value, dict) or value.get("type") != "summarize":
        raise invalid("compaction.type: Input should be 'summarize'")
    instructions = value.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("compaction.instructions: Input should be a valid string")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise invalid("system: Input should be a valid string or list")
    for i, block in enumerate(system):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise invalid(f"system.{i}: Input should be a text block")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise invalid(f"tools.{i}.name: Field required")
        if tool.get("type", "custom") == "custom" and not isinstance(tool.get("input_schema"), dict):
            raise invalid(f"tools.{i}.input_schema: Field required")


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise invalid("messages: Input should be a valid list")
    if not messages:
        raise invalid("messages: at least one message is required")
    pending: set[str] = set()
    pending_at = -1
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise invalid(f"messages.{i}: Input should be an object")
        role = msg.get("role")
        if not isinstance(role, str) or role not in ROLES:  # a list or an object: a 400, not a crash
            raise invalid(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        content = msg.get("content")
        if not isinstance(content, str | list):
            raise invalid(f"messages.{i}.content: Field required")
        answered: set[str] = set()
        for j, block in enumerate(as_blocks(content)):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise invalid(f"messages.{i}.content.{j}.type: Field required")
            kind = block["type"]
            if kind == "tool_use":
                if role != "assistant":
                    raise invalid(f"messages.{i}.content.{j}: tool_use blocks belong to assistant turns")
            elif kind == "tool_result":
                if role != "user":
                    raise invalid(f"messages.{i}.content.{j}: tool_result blocks belong to user turns")
                answered.add(str(block.get("tool_use_id")))
            elif kind == "text" and not isinstance(block.get("text"), str):
                raise invalid(f"messages.{i}.content.{j}.text: Field required")
            elif kind == "document" and role == "assistant":
                raise invalid(f"messages.{i}.content.{j}: document blocks are not allowed in assistant turns")
        stray = sorted(answered - pending)
        if stray:
            raise invalid(
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(stray)}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message."
            )
        if pending:
            missing = sorted(pending - answered)
            if missing:
                raise invalid(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    f"`tool_result` block in the next message (messages.{pending_at})."
                )
            pending = set()
        if role == "assistant":
            pending = {str(b.get("id")) for b in as_blocks(content) if b.get("type") == "tool_use"}
            pending_at = i


def _check_breakpoints(body: Mapping[str, Any]) -> None:
    """Every `cache_control` (tools -> system -> messages, then the top-level one): at most four,
    ephemeral, a known ttl, no 1h after a 5m."""
    system = body.get("system")
    blocks = [*(body.get("tools") or []), *(system if isinstance(system, list) else [])]
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        blocks.extend(content if isinstance(content, list) else [])
    controls = [b["cache_control"] for b in blocks if isinstance(b, dict) and b.get("cache_control")]
    if body.get("cache_control"):
        controls.append(body["cache_control"])
    if len(controls) > MAX_CACHE_BREAKPOINTS:
        raise invalid(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(controls)}."
        )
    seen_5m = False
    for cc in controls:
        if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
            raise invalid("cache_control.type: Input should be 'ephemeral'")
        ttl = cc.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise invalid("cache_control.ttl: Input should be '5m' or '1h'")
        if ttl == "1h" and seen_5m:
            raise invalid("cache_control: a ttl='1h' cache_control block must not come after a ttl='5m' one")
        seen_5m = seen_5m or ttl == "5m"
