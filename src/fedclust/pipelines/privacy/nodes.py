"""Privacy nodes shared by the method pipelines.

The calibration node of each method lives with the method (its noise depends on its protocol);
the report node is the same for all: it accounts the releases the run actually made.
"""

from __future__ import annotations

import logging
import re

from fedclust.data.preprocess import scaling_statistics
from fedclust.privacy.release import DESCRIPTIONS
from fedclust.privacy.report import privacy_report
from fedclust.registry.privacy import check_privacy_params

logger = logging.getLogger(__name__)


def condense_notes(notes, limit: int = 8) -> list[str]:
    """Unique notes in order; notes that differ only in their numbers are kept once, with a count."""

    seen: dict[str, list] = {}
    for note in notes:
        key = re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", str(note))
        seen.setdefault(key, [note, 0])[1] += 1
    out = [note if count == 1 else f"{note} [and {count - 1} more like it]" for note, count in seen.values()]
    if len(out) > limit:
        out = out[:limit] + [f"... {len(out) - limit} more notes"]
    return out


#: the note of a private run whose data were scaled by statistics of the data themselves
SCALING_NOTE = (
    "before the run the data went through {what}: those statistics come from every client's data, "
    "no release carries them and epsilon does not cover them; declare public bounds "
    "(dataset.options.bounds) for a run that is private end to end"
)


def report_privacy(result, calibration: dict, privacy: dict, method: str, data=None) -> dict:
    """The privacy report of a finished run (written to data/08_reporting/<method>/privacy.json).

    ``data``: the data set the run read (its scaling, :func:`~fedclust.data.preprocess.scaling_statistics`,
    goes into the report as ``preprocessing``; a private run on data scaled by their own statistics
    gets a note that epsilon does not cover them)."""
    _, delta = check_privacy_params(privacy)
    rep = privacy_report(
        list(result.dp_events),
        calibration.get("delta", delta),
        method=method,
        mechanism=calibration.get("mechanism", "gaussian"),
        unit=calibration.get("unit", "sample"),
        paper_epsilon=calibration.get("paper_epsilon"),
        paper_formula=calibration.get("paper_formula"),
        notes=tuple(condense_notes(tuple(calibration.get("notes", ())) + tuple(result.info.get("privacy_notes", ())))),
        accountant=privacy.get("accountant", "rdp"),
        outside=tuple(result.info.get("privacy_outside", ())),
    )
    rep["notes"] = condense_notes(rep.get("notes", []))
    tm = calibration.get("trust_model") if rep.get("private") else None
    rep["trust_model"] = tm or "none"
    if tm:
        rep["trust_model_meaning"] = DESCRIPTIONS.get(tm, "")
    rep["calibration"] = {k: v for k, v in calibration.items() if k not in ("notes",)}
    scaling = scaling_statistics(getattr(data, "meta", None))
    if scaling:
        rep["preprocessing"] = {**scaling, "covered_by_epsilon": scaling["reads"] == "public"}
        if rep.get("private") and scaling["reads"] == "data":
            rep["notes"].append(SCALING_NOTE.format(what=scaling["what"]))
            logger.warning("%s: %s", method, rep["notes"][-1])
    agg = result.info.get("aggregation")
    if agg:  # the Flower backend: the protocol that carried every sum, and the noise that reached it
        rep["aggregation_protocol"] = agg["protocol"]
        rep["aggregation"] = agg  # per release: clients, t, SecAgg+'s encoding and error, the noise std present
        rep["notes"].append(
            f"{agg['protocol']}: t={agg['threshold_t']}, at least {agg['fewest_clients_in_sum']} of "
            f"{agg['clients']} clients' noise shares reached every sum; epsilon accounts the noise present"
        )
    return rep
