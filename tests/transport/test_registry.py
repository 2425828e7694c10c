"""Board declarations: parsing, errors, the schema fragment, the transport factory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from qnn_ci.errors import UserError
from qnn_ci.manifest.boards_file import BOARD_SCHEMA, BOARDS_SCHEMA, load_boards_file, parse_boards
from qnn_ci.transport.adb import AdbTransport
from qnn_ci.transport.factory import open_transport
from qnn_ci.transport.local import LocalTransport
from qnn_ci.transport.ssh import SshTransport

GOOD = """\
boards:
  rb3:
    transport: ssh
    host: rb3.lab
    user: root
    key_file: keys/id_ed25519
    known_hosts: ~/lab_known_hosts
    soc: qcm6490
    env: {ADSP_LIBRARY_PATH: /usr/lib/dsp, LEVEL: 3}
    retries: 0
  phone:
    transport: adb
    serial: 192.168.1.20:5555
    adb_server_port: 5038
    work_root: /data/local/tmp/qnn-ci
  here:
    transport: local
    timeout_s: 30
    lock_max_age_s: 7200
    lock_timeout_s: 45
  hub:
    transport: ai-hub
    device: RB3 Gen 2 (Proxy)
    token_env: LAB_HUB_TOKEN
    options: --compute_unit npu
    job_timeout_s: 900
  hub-chip:
    transport: ai-hub
    chipset: qualcomm-qcs6490-proxy
    soc: QCS6490
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "qnn-boards.yaml"
    path.write_text(text)
    return path


def test_good_file(tmp_path: Path) -> None:
    boards = load_boards_file(_write(tmp_path, GOOD))
    rb3, phone, here = boards["rb3"], boards["phone"], boards["here"]
    assert rb3.transport == "ssh" and rb3.host == "rb3.lab" and rb3.port == 22
    assert rb3.key_file == tmp_path / "keys" / "id_ed25519"
    assert rb3.known_hosts == Path.home() / "lab_known_hosts"
    assert rb3.soc == "QCS6490"                            # canonical name of the alias
    assert rb3.env == {"ADSP_LIBRARY_PATH": "/usr/lib/dsp", "LEVEL": "3"}
    assert rb3.retries == 0 and rb3.host_key_policy == "reject"
    assert phone.serial == "192.168.1.20:5555" and phone.adb_server_port == 5038
    assert phone.work_root == "/data/local/tmp/qnn-ci"
    assert here.timeout_s == 30 and here.work_root == "/tmp/qnn-ci"
    assert here.lock_max_age_s == 7200 and rb3.lock_max_age_s == 6 * 3600
    assert here.lock_timeout_s == 45 and rb3.lock_timeout_s == 300      # fits a CI job
    assert isinstance(open_transport(rb3), SshTransport)
    assert isinstance(open_transport(phone), AdbTransport)
    assert isinstance(open_transport(here), LocalTransport)
    hub, chip = boards["hub"], boards["hub-chip"]
    assert (hub.transport, hub.device, hub.token_env, hub.options, hub.job_timeout_s) == (
        "ai-hub", "RB3 Gen 2 (Proxy)", "LAB_HUB_TOKEN", "--compute_unit npu", 900)
    assert chip.chipset == "qualcomm-qcs6490-proxy" and chip.device is None
    assert chip.token_env == "QAI_HUB_API_TOKEN" and chip.api_url is None
    with pytest.raises(ValueError, match="is an AI Hub board: it runs jobs"):
        open_transport(hub)


