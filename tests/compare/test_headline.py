"""The comparison headline names an output that FAILED its bound: the worst
failing output and metric, "+N more failing" when several did; when nothing
failed, the worst output that has a bound. Real comparisons of .npy output sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qnn_ci.compare.compare import compare_sets
from qnn_ci.compare.outputs import load_output_set
from qnn_ci.compare.thresholds import apply_thresholds
from qnn_ci.engine.bounds import Thresholds


def _npy_sets(root: Path, outputs: dict[str, tuple[list[np.ndarray], list[np.ndarray]]]
              ) -> tuple[Path, Path]:
    """``root/{ref,test}/Result_<n>/<name>.npy`` for every output and sample."""
    for side, pick in (("ref", 0), ("test", 1)):
        for name, pair in outputs.items():
            for n, values in enumerate(pair[pick]):
                folder = root / side / f"Result_{n}"
                folder.mkdir(parents=True, exist_ok=True)
                np.save(folder / f"{name}.npy", np.asarray(values, np.float32))
    return root / "ref", root / "test"


def _state_and_logits(tmp_path: Path, rng: np.random.Generator,
                      logits_noise: float = 0.05) -> tuple[Path, Path]:
    """A recurrent model's outputs: `out_cache3` (state, far off: cosine ~0.7,
    max_abs ~3) and `logits` (slightly off: max_abs ~0.15)."""
    ref_cache = [rng.standard_normal(256) for _ in range(2)]
    ref_logits = [rng.standard_normal(64) for _ in range(2)]
    test_cache = [r + rng.standard_normal(256) for r in ref_cache]
    test_logits = [r + logits_noise * rng.standard_normal(64) for r in ref_logits]
    return _npy_sets(tmp_path, {"out_cache3": (ref_cache, test_cache),
                                "logits": (ref_logits, test_logits)})


def test_an_unbounded_worse_output_never_headlines_the_failure(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    ref, test = _state_and_logits(tmp_path, rng)
    # Only logits is held to max_abs; cosine is loosened so that nothing but that fails.
    t = Thresholds(default={"cosine": -1.0}, per_output={"logits": {"max_abs": 0.05}})
    comp = compare_sets(load_output_set(ref), load_output_set(test), t)
    assert not comp.passed
    by = {o.name: o for o in comp.outputs}
    cache_max = max(s.metrics.max_abs for s in by["out_cache3"].samples)
    logits_max = max(s.metrics.max_abs for s in by["logits"].samples)
    assert cache_max > logits_max > 0.05          # the unbounded output IS worse
    # The old headline would have named out_cache3 (the worst max_abs of all outputs).
    assert comp.worst("max_abs")[1] == "logits"
    assert comp.worst("max_abs", failing=True)[1] == "logits"
    sample = next(s.sample for s in by["logits"].samples if s.metrics.max_abs == logits_max)
    [failure] = comp.failing()
    assert (failure.output, failure.metric, failure.bound) == ("logits", "max_abs", 0.05)
    assert comp.summary_line().startswith(
        f"worst max_abs {logits_max:.4g} (logits, sample {sample}); ")
    assert "out_cache3" not in comp.summary_line()
    assert comp.to_dict()["failing"] == [failure.to_dict()]


def test_several_failing_outputs_say_how_many_more(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    ref, test = _state_and_logits(tmp_path, rng, logits_noise=0.5)
    t = apply_thresholds(["cosine=0.999", "logits:max_abs=0.05"])
    comp = compare_sets(load_output_set(ref), load_output_set(test), t)
    failures = comp.failing()
    assert {(f.output, f.metric) for f in failures} == {
        ("out_cache3", "cosine"), ("logits", "cosine"), ("logits", "max_abs")}
    # Worst first: cosine before max_abs, and the lower cosine first.
    assert [f.metric for f in failures] == ["cosine", "cosine", "max_abs"]
    assert failures[0].value <= failures[1].value
    top = failures[0]
    line = comp.summary_line()
    assert line.startswith(f"worst cosine {top.value:.6f} ({top.output}, sample {top.sample})"
                           "; +2 more failing (")
    assert f"{failures[1].output} cosine" in line and "logits max_abs" in line


def test_nothing_failed_headlines_the_worst_bounded_output(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    ref, test = _state_and_logits(tmp_path, rng, logits_noise=0.01)
    # Only logits has bounds (cosine and max_abs); out_cache3 has none.
    t = Thresholds(default={}, per_output={"logits": {"max_abs": 1.0, "cosine": 0.9}})
    comp = compare_sets(load_output_set(ref), load_output_set(test), t)
    assert comp.passed and comp.failing() == []
    by = {o.name: o for o in comp.outputs}
    cos = min(s.metrics.cosine for s in by["logits"].samples)
    assert min(s.metrics.cosine for s in by["out_cache3"].samples) < cos
    assert comp.summary_line().startswith(f"worst cosine {cos:.6f} (logits, sample ")
    # Unbounded out_cache3 (cosine ~0.7) is not the headline though it is worse.
    assert comp.worst("cosine")[1] == "logits"

