"""DP releases described as data.

A training run returns the list of releases it actually made; the privacy-report stage accounts
them with :mod:`fedclust.privacy.accountants` (RDP or PLD from ``dp-accounting``).

A :class:`GaussianRelease` is ``count`` repetitions (rounds) of one *step*. A step applies one or
more Gaussian mechanisms (``noise_multipliers``: noise std divided by the L2 sensitivity) to the
same selected units, after selecting them with ``sampling``:

* ``"none"``: every unit takes part every step;
* ``"poisson"``: each unit independently with probability ``sampling_rate``;
* ``"without_replacement"``: a fixed-size subset of ``sample_size`` out of ``population``.

``unit`` says what a neighbouring dataset differs in: ``"sample"`` (record-level DP) or
``"client"`` (client-level DP). ``neighbouring`` is ``"add_remove"`` or ``"replace_one"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SAMPLING = ("none", "poisson", "without_replacement")
NEIGHBOURING = ("add_remove", "replace_one")
UNITS = ("sample", "client")


@dataclass(frozen=True)
class GaussianRelease:
    noise_multipliers: tuple[float, ...]
    count: int = 1
    sampling: str = "none"
    sampling_rate: float = 1.0
    population: int | None = None
    sample_size: int | None = None
    neighbouring: str = "add_remove"
    unit: str = "sample"
    label: str = ""
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        z = tuple(
            float(v)
            for v in (
                self.noise_multipliers
                if isinstance(self.noise_multipliers, (list, tuple))
                else (self.noise_multipliers,)
            )
        )
        object.__setattr__(self, "noise_multipliers", z)
        if not z or any(v < 0 for v in z):
            raise ValueError(f"noise_multipliers must be non-negative, got {z}")
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {SAMPLING}, got {self.sampling!r}")
        if self.neighbouring not in NEIGHBOURING:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {self.neighbouring!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if not 0.0 < self.sampling_rate <= 1.0:
            raise ValueError(f"sampling_rate must be in (0, 1], got {self.sampling_rate}")
        if self.sampling == "without_replacement":
            if self.population is None or self.sample_size is None:
                raise ValueError("without_replacement sampling needs population and sample_size")
            if not 0 < self.sample_size <= self.population:
                raise ValueError(f"sample_size must be in (0, population={self.population}], got {self.sample_size}")

    @property
    def is_private(self) -> bool:
        """False when any component has zero noise (a non-private release: epsilon is infinite)."""
        return all(v > 0 for v in self.noise_multipliers)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["noise_multipliers"] = list(self.noise_multipliers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "GaussianRelease":
        d = dict(d)
        d["noise_multipliers"] = tuple(d["noise_multipliers"])
        return cls(**d)


def non_dp_release(step: str, *, unit: str = "sample", neighbouring: str = "add_remove") -> GaussianRelease:
    """A release that is not a DP mechanism: it has no bounded sensitivity or adds
    no noise, so any run that makes it spends epsilon = inf. ``step`` names the step; the privacy
    report quotes it in its notes."""
    return GaussianRelease(
        noise_multipliers=(0.0,), count=1, unit=unit, neighbouring=neighbouring, label=f"NOT DP: {step}"
    )
