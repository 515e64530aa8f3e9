"""fedclust file for ensuring the package is executable
as `fedclust` and `python -m fedclust`
"""

import sys
from pathlib import Path
from typing import Any

from fedclust.environment import apply_defaults

apply_defaults()  # before Kedro and MLflow load: the environment a fedclust command starts with

from kedro.framework.cli.utils import find_run_command  # noqa: E402  (after the environment defaults)
from kedro.framework.project import configure_project  # noqa: E402


def main(*args, **kwargs) -> Any:
    package_name = Path(__file__).parent.name
    configure_project(package_name)

    interactive = hasattr(sys, "ps1")
    kwargs["standalone_mode"] = not interactive

    run = find_run_command(package_name)
    return run(*args, **kwargs)


if __name__ == "__main__":
    main()
