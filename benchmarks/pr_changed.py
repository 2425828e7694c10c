"""Pull-request runs: only what changed, and a cache that travels.

Whole processes, as a CI job runs them, on a git repository of N tiny exports
(``_workload``; the stages that run are static_shapes and calibration):

- one model changed: ``qnn-ci run --changed-since HEAD`` over all N exports vs
  ``qnn-ci run --export <that one>`` -- the honest yardstick is the run of the one
  export alone (goal <= 1.2x). Before every single run the model gets new bytes, so
  both sides really compute that export's stages.
- a clone at another path with the first clone's work folder restored into it (as
  the Action's actions/cache step does): its run vs the first, uncached run of the
  same exports in the first clone (goal <= 5 %). These exports name a SoC, so the
  first run does what a PR job does on a hosted runner: static shapes, calibration,
  quantization and preparation on the HTP simulator, simulated numerics.

    python benchmarks/pr_changed.py [--exports 50] [--travel-exports 12] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, Samples, clean_env, goal_line, paired, run_once, venv_bin
from _workload import make_model, make_workload


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


CLS = "pkg:rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
WIDTHS = (160, 192, 224, 256, 288, 320, 352, 384)
GEN_IMAGES = "import numpy as np\n" + "".join(f'''
def images_{w}(count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {{"x": rng.uniform(-1, 1, size=(1, 3, 48, {w})).astype(np.float32)}}
''' for w in WIDTHS)


def commit(repo: Path) -> None:
    who = ["-c", "user.email=b@example.com", "-c", "user.name=b"]
    git(repo, "init", "-q", "-b", "main")
    git(repo, *who, "add", "-A")
    git(repo, *who, "commit", "-qm", "w")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=50)
    ap.add_argument("--travel-exports", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.exports
    env = clean_env()
    qnn_ci = venv_bin("qnn-ci")
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "clone-one"
        make_workload(one, n)
        commit(one)
        work = one / ".qnn-ci"
        run_once([qnn_ci, "run", "--workdir", str(work)], cwd=one, env=env)   # fill

        # The travelling cache, on real exports: the PP-OCR classifier at a few input
        # widths (distinct work each), for a SoC: the simulator stages run too.
        src = Path(tmp) / "travel-one"
        src.mkdir()
        (src / "gens.py").write_text(GEN_IMAGES)
        lines = ["defaults:", "  target: {soc: QCS6490}", "  sim: {samples: 1}",
                 "  diagnosis: {enabled: false}",
                 "exports:"]
        for w in WIDTHS[:args.travel_exports]:
            lines += [f"  - name: cls{w}", f"    model: {CLS}",
                      f"    inputs: {{x: {{shape: [1, 3, 48, {w}]}}}}",
                      f"    calibration: {{generator: 'gens:images_{w}', samples: 4, "
                      "held_out: 1}"]
        (src / "qnn-ci.yaml").write_text("\n".join(lines) + "\n")
        commit(src)
        ok = (0, 1)                       # a failed numeric check is cached work too
        first = Samples([run_once([qnn_ci, "run", "--workdir", str(src / ".qnn-ci")],
                                  cwd=src, env=env, ok=ok)])
        two = Path(tmp) / "elsewhere" / "travel-two"
        subprocess.run(["git", "clone", "-q", str(src), str(two)], check=True)
        shutil.copytree(src / ".qnn-ci", two / ".qnn-ci")
        shutil.rmtree(src)                # another runner: the first clone is gone
        travel = Samples([run_once([qnn_ci, "run", "--workdir", str(two / ".qnn-ci")],
                                   cwd=two, env=env, ok=ok)])
        out = subprocess.run([qnn_ci, "run", "--workdir", str(two / ".qnn-ci")], cwd=two,
                             env=env, capture_output=True, text=True)
        not_cached = [ln for ln in out.stdout.splitlines()
                      if ("PASS" in ln or "FAIL" in ln) and "(cached)" not in ln
                      and "::" not in ln]

        changed = n // 2
        counter = [0]

        def change() -> None:     # new bytes for one model before every single run
            counter[0] += 1
            make_model(one / f"m{changed}.onnx", changed + 1000 * counter[0])

        pr = [qnn_ci, "run", "--workdir", str(work), "--changed-since", "HEAD"]
        alone = [qnn_ci, "run", "--workdir", str(work), "--export", f"e{changed}"]
        res = paired(alone, pr, args.repeat, cwd=one, env=env, before=change)
    print(f"pull-request runs over {n} tiny exports; {NOISE_NOTE}")
    print("one export alone vs --changed-since with that one model changed "
          "(paired, whole processes):")
    print(res.describe("one export alone", f"--changed-since over {n} exports"))
    print(f"{args.travel_exports} real exports (PP-OCR classifier, simulator stages): first run "
          f"{first.describe()}; a clone at another path with the work folder restored: "
          f"{travel.describe()}; stage rows not cached there: {len(not_cached)}")
    print(goal_line(f"--changed-since, 1 of {n} changed / that export alone", res.ratio,
                    "<= 1.2x", res.ratio <= 1.2, unit="x"))
    share = 100 * travel.median / first.median
    print(goal_line("restored cache in another clone / first run", share, "<= 5 %",
                    share <= 5.0 and not not_cached, unit=" %"))


if __name__ == "__main__":
    main()
