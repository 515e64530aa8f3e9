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

.PHONY: install run test viz mlflow-ui benchmarks clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/kedro run

test: install
	$(BIN)/python -m pytest -q

viz: install
	$(BIN)/kedro viz build --include-hooks

mlflow-ui: install
	$(BIN)/kedro mlflow ui

clean:
	rm -rf mlruns mlflow.db build .viz
