"""Offline Anthropic API emulator: the real `anthropic` SDK talks to it over loopback HTTP.

`emulator.server.EmulatorServer` runs it in-process; `emulator.cli.main` runs it standalone.
Pipeline code (tasks/, checkpoints/) never imports this package.

Key contracts (each covered by tests/emulator/):
- One token counter (`tokens.count_tokens`) feeds count_tokens and `usage`; input_tokens +
  cache_creation_input_tokens + cache_read_input_tokens == count_tokens(body).
- Every billed request is in `state.accounting.billed` with usd from `docmill.prices.usd_at` at the
  price `state.price_for(model)` gives: docmill's dated table on the emulator's day (batch items at the
  model's batch multiplier), an `extra_models` entry, or for a served model with no published price
  the dearest published rates (knob `unpriced_price`); errors are never billed; `accounting.received`
  counts every request.
- The model list is docmill's dated model table: every model not retired on the emulator's day is
  served; retired and unknown ids answer 404 not_found_error. Per-model rules (`model_rules`): a
  `thinking.type` the model refuses, effort where unsupported, non-default sampling on 5.x: 400.
  Adaptive thinking (5.x, on by default) is modelled: a thinking block before the text, deterministic
  tokens per effort (knob `thinking_tokens_by_effort`, off with `model_thinking`), billed as output.
- Every /v1 response has a `request-id` header; error bodies repeat it as `request_id`.
- Time is the virtual clock (`state.clock`): cache TTLs, batch progress, expiry, archive and
  rate-limit refill all follow it; tests advance it instead of sleeping.
- Faults are data (`faults.FaultRule`), consumed in order, seeded; see `faults` for the kinds.
- No kinder than the API (reference §00): pre-4.6 aliases answer with their dated ids, models past
  their retirement day in docmill's table answer 404, cache minimums are per model (the same table)
  and the output schema is not in the cached prefix, every answer has `anthropic-ratelimit-*`
  headers (`tokens-*`: the tightest token limit), `results_url` is on the emulator's own address; a
  request the API refuses is refused in its error shape (`validation`: unknown top-level keys — the
  SDK's TypedDicts —, `role: system` first or mid-conversation, empty messages, `max_tokens` 0 or
  above the model's limit from docmill's table, `tool_choice` without tools, a malformed
  `output_config`, no `anthropic-version`); admission reserves `max_tokens` of the output-token
  limit and does not count cache reads against the input one (`input_limit_counts_cache_reads`); a
  batch is `in_progress` for `batch_base_seconds` (a minute) of virtual time; a dropped stream is
  billed in full. Optional: the "compiled grammar is too large" 400 (`grammar`), answer time growing
  with output tokens (`output_tokens_per_second`, virtual seconds at `clock_speed`).

Modules: server (app + routes), calls (`Call`: what a /v1 handler gets), messages (one request end
to end + SSE), batches (a batch's life on the virtual clock + its handlers), batch_store (the batch
records the state holds, the journal), compaction, caching, tokens, faults, validation,
accounting, state (config, rate limits), clock (virtual time,
RFC 3339), catalog (model ids, end of life, the unpriced rate), model_rules (per-model
thinking / effort / sampling rules, adaptive thinking tokens), grammar (schema size rule), control
(/_emulator/ endpoints), cli. The deterministic answers: model (respond, summarize), grounding
(reading a request's documents and labelled lines), schema_fill + schema_hints (a JSON schema filled
with grounded values), item_frames, line_items, source_code, claims, records, roles, frames, values,
words, summary (the compaction summary).
"""
