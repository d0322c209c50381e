"""Never torch: import, load, execute and metadata work with a poisoned 'torch' first on sys.path, and
torch never appears in sys.modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from fixtures_util import FIXTURES

SRC = Path(__file__).resolve().parents[1] / "src"


def test_pterun_never_imports_torch(tmp_path):
    poison = tmp_path / "torch"
    poison.mkdir()
    (poison / "__init__.py").write_text("raise RuntimeError('pterun must never import torch')\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(SRC)!r}]
        import numpy as np
        import pterun
        from pterun import Runtime
        from pterun.cli import main
        from pterun.summary import describe
        rt = Runtime.get()
        for name in ("mlp", "multi_method", "cond", "transformer"):
            program = rt.load_program({str(FIXTURES)!r} + "/" + name + ".pte")
            for method in sorted(program.method_names):
                meta = program.metadata(method)
                m = program.load_method(method)
                inputs = []
                for i in range(meta.num_inputs()):
                    info = meta.input_tensor_meta(i)
                    inputs.append(np.zeros(info.sizes(), info.numpy_dtype()))
                outs = m.execute(inputs)
                assert outs
        describe({str(FIXTURES)!r} + "/mlp.pte")
        assert main(["inspect", {str(FIXTURES)!r} + "/mlp.pte"]) == 0
        assert rt.backend_registry.registered_backend_names is not None
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("OK")
