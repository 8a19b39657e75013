"""`docmill emulator`: run the offline Anthropic API emulator in the foreground.

docmill emulator --port 8765
ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=test python my_script.py
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from dataclasses import fields

from emulator.faults import FaultKind, parse_rules
from emulator.server import EmulatorServer
from emulator.state import EmulatorConfig

EPILOG_TEMPLATE = """\
fault rules (--fault, repeatable, or env DOCMILL_EMULATOR_FAULTS as a JSON list):
  '{"kind": "overloaded", "count": 3}'                the next 3 /v1/messages calls get 529
  '{"kind": "rate_limit", "retry_after": 2}'          every call gets 429, retry-after 2 s
  '{"kind": "server_error", "marker": "INV-0042"}'    500 for bodies containing INV-0042
  '{"kind": "truncate", "probability": 0.1}'          10 % of answers cut (stop_reason max_tokens)
  '{"kind": "invalid_request", "custom_id": "doc-7"}' batch item doc-7 ends `errored`
  '{"kind": "spend_limit"}'                          429 enforced_spend_limit_reached (retrying cannot help)
{kinds}
  fields: path (glob, default /v1/messages), marker, custom_id, count, probability, status,
          error_code, message, retry_after, should_retry, latency_ms, seconds, after_lines, after_events

every knob is also an env var DOCMILL_EMULATOR_<NAME> (e.g. DOCMILL_EMULATOR_LATENCY_MS=50).
control endpoints (no auth): GET /_emulator/accounting, POST|GET|DELETE /_emulator/faults,
POST /_emulator/clock/advance {"seconds": N}, POST /_emulator/config {...}, POST /_emulator/reset.
"""

KINDS = textwrap.fill(" ".join(FaultKind), 110, initial_indent="  kinds: ", subsequent_indent=" " * 9)
EPILOG = EPILOG_TEMPLATE.replace("{kinds}", KINDS)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="docmill emulator",
        description="Offline Anthropic API emulator: point the anthropic SDK at it with base_url=. "
        "Answers are deterministic and grounded in the request; nothing leaves this machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument(
        "--port", type=int, default=8765, help="port to listen on; 0 picks a free one (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, help="seed for probabilistic faults and result order")
    p.add_argument("--latency-ms", type=float, help="added latency on every API request")
    p.add_argument(
        "--fault", action="append", default=[], metavar="JSON", help="add a fault rule (repeatable)"
    )
    p.add_argument("--rpm", type=int, help="rate limit: requests per minute (429 + retry-after above it)")
    p.add_argument("--input-tpm", type=int, help="rate limit: input tokens per minute")
    p.add_argument("--output-tpm", type=int, help="rate limit: output tokens per minute")
    p.add_argument("--batch-seconds-per-request", type=float, help="virtual seconds each batch item takes")
    p.add_argument("--batch-base-seconds", type=float, help="virtual seconds before a batch starts finishing")
    p.add_argument(
        "--clock-speed", type=float, help="virtual seconds per real second (e.g. 3600: an hour a second)"
    )
    p.add_argument(
        "--cache-min-tokens",
        type=int,
        help="shortest cacheable prompt prefix for models outside the per-model table (default 4096)",
    )
    p.add_argument(
        "--output-tokens-per-second",
        type=float,
        help="latency model: an answer takes output tokens / this many seconds (default 0: instant)",
    )
    p.add_argument(
        "--grammar-max-complexity",
        type=int,
        help='refuse schemas above this complexity with 400 "compiled grammar is too large" (default off)',
    )
    p.add_argument("--no-auth", action="store_true", help="accept requests without an API key")
    return p


# the options named otherwise than the knob they set; every other option named like a knob sets it
KNOB_OF = {
    "rpm": "requests_per_minute",
    "input_tpm": "input_tokens_per_minute",
    "output_tpm": "output_tokens_per_minute",
}


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    config = EmulatorConfig.from_env()
    knobs = {f.name for f in fields(config)}
    given = {KNOB_OF.get(k, k): v for k, v in vars(args).items() if v is not None}
    config.update({k: v for k, v in given.items() if k in knobs})
    if args.no_auth:
        config.require_auth = False
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        rules = [rule for text in args.fault for rule in parse_rules(text)]
    except (ValueError, TypeError, KeyError) as e:
        print(f"docmill emulator: bad option: {e}", file=sys.stderr)
        return 2
    server = EmulatorServer(config, host=args.host, port=args.port)
    for rule in rules:
        server.state.faults.add(rule)
    try:
        server.start()
    except OSError as e:
        print(f"docmill emulator: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    summary = {"base_url": server.base_url, "faults": len(server.state.faults.rules)}
    print(f"emulator listening on {server.base_url} {json.dumps(summary)}", flush=True)
    try:
        stop.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
