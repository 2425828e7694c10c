"""The manifest's ``htp_config:`` (an export's or ``defaults:``), validated at load.

The SDK reads these settings from a JSON file and silently ignores what it does not
know, so a mistake there passes unnoticed until a board run is slow or wrong. Each
problem is one line naming the file, line and key, and what to do:

- an unknown key (with did-you-mean);
- a wrong type or a value out of range (``O`` outside 1..3, ``dlbc`` not 0/1 ...);
- ``fp16_relaxed_precision`` on an SoC without FP16 (QCS6490, HTP v68);
- ``vtcm_mb`` above the SoC's VTCM (where the SoC table knows it);
- ``soc_model`` / ``dsp_arch`` that disagree with ``target.soc`` (they are derived
  from it; writing them is allowed only when they agree); without ``target.soc`` they
  are refused, since nothing could check them.

The same function checks ``qnn-ci htp-config``'s arguments.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from qnn_ci.engine.spec import HtpConfigSpec
from qnn_ci.errors import UserError
from qnn_ci.tables import HTP_DEVICE_KEYS, HTP_GRAPH_KEYS, HTP_OPTIMIZATION_LEVELS, SocInfo

KeyPath = tuple[Any, ...]
ErrorAt = Callable[[KeyPath, str], UserError]      # (key path, message) -> the error
KEYS = (*HTP_GRAPH_KEYS, *HTP_DEVICE_KEYS)
# Words users reach for, and the key they mean.
_SYNONYMS = {"vtcm": "vtcm_mb", "vtcm_size": "vtcm_mb", "optimization_level": "O",
             "optimisation_level": "O", "o": "O", "opt_level": "O",
             "fp16": "fp16_relaxed_precision",
             "relaxed_precision": "fp16_relaxed_precision", "hvx": "hvx_threads",
             "soc_id": "soc_model", "arch": "dsp_arch", "htp_arch": "dsp_arch"}


def _hint(key: str) -> str:
    if key in _SYNONYMS:
        return f" (did you mean {_SYNONYMS[key]!r}?)"
    close = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key_text(key: str) -> str:
    return (f"unknown key {key[:40]!r}{_hint(key)}: the SDK would silently ignore it; "
            f"allowed: {', '.join(KEYS)}")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_htp_config(value: Any, soc: SocInfo | None, error: ErrorAt,
                     key_path: KeyPath = ("htp_config",)) -> HtpConfigSpec:
    """``htp_config:`` as a spec; ``error(key path, message)`` makes the one-line error
    (the loader's names file, line and key). ``soc``: the export's ``target.soc``."""
    if value is None:
        return HtpConfigSpec()
    if not isinstance(value, Mapping):
        raise error(key_path, f"expected a mapping of {', '.join(KEYS)}, got "
                              f"{type(value).__name__}")
    for key in value:
        if str(key) not in KEYS:
            raise error((*key_path, key), unknown_key_text(str(key)))
    at = lambda key: (*key_path, key)   # noqa: E731
    vtcm, level = value.get("vtcm_mb"), value.get("O")
    threads, dlbc = value.get("hvx_threads"), value.get("dlbc")
    fp16, soc_model, dsp_arch = (value.get("fp16_relaxed_precision"), value.get("soc_model"),
                                 value.get("dsp_arch"))
    if vtcm is not None and (not _int(vtcm) or vtcm < 0):
        raise error(at("vtcm_mb"), f"vtcm_mb must be a whole number of MiB >= 0 (0 = the "
                                   f"SoC's maximum), got {vtcm!r}")
    if level is not None and (not _int(level) or level not in HTP_OPTIMIZATION_LEVELS):
        raise error(at("O"), f"O must be 1, 2 or 3 (1 fastest prepare, 3 most optimal), "
                             f"got {level!r}")
    if threads is not None and (not _int(threads) or threads < 1):
        raise error(at("hvx_threads"), f"hvx_threads must be a whole number >= 1, got "
                                       f"{threads!r}")
    if dlbc is not None and (not isinstance(dlbc, (bool, int)) or int(dlbc) not in (0, 1)):
        raise error(at("dlbc"), f"dlbc must be 0 or 1, got {dlbc!r}")
    if fp16 is not None and (not isinstance(fp16, (bool, int)) or int(fp16) not in (0, 1)):
        raise error(at("fp16_relaxed_precision"), f"fp16_relaxed_precision must be true or "
                                                  f"false, got {fp16!r}")
    if soc is not None:
        if fp16 and not soc.fp16:
            raise error(at("fp16_relaxed_precision"),
                        f"{soc.name} (HTP {soc.arch_name}) has no FP16: fp16_relaxed_precision "
                        "would put FP16 ops in a graph it cannot load; remove it")
        if vtcm and soc.vtcm_mb is not None and vtcm > soc.vtcm_mb:
            raise error(at("vtcm_mb"), f"vtcm_mb {vtcm} is more than the {soc.vtcm_mb} MiB of "
                                       f"VTCM the {soc.name} has; use at most {soc.vtcm_mb} "
                                       "(or 0 for the SoC's maximum)")
    for key, given in (("soc_model", soc_model), ("dsp_arch", dsp_arch)):
        if given is None:
            continue
        if soc is None:
            raise error(at(key), f"{key} is derived from target.soc, and this export has "
                                 "none: set target.soc and remove " + key)
        want: Any = soc.sdk_soc_id if key == "soc_model" else soc.arch_name
        same = (_int(given) and given == want) if key == "soc_model" else \
            (isinstance(given, str) and given.strip().lower() == want)
        if not same:
            raise error(at(key), f"{key} {given!r} disagrees with target.soc {soc.name} "
                                 f"({key} {want!r}); remove it (qnn-ci derives it) or fix "
                                 "target.soc")
    return HtpConfigSpec(
        vtcm_mb=vtcm, O=level, fp16_relaxed_precision=None if fp16 is None else bool(fp16),
        hvx_threads=threads, dlbc=None if dlbc is None else int(dlbc),
        soc_model=soc_model, dsp_arch=None if dsp_arch is None else str(dsp_arch).lower())
