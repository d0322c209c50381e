"""The packed-weight cache from the command line: ``--cache``, ``--cache-dir DIR`` and ``--no-cache`` set the
command's Runtime like ``--threads`` does (before or after the command, beating ``PTERUN_CACHE_DIR``)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from fixtures_util import FIXTURES
from pterun import cli
from pterun.cli import main


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err


def _runtime_of(argv):
    from pterun.cli.parser import build_parser, parse

    return cli._runtime(parse(build_parser(), argv))


def test_the_cache_flags_set_the_command_s_runtime(tmp_path, monkeypatch):
    from pterun import Runtime, config

    monkeypatch.setenv("PTERUN_CACHE_DIR", str(tmp_path / "env"))
    assert _runtime_of(["run", "m.pte"]) is Runtime.get()  # no flag: the default Runtime, which reads the variable
    assert _runtime_of(["--cache", "run", "m.pte"]).cache == config.default_cache_dir()
    assert _runtime_of(["run", "m.pte", "--cache-dir", str(tmp_path / "d")]).cache == str(tmp_path / "d")
    assert _runtime_of(["--no-cache", "bench", "m.pte"]).cache == ""  # off, whatever the variable says
    assert _runtime_of(["--cache", "trace", "m.pte", "--out", "t.npz"]).cache == config.default_cache_dir()
    # the flag after the command is the one that counts, as for --threads
    assert _runtime_of(["--cache", "run", "m.pte", "--no-cache"]).cache == ""


needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert not installed")


@needs_litert
def test_cache_dir_keeps_packed_weights_from_the_second_run_on_and_no_cache_keeps_none(tmp_path, monkeypatch,
                                                                                       capsys):
    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)  # the fixture is smaller than the floor of real use
    model, where = str(FIXTURES / "xnn_mobilenet_v2.pte"), tmp_path / "c"
    outs = []
    for k in range(3):  # the first run notes the model, the second writes its weights, the third reads them
        out = tmp_path / f"out{k}.npz"
        assert main(["--cache-dir", str(where), "run", model, "--output", str(out)]) == 0
        outs.append(np.load(out)["out0"])
        weights = [f for f in os.listdir(where / "xnnpack") if f.endswith(".weights")]
        assert len(weights) == (0 if k == 0 else 1), k
    np.testing.assert_array_equal(outs[0], outs[2])  # read from the cache: the packing's numbers bit for bit
    monkeypatch.setenv("PTERUN_CACHE_DIR", str(tmp_path / "env"))
    for _ in range(2):
        assert main(["--no-cache", "run", model]) == 0
    assert not (tmp_path / "env").exists()
    capsys.readouterr()


@pytest.mark.parametrize("argv,message", [
    (["--cache-dir", "", "run", "m.pte"], "argument --cache-dir: expected a directory, got ''"),
    (["--cache", "--no-cache", "run", "m.pte"], "argument --no-cache: not allowed with argument --cache"),
    (["run", "m.pte", "--cache-dir", "d", "--cache"], "argument --cache: not allowed with argument --cache-dir"),
])
def test_bad_cache_flags_are_usage_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert err.endswith(f": error: {message}\n")


def test_a_cache_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["--cache-dir", str(f), "run", "m.pte"]) == 2
    assert capsys.readouterr().err.endswith(f"pterun: error: argument --cache-dir: {f} is a file, not a directory\n")
