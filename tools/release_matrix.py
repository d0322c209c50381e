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
import json
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
# what the LLM exporter of releases before 1.0 imports without declaring it (1.0 depends on pytorch-tokenizers);
# 0.5.0's also imports torchao (through its Vulkan passes) and names none: the torchao released for torch 2.6
EXPORTER_EXTRAS = {r: ["huggingface_hub", "tiktoken", "sentencepiece"] for r in ("0.4.0", "0.5.0", "0.6.0", "0.7.0")}
EXPORTER_EXTRAS["0.5.0"].append("torchao==0.8.0")
# 0.4.0's exporter runs without torchao, but its 8da4w needs one: the torchao released with torch 2.5
EXPORTER_EXTRAS["0.4.0"].append("torchao==0.6.1")
# 0.7.0's LLM builder imports pytorch_tokenizers, declared only from 1.0: the oldest on the index
EXPORTER_EXTRAS["0.7.0"].append("pytorch-tokenizers==1.0.1")


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
        probe = subprocess.run([str(python), "-c", "import torch, executorch"], capture_output=True, check=False)
        if probe.returncode == 0:
            return python
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--upgrade", "pip"])
    torch_req = torch_requirement(release, python)
    _run([str(python), "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off",
          f"executorch=={release}", torch_req, *EXPORTER_EXTRAS.get(release, [])])
    return python


README_HEAD = """\
# The release matrix: the same programs exported by every ExecuTorch release

`<release>/` holds programs exported with that ExecuTorch release (and the torch it was built for), each with
`<program>.npz`: its inputs and **that release's own runtime's** outputs (`executorch.runtime`, with the XNNPACK
backend the release's wheel ships), in the layout of `../README.md` (`__manifest__` = JSON list of calls run in
order on one loaded program, arrays `c<call>_in<i>` / `c<call>_out<j>`). `<release>/manifest.json` gives the
versions and, per program, what it is, its files, its instruction sequence (`K` kernel call, `D` delegate call),
the number of XNNPACK delegate calls, the file's header facts and the gap to eager PyTorch; a program the release
could not export is listed with `exported: false` and the reason.

`tests/test_releases.py` runs every committed program in pterun on both engines (`numpy`, `auto`), with
`merge_delegates` and `fold` each on and off, against the recorded outputs (float: 1e-4 of the output's scale;
dynamically quantized: 1e-3; outputs dequantized from static int8: one quantization step; integers exact).

Regenerate (from the repository root; any Python 3.11, it creates one virtual environment per release outside
the repository, in `~/.cache/pterun-releases`, and deletes each when its release is done):

```
python3 tools/release_matrix.py                    # every release (each installs ~3-5 GB of CUDA torch)
python3 tools/release_matrix.py 0.6.0 1.0.1        # some releases
python3 tools/release_matrix.py 1.0.1 --programs xnnpack_cnn llama --keep-venvs
python3 tools/release_matrix.py --readme           # only rewrite this README from the manifests
```

The programs are `tools/releases/programs.py`; what differs between releases' export APIs is
`tools/releases/compat.py`, one commented branch per change. `tools/releases/format_facts.py` prints the file
format features each release's files use, as pterun reads them.
"""


