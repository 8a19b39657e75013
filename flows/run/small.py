"""Whether a run has so little to send that Prefect's fixed cost buys it nothing.

Through Prefect a foreground `docmill run` waits for a temporary API server (10-20 s on a loaded
2-core machine, bench/nightly.py) and pays Prefect's import and bookkeeping; in the foreground the
person or cron job that started it is its retry (flows.cli.run_commands runs the flow with
retries=0), so what a small run gets from Prefect is a flow-run record in the UI. `work_left` counts
the documents that would need an API call (an `ok`, non-duplicate document whose per-file key has no
result in the ledger) and stops counting at `limit`: the inventory's fast path (tasks.source.known_files)
makes this a `stat` per unchanged file; a file whose stamp moved is hashed (a `touch` still has its
result), and a new or changed one counts without being parsed (at most `limit` of them). A source this
store never inventoried has everything to send: its files are counted from the listing alone
(tasks.source.inventory.listed_files), none read, so the count costs no second inventory. Nothing is
written: the run that follows takes its own inventory.
"""

from __future__ import annotations

from itertools import islice

from checkpoints.inventory_cache import cache_key
from checkpoints.ledger import ResultsLedger
from checkpoints.store import open_store
from docmill.settings import Settings
from flows.run.continuation import source_id
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.document import Document
from tasks.source.inventory import inventory, listed_files, recorded
from tasks.source.known_files import known_files
from tasks.source.readers import DocType


def work_left(source: str, recipe_name: str, settings: Settings, *, limit: int) -> int:
    """Documents of `source` that would need a per-file API call, counted up to `limit`."""
    if limit <= 0:
        return 0
    store = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    recipe = load_recipe(recipe_name)
    if not store.exists(cache_key(source_id(source))):  # never inventoried here: every file may need a call
        return listed_files(source, settings, doc_types=recipe.doc_types, limit=limit)
    known = known_files(store, source_id(source), settings, recipe.doc_types)
    if known is None:  # stamps not trusted: every file would be read
        return listed_files(source, settings, doc_types=recipe.doc_types, limit=limit)
    ledger, model, params = ResultsLedger(store), str(settings.api.model), file_params(settings)

    def unanswered(doc: Document) -> bool:
        return (
            doc.status == "ok"
            and not doc.duplicate_of
            and not ledger.has(FILE_PASS, file_key(recipe, doc, model, params))
        )

    n = 0
    for doc_type, doc in recorded(source, settings, doc_types=recipe.doc_types, known=known):
        if doc is None and doc_type == DocType.EML:  # its attachments are documents: inventoried here
            known.keep_cache = True  # a look only: the run that follows writes the cache
            found = inventory(source, settings, doc_types=recipe.doc_types, known=known)
            return sum(1 for _ in islice(filter(unanswered, found), limit))
        n += 1 if doc is None else unanswered(doc)  # new or changed: may need a call (not parsed here)
        if n >= limit:
            break
    return min(n, limit)
