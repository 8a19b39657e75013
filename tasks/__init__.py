"""Stage logic of a run, one package per concept (table: tasks/README.md).

source/               a source -> documents (inventory, known files, loading, doc ids) and readers/ per format
recipes/              what to extract: schemas, prompts, version
request               the per-file request: how a document is sent, its blocks, key and repair turn
cost/                 worst cases and the per-document guard, the batch cap, `docmill estimate`
evaluate              accuracy after a run
api/                  ModelClient (one call, one transport retry layer), pacing, usage arithmetic
per_file/             the per-file pass: gate, outcome, settle, accounting, realtime, long documents
batch/                the per-file pass through Message Batches: engine, lifecycle, items, spool, results
deadline/             --finish-by: batches while they can finish, then realtime
conversation/         long tasks inside a token budget: task, compaction, pinned facts
integration/          the cross-document pass: records, checks, run, long
reporting/            summary, exports, report.md/html, status
"""
