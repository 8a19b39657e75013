"""The command line and the Prefect layer over the stages in tasks/ (which never import flows/).

    flows/cli/       the `docmill` command
        main.py          parse, dispatch, one line per error, exit codes (exit_codes.py)
        args.py          the parser: commands, options, help
        checks.py        what is refused before anything starts (exit 2)
        run_commands.py  `run` and `resume`
        commands.py      status, runs, review, report, estimate, eval, doctor, emulator
    flows/orchestration/   Prefect: flows, tasks, artifacts, the temporary server
        prefect_flows.py the flows `extract`, `nightly`, `backfill`, `resume` (deploy/prefect.yaml)
        chunk_tasks.py   chunks as task runs (`prefect_map`), stop states, the progress artifact
        artifacts.py     summary, report link and failures of a finished run
        server.py        the temporary API server docmill owns; boot.py starts it first thing
    flows/entry.py   where a run starts: `run_extract`, `resume_run` (which run, its settings and clients,
                     over workers or not), `RunWiring`
    flows/workers/   `docmill run --workers N`: one run spread over Prefect workers
        spread.py        the driver's side: shards planned, N shard workers launched, waited for
        shard_worker.py  the `shard-worker` flow: a worker claims shards and works their chunks
    flows/run/       one run's pieces, with or without Prefect, below the workers and the entry
        driver.py        the phases in order, each resumable from the store; `choose_pass`
        modes.py         which per-file pass a run takes: the one place a mode is decided (a leaf)
        passes.py        `FilePass`: the realtime and batch passes over chunks, the cost cap's stop
        guard.py         the run's lease and the refusal of a second run over the same documents
        context.py       `RunContext` (built once, passed whole), `RunParams`, endpoint, clients and their
                         possibly-billed hook, shared limit
        continuation.py  which run a command continues, with which settings
        deadline.py      `--finish-by`: `DeadlinePass`, batch, then realtime near the deadline
        early.py         a batch run's batches created before its Prefect flow run (which continues it)
        progress.py      the progress line

    flows/extract.py  the flows again, for deployments registered before this layout (and
                      orchestration/shard_worker.py, the shard-worker flow at its former path)

Imports point down: cli -> orchestration -> entry -> workers -> run (tests/layout/test_dependency_rules.py).

Where a run's state lives in the store: checkpoints/ (chunks, outcomes, manifest, lease, shards).

Prefect loads a deployment's entrypoint file with its folder first on sys.path, so no module in a
folder that holds an entrypoint may share a name with a top-level package (`prefect`, `tasks`,
`flows`, ...): hence `orchestration/`, `workers/`, `prefect_flows.py`, `chunk_tasks.py`
(tests/deploy/test_deploy_parameters.py loads every entrypoint as Prefect does).
"""
