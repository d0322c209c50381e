"""The fixed set of small programs every release exports, with seeded weights and inputs.

Example (inside a release's virtual environment)::

    >>> from programs import PROGRAMS                            # doctest: +SKIP
    >>> spec = PROGRAMS["xnn_cnn"]()                              # doctest: +SKIP
    >>> spec.calls[0]["inputs"][0].shape                          # doctest: +SKIP
    torch.Size([2, 3, 8, 8])

Each builder returns a ``Spec``: how to export the program with the running release (``build`` returns the
ExecuTorch program manager, written with ``compat``'s per-release functions) and the calls to record, in order,
on one loaded program. Programs are torch-only here; which release API does what lives in ``compat``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import compat
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Spec:
    what: str  # one line for the manifest and the README
    build: Callable[[], object]  # -> ExecuTorch program manager (has .buffer, .executorch_program)
    calls: list  # [{"method": name, "inputs": [...]}], run in order on one loaded program
    eager: dict = field(default_factory=dict)  # method -> callable giving eager PyTorch outputs (sanity check)
    kind: str = "float"  # "float", "qint8" (static int8 outputs), "8da4w", "llm"
    external_data: bool = False  # write the constants to NAME.ptd
    bundled: bool = False  # also write NAME.bpte with the calls as test cases
    llm_steps: bool = False  # decode calls feed on the previous call's argmax (recorded inputs are the ones used)
    notes: dict = field(default_factory=dict)  # filled by build: goes into the manifest (e.g. the recipe used)


PROGRAMS: dict[str, Callable[[], Spec]] = {}


def program(name: str):
    def register(fn):
        PROGRAMS[name] = fn
        return fn
    return register


def _seed(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 10)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    """conv -> relu -> max pool -> flatten -> linear. The pool leaves [N, 16, 1, 1]: releases whose partitioner
    leaves the flatten out of XNNPACK (0.6 to 1.2) make two delegate calls back to back, the flatten only an
    alias in the memory plan (two values at one arena offset), the case issue 22 is about."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(4, stride=4)  # 0.4.0's XNNPACK partitioner wants an explicit stride
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(F.relu(self.conv(x))), 1))


