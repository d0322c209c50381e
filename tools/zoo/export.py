#!/usr/bin/env python
"""Export the model zoo with the reference toolchain and record ExecuTorch's outputs.

Run with the reference virtualenv (torch, executorch, torchvision, transformers)::

    .ref/bin/python tools/zoo/export.py                      # every model, every variant
    .ref/bin/python tools/zoo/export.py resnet18 bert        # some models
    .ref/bin/python tools/zoo/export.py --missing            # only cases not in the cache yet

For each model of ``tools/zoo/models.py`` and each of its variants this writes, under the cache directory
(``--cache``, else ``$PTERUN_ZOO_CACHE``, else ``~/.cache/pterun-zoo``; never committed):

* ``MODEL/VARIANT.pte``: the program;
* ``MODEL/VARIANT.npz``: ``in0..`` the inputs and ``out0..`` the outputs of ExecuTorch's runtime on them;
* ``MODEL/VARIANT.json``: ``status`` ("ok", "reference_failed", or "skipped" when the model's subprocess ran
  past ``--timeout``), otherwise the ``stage`` (build, quantize, export, lower, run, process) and the
  ``reason``; the tolerance ``kind`` (float, static, dynamic) and, for static int8, the output quantization
  scales read from the quantized graph.

Each model is exported in its own subprocess (``--one``), so a crash or a hang in the reference toolchain costs
one model: a crash is recorded as that model's failure, a timeout as a skipped case (slow is not a failure of
the reference). ``tools/zoo/run.py`` then runs pterun on the cache.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIND = {"portable": "float", "xnn_fp32": "float", "xnn_int8": "static", "xnn_8da4w": "dynamic",
        "xnn_8da8w": "dynamic"}


def cache_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("PTERUN_ZOO_CACHE") or Path.home() / ".cache" / "pterun-zoo").expanduser()


class StageError(Exception):
    def __init__(self, stage: str, exc: BaseException):
        super().__init__(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        self.stage = stage


def stage(name: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # the reference toolchain's failure is the record, whatever its class
        traceback.print_exc(file=sys.stderr)
        raise StageError(name, e) from e


def output_scales(gm) -> list:
    """Scale of each graph output that is a per-tensor dequantize (None where it is not)."""
    import torch

    out = next(n for n in gm.graph.nodes if n.op == "output")
    args = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    scales = []
    for a in args:
        s = None
        if isinstance(a, torch.fx.Node) and a.op == "call_function" and "dequantize_per_tensor" in str(a.target):
            s = a.args[1] if isinstance(a.args[1], float) else None
        scales.append(s)
    return scales


def program_for(variant: str, module, inputs: tuple, calib: list):
    """(ExecuTorch program, metadata) for one variant."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    meta: dict = {}
    module = copy.deepcopy(module)
    if variant == "xnn_int8":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                             get_symmetric_quantization_config)
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        def quantize():
            gm = torch.export.export(module, inputs).module()
            prepared = prepare_pt2e(gm, XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True)))
            for c in calib:
                prepared(*c)
            return convert_pt2e(prepared)

        module = stage("quantize", quantize)
        meta["out_scales"] = output_scales(module)
    elif variant in ("xnn_8da4w", "xnn_8da8w"):
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup

        cfg = (Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
               if variant == "xnn_8da4w" else
               Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
        stage("quantize", quantize_, module, cfg)
    ep = stage("export", lambda: torch.export.export(module, inputs))
    if variant == "portable":
        et = stage("lower", lambda: to_edge(ep).to_executorch())
    else:
        et = stage("lower", lambda: to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
                   .to_executorch())
    return et, meta


def export_model(name: str, root: Path, variants: list, missing: bool) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from models import MODELS

    family, all_variants, build = MODELS[name]
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    todo = [v for v in all_variants if (not variants or v in variants) and not (missing and recorded(out, v))]
    if not todo:
        return
    seed = sum(map(ord, name))  # stable across runs, unlike hash()
    torch.manual_seed(seed)  # torchvision / torchaudio initialise weights from the global generator
    g = torch.Generator().manual_seed(seed)
    try:
        module, inputs = stage("build", build, g)
        with torch.no_grad():
            module(*inputs)
        calib = [tuple(torch.randn_like(x) if x.is_floating_point() else x for x in inputs) for _ in range(3)]
        calib.append(inputs)
    except StageError as e:
        for v in todo:
            write(out, v, {"status": "reference_failed", "stage": e.stage, "reason": str(e), "family": family})
        return
    for v in todo:
        t0 = time.time()
        rec = {"family": family, "kind": KIND[v]}
        try:
            with torch.no_grad():
                et, meta = program_for(v, module, inputs, calib)
            rec.update(meta)
            pte = out / f"{v}.pte"
            pte.write_bytes(et.buffer)

            def run():
                from executorch.runtime import Runtime

                method = Runtime.get().load_program(str(pte)).load_method("forward")
                return method.execute(list(inputs))

            outs = stage("run", run)
            arrays = {f"in{i}": x.numpy() for i, x in enumerate(inputs)}
            arrays.update({f"out{j}": o.numpy() for j, o in enumerate(outs)})
            np.savez(out / f"{v}.npz", **arrays)
            rec.update(status="ok", pte_bytes=len(et.buffer), seconds=round(time.time() - t0, 1))
        except StageError as e:
            rec.update(status="reference_failed", stage=e.stage, reason=str(e))
        write(out, v, rec)
        print(f"{name}/{v}: {rec['status']}{'' if rec['status'] == 'ok' else ' at ' + rec['stage'] + ': ' + rec['reason']}"
              f" ({time.time() - t0:.0f} s)", flush=True)


def recorded(out: Path, variant: str) -> bool:
    """Whether ``--missing`` leaves the case alone: it has a record that is not a skip (a skip is retried)."""
    path = out / f"{variant}.json"
    return path.exists() and json.loads(path.read_text()).get("status") != "skipped"


def write(out: Path, variant: str, rec: dict) -> None:
    (out / f"{variant}.json").write_text(json.dumps(rec, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="models (default: all)")
    ap.add_argument("--cache", help="cache directory (default $PTERUN_ZOO_CACHE or ~/.cache/pterun-zoo)")
    ap.add_argument("--variants", nargs="*", default=[], help="only these variants")
    ap.add_argument("--missing", action="store_true", help="skip cases already recorded (a skipped one is retried)")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per model (default 1200)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    root = cache_dir(args.cache)
    if args.one:
        import warnings

        warnings.filterwarnings("ignore")
        export_model(args.one, root, args.variants, args.missing)
        return 0
    sys.path.insert(0, str(HERE))
    from models import MODELS

    names = args.names or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {sorted(MODELS)}")
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        cmd = [sys.executable, __file__, "--one", name, "--cache", str(root)]
        cmd += ["--variants", *args.variants] if args.variants else []
        cmd += ["--missing"] if args.missing else []
        t0 = time.time()
        log = root / f"{name}.log"
        with open(log, "w") as f:
            try:
                r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith(name + "/")]
        for ln in lines:
            print(ln, flush=True)
        if rc != 0:  # a crash: every variant not recorded becomes a reference failure; a timeout: skipped
            family, variants, _ = MODELS[name]
            for v in variants:
                if (not args.variants or v in args.variants) and not recorded(root / name, v):
                    (root / name).mkdir(parents=True, exist_ok=True)
                    if rc == "timeout":
                        rec = {"status": "skipped", "stage": "timeout", "family": family,
                               "reason": f"export and reference run took over {args.timeout} s (--timeout)"}
                    else:
                        rec = {"status": "reference_failed", "stage": "process", "family": family,
                               "reason": f"exporter exited with {rc} (see {log.name})"}
                    write(root / name, v, rec)
                    print(f"{name}/{v}: {rec['status']} at {rec['stage']}: {rec['reason']}", flush=True)
        print(f"# {name}: {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
