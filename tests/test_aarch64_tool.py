"""The fixture check that ``tools/aarch64_check.sh`` runs on emulated aarch64 (``tools/aarch64_fixtures.py``), here on
the host: every XNNPACK fixture passes, and a recorded output moved past its tolerance, or a fixture that no longer
runs, fails the check. The emulated run itself needs root and qemu: ``sudo tools/aarch64_check.sh`` (tools/AARCH64.md).
"""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np
from fixtures_util import FIXTURES

_spec = importlib.util.spec_from_file_location("pterun_aarch64_fixtures",
                                               FIXTURES.parent.parent / "tools" / "aarch64_fixtures.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_every_xnnpack_fixture_passes_on_the_numpy_engine(capsys):
    assert tool.main(["--engine", "numpy", str(FIXTURES)]) == 0
    lines = capsys.readouterr().out.splitlines()
    n = len(list(FIXTURES.glob("xnn_*.pte")))
    assert n >= 17
    assert lines[-1].startswith(f"SUMMARY {n}/{n} pass, fp32 max err "), lines[-1]
    assert [ln.split()[0] for ln in lines[:-1]] == sorted(p.stem for p in FIXTURES.glob("xnn_*.pte"))


def _copy(tmp_path, name):
    (tmp_path / "fixtures").mkdir(exist_ok=True)
    for suffix in (".pte", ".npz"):
        shutil.copy(FIXTURES / f"{name}{suffix}", tmp_path / "fixtures" / f"{name}{suffix}")
    return tmp_path / "fixtures"


def test_an_output_past_its_tolerance_fails_the_check(tmp_path, capsys):
    fixtures = _copy(tmp_path, "xnn_mlp")
    with np.load(fixtures / "xnn_mlp.npz") as z:
        arrays = {k: z[k] for k in z.files}
    out = arrays["c0_out0"]
    out.reshape(-1)[3] += np.float32(2e-4) * np.abs(out).max()  # twice the 1e-4 of scale a float graph is allowed
    np.savez(fixtures / "xnn_mlp.npz", **arrays)
    assert tool.main(["--engine", "numpy", str(fixtures)]) == 1
    text = capsys.readouterr().out
    assert "xnn_mlp" in text and " FAIL " in text and "max error 0.0002" in text
    assert text.splitlines()[-1].startswith("SUMMARY 0/1 pass, fp32 max err 0.0002 x scale (xnn_mlp)")


def test_a_fixture_that_cannot_run_fails_the_check_and_the_others_still_run(tmp_path, capsys):
    fixtures = _copy(tmp_path, "xnn_mlp")
    _copy(tmp_path, "xnn_gru")
    (fixtures / "xnn_mlp.pte").write_bytes((fixtures / "xnn_mlp.pte").read_bytes()[:100])
    assert tool.main(["--engine", "numpy", str(fixtures)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("xnn_gru ") and " pass " in lines[0]
    assert lines[1].split() == ["xnn_mlp", "FAIL"]
    assert "InvalidProgramError" in "\n".join(lines)
    assert lines[-1].startswith("SUMMARY 1/2 pass")