class Block(nn.Module):
    """A pre-norm transformer block: multi-head self-attention (explicit matmul/softmax) and a GELU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, y):
        return torch.tanh(self.fc(y)) * 2.0


class Linear8da4w(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 96, bias=False), nn.Linear(96, 32, bias=False)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def _calls(method: str, *inputs_per_call) -> list:
    return [{"method": method, "inputs": list(ins)} for ins in inputs_per_call]


@program("portable_mlp")
def mlp() -> Spec:
    g = _seed(1)
    m = MLP().eval()
    x = _randn(g, 4, 16)
    return Spec("MLP 16-32-32-10 (relu, tanh), portable kernels", lambda: compat.lower_portable(compat.export(m, (x,))),
                _calls("forward", (x,), (_randn(g, 4, 16),)), {"forward": m})


@program("portable_cnn")
def cnn() -> Spec:
    g = _seed(2)
    m = CNN().eval()
    x = _randn(g, 2, 3, 8, 8)
    return Spec("conv3x3/2 -> relu -> maxpool4/4 -> flatten -> linear, portable kernels",
                lambda: compat.lower_portable(compat.export(m, (x,))), _calls("forward", (x,)), {"forward": m})


@program("xnnpack_cnn")
def xnn_cnn() -> Spec:
    g = _seed(2)
    m = CNN().eval()
    x = _randn(g, 2, 3, 8, 8)
    return Spec("the CNN of portable_cnn lowered to XNNPACK fp32 (0.6 to 1.2: two delegate calls back to back, the "
                "flatten only in the memory plan)", lambda: compat.lower_xnnpack(compat.export(m, (x,))),
                _calls("forward", (x,), (_randn(g, 2, 3, 8, 8),)), {"forward": m})


@program("xnnpack_mlp_dynamic")
def xnn_mlp_dynamic() -> Spec:
    g = _seed(3)
    m = MLP().eval()
    x = _randn(g, 4, 16)
    batch = torch.export.Dim("batch", min=1, max=8)
    return Spec("the MLP of portable_mlp on XNNPACK with a dynamic batch (Dim 1..8); calls with 3, 8 and 1 rows",
                lambda: compat.lower_xnnpack(compat.export(m, (x,), dynamic_shapes={"x": {0: batch}})),
                _calls("forward", (_randn(g, 3, 16),), (_randn(g, 8, 16),), (_randn(g, 1, 16),)), {"forward": m})


@program("xnnpack_transformer")
def xnn_transformer() -> Spec:
    g = _seed(4)
    m = Block().eval()
    x = _randn(g, 2, 6, 32)
    return Spec("pre-norm transformer block (4-head attention, layer norms, GELU MLP), dim 32, on XNNPACK",
                lambda: compat.lower_xnnpack(compat.export(m, (x,))),
                _calls("forward", (x,), (_randn(g, 2, 6, 32),)), {"forward": m})


@program("xnnpack_qint8_cnn")
def xnn_qint8_cnn() -> Spec:
    g = _seed(5)
    m = CNN().eval()
    x = _randn(g, 2, 3, 8, 8)
    calib = [(_randn(g, 2, 3, 8, 8),) for _ in range(8)]
    return Spec("the CNN of portable_cnn, PT2E static int8 (symmetric, per-channel weights) on XNNPACK",
                lambda: compat.lower_xnnpack(compat.pt2e_quantize(m, (x,), calib)),
                _calls("forward", (x,), (_randn(g, 2, 3, 8, 8),)), {"forward": m}, kind="qint8")


@program("portable_multi_method")
def multi_method() -> Spec:
    g = _seed(6)
    fwd, enc = MLP().eval(), Encoder().eval()
    x, y = _randn(g, 2, 16), _randn(g, 3, 4)

    def build():
        from executorch.exir import to_edge
        edge = to_edge({"forward": compat.export(fwd, (x,)), "encode": compat.export(enc, (y,))},
                       constant_methods={"get_max_seq_len": 64, "get_scale": 0.5})
        return edge.to_executorch()

    calls = (_calls("forward", (x,)) + _calls("encode", (y,)) + _calls("get_max_seq_len", ())
             + _calls("get_scale", ()) + _calls("forward", (_randn(g, 2, 16),)))
    return Spec("two tensor methods (forward: the MLP, encode: tanh(linear)*2) and constant methods "
                "get_max_seq_len=64, get_scale=0.5, portable", build, calls, {"forward": fwd, "encode": enc})


@program("xnnpack_8da4w")
def xnn_8da4w() -> Spec:
    g = _seed(7)
    m = Linear8da4w().eval()
    # 4 rows, not 3: ExecuTorch 0.6.0's runtime returns an all-zero last row for this program with 3 rows
    x = _randn(g, 4, 64)
    notes = {}

    def build():
        notes["recipe"] = compat.quantize_8da4w(m)
        return compat.lower_xnnpack(compat.export(m, (x,)))

    return Spec("two bias-free linears 64-96-32 with relu, int8 dynamic activations x int4 weights (group 32), "
                "on XNNPACK", build, _calls("forward", (x,), (_randn(g, 4, 64),)), {"forward": m}, kind="8da4w",
                notes=notes)


@program("ptd_mlp")
def ext_mlp() -> Spec:
    g = _seed(8)
    m = MLP().eval()
    x = _randn(g, 4, 16)

    def build():
        config = compat.external_constants_config()
        return compat.lower_portable(compat.export(m, (x,)), backend_config=config)

    return Spec("the MLP of portable_mlp with every constant in ptd_mlp.ptd (external_constants=True), portable",
                build, _calls("forward", (x,)), {"forward": m}, external_data=True)


@program("bundled_mlp")
def bundled_mlp() -> Spec:
    g = _seed(9)
    m = MLP().eval()
    x = _randn(g, 4, 16)
    return Spec("the MLP of portable_mlp as a bundled program (.bpte) with two test cases (expected outputs from "
                "eager PyTorch)",
                lambda: compat.lower_portable(compat.export(m, (x,))),
                _calls("forward", (x,), (_randn(g, 4, 16),)), {"forward": m}, bundled=True)


# hidden_dim 64 (not the default 4 * dim * 2/3): the program stays ~300 KB, most of it the two 256 x 64 tables
LLM_PARAMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "hidden_dim": 64,
              "multiple_of": 32, "norm_eps": 1e-5}
LLM_MAX_SEQ = 32


@program("llama")
def llm() -> Spec:
    g = _seed(10)
    prompt = torch.randint(0, LLM_PARAMS["vocab_size"], (1, 5), generator=g)

    def build():
        return export_llm(prompt)

    calls = [{"method": "forward", "inputs": [prompt, torch.tensor([0])]},
             {"method": "forward", "inputs": None}, {"method": "forward", "inputs": None}]
    return Spec(f"tiny Llama from the release's export_llama (-kv -X, fp32, random weights, "
                f"{json.dumps(LLM_PARAMS)}, max_seq_len {LLM_MAX_SEQ}); prefill of 5 tokens then 2 greedy decode "
                "steps on one loaded program", build, calls, kind="llm", llm_steps=True)


class _Saved:
    """What ``export_llm`` hands back: the serialized program, in the shape of a program manager."""

    def __init__(self, data: bytes):
        self.buffer = data
        self.executorch_program = None


def export_llm(prompt) -> _Saved:
    """Run the release's own exporter on a seeded random checkpoint of its own Transformer class."""
    lib, export_llama = compat.llama_exporter()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        torch.manual_seed(11)
        model = compat.llama_transformer(dict(LLM_PARAMS, max_seq_len=LLM_MAX_SEQ))
        with torch.no_grad():  # small normal weights, unit norms: logits of a sensible scale
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.05)
        torch.save(model.state_dict(), d / "ckpt.pth")
        (d / "params.json").write_text(json.dumps(LLM_PARAMS))
        args = lib.build_args_parser().parse_args(
            ["-c", str(d / "ckpt.pth"), "-p", str(d / "params.json"), "-kv", "-X", "-d", "fp32",
             "--max_seq_length", str(LLM_MAX_SEQ), "-o", str(d), "-n", "llm"])
        if hasattr(args, "max_context_length"):  # 0.6.0 added a context length separate from the sequence length
            args.max_context_length = LLM_MAX_SEQ
        export_llama(args)
        pte = sorted(d.glob("*.pte"))
        if len(pte) != 1:
            raise RuntimeError(f"export_llama wrote {[p.name for p in pte]}, expected one .pte")
        return _Saved(pte[0].read_bytes())
