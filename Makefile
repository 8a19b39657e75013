# The two commands of the README (run, test), and the two that move or check the lock.
# Every install comes from requirements.lock (every package pinned, with hashes); `make lock` is the
# only way a version changes, `make upgrade-check` tries the newest allowed versions in a scratch venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
# pytest-xdist workers: most tests wait on servers, subprocesses and clocks: with two workers the
# suite kept ~1 of 2 cores busy (CPU 529 s in 531 s wall for the whole of .ci/run), so three run at once
TEST_WORKERS ?= 3
UV := $(BIN)/uv
# What the lock is resolved for: Python 3.11 and newer, every platform (markers keep each one's wheels).
LOCK_FLAGS := pyproject.toml --extra dev --generate-hashes --universal --python-version 3.11 --quiet

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_LOGGING_LEVEL ?= WARNING

.PHONY: run test lint typecheck bench clean lock upgrade-check

# uv comes from the lock too: its own block is cut out of the lock and installed hash-checked by pip,
# then uv installs exactly the lock (sync also removes what the lock does not list) and docmill itself
# (editable, built with the locked setuptools, no build isolation: nothing unpinned is fetched).
# Bytecode is compiled at install: where PYTHONDONTWRITEBYTECODE is set (these machines set it), every
# Python start would otherwise compile Prefect and the SDK from source again (~1 s CPU per start), and
# docmill's own ~150 modules a run imports (~0.2 s CPU per start; an edited module is compiled again
# in memory until the next compile, as without it).
$(STAMP): $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	awk '/^uv==/{p=1} p{print} p && !/\\$$/{exit}' $(LOCK) > $(VENV)/uv.req
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r $(VENV)/uv.req
	$(UV) pip sync --quiet --compile-bytecode --require-hashes --python $(BIN)/python $(LOCK)
	$(UV) pip install --quiet --no-deps --no-build-isolation --python $(BIN)/python -e .
	$(BIN)/python -m compileall -q docmill flows tasks checkpoints emulator
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python examples/make_invoices.py --out examples/corpus/invoices --count 40 --seed 7 --media
	$(BIN)/docmill run examples/corpus/invoices --recipe invoices --store ./docmill-store

test: $(STAMP)
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --check --no-cache .
	$(BIN)/mypy
	$(BIN)/python -m compileall -q docmill flows tasks checkpoints emulator
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

# Move the lock to the newest versions pyproject.toml allows (UPGRADE=pkg[,pkg] moves only those),
# then reinstall. Run `make test` afterwards and commit the lock with what it changed.
lock: $(STAMP)
	$(UV) pip compile $(LOCK_FLAGS) $(if $(UPGRADE),$(foreach p,$(subst $(comma), ,$(UPGRADE)),--upgrade-package $(p)),--upgrade) -o $(LOCK)
	$(MAKE) --no-print-directory $(STAMP)

# The newest allowed versions in a scratch venv, the whole suite against them: a dependency release
# is found on purpose, not by a red CI. Prints what would move; never touches the lock or .venv.
upgrade-check: $(STAMP)
	PY=$(PY) .ci/upgrade-check

clean:
	rm -rf $(VENV) docmill-store examples/corpus

comma := ,
