#!/usr/bin/env python
"""Export the release matrix: the same small programs with every ExecuTorch release, each recorded by that
release's own runtime, into ``tests/fixtures/releases/<release>/``.

Run it with any Python 3.11 (it only creates virtual environments and runs commands; it never imports torch)::

    python3 tools/release_matrix.py                        # every release of RELEASES
    python3 tools/release_matrix.py 0.6.0 1.0.1            # only these releases
    python3 tools/release_matrix.py 1.0.1 --programs xnn_cnn llm
    python3 tools/release_matrix.py 1.5.1 --python 1.5.1=.ref/bin/python   # reuse an existing environment

For each release it

1. creates ``VENVS/et-<release>`` (default ``~/.cache/pterun-releases``, never inside the repository) and installs
   ``executorch==<release>`` with the torch that release was built for: the wheel's own ``Requires-Dist: torch``
   narrowed to its first minor series (``torch>=2.12.0a0`` -> ``torch>=2.12.0,<2.13``: pip would otherwise take a
   newer torch that the release's compiled extensions do not import with), or ``TORCH_OVERRIDE`` where the wheel
   names none;
2. runs ``tools/releases/export_release.py`` with that environment's Python, which exports the programs of
   ``tools/releases/programs.py`` with that release's APIs (``tools/releases/compat.py``) and records the outputs of
   that release's runtime;
3. deletes the environment unless ``--keep-venvs`` (each is 3-5 GB: CUDA builds of torch), with ``pip
   --no-cache-dir`` so nothing is left in pip's cache either.
"""

from __future__ import annotations

import argparse
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "releases"
SCRIPT = REPO / "tools" / "releases" / "export_release.py"
DEFAULT_VENVS = Path.home() / ".cache" / "pterun-releases"

RELEASES = ["0.4.0", "0.5.0", "0.6.0", "0.7.0", "1.0.1", "1.1.0", "1.2.0", "1.3.1", "1.4.1", "1.5.1"]
# releases whose wheel does not name its torch: the one it was released with
TORCH_OVERRIDE = {"1.5.1": "torch==2.14.1"}


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def torch_requirement(release: str, python: Path) -> str:
    """The torch requirement of ``executorch==release``, read from its wheel's METADATA (downloaded, no deps)."""
    if release in TORCH_OVERRIDE:
        return TORCH_OVERRIDE[release]
    with tempfile.TemporaryDirectory() as d:
        _run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir", "-d", d,
              f"executorch=={release}"])
        wheel, = Path(d).glob("executorch-*.whl")
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            msg = email.parser.Parser().parsestr(z.read(meta).decode())
    for req in msg.get_all("Requires-Dist") or []:
        m = re.match(r"torch\s*\(?([^;)]*)\)?\s*(;.*)?$", req.strip())
        if m and not req.startswith(("torchao", "torchaudio", "torchvision")):
            return narrow(m.group(1).replace(" ", ""))
    raise SystemExit(f"executorch=={release} names no torch in its metadata: add it to TORCH_OVERRIDE")


def narrow(spec: str) -> str:
    """``==2.5.0`` stays; ``<2.10.0,>=2.9.0`` stays; a lone ``>=2.12.0a0`` becomes ``>=2.12.0,<2.13``."""
    parts = spec.split(",")
    if any(p.startswith(("==", "<")) for p in parts):
        return "torch" + spec
    low, = (p[2:] for p in parts if p.startswith(">="))
    major, minor = (int(re.match(r"\d+", x).group()) for x in low.split(".")[:2])
    base = re.sub(r"(a|b|rc|\.dev)\d*$", "", low)
    return f"torch>={base},<{major}.{minor + 1}"


def create_venv(release: str, venvs: Path) -> Path:
    venv = venvs / f"et-{release}"
    python = venv / "bin" / "python"
    if python.exists():
        probe = subprocess.run([str(python), "-c", "import torch, executorch"], capture_output=True)
        if probe.returncode == 0:
            return python
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--upgrade", "pip"])
    torch_req = torch_requirement(release, python)
    _run([str(python), "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off",
          f"executorch=={release}", torch_req])
    return python


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("releases", nargs="*", help=f"releases to export (default: {' '.join(RELEASES)})")
    ap.add_argument("--programs", nargs="*", default=[], help="only these programs (default: all)")
    ap.add_argument("--venvs", type=Path, default=DEFAULT_VENVS, help=f"where the environments live "
                    f"(default {DEFAULT_VENVS}; not inside the repository)")
    ap.add_argument("--keep-venvs", action="store_true", help="keep each environment after its release is done")
    ap.add_argument("--python", action="append", default=[], metavar="RELEASE=PYTHON",
                    help="use this existing interpreter for RELEASE instead of creating an environment")
    ap.add_argument("--out", type=Path, default=OUT, help="fixture root (default tests/fixtures/releases)")
    args = ap.parse_args(argv)
    venvs = args.venvs.expanduser().resolve()
    if venvs == REPO or REPO in venvs.parents:
        ap.error("--venvs must be outside the repository")
    given = dict(p.split("=", 1) for p in args.python)
    failed = []
    for release in args.releases or RELEASES:
        print(f"=== ExecuTorch {release}", flush=True)
        python = Path(given[release]) if release in given else None
        try:
            if python is None:
                python = create_venv(release, venvs)
            env = dict(os.environ, PYTHONHASHSEED="0")
            _run([str(python), str(SCRIPT), str(args.out / release), *args.programs], env=env, cwd=REPO)
        except subprocess.CalledProcessError as e:
            print(f"ExecuTorch {release} failed: {e}", file=sys.stderr)
            failed.append(release)
        finally:
            if release not in given and not args.keep_venvs and (venvs / f"et-{release}").exists():
                shutil.rmtree(venvs / f"et-{release}")
    if failed:
        print(f"failed releases: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
