# The two commands of the README: `make run` and `make test`.
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

.PHONY: install run lint test test-fast viz mlflow-ui benchmarks clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/kedro run

# The suite runs on PYTEST_WORKERS processes (pytest-xdist; 2 = this project's 2-core machines):
# about 5 minutes instead of 9. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

# The inner loop: everything but the tests marked slow (end-to-end Kedro runs, accuracy over
# several seeds), in under 2 minutes. No lint, no skip check.
test-fast: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "not slow"

# Style (ruff), declared against imported dependencies (deptry) and the layers of the package
# (import-linter contracts in pyproject.toml: an import that goes up a layer fails here).
LINT_PATHS := src tests benchmarks
lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/deptry .
	$(BIN)/lint-imports

viz: install
	$(BIN)/kedro viz build --include-hooks

# The venv's own mlflow on the store of conf/base/mlflow.yml: works without activating the venv
# (`kedro mlflow ui` runs whatever `mlflow` is first on PATH). `mlflow ui` alone leaves its job
# runners behind when only its main process is stopped; here Ctrl-C, SIGTERM or SIGHUP to make
# stops the server with every process it started (all in make's process group: `kill 0`).
MLFLOW_PORT ?= 5000
mlflow-ui: install
	@$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port $(MLFLOW_PORT) & \
	trap 'trap - INT TERM HUP; kill -TERM 0 2>/dev/null; wait; exit 0' INT TERM HUP; wait

clean:
	rm -rf mlruns mlflow.db build .viz
