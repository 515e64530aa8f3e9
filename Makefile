# The two commands of the README: `make run` and `make test` (which also builds the docs: `make docs`).
# Both create .venv when it is missing and install the project with its pinned dependencies
# (torch 2.13.0 through constraints.txt: the CPU build; anything else pulls GBs of CUDA wheels).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fedclust-installed

# No telemetry prompts or network calls from Kedro; headless plotting.
export KEDRO_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export MPLBACKEND := Agg
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install chromium run lint docs test test-fast viz mlflow-ui benchmarks clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/kedro run

# The suite runs on PYTEST_WORKERS processes (pytest-xdist; 2 = this project's 2-core machines), a
# module per worker at a time (--dist loadscope), so that a module's fixtures (a Kedro project copy,
# an MLflow server, an audit) are built once. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
test: lint docs chromium
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadscope

# The inner loop: everything but the tests marked slow (end-to-end Kedro runs, accuracy over
# several seeds), in under 2 minutes. No lint, no skip check.
test-fast: install chromium
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadscope -m "not slow"

# The documentation site (mkdocs.yml): docs/ into site/, with the parameter reference generated from
# conf/base and the method registry (docs/hooks.py). --strict: a broken link or anchor, or a page of
# docs/ left out of the nav, fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Style (ruff), declared against imported dependencies (deptry) and the layers of the package
# (import-linter contracts in pyproject.toml: an import that goes up a layer fails here).
LINT_PATHS := src tests benchmarks docs
lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/deptry .
	$(BIN)/lint-imports

# The browser tests drive the system's Chromium through Playwright (no browser download): installed
# here with apt-get when it is missing (as root, or with password-less sudo); otherwise make stops
# and says how. The tests themselves never install anything.
APT_CHROMIUM := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && $(APT_CHROMIUM); \
	  elif command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    sudo apt-get update -qq && sudo $(APT_CHROMIUM); \
	  else \
	    echo "make test: the browser tests need Chromium; install it with:" \
	         "sudo apt-get update && sudo apt-get install -y chromium" >&2; exit 1; \
	  fi; }

viz: install
	$(BIN)/kedro viz build --include-hooks

# The venv's own mlflow on the store of conf/base/mlflow.yml: works without activating the venv
# (`kedro mlflow ui` runs whatever `mlflow` is first on PATH). `mlflow ui` alone leaves its job
# runners behind when only its main process is stopped; here Ctrl-C, SIGTERM or SIGHUP to make
# stops the server with every process it started (all in make's process group: `kill 0`).
# One web worker (MLFLOW_WORKERS): with several, uvicorn's supervisor pings each worker and restarts
# one that misses a 5 s health check, which a loaded 2-core machine makes it do again and again (the
# UI then shows "Something went wrong"); a single worker is served by the main process, with no such
# checks, and is plenty for browsing runs. MLflow's job runners (seven processes, for GenAI evaluation
# jobs that this project never submits) stay off unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true.
MLFLOW_PORT ?= 5000
MLFLOW_WORKERS ?= 1
mlflow-ui: install
	@echo "MLflow UI: http://127.0.0.1:$(MLFLOW_PORT)/ (Ctrl-C stops it)"
	@MLFLOW_SERVER_ENABLE_JOB_EXECUTION=$${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false} \
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port $(MLFLOW_PORT) --workers $(MLFLOW_WORKERS) & \
	trap 'trap - INT TERM HUP; kill -TERM 0 2>/dev/null; wait; exit 0' INT TERM HUP; wait

clean:
	rm -rf mlruns mlflow.db mlflow.db.lock mlflow.db.failed.jsonl build .viz site