@pytest.mark.parametrize(("board", "key", "message"), [
    ({"transport": "ssh", "host": "h", "key_file": "k", "hots": "x"}, "boards.b.hots",
     "unknown key 'hots' (did you mean 'host'?)"),
    ({"transport": "sssh"}, "boards.b.transport", "did you mean 'ssh'?"),
    ({"transport": "ssh", "key_file": "k"}, "boards.b", "ssh board b needs host"),
    ({"transport": "ssh", "host": "h"}, "boards.b", "needs key_file"),
    ({"transport": "adb"}, "boards.b", "adb board b needs serial"),
    ({"host": "h"}, "boards.b", "needs transport"),
    ({"transport": "ssh", "host": "h", "key_file": "k", "port": "22"}, "boards.b.port",
     "port must be an integer, got str '22'"),
    ({"transport": "ssh", "host": "h", "key_file": "k", "port": 70000}, "boards.b.port",
     "port must be <= 65535"),
    ({"transport": "adb", "serial": "s", "host": "h"}, "boards.b.host",
     "host applies to ssh boards only, not to this adb board"),
    ({"transport": "local", "work_root": "tmp/x"}, "boards.b.work_root", "absolute path"),
    ({"transport": "local", "work_root": "/"}, "boards.b.work_root", "not /"),
    ({"transport": "local", "env": {"A B": "1"}}, "boards.b.env.A B", "not a valid"),
    ({"transport": "local", "env": {"A": None}}, "boards.b.env.A", "strings or numbers"),
    ({"transport": "local", "timeout_s": 0}, "boards.b.timeout_s", "must be > 0"),
    ({"transport": "local", "lock_max_age_s": 0}, "boards.b.lock_max_age_s", "must be > 0"),
    ({"transport": "local", "lock_timeout_s": -1}, "boards.b.lock_timeout_s", "must be >= 0"),
    ({"transport": "local", "lock_timeout_s": "5m"}, "boards.b.lock_timeout_s",
     "must be a number, got str '5m'"),
    ({"transport": "local", "retries": True}, "boards.b.retries", "must be an integer"),
    ({"transport": "local", "soc": "SM8551"}, "boards.b.soc", "unknown SoC"),
    ({"transport": "local", "net_run": "bin/qnn-net-run"}, "boards.b.net_run", "absolute"),
    ({"transport": "ai-hub"}, "boards.b", "ai-hub board b needs device: (an AI Hub device"),
    ({"transport": "ai-hub", "device": "d", "host": "h"}, "boards.b.host",
     "host applies to ssh boards only"),
    ({"transport": "ai-hub", "device": "d", "work_root": "/tmp/x"}, "boards.b.work_root",
     "applies to boards qnn-ci runs commands on (ssh, adb, local), not to this ai-hub"),
    ({"transport": "ai-hub", "device": "d", "token_env": "abc-def"}, "boards.b.token_env",
     "must name an environment variable"),
    ({"transport": "ai-hub", "device": "d", "job_timeout_s": 0}, "boards.b.job_timeout_s",
     "must be > 0"),
    ({"transport": "ai-hub", "device": "d", "max_parallel": 0}, "boards.b.max_parallel",
     "must be >= 1"),
    ({"transport": "ai-hub", "device": "d", "quantize": "aihub"}, "boards.b.quantize",
     "did you mean 'ai-hub'?"),
    ({"transport": "ssh", "host": "h", "key_file": "k", "device": "d"}, "boards.b.device",
     "device applies to ai-hub boards only"),
])
def test_errors_name_file_key_and_fix(tmp_path: Path, board: dict[str, Any], key: str,
                                      message: str) -> None:
    source = tmp_path / "qnn-ci.yaml"
    with pytest.raises(UserError) as info:
        parse_boards({"b": board}, source=source)
    text = str(info.value)
    assert text.startswith(f"{source}: {key}: "), text
    assert message in text
    assert "\n" not in text
    # the schema fragment agrees: the same declaration is invalid there too
    assert not jsonschema.Draft202012Validator(BOARDS_SCHEMA).is_valid({"b": board}) or \
        key.endswith(("soc", "work_root", "net_run"))


def test_error_carries_the_yaml_line(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("    retries: 0\n", "    retries: -1\n"))
    with pytest.raises(UserError) as info:
        load_boards_file(path)
    assert str(info.value).startswith(f"{path}:10: boards.rb3.retries: retries must be >= 0")


@pytest.mark.parametrize("text", ["boards: [1, 2]\n", "bords: {}\n", "- 1\n",
                                  "version: 2\nboards: {}\n", "boards:\n  'bad name': {}\n"])
def test_bad_files(tmp_path: Path, text: str) -> None:
    with pytest.raises(UserError) as info:
        load_boards_file(_write(tmp_path, text))
    assert str(info.value).startswith(str(tmp_path / "qnn-boards.yaml"))


def test_schema_accepts_what_the_parser_accepts(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(GOOD)["boards"]
    jsonschema.Draft202012Validator.check_schema(BOARDS_SCHEMA)
    jsonschema.Draft202012Validator(BOARDS_SCHEMA).validate(data)
    for board in data.values():
        jsonschema.Draft202012Validator(BOARD_SCHEMA).validate(board)
    assert parse_boards(data, source=tmp_path / "x.yaml").keys() == data.keys()


def test_missing_key_file_is_a_user_error(tmp_path: Path) -> None:
    (board,) = parse_boards({"k": {"transport": "ssh", "host": "127.0.0.1",
                                   "key_file": "nope"}}, source=tmp_path / "m.yaml").values()
    with pytest.raises(UserError, match=r"key file .*nope does not exist"):
        SshTransport(board).run(["true"], timeout=5)
