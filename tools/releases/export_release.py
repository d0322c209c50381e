#!/usr/bin/env python
"""Export the release-matrix programs with the ExecuTorch release installed in THIS interpreter, and record that
release's own runtime's outputs. ``tools/release_matrix.py`` runs it inside each release's virtual environment::

    ~/.cache/pterun-releases/et-1.0.1/bin/python tools/releases/export_release.py tests/fixtures/releases/1.0.1
    .../bin/python tools/releases/export_release.py OUT_DIR xnn_cnn llm      # only some programs

For every program NAME it writes ``OUT_DIR/NAME.pte`` (``NAME.ptd`` / ``NAME.bpte`` where the program has them)
and ``OUT_DIR/NAME.npz`` (the calls, in the layout of tests/fixtures/README.md), and it (re)writes
``OUT_DIR/manifest.json``: versions, and per program what it is, its files, its delegate calls, or why this
release could not export it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore")

import compat  # this folder is on sys.path: the script's own

compat.ensure_flatc()  # 0.4.0 and 0.6.0 serialize through flatc on PATH: set it before anything is serialized

from programs import PROGRAMS, Spec


# ----------------------------------------------------------------------------------------------------------------
# The release's runtime
# ----------------------------------------------------------------------------------------------------------------
def _load_kernels() -> None:
    """Register the optional kernel libraries the wheel ships, so leftover quantized ops run too."""
    for mod in ("executorch.kernels.quantized", "executorch.extension.llm.custom_ops.custom_ops"):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001  (absent from older wheels: those programs don't need them)
            print(f"  ({mod} not loaded: {type(e).__name__})")


def load_program(pte: Path, ptd: Path | None):
    """One loaded program of the release's runtime, as ``run(method, inputs) -> outputs``.

    ``executorch.runtime`` exists since 0.4.0; where it cannot take a ``.ptd`` (before 1.2's ``data_path``?),
    ``portable_lib._load_for_executorch(path, data_path)`` does, when that release has it."""
    from executorch.runtime import Runtime
    _load_kernels()
    if ptd is None:
        program = Runtime.get().load_program(str(pte))
        methods = {}

        def run(name, inputs):
            if name not in methods:
                methods[name] = program.load_method(name)
            return list(methods[name].execute(inputs))
        return run, "executorch.runtime"
    try:
        program = Runtime.get().load_program(str(pte), data_path=str(ptd))
    except TypeError:
        from executorch.extension.pybindings import portable_lib
        try:
            module = portable_lib._load_for_executorch(str(pte), str(ptd))
        except TypeError as e:  # its message lists the signatures and this machine's paths: keep neither
            raise compat.Unsupported(f"ExecuTorch {compat.ET_VERSION}'s runtime cannot load a .ptd: neither "
                                     "Runtime.load_program nor portable_lib._load_for_executorch takes a data file "
                                     "(it writes one with write_tensor_data_to_file)") from e
        return (lambda name, inputs: list(module.run_method(name, tuple(inputs)))), \
            "portable_lib._load_for_executorch(pte, ptd)"
    methods = {}

    def run_ptd(name, inputs):
        if name not in methods:
            methods[name] = program.load_method(name)
        return list(methods[name].execute(inputs))
    return run_ptd, "executorch.runtime (data_path)"


# ----------------------------------------------------------------------------------------------------------------
# Recording: the NPZ layout of tests/fixtures/README.md
# ----------------------------------------------------------------------------------------------------------------
def _encode(value, key: str, arrays: dict):
    if isinstance(value, torch.Tensor):
        arrays[key] = value.detach().contiguous().numpy().copy()
        return {"array": key}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if value is None:
        return {"none": None}
    raise TypeError(f"cannot record a {type(value).__name__}")


def record(spec: Spec, run) -> tuple[list, dict]:
    manifest, arrays = [], {}
    previous = None
    for c, call in enumerate(spec.calls):
        inputs = call["inputs"]
        if inputs is None:  # an LLM decode step: the previous call's greedy token at the next position
            token = int(previous[0].reshape(-1, previous[0].shape[-1])[-1].argmax())
            pos = int(manifest[-1]["_next_pos"])
            inputs = [torch.tensor([[token]], dtype=torch.long), torch.tensor([pos], dtype=torch.long)]
        outputs = run(call["method"], inputs)
        entry = {"method": call["method"],
                 "inputs": [_encode(v, f"c{c}_in{i}", arrays) for i, v in enumerate(inputs)],
                 "outputs": [_encode(v, f"c{c}_out{j}", arrays) for j, v in enumerate(outputs)]}
        if spec.llm_steps:
            entry["_next_pos"] = int(inputs[1][0]) + int(inputs[0].shape[1])
        manifest.append(entry)
        previous = outputs
    for entry in manifest:
        entry.pop("_next_pos", None)
    return manifest, arrays


def eager_gap(spec: Spec, manifest: list, arrays: dict) -> float | None:
    """Max |runtime - eager| over the recorded float outputs: a sanity check printed and kept in the manifest."""
    worst = None
    for entry in manifest:
        fn = spec.eager.get(entry["method"])
        if fn is None:
            continue
        ins = [torch.from_numpy(arrays[v["array"]]) for v in entry["inputs"]]
        with torch.no_grad():
            out = fn(*ins)
        outs = out if isinstance(out, (tuple, list)) else [out]
        for v, e in zip(entry["outputs"], outs):
            if "array" in v and arrays[v["array"]].dtype.kind == "f":
                gap = float(np.abs(arrays[v["array"]].astype(np.float64) - e.numpy()).max(initial=0))
                worst = gap if worst is None else max(worst, gap)
    return worst


# ----------------------------------------------------------------------------------------------------------------
# What the emitted program contains
# ----------------------------------------------------------------------------------------------------------------
def describe_plans(data: bytes) -> dict:
    """Per method of the serialized program: the instruction kinds in order (K kernel, D delegate call, M move,
    J jump, F free), the number of delegate calls, whether two delegate calls follow each other, and the
    backends. Read back with the release's own deserializer (it returns a ``PTEFile`` wrapping the ``Program``
    from 1.5)."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    prog = deserialize_pte_binary(data)
    prog = getattr(prog, "program", prog)
    letters = {"KernelCall": "K", "DelegateCall": "D", "MoveCall": "M", "JumpFalseCall": "J", "FreeCall": "F"}
    out = {}
    for plan in prog.execution_plan:
        seq = "".join(letters.get(type(ins.instr_args).__name__, "?") for chain in plan.chains
                      for ins in chain.instructions)
        out[plan.name] = {"instructions": seq, "delegate_calls": seq.count("D"), "back_to_back": "DD" in seq,
                          "backends": sorted({d.id for d in plan.delegates})}
    return out


