"""execute() never warns about floating-point overflow, 0/0 or invalid values, and leaves the caller's NumPy
error settings exactly as they were, on the fast (context variable) path and on the np.errstate fallback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fixtures_util import FIXTURES
from pterun import Runtime, _fpstate


@pytest.fixture(params=["contextvar", "errstate"])
def path(request, monkeypatch):
    if request.param == "errstate":
        monkeypatch.setattr(_fpstate, "quiet", _fpstate._errstate_quiet)
        monkeypatch.setattr(_fpstate, "restore", _fpstate._errstate_restore)
        from pterun.delegates.xnnpack.numpy_engine import plan as xnn_compile
        from pterun.interp import method
        for mod in (method, xnn_compile):
            monkeypatch.setattr(mod, "quiet", _fpstate._errstate_quiet)
            monkeypatch.setattr(mod, "restore", _fpstate._errstate_restore)
    elif _fpstate._CV is None:
        pytest.skip("this NumPy has no floating-point context variable: only the errstate path exists")
    return request.param


def test_quiet_silences_and_restore_puts_back_the_callers_settings(path):
    quiet, restore = _fpstate.quiet, _fpstate.restore
    with np.errstate(divide="raise", over="warn", invalid="call", under="ignore"):
        before = np.geterr()
        token = quiet()
        try:
            assert np.geterr() == {"divide": "ignore", "over": "ignore", "under": "ignore", "invalid": "ignore"}
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert np.isinf(np.float32(1) / np.float32(0))
        finally:
            restore(token)
        assert np.geterr() == before


@pytest.mark.parametrize("name", ["mlp", "xnn_mlp"])
def test_execute_with_overflowing_inputs_is_silent_and_restores_settings(path, name):
    method = Runtime.get().load_program(FIXTURES / f"{name}.pte").load_method("forward")
    meta = method.metadata.input_tensor_meta(0)
    x = np.full(meta.sizes(), np.inf, np.float32)  # inf - inf in the first product: invalid, NaN from there on
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = method.execute([x])
        assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise", "invalid": "raise"}
    assert not np.isfinite(out).all()
