"""The programs ``bench.py`` knows and how its command line picks among them.

``all_models()`` lists the exported bench models (``bench/export_models.py``), the test fixtures (``fx_NAME``)
and the demo; ``--pte NAME=PATH`` adds any program (:func:`pte_models`); :func:`chosen` applies ``--models``
patterns. Example::

    >>> sorted(n for n in all_models() if n.startswith("fx_"))[:2]
    ['fx_cnn', 'fx_gru']
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from configs import DEFAULT_CONFIGS

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODELS_DIR = HERE / "models"
FIXTURES_DIR = REPO / "tests" / "fixtures"
DEMO = REPO / "src" / "pterun" / "models" / "demo.pte"
EXPORT = HERE / "export_models.py"

# name -> (path, kind). kind: "full" = exported by export_models.py; "fixture"; "demo"
EXPORTED = ["resnet18_portable", "resnet18_xnnpack", "mobilenet_v2_portable", "mobilenet_v2_xnnpack",
            "mlp_portable", "mlp_xnnpack", "bert_tiny_portable", "bert_tiny_xnnpack", "whisper_encoder_portable",
            "whisper_encoder_xnnpack", "few_ops_portable", "many_ops_portable"]
FIXTURES = ["mlp", "cnn", "transformer", "gru", "mobilenet_v2", "resnet_small",
            # XNNPACK-delegated fixtures: a transformer (delegates split by portable ops), an 8da4w linear
            "xnn_transformer", "xnn_8da4w", "xnn_mobilenet_v2"]


def all_models() -> dict[str, tuple[Path, str]]:
    """name -> (path, kind) of every program the bench knows by name."""
    models = {n: (MODELS_DIR / f"{n}.pte", "full") for n in EXPORTED}
    models.update({f"fx_{n}": (FIXTURES_DIR / f"{n}.pte", "fixture") for n in FIXTURES})
    models["demo"] = (DEMO, "demo")
    return models




def pte_models(specs: list[str], error) -> dict[str, tuple[Path, str]]:
    """The ``--pte NAME=PATH`` programs; ``error(message)`` (argparse's) for a spec that names no file."""
    extra = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_file():
            error(f"--pte {spec!r}: expected NAME=PATH of an existing .pte")
        extra[name] = (Path(path).resolve(), "extra")
    return extra


def chosen(models: dict, extra: dict, patterns: list[str] | None, error) -> list[str]:
    """The names to run: the ``--models`` patterns' matches and every ``--pte`` program; with neither, all known
    programs; ``--pte`` alone, only those. ``error`` for a pattern that matches nothing."""
    if not patterns:
        return list(extra) if extra else list(models)
    unknown = [pat for pat in patterns if not any(fnmatch.fnmatchcase(n, pat) for n in models)]
    if unknown:
        error(f"unknown model(s) {unknown}; see --list")
    return [n for n in models if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)] + \
        [n for n in extra if not any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]


def shown(path: Path) -> str:
    """A program's path as results show it: inside the checkout relative to it, elsewhere its file name alone (no
    machine's folders in a report)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def build_parser(doc: str) -> argparse.ArgumentParser:
    """bench.py's command line (``doc``: its help text)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="auto", help="python of the reference venv (torch + executorch); 'auto' "
                    "(default) uses .ref/bin/python if it exists, 'none' times pterun alone")
    ap.add_argument("--peer", default=None, metavar="PY", help="python of a venv with executorch-numpy-runtime "
                    "(ExecuTorch's C++ runtime with NumPy I/O, Python 3.12+): runs the configuration 'peer' with it, "
                    "added to the default --configs; 'auto' uses .peer/bin/python if it exists; default: no peer")
    ap.add_argument("--py", default=sys.executable, help="python that runs pterun (default: this one)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per runtime and model (default 3)")
    ap.add_argument("--models", nargs="*", help="model names or globs (default: all available); see --list")
    ap.add_argument("--pte", nargs="+", default=[], metavar="NAME=PATH",
                    help="also benchmark these programs (any .pte, e.g. the model zoo's), named NAME")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default bench/out)")
    ap.add_argument("--budget", type=float, default=2.5, help="seconds of timed calls per process (default 2.5)")
    ap.add_argument("--min-calls", type=int, default=5, help="timed calls per process at least (default 5) ...")
    ap.add_argument("--max-time", type=float, default=15.0,
                    help="... unless they take longer than this many seconds (then at least 2; default 15)")
    ap.add_argument("--model-budget", type=float, default=120.0,
                    help="seconds per model after which no further round starts (default 120)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a process is abandoned")
    ap.add_argument("--configs", nargs="+", default=None, metavar="CONFIG",
                    help=f"the configurations to run side by side (default: {' '.join(DEFAULT_CONFIGS)}, and 'peer' "
                    "with --peer): 'defaults' (pterun with no thread or engine setting), 'cached' (the defaults with "
                    "the packed-weight cache), ENGINE-Nt (PTERUN_ENGINE=ENGINE PTERUN_NUM_THREADS=N; ENGINE in "
                    "numpy, litert, auto), ref-Nt (ExecuTorch with an N-thread threadpool), 'ref' (ExecuTorch as it "
                    "comes), 'peer' (executorch-numpy-runtime as it comes: needs --peer). Every process starts with "
                    "the thread and engine variables removed from the environment")
    ap.add_argument("--profile", action="store_true", help="also profile pterun per operator (OUT/profile.md)")
    ap.add_argument("--no-export", action="store_true", help="do not export missing models")
    ap.add_argument("--live-src", action="store_true", help="import pterun from src/ as it is when each process "
                    "starts (default: from a copy of src/ taken and byte-compiled when the run begins, so that edits "
                    "made during a long run do not mix into it; the live tree is not byte-compiled, so with "
                    "PYTHONDONTWRITEBYTECODE set each process compiles pterun from source, inflating import and load)")
    ap.add_argument("--update-readme", action="store_true", help="put the table into bench/README.md")
    ap.add_argument("--list", action="store_true", help="list model names and exit")
    ap.add_argument("--report", type=Path, metavar="RESULTS_JSON",
                    help="only re-render OUT/results.md, ratios.png (and the README with --update-readme) from a "
                    "results.json of an earlier run")
    return ap
