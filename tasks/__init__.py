"""Stage logic of a run, one module per stage (table: tasks/README.md).

inventory, textract   a source -> documents -> text (doc_names: ids and globs)
recipes/              what to extract: schemas, prompts, version
estimate, evaluate    cost before a run; accuracy after it
api/                  ModelClient (one call, one transport retry layer), pacing, usage arithmetic
per_file/             the per-file pass: request, gate, outcome, settle, accounting, realtime, long documents
batch/                the per-file pass through Message Batches: engine, lifecycle, items, spool, results
conversation/         long tasks inside a token budget: task, compaction, pinned facts
integration/          the cross-document pass: records, checks, run, long
reporting/            summary, exports, report.md/html, status
"""