README_NOTES = """\
## Notes

* torch: each release gets the torch its wheel's `Requires-Dist` names, narrowed to the first minor series
  (1.3.1 says `torch>=2.12.0a0`: 2.12.1; a newer torch does not import its compiled extensions). 1.5.1's wheel
  names none: torch 2.14.1, the reference environment's. The torch wheels on the index are CUDA builds; where a
  CPU build of the same version is at hand pip takes it (1.4.1: `2.13.0+cpu`), which exports the same programs.
* The LLM exporters of 0.4-0.7 import `huggingface_hub`, `tiktoken` and `sentencepiece` without declaring them,
  0.5.0's also `torchao` (through its Vulkan passes; torchao 0.8.0, the one for torch 2.6) and 0.7.0's
  `pytorch_tokenizers` (1.0.1, the oldest on the index): the script installs them. The tiny Llama is exported
  with `-kv` but without `--use_sdpa_with_kv_cache` (0.4-0.6 wheels ship no custom-ops library for their runtime
  to run `llama::sdpa_with_kv_cache` with).
* 0.4.0 and 0.6.0 serialize by running `flatc` from PATH; their wheels ship one (`executorch/data/bin/flatc`),
  which the export script puts on PATH.
* `.ptd`: 0.5.0 has `external_constants` but cannot write the data file; 0.6.0 and 0.7.0 write one but their
  runtime cannot load it (`Runtime.load_program` and `_load_for_executorch` take no data path), so there is nothing
  of their own to record; 1.0-1.4 load it with `portable_lib._load_for_executorch(pte, ptd)`, 1.5 with
  `Runtime.load_program(..., data_path=)`.
* 8da4w needs torchao, which 0.4.0 and 0.5.0 do not depend on: the script installs the torchao of their torch
  (0.6.1 for 0.4.0; 0.8.0 for 0.5.0, whose exporter needs it anyway). 0.4.0's program then runs in its own
  runtime to numbers that have nothing to do with the model (1.4 off eager PyTorch, outputs of scale 1.3; pterun
  and every later release agree with eager within 0.004), so it is not committed: the export script drops any
  program whose recorded outputs are further than 0.1 x their scale from eager PyTorch. The program takes 4
  rows: with 3 rows ExecuTorch 0.6.0's own runtime returns an all-zero last row (rows 0-1 agree with pterun and
  eager PyTorch to 1e-3).
"""


def _release_key(r: str) -> tuple:
    return tuple(int(x) for x in r.split("."))


def write_readme(out: Path) -> None:
    """README.md of the fixture root: the table of releases x programs, from the manifests."""
    manifests = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/manifest.json")}
    releases = sorted(manifests, key=_release_key)
    programs = sorted({n for m in manifests.values() for n in m["programs"]})
    lines = [README_HEAD, "## Releases", "", "| ExecuTorch | torch | torchao | Python |", "|---|---|---|---|"]
    lines += [f"| {r} | {m['torch']} | {m.get('torchao') or '-'} | {m['python']} |" for r, m in
              ((r, manifests[r]) for r in releases)]
    legend = ("Cell: `ok` exported and recorded, with `nD` = n XNNPACK delegate calls (`DD`: two of them back to "
              "back); `-` not exported (reason below).")
    lines += ["", "## Programs", "", legend, ""]
    lines += ["| program | " + " | ".join(releases) + " |", "|---" * (len(releases) + 1) + "|"]
    reasons = []
    for name in programs:
        cells = []
        for r in releases:
            e = manifests[r]["programs"].get(name)
            if e is None:
                cells.append("")
            elif e["exported"]:
                n = e["xnnpack_delegates"]
                b2b = any(p["back_to_back"] for p in e["methods"].values())
                cells.append("ok" + (f" {n}D" if n else "") + (" DD" if b2b else ""))
            else:
                cells.append("-")
                reasons.append((_release_key(r), f"* {r} `{name}`: {e['reason']}"))
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    whats = {n: next(m["programs"][n]["what"] for m in manifests.values() if n in m["programs"]) for n in programs}
    lines += ["", "What each program is:", ""] + [f"* `{n}`: {w}" for n, w in whats.items()]
    if reasons:
        lines += ["", "## Not exported", ""] + [line for _, line in sorted(reasons)]
    lines += ["", README_NOTES]
    (out / "README.md").write_text("\n".join(lines) + "\n")


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
    ap.add_argument("--readme", action="store_true", help="only rewrite the README's table from the manifests")
    args = ap.parse_args(argv)
    if args.readme:
        write_readme(args.out)
        return 0
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
    write_readme(args.out)
    if failed:
        print(f"failed releases: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
