"""The cap is never off (issue 22, repro 1): `--max-cost-usd 0.001 --model M` against the emulator, on
every model the emulator serves today, stops at start (no price: exit 2, nothing sent, a line naming
how to declare one) or is held by the cap (exit 4, the ledger equal to the bill, both under the cap).
Without a cap an unpriced model runs, warns once, and the report shows its tokens as unpriced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.models import MODELS, Status
from docmill.prices import price_on
from docmill.settings import get_settings
from flows.cli.main import main
from tests.fixtures.today import TODAY
from tests.flows.helpers import make_corpus

SERVED_TODAY = sorted(m.id for m in MODELS.values() if m.status_on(TODAY) is not Status.RETIRED)
CAP = 0.001


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    monkeypatch.delenv("DOCMILL_PRICES", raising=False)
    get_settings.cache_clear()
    yield str(tmp_path / "store")
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("cap"), count=4, seed=5)[0]


@pytest.mark.parametrize("model", SERVED_TODAY)
def test_repro_1_stops_at_start_or_is_held_by_the_cap(
    env: str, emulator: Any, corpus: Path, capsys: pytest.CaptureFixture[str], model: str
) -> None:
    args = ["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "r1", "--max-cost-usd", str(CAP)]
    code = main([*args, "--model", model])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("docmill:")]
    billed = emulator.state.accounting.total_usd()
    if price_on(model, TODAY) is None:
        assert code == 2, err
        assert (
            len(err) == 1 and model in err[0] and "DOCMILL_PRICES" in err[0] and "nothing was sent" in err[0]
        )
        assert emulator.state.accounting.received == 0
        return
    assert code == 4, err  # held by the cap: one request's worst case is more than $0.001
    assert billed <= CAP
    assert CostLedger(open_store(env), "r1").totals()["usd"] == pytest.approx(billed, abs=1e-9)


def test_an_unpriced_model_without_a_cap_runs_warns_once_and_reports_unpriced_tokens(
    env: str,
    emulator: Any,
    corpus: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = "claude-fable-5-2"  # served (current), no published price
    assert price_on(model, TODAY) is None
    code = main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "u1", "--model", model])
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if "no price" in line]  # the CLI's log lines on stderr
    assert len(said) == 1 and model in said[0], said  # once, at the start
    store = open_store(env)
    totals = CostLedger(store, "u1").totals()
    assert totals["unpriced"] > 0 and totals["unpriced_models"] == [model] and totals["unpriced_tokens"] > 0
    report = store.get("runs/u1/report.md").decode()
    assert f"**Unpriced:** {totals['unpriced']} answer(s) of `{model}`" in report
    assert f"{totals['unpriced_tokens']:,} tokens" in report
    # the emulator billed them (at the dearest published rates, its harsher default): the ledger did not
    assert emulator.state.accounting.total_usd() > totals["usd"]
