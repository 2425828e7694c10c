"""Read an ELF header: enough to tell which machine a shared library was built for."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from qnn_ci.errors import ToolError
from qnn_ci.tables import ELF_MACHINE_BY_TARGET_PREFIX

ET_DYN = 3
_E_TYPES = {0: "NONE", 1: "REL", 2: "EXEC", 3: "DYN", 4: "CORE"}
# Names for machines we may meet beyond the lib targets in qnn_ci.tables.
_EXTRA_MACHINES = {3: "x86 (i386)", 164: "Hexagon", 243: "RISC-V"}
MACHINE_NAMES: dict[int, str] = _EXTRA_MACHINES | dict(ELF_MACHINE_BY_TARGET_PREFIX.values())


@dataclass(frozen=True)
class ElfHeader:
    """The fields of an ELF header qnn-ci checks: class, byte order, type, machine."""

    elf_class: int          # 1 = 32-bit, 2 = 64-bit
    endianness: str         # "little" | "big"
    e_type: int             # 3 = ET_DYN (shared object)
    machine: int            # e_machine, e.g. 183 AArch64
    machine_name: str

    @property
    def bits(self) -> int:
        return 64 if self.elf_class == 2 else 32

    @property
    def type_name(self) -> str:
        return _E_TYPES.get(self.e_type, str(self.e_type))

    def describe(self) -> str:
        return (f"ELF{self.bits} {self.endianness}-endian {self.type_name}, "
                f"machine {self.machine} ({self.machine_name})")


def read_elf_header(path: Path) -> ElfHeader:
    """The ELF header of ``path``; ToolError when it is not a readable ELF file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head[:4] != b"\x7fELF":
        raise ToolError(f"{path} is not an ELF file (starts with {head[:4]!r})")
    if len(head) < 20:
        raise ToolError(f"{path} is a truncated ELF file ({len(head)} bytes)")
    elf_class, data = head[4], head[5]
    if elf_class not in (1, 2) or data not in (1, 2):
        raise ToolError(f"{path}: invalid ELF identification (class {elf_class}, data {data})")
    endian = "little" if data == 1 else "big"
    e_type, machine = struct.unpack("<HH" if data == 1 else ">HH", head[16:20])
    return ElfHeader(elf_class=elf_class, endianness=endian, e_type=e_type, machine=machine,
                     machine_name=MACHINE_NAMES.get(machine, f"machine {machine}"))


def expected_machine(lib_target: str) -> tuple[int, str] | None:
    """(e_machine, name) a library built for ``lib_target`` must have, if known."""
    for prefix, machine in ELF_MACHINE_BY_TARGET_PREFIX.items():
        if lib_target.startswith(prefix):
            return machine
    return None


def check_library(header: ElfHeader, lib_target: str) -> list[str]:
    """Problems with ``header`` as a shared library for ``lib_target`` (empty: fine)."""
    problems: list[str] = []
    if header.e_type != ET_DYN:
        problems.append(f"not a shared object: ELF type {header.type_name}")
    want = expected_machine(lib_target)
    if want is not None and header.machine != want[0]:
        problems.append(f"built for {header.machine_name} (e_machine {header.machine}), "
                        f"but target {lib_target} needs {want[1]} (e_machine {want[0]})")
    return problems
