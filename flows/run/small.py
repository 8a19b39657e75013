"""Whether a run has so little to send that Prefect's fixed cost buys it nothing.

Through Prefect a foreground `docmill run` waits for a temporary API server (10-20 s on a loaded
2-core machine, bench/nightly.py) and pays Prefect's import and bookkeeping; in the foreground the
person or cron job that started it is its retry (flows.cli.run_commands runs the flow with
retries=0), so what a small run gets from Prefect is a flow-run record in the UI. `work_left` counts
the documents that would need an API call (an `ok`, non-duplicate document whose per-file key has no
result in the ledger) and stops counting at `limit`: the inventory's fast path (tasks.source.known_files)
makes this a `stat` per unchanged file, and at most `limit` changed files are read. A source this
store never inventoried has everything to send: its files are counted from the listing alone
(tasks.source.inventory.listed_files), none read, so the count costs no second inventory. Nothing is
written: the run that follows takes its own inventory.
"""

from __future__ import annotations

from checkpoints.inventory_cache import cache_key
from checkpoints.ledger import ResultsLedger
from checkpoints.store import open_store
from docmill.settings import Settings
from flows.run.continuation import source_id
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.inventory import inventory, listed_files
from tasks.source.known_files import known_files


def work_left(source: str, recipe_name: str, settings: Settings, *, limit: int) -> int:
    """Documents of `source` that would need a per-file API call, counted up to `limit`."""
    if limit <= 0:
        return 0
    store = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    recipe = load_recipe(recipe_name)
    if not store.exists(cache_key(source_id(source))):  # never inventoried here: every file may need a call
        return listed_files(source, settings, doc_types=recipe.doc_types, limit=limit)
    known = known_files(store, source_id(source), settings, recipe.doc_types)
    if known is not None:
        known.keep_cache = True  # a look only: the run that follows writes the cache
    ledger, model, params = ResultsLedger(store), str(settings.api.model), file_params(settings)
    n = 0
    for doc in inventory(source, settings, doc_types=recipe.doc_types, known=known):
        if doc.status != "ok" or doc.duplicate_of:
            continue
        if not ledger.has(FILE_PASS, file_key(recipe, doc, model, params)):
            n += 1
            if n >= limit:
                break
    return n
