"""The AI Hub device a board entry names, and the SoC it is: from the device's own
attributes (``soc-model:<id>``, ``chipset:<name>``, ``hexagon:v<arch>``) read
against the one SoC table (``qnn_ci.tables``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qnn_ci.hub.client import HubClient, HubError
from qnn_ci.tables import SocInfo, find_soc, soc_of_hub_chipset, soc_of_hub_model


@dataclass(frozen=True)
class HubDevice:
    """One device: its name, attributes, and what they say of its SoC."""

    name: str
    os: str
    attributes: tuple[str, ...]
    soc: SocInfo | None          # None: the attributes name no SoC qnn-ci knows
    htp_arch: int | None         # from hexagon:vNN, else the SoC's

    def attribute(self, key: str) -> str | None:
        prefix = key + ":"
        return next((a[len(prefix):] for a in self.attributes if a.startswith(prefix)), None)

    def describe(self) -> str:
        chip = self.attribute("chipset")
        what = self.soc.name if self.soc else "an unknown SoC"
        return f"'{self.name}' ({'chipset ' + chip + ': ' if chip else ''}{what})"

    def handle(self) -> Any:
        import qai_hub

        return qai_hub.Device(self.name, self.os)


def read_device(raw: Any) -> HubDevice:
    """A ``qai_hub.Device`` as a HubDevice."""
    attributes = tuple(str(a) for a in (getattr(raw, "attributes", None) or ()))
    soc = None
    arch = None
    for attr in attributes:
        key, _, value = attr.partition(":")
        if key == "soc-model" and value.strip().isdigit():
            soc = soc or soc_of_hub_model(int(value))
        elif key == "hexagon" and value.strip().lower().lstrip("v").isdigit():
            arch = int(value.strip().lower().lstrip("v"))
    if soc is None:
        chip = next((a.partition(":")[2] for a in attributes if a.startswith("chipset:")), "")
        soc = soc_of_hub_chipset(chip) if chip else None
    return HubDevice(str(raw.name), str(getattr(raw, "os", "") or ""), attributes, soc,
                     arch if arch is not None else (soc.htp_arch if soc else None))


def find_device(hub: HubClient) -> HubDevice:
    """The device of the board entry: by ``device:`` name, else the first with the
    ``chipset:`` attribute. One AI Hub does not have is one line."""
    board = hub.board
    if board.device:
        query: dict[str, str] = {"name": board.device}
        what = f"named {board.device!r} (device:)"
    else:
        query = {"attributes": f"chipset:{board.chipset}"}
        what = f"with chipset {board.chipset!r} (chipset:)"
    found = hub.call("device lookup", lambda: hub.client.get_devices(**query))
    if not found:
        raise HubError("hub.device", hub.mask(f"{hub.where()}: AI Hub has no device {what}; "
                                              "`qai-hub list-devices` lists them"))
    return read_device(found[0])


def soc_mismatch(device: HubDevice, board_name: str, export: str,
                 target_soc: str | None) -> str | None:
    """Why ``export`` (``target.soc``) must not be judged on ``device``, else None."""
    want = find_soc(target_soc or "")
    if want is None:
        return None
    if device.soc is not None and device.soc.name != want.name:
        return (f"board {board_name} is the AI Hub device {device.describe()} but export "
                f"{export} targets {want.name} (target.soc): a run there proves nothing "
                f"about the {want.name}; choose a {want.name} device (device: or chipset:) or "
                "correct target.soc")
    if device.soc is None and device.htp_arch is not None and device.htp_arch != want.htp_arch:
        return (f"board {board_name} is the AI Hub device '{device.name}' with HTP "
                f"v{device.htp_arch} but export {export} targets {want.name} (HTP "
                f"{want.arch_name}, target.soc); choose a {want.name} device or correct "
                "target.soc")
    return None
