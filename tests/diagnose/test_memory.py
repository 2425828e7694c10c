"""qnn_ci.util.memory: the bytes this process may use, from /proc/meminfo and its cgroup
(v2 and v1, parents included), on sample file contents written here."""

from __future__ import annotations

from pathlib import Path

from qnn_ci.util.memory import (
    GiB,
    MiB,
    available_bytes,
    cgroup_paths,
    cgroup_room,
    human,
    meminfo_available,
    parse_size,
)

MEMINFO = """MemTotal:       24683664 kB
MemFree:        20000000 kB
MemAvailable:   16000000 kB
Buffers:          123456 kB
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_sizes_and_meminfo() -> None:
    assert parse_size("1024") == 1024
    assert parse_size("512M") == 512 * MiB
    assert parse_size("1.5G") == int(1.5 * GiB)
    assert parse_size("100k") == 102_400 and parse_size("2GiB") == 2 * GiB
    assert parse_size("lots") is None and parse_size("") is None
    assert meminfo_available(MEMINFO) == 16_000_000 * 1024
    assert meminfo_available("MemTotal: 1 kB\n") is None
    assert human(3.1 * GiB) == "3.1 GiB" and human(170 * MiB) == "170 MiB"


def test_cgroup_v2_limit_minus_usage_the_tightest_parent(tmp_path: Path) -> None:
    proc = _write(tmp_path / "cgroup", "0::/user.slice/job\n")
    root = tmp_path / "fs"
    _write(root / "user.slice/job/memory.max", "max\n")
    _write(root / "user.slice/job/memory.current", "100\n")
    _write(root / "user.slice/memory.max", f"{4 * GiB}\n")
    _write(root / "user.slice/memory.current", f"{3 * GiB}\n")
    assert cgroup_paths(proc.read_text()) == ("/user.slice/job", None)
    assert cgroup_room(proc, root) == 1 * GiB
    meminfo = _write(tmp_path / "meminfo", MEMINFO)
    assert available_bytes({}, meminfo=meminfo, proc_cgroup=proc, cgroup_root=root) == GiB
    _write(root / "user.slice/memory.max", "max\n")        # no limit anywhere: MemAvailable
    assert cgroup_room(proc, root) is None
    assert available_bytes({}, meminfo=meminfo, proc_cgroup=proc,
                           cgroup_root=root) == 16_000_000 * 1024


def test_cgroup_v1_and_a_container_root(tmp_path: Path) -> None:
    text = "12:pids:/x\n4:memory:/process_api/abc\n0::/\n"
    assert cgroup_paths(text) == ("/", "/process_api/abc")
    proc = _write(tmp_path / "cgroup", text)
    root = tmp_path / "fs"
    mem = root / "memory/process_api/abc"
    _write(mem / "memory.limit_in_bytes", f"{2 * GiB}\n")
    _write(mem / "memory.usage_in_bytes", f"{512 * MiB}\n")
    _write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n")   # unlimited
    _write(root / "memory/memory.usage_in_bytes", "1\n")
    assert cgroup_room(proc, root) == 2 * GiB - 512 * MiB
    # the path /proc/self/cgroup names is not mounted (a container): its mount's root
    other = tmp_path / "other"
    _write(other / "memory.max", f"{GiB}\n")
    _write(other / "memory.current", f"{GiB + 5}\n")          # over the limit: no room
    assert cgroup_room(_write(tmp_path / "c2", "0::/host/path\n"), other) == 0


def test_the_env_override_wins(tmp_path: Path) -> None:
    meminfo = _write(tmp_path / "meminfo", MEMINFO)
    none = tmp_path / "missing"
    assert available_bytes({"QNN_CI_MEMORY": "300M"}, meminfo=meminfo) == 300 * MiB
    assert available_bytes({"QNN_CI_MEMORY": "junk"}, meminfo=meminfo, proc_cgroup=none,
                           cgroup_root=none) == 16_000_000 * 1024
    assert available_bytes({}, meminfo=none, proc_cgroup=none, cgroup_root=none) is None