def header_facts(data: bytes) -> dict:
    """The file identifier and the extended header's length (24 before 1.0, 32 from 1.0)."""
    facts = {"identifier": data[4:8].decode("ascii", "replace")}
    if data[8:12] == b"eh00":
        facts["extended_header_length"] = int.from_bytes(data[12:16], "little")
    return facts


# ----------------------------------------------------------------------------------------------------------------
def _short(e: Exception, out: Path) -> str:
    """First line of an error, with the output folder's path taken out (no machine paths in the manifest)."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}".replace(str(out.resolve()), "").replace(str(out), "")


# a recorded output further than this (times the outputs' scale) from eager PyTorch is a bug of the release's
# runtime (0.6.0 zeroes the last of 3 rows of an 8da4w linear; 0.4.0 with torchao 0.6.1 computes another 8da4w):
# quantized programs sit within ~1.5% of eager, float ones within 1e-6
EAGER_GAP_LIMIT = 0.1


def export_one(name: str, out: Path) -> dict:
    spec = PROGRAMS[name]()
    entry = {"what": spec.what, "kind": spec.kind}
    try:
        et_program = spec.build()
    except compat.Unsupported as e:
        return dict(entry, exported=False, reason=str(e))
    except Exception as e:  # noqa: BLE001  (a release that cannot export it: recorded, never faked)
        traceback.print_exc()
        return dict(entry, exported=False, reason=f"export failed: {_short(e, out)}")
    entry.update(spec.notes)
    data = bytes(et_program.buffer)
    pte = out / f"{name}.pte"  # a bundled program's .pte is only a step: the .bpte embeds it
    pte.write_bytes(data)
    files = [] if spec.bundled else [pte.name]
    ptd = None
    if spec.external_data:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            et_program.write_tensor_data_to_file(d)
            produced = sorted(Path(d).glob("*.ptd"))
            if len(produced) != 1:
                raise RuntimeError(f"{name}: expected one .ptd, the exporter wrote {[p.name for p in produced]}")
            ptd = out / f"{name}.ptd"
            ptd.write_bytes(produced[0].read_bytes())
            entry["ptd_written_as"] = produced[0].name
        files.append(ptd.name)
    try:
        run, via = load_program(pte, ptd)
        manifest, arrays = record(spec, run)
    except compat.Unsupported as e:
        for f in files + [pte.name]:
            (out / f).unlink(missing_ok=True)
        return dict(entry, exported=False, reason=str(e))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        for f in files + [pte.name]:
            (out / f).unlink(missing_ok=True)
        return dict(entry, exported=False,
                    reason=f"the release's runtime failed on it: {_short(e, out)}")
    np.savez_compressed(out / f"{name}.npz", __manifest__=np.array(json.dumps(manifest)), **arrays)
    files.append(f"{name}.npz")
    if spec.bundled:
        cases = {}
        for c in manifest:
            ins = [torch.from_numpy(arrays[v["array"]]) for v in c["inputs"]]
            with torch.no_grad():
                expected = spec.eager[c["method"]](*ins)
            cases.setdefault(c["method"], []).append((ins, [expected]))
        (out / f"{name}.bpte").write_bytes(compat.bundle(et_program, cases))
        files.append(f"{name}.bpte")
        pte.unlink()
    gap = eager_gap(spec, manifest, arrays)
    scale = max((float(np.abs(a).max(initial=0)) for k, a in arrays.items() if "_out" in k and a.dtype.kind == "f"),
                default=0.0)
    if gap is not None and gap > EAGER_GAP_LIMIT * scale:  # the reference itself is wrong: nothing to match
        for f in files + [pte.name]:
            (out / f).unlink(missing_ok=True)
        return dict(entry, exported=False, reason=f"the release's own runtime disagrees with eager PyTorch: max "
                    f"|runtime - eager| = {gap:.3g} for outputs of scale {scale:.3g}; not a reference to match")
    plans = describe_plans(data)
    entry.update(exported=True, files=files, recorded_with=via, calls=len(manifest), pte_bytes=len(data),
                 header=header_facts(data), methods=plans,
                 xnnpack_delegates=sum(p["delegate_calls"] for p in plans.values()),
                 max_abs_gap_to_eager=gap)
    print(f"  {name}: {len(data)} bytes, {[(m, p['instructions']) for m, p in plans.items()]}, eager gap {gap}")
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the release's fixture folder")
    ap.add_argument("programs", nargs="*", help=f"only these ({', '.join(PROGRAMS)})")
    args = ap.parse_args(argv)
    unknown = set(args.programs) - set(PROGRAMS)
    if unknown:
        ap.error(f"unknown programs {sorted(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() and args.programs else {"programs": {}}
    manifest.update(executorch=compat.ET_VERSION, torch=torch.__version__, python=platform.python_version())
    for extra in ("torchao",):
        try:
            import importlib.metadata
            manifest[extra] = importlib.metadata.version(extra)
        except Exception:  # noqa: BLE001
            manifest[extra] = None
    print(f"ExecuTorch {compat.ET_VERSION}, torch {torch.__version__}")
    for name in args.programs or list(PROGRAMS):
        torch.manual_seed(0)
        manifest["programs"][name] = export_one(name, args.out)
    manifest["programs"] = dict(sorted(manifest["programs"].items()))
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    failed = [n for n, p in manifest["programs"].items() if not p["exported"]]
    print(f"not exported: {failed}" if failed else "all programs exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
