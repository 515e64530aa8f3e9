"""Shared test fixtures and paths."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fedclust.environment import apply_defaults

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")
# the environment a fedclust command starts with (its kedro.init entry point): the in-process Kedro
# sessions of the tests run as `kedro run` does (MLflow's telemetry off, its short HTTP retries)
apply_defaults()

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    d = SHARED_DATA / "mnist"
    if not (d / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"MNIST test set not found under {d}")
    return d


def make_project_copy(project_root: Path, dest: Path) -> Path:
    """A project copy at ``dest`` whose MLflow store is ``dest/mlflow.db`` (absolute URI)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(project_root / "pyproject.toml", dest / "pyproject.toml")
    if (project_root / ".telemetry").exists():
        shutil.copy(project_root / ".telemetry", dest / ".telemetry")
    shutil.copytree(project_root / "conf", dest / "conf", ignore=shutil.ignore_patterns("local"))
    (dest / "conf" / "local").mkdir()
    # Absolute store: MLflow caches one SQL engine per tracking URI, so a relative one would keep
    # pointing at the first database opened in this process.
    mlflow_yml = (project_root / "conf" / "base" / "mlflow.yml").read_text()
    (dest / "conf" / "local" / "mlflow.yml").write_text(
        mlflow_yml.replace("sqlite:///mlflow.db", f"sqlite:///{dest / 'mlflow.db'}")
    )
    (dest / "src").mkdir()  # Kedro checks that it exists; the package itself is installed
    for layer in ("01_raw", "02_intermediate", "05_model_input", "07_model_output", "08_reporting"):
        (dest / "data" / layer).mkdir(parents=True)
    return dest


@pytest.fixture(scope="session")
def project_copy():
    """``project_copy(dest)``: a throw-away copy of the project (see :func:`make_project_copy`)."""
    return lambda dest: make_project_copy(PROJECT_ROOT, dest)


@pytest.fixture(scope="module")
def torch_one_thread():
    """One torch thread for a module: tiny tensors, and one thread avoids OpenMP oversubscription
    on the shared 2-core machine."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ---- markers applied by fixture, and no silent skips ---------------------------------------------

#: fixtures that read ../shared/data and skip when it is missing: their tests are ``external_data``
EXTERNAL_DATA_FIXTURES = {"mnist_dir", "iris", "circles", "coil20"}
#: fixtures that run a copy of the Kedro project (sessions, subprocesses): their tests are ``slow``
SLOW_FIXTURES = {"project_copy", "kedro_project", "run_pipeline", "benchmark_project"}
#: tests measured at several seconds each (``pytest --durations``, one process, on the shared 2-core
#: machine): ``slow`` wherever their modules live. By function name, so that all parameters go together.
SLOW_TESTS = {
    # executors and grids: process pools, a local Ray instance, whole grids
    "test_processes_give_the_same_records_as_serial",
    "test_ray_gives_the_same_records_as_serial",
    "test_a_larger_sweep_resumes_the_cells_it_shares_and_a_changed_setting_does_not",
    "test_interrupted_grid_keeps_finished_cells_and_resumes_only_the_missing",
    "test_editing_a_module_the_grid_does_not_import_keeps_its_cells",
    "test_grid_runs_on_a_list_of_files_with_scale_and_graph_parameters",
    "test_grid_rr_equals_dp_ifca_when_nothing_moves_and_literal_noise_costs_epsilon",
    "test_runs_of_dead_processes_on_this_host_are_marked_killed",
    # privacy: audits outside the audit modules, calibration sweeps
    "test_fkm_canary_audit_sound_and_powerful",
    "test_calibration_monotone_in_epsilon_and_steps",
    "test_calibration_release_and_spent_epsilon",
    # accuracy over runs, registry against library
    "test_a_large_budget_approaches_the_non_private_twin",
    "test_rotated_digits_clustered_methods_beat_fedavg",
    "test_rr_cluster_through_the_registry_equals_the_library_run",
    "test_coil20_arpack_embedding_equals_dense_and_sc_is_stable",
    # fresh interpreters (imports of torch, Kedro)
    "test_the_registry_is_library_code_without_kedro_or_torch_at_import",
    "test_apply_before_torch_import_reaches_torch",
    "test_mnist_test_set_real_file",
}
#: modules whose every test is slow, by file name wherever it lives: the privacy audits (many runs of
#: each method per test), the benchmark grid and the Kedro-Viz build (a module fixture that runs them)
SLOW_MODULES = ("test_audit_", "test_benchmark_grid.py", "test_viz_graph.py")
#: tests of those modules that stay in ``make test-fast``: the noise-scale test of every DP release
#: (about 10 s together). A release whose noise or sensitivity is wrong (DK++'s sqrt(c^2 + 1)
#: replaced by c, a halved multiplier) then fails the inner loop, not only the slow audits.
FAST_IN_SLOW_MODULES = {
    "test_released_noise_std_is_the_claimed_one",
    "test_clip_estimate_noise_std_is_the_multiplier_times_sensitivity_one",
    "test_released_noise_std_equals_the_accounted_std",
    "test_secure_aggregation_noise_std_equals_the_largest_client_sigma_over_K",
    "test_noise_std_is_public_when_a_private_sample_is_scaled_up",
    "test_perturbed_data_noise_std_equals_accounted_std",
    "test_perturbed_factor_noise_stds_equal_accounted_stds",
    "test_perturbed_data_noise_std_with_a_declared_domain_equals_multiplier_times_sqrt2_tau",
    "test_data_sensitivity_takes_the_smallest_bound_of_the_declared_domain",
    "test_released_sum_noise_has_the_std_the_release_claims",
    "test_identifier_noise_has_the_std_the_release_claims",
}
#: markers under which a skip is allowed (counted and listed, never silent)
ALLOWED_SKIP_MARKERS = ("external_data", "allow_skip")


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(item.fixturenames)
        if names & EXTERNAL_DATA_FIXTURES:
            item.add_marker(pytest.mark.external_data)
        if (
            names & SLOW_FIXTURES
            or getattr(item, "originalname", item.name) in SLOW_TESTS
            or (
                item.path.name.startswith(SLOW_MODULES)
                and getattr(item, "originalname", item.name) not in FAST_IN_SLOW_MODULES
            )
        ):
            item.add_marker(pytest.mark.slow)


class SkipLedger:
    """Every skip, allowed (the test carries one of :data:`ALLOWED_SKIP_MARKERS`) or not. The summary
    prints their count; a skip that no marker allows fails the run, so that nothing is skipped
    silently (on a clean clone without ../shared/data only ``external_data`` tests may skip)."""

    def __init__(self):
        self.allowed: list[tuple[str, str]] = []
        self.not_allowed: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report):
        if not report.skipped or report.when == "teardown" or hasattr(report, "wasxfail"):
            return
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        allowed = any(m in report.keywords for m in ALLOWED_SKIP_MARKERS)
        (self.allowed if allowed else self.not_allowed).append((report.nodeid, reason))

    def pytest_terminal_summary(self, terminalreporter):
        n = len(self.allowed) + len(self.not_allowed)
        terminalreporter.write_line(
            f"skipped: {n} ({len(self.allowed)} allowed by a marker, {len(self.not_allowed)} not allowed)"
        )
        for nodeid, reason in self.not_allowed:
            terminalreporter.write_line(f"  skipped without an allowing marker: {nodeid}: {reason}", red=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.not_allowed and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist controller (or a plain run) sees every report
        config.pluginmanager.register(SkipLedger(), "fedclust-skip-ledger")
