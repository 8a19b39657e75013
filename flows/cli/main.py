"""The docmill command line. Errors reach the user here as one line.

Exit codes (the table in README.md):
  0  the run finished (documents that failed for good or need review are reported, not errors)
  2  bad input or configuration: a flag, setting, recipe, run id, store or source (nothing was sent)
  3  the run stopped on an error or a systemic failure, or documents failed transiently;
     `docmill resume RUN_ID` continues it
  4  the run's budget is spent; resume with a higher --max-cost-usd
  5  another process drives this run (its lease has not expired), or another live run of the
     same recipe and model covers the same documents (the overlap check; nothing was sent)
  6  the run finished but its integration pass is partial or failed (see the report); the next
     run of the same source asks again only what is missing
  130 interrupted (SIGINT), 143 terminated (SIGTERM): resume continues it
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from docmill.collector import relax_process_gc
from docmill.errors import BudgetExhausted, ConfigError, DocmillError, InputError, Interrupted, LeaseHeld
from docmill.settings import get_settings
from flows.cli import args as cli_args
from flows.cli.commands import (
    cmd_doctor,
    cmd_emulator,
    cmd_estimate,
    cmd_eval,
    cmd_report,
    cmd_review,
    cmd_runs,
    cmd_status,
)
from flows.cli.exit_codes import EXIT_BUDGET, EXIT_INPUT, EXIT_INTERRUPT, EXIT_LEASE, EXIT_OK, EXIT_RUN
from flows.cli.run_commands import cmd_resume, cmd_run


def quiet_prefect() -> None:
    """Prefect's environment as `docmill` sets it before Prefect is imported (the early server's too)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "ERROR")


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "resume": cmd_resume,
    "status": cmd_status,
    "runs": cmd_runs,
    "review": cmd_review,
    "report": cmd_report,
    "estimate": cmd_estimate,
    "doctor": cmd_doctor,
    "eval": cmd_eval,
    "emulator": cmd_emulator,
}


def build_parser() -> argparse.ArgumentParser:
    """The parser (flows/cli/args.py) with this module's exit codes as its description."""
    return cli_args.build_parser(__doc__)


TEARDOWN_SECONDS = 5.0  # after an interrupted command returned: the interpreter's exit, at most


def main(argv: list[str] | None = None) -> int:
    console = argv is None  # the `docmill` command itself (tests pass argv and go on running)
    if console:  # the process is docmill's: its collector tuned for it
        relax_process_gc()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["emulator"]:  # the emulator has its own parser and --help
        from emulator.cli import main as emulator_main

        return int(emulator_main(argv[1:]) or 0)
    quiet_prefect()
    from docmill.logs import redact
    from docmill.shutdown import SHUTDOWN, install, leave_within

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a bad command line (2, one line already printed)
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_INPUT
    try:
        raise_errors = get_settings().raise_errors
    except Exception as e:  # invalid settings: say which, in one line
        errors: list[Any] = getattr(e, "errors", lambda: [])()
        what = "; ".join(f"DOCMILL_{'__'.join(map(str, x['loc'])).upper()}: {x['msg']}" for x in errors[:3])
        print(f"docmill: ConfigError: invalid setting {redact(what or str(e))}", file=sys.stderr)
        return EXIT_INPUT
    SHUTDOWN.reset()
    restore = install(get_settings().shutdown_grace_seconds)  # SIGINT/SIGTERM: stop, finish, 130/143
    code = EXIT_RUN
    try:
        code = _dispatch(args, raise_errors)
        if console:
            sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # the reader went away (`docmill status | head`): nothing left to say
        code = EXIT_OK
        if console:  # the interpreter's last flush of stdout must not complain either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return code
    finally:
        restore()
        if console and SHUTDOWN.requested:  # what is left is teardown: it must not need a server
            leave_within(TEARDOWN_SECONDS, code)
        SHUTDOWN.reset()  # the stop belonged to this command (tests call main() again in-process)


def _dispatch(args: argparse.Namespace, raise_errors: bool) -> int:
    """Run the command; every docmill error leaves as one line and its exit code."""
    from docmill.logs import configure, current_run, redact
    from docmill.shutdown import EXIT_CODES, SHUTDOWN, say_stopped

    try:
        settings = get_settings()
        configure(args.log_format or settings.log_format, level=args.log_level)
        if getattr(args, "store", None):
            os.environ["DOCMILL_STORE"] = args.store
        return int(COMMANDS[args.command](args))
    except KeyboardInterrupt:
        say_stopped("SIGINT", current_run() or getattr(args, "run_id", None))
        return EXIT_INTERRUPT
    except BrokenPipeError:
        raise  # `main` ends quietly
    except Interrupted as e:  # a signal stopped the run gracefully (docmill.shutdown)
        if raise_errors:
            raise
        say_stopped(e.signal_name, e.run_id)
        return EXIT_CODES.get(e.signal_name, EXIT_INTERRUPT)
    except DocmillError as e:
        if raise_errors:
            raise
        print(f"docmill: {redact(e.one_line())}", file=sys.stderr)
        codes = {
            BudgetExhausted: EXIT_BUDGET,
            LeaseHeld: EXIT_LEASE,
            ConfigError: EXIT_INPUT,
            InputError: EXIT_INPUT,
        }
        return next((c for t, c in codes.items() if isinstance(e, t)), EXIT_RUN)
    except Exception as e:
        if raise_errors:
            raise
        if SHUTDOWN.requested:  # whatever broke after a signal (an orchestrator gone) is the signal's
            say_stopped(SHUTDOWN.signal_name, current_run() or getattr(args, "run_id", None))
            return EXIT_CODES.get(SHUTDOWN.signal_name, EXIT_INTERRUPT)
        print(
            f"docmill: unexpected {type(e).__name__}: {redact(str(e))[:300]} "
            "(set DOCMILL_RAISE_ERRORS=1 for the traceback; resume continues the run)",
            file=sys.stderr,
        )
        return EXIT_RUN


if __name__ == "__main__":
    sys.exit(main())
