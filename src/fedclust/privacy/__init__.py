"""Privacy layer: Gaussian mechanisms, accountants on dp-accounting, and the papers' calibrators.

* :mod:`~fedclust.privacy.events`: :class:`GaussianRelease`, a DP release described as data;
* :mod:`~fedclust.privacy.mechanisms`: clipping, Gaussian noise, classical and analytic σ;
* :mod:`~fedclust.privacy.accountants`: ε of a list of releases (RDP/PLD from ``dp-accounting``) and
  noise calibration by bisection;
* :mod:`~fedclust.privacy.paper`: the papers' own formulas (``dp_fedc``, ``fedsc``, ``rr_cluster``);
* :mod:`~fedclust.privacy.report`: the JSON-ready privacy report of a run.
"""

from fedclust.privacy.accountants import (
    calibrate_noise_multiplier,
    effective_noise_multiplier,
    epsilon,
    split_noise_multipliers,
)
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.mechanisms import (
    PrivacyWarning,
    add_gaussian_noise,
    analytic_sigma,
    classical_sigma,
    clip_by_norm,
    clip_rows,
)
from fedclust.privacy.report import json_ready, privacy_report

__all__ = [
    "GaussianRelease",
    "PrivacyWarning",
    "add_gaussian_noise",
    "analytic_sigma",
    "calibrate_noise_multiplier",
    "classical_sigma",
    "clip_by_norm",
    "clip_rows",
    "effective_noise_multiplier",
    "epsilon",
    "json_ready",
    "privacy_report",
    "split_noise_multipliers",
]
