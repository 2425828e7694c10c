"""Board-bound work: pytest-xdist `-n 2` vs serial on two stand-in boards, in one run.

N exports of a small CNN, half bound to board `b0`, half to `b1`: two stand-in
boards (stand-in qnn-net-run folders reached over one real sshd on loopback, as
in tests/board_run). Each board inference takes a slot of `--inference-s` seconds
(`make_board(inference_s=...)`: the stand-in's own start-up and compute happen
inside the slot, the rest asleep), as a real board's time is the device's, not the
host's. The SDK stages (stand-in converter, lib generator) are run once up front
and stay cached; before every timed run the board stages' results (`so_load`,
`htp_vs_cpu`) are removed, so each run re-does exactly the board-bound work.

Both sides are whole `pytest` processes a user would start on the manifest:

    A  pytest -p no:xdist -q qnn-ci.yaml                   (serial)
    B  pytest -n 2 --dist loadscope -q qnn-ci.yaml          (two workers)

`--dist loadscope` keeps an export's items (`qnn-ci.yaml::<export>::<stage>`) on one
worker, so the two workers take one export (one board) each instead of splitting an
export's stages and waiting on each other's stage locks; `--dist load` (xdist's
default) measured 0.67x here against loadscope's figure below (`--dist load` to see it).

paired (A, B, A, B, ...), median and min of `--repeat` (default 5). Yardstick: the
serial run of the same work. Default size (what `make bench` runs): 2 exports, one
per board, 1 held-out sample, 5 s slots: 20 s of board time per export, next to
the host's own per-export work (ssh sessions, uploads, the fp32 reference, pytest).
Goal: B / A <= 0.6 (two boards, two workers: the ideal is 0.5 plus the workers'
start-up and the host's share).

    python benchmarks/board_xdist.py [--exports 2] [--held-out 1] [--inference-s 5.0]
                                     [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _harness import NOISE_NOTE, clean_env, goal_line, paired  # noqa: E402

from fixtures.qairt_standin import make_esdk, make_sdk  # noqa: E402
from fixtures.qairt_standin.net_run import make_board  # noqa: E402
from fixtures.sshd import SshServer, running_sshd  # noqa: E402
from tests.board_run.conftest import INPUT_SHAPE, build_cnn, write_samples  # noqa: E402

BOARD_STAGES = ("so_load", "htp_vs_cpu")


def _manifest(folder: Path, exports: int, held: int) -> Path:
    build_cnn(folder / "cnn.onnx")
    write_samples(folder / "cal", 4 + held, seed=5)
    shape = ", ".join(map(str, INPUT_SHAPE))
    lines = ["exports:"]
    for i in range(exports):
        lines += [f"  - name: cnn{i}", "    model: cnn.onnx",
                  f"    inputs: {{x: {{shape: [{shape}], dtype: float32}}}}",
                  f"    calibration: {{input_list: cal/input_list.txt, samples: 4, "
                  f"held_out: {held}}}",
                  "    target: {soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}",
                  f"    board: b{i % 2}",
                  "    latency: {enabled: false}"]     # board time as counted below
    path = folder / "qnn-ci.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _boards(folder: Path, server: SshServer, inference_s: float) -> None:
    lines = ["boards:"]
    for b in ("b0", "b1"):
        board = make_board(folder / f"board-{b}", inference_s=inference_s)
        work = folder / f"board-{b}-work"
        work.mkdir()
        cfg = server.board(b)
        lines += [f"  {b}:", "    transport: ssh", f"    host: {cfg.host}",
                  f"    port: {cfg.port}", f"    user: {cfg.user}",
                  f"    key_file: {cfg.key_file}", f"    known_hosts: {cfg.known_hosts}",
                  f"    qnn_lib_dir: {board / 'lib'}",
                  f"    net_run: {board / 'bin' / 'qnn-net-run'}",
                  f"    work_root: {work}", "    connect_timeout_s: 5",
                  "    lock_timeout_s: 600"]
    (folder / "qnn-boards.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exports", type=int, default=2)
    ap.add_argument("--held-out", type=int, default=1)
    ap.add_argument("--inference-s", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dist", default="loadscope", choices=("load", "loadscope"),
                    help="pytest-xdist's scheduling for side B")
    ap.add_argument("--quick", action="store_true", help="2 s slots, 3 repeats (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.inference_s, args.repeat = 2.0, 3
    tmp = Path(tempfile.mkdtemp(prefix="qnn-ci-board-xdist-"))
    try:
        with running_sshd(tmp / "sshd") as server:
            project = tmp / "project"
            project.mkdir()
            manifest = _manifest(project, args.exports, args.held_out)
            _boards(project, server, args.inference_s)
            work = tmp / "work"
            env = clean_env(QNN_SDK_ROOT=str(make_sdk(tmp / "sdk", "2.31.0")),
                            ESDK_ENV=str(make_esdk(tmp / "esdk")),
                            QNN_CI_LOCK_DIR=str(tmp / "locks"))
            base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    str(manifest), f"--qnn-workdir={work}", "-o", "addopts="]
            serial = [*base, "-p", "no:xdist"]
            xdist = [*base, "-n", "2", "--dist", args.dist]

            def reset() -> None:
                for export in work.glob("cnn*"):
                    for stage in BOARD_STAGES:
                        shutil.rmtree(export / stage, ignore_errors=True)

            from _harness import run_once
            run_once(serial, cwd=project, env=env)      # warm-up; SDK stages cached from here
            res = paired(serial, xdist, repeat=args.repeat, warmup=0, cwd=project, env=env,
                         before=reset)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per_export = (2 + 2 * args.held_out) * args.inference_s    # so_load: 1 per backend
    print(f"{args.exports} exports on 2 stand-in boards over sshd, (1 so_load + "
          f"{args.held_out} held-out) samples x 2 backends x a {args.inference_s} s slot "
          f"(~{per_export:.1f} s of board time per export); SDK stages cached, board stages "
          f"re-run each time; {args.repeat} pairs {NOISE_NOTE}")
    print("yardstick: the same pytest run without xdist (serial)")
    print(res.describe("pytest serial (-p no:xdist)", f"pytest -n 2 --dist {args.dist}"))
    print(goal_line(f"board-bound work, pytest -n 2 --dist {args.dist} / serial", res.ratio,
                    "<= 0.60x",
                    res.ratio <= 0.60, unit="x"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
