"""External weights in .ptd files: data_path, layout checks, and every error path."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import InvalidProgramError, MethodNotFoundError, NamedDataNotFoundError, Runtime
from pterun.cli import main

PTE = FIXTURES / "ext_mlp.pte"
PTD = FIXTURES / "ext_mlp.ptd"


@pytest.mark.parametrize("kind", ["path", "str", "list", "bytes"])
def test_runs_with_external_weights(kind):
    data_path = {"path": PTD, "str": str(PTD), "list": [PTD], "bytes": PTD.read_bytes()}[kind]
    call = load_calls("ext_mlp")[0]
    out = Runtime.get().load_program(PTE, data_path=data_path).load_method("forward").execute(call["inputs"])
    assert_matches(out[0], call["outputs"][0], "ext_mlp")


def test_external_weights_are_not_copied():
    program = Runtime.get().load_program(PTE, data_path=PTD)
    m = program.load_method("forward")
    ptd = program._external[0]
    weights = [v.array for v in m._runner.values if hasattr(v, "array") and not v.array.flags.writeable]
    assert weights, "external constants should be read-only views"
    mapped = ptd.buf.array()
    assert all(np.shares_memory(w, mapped) for w in weights)


def test_missing_data_path_names_the_tensor():
    program = Runtime.get().load_program(PTE)
    with pytest.raises(NamedDataNotFoundError) as e:
        program.load_method("forward")
    assert type(e.value) is NamedDataNotFoundError and isinstance(e.value, KeyError)
    assert not isinstance(e.value, MethodNotFoundError)  # a missing key is not a missing method
    assert str(e.value) == (f"{PTE}: method 'forward': tensor 'fc1.weight' is stored in external data (.ptd), but "
                            "no data_path was given to load_program")


@pytest.mark.parametrize("make", ["Module", "_load_for_executorch"])
def test_a_module_without_its_ptd_fails_at_construction(make):
    # not at the first forward, long after the line that forgot the data file
    import pterun
    with pytest.raises(NamedDataNotFoundError) as e:
        getattr(pterun, make)(PTE)
    assert str(e.value) == (f"{PTE}: method 'forward': tensor 'fc1.weight' is stored in external data (.ptd), but "
                            "no data_path was given to load_program")
    with pytest.raises(InvalidProgramError, match="external tensor 'fc1.weight' in .*ext_mlp_wrong.ptd has dtype"):
        getattr(pterun, make)(PTE, FIXTURES / "ext_mlp_wrong.ptd")
    module = getattr(pterun, make)(PTE, PTD)
    call = load_calls("ext_mlp")[0]
    assert_matches(module.forward(call["inputs"])[0], call["outputs"][0], "ext_mlp through Module")


def test_missing_ptd_file():
    with pytest.raises(FileNotFoundError, match="no such external data file"):
        Runtime.get().load_program(PTE, data_path=FIXTURES / "nope.ptd")


def test_missing_key_names_it_and_the_files_searched():
    other = FIXTURES / "xnn_ext_mlp.ptd"
    program = Runtime.get().load_program(PTE, data_path=other)
    with pytest.raises(NamedDataNotFoundError) as e:
        program.load_method("forward")
    assert type(e.value) is NamedDataNotFoundError
    assert str(e.value) == f"{PTE}: method 'forward': external tensor 'fc1.weight' is not in {other}"


def test_program_named_data_raises_named_data_not_found_for_an_unknown_key():
    program = Runtime.get().load_program(PTE, data_path=PTD)
    with pytest.raises(NamedDataNotFoundError) as e:
        program.named_data("no.such.key")
    assert type(e.value) is NamedDataNotFoundError and isinstance(e.value, KeyError)
    assert str(e.value) == f"no named data with key 'no.such.key' in {PTE} or {PTD}"


def test_wrong_shape_in_ptd():
    program = Runtime.get().load_program(PTE, data_path=FIXTURES / "ext_mlp_wrong.ptd")
    with pytest.raises(InvalidProgramError, match=r"external tensor 'fc1.weight' in .*ext_mlp_wrong.ptd has dtype "
                                                  r"Float, sizes \[17, 8\], dim order \[0, 1\]; the program expects "
                                                  r"Float, sizes \[16, 8\], dim order \[0, 1\]"):
        program.load_method("forward")


def test_wrong_dtype_in_ptd():
    data = bytearray(PTD.read_bytes())
    from pterun.format.ptd import read_ptd
    ptd = read_ptd(bytes(data), "x")
    # flip the scalar type byte of one layout from Float (6) to Double (7): find it through the parsed table
    from pterun.format.flatbuffer import Table
    root = Table.root(ptd.buf)
    for nd in root.tables(8):
        if nd.string(4) == "fc2.bias":
            pos = nd.table(8).field(4)
            assert data[pos] == 6
            data[pos] = 7
    program = Runtime.get().load_program(PTE, data_path=bytes(data))
    with pytest.raises(InvalidProgramError, match="external tensor 'fc2.bias' in <bytes> has dtype Double"):
        program.load_method("forward")


def test_duplicate_keys_across_ptd_files():
    with pytest.raises(InvalidProgramError, match="named data key '.*' is in both"):
        Runtime.get().load_program(PTE, data_path=[PTD, PTD])


def test_a_pte_passed_as_data_path():
    with pytest.raises(InvalidProgramError, match=r"expected identifier 'FT01' .* \(this is a \.pte program, not "
                                                  r"external data\)"):
        Runtime.get().load_program(PTE, data_path=PTE)


def test_truncated_ptd():
    with pytest.raises(InvalidProgramError):
        Runtime.get().load_program(PTE, data_path=PTD.read_bytes()[:100])


def test_inspect_ptd_lists_keys(capsys):
    assert main(["inspect", str(PTD)]) == 0
    out = capsys.readouterr().out
    assert "external data, 4 key(s)" in out
    assert "fc1.weight  float32[16, 8]  512 bytes" in out  # the NumPy spelling, as for a .pte


def test_inspect_pte_shows_external_references(capsys):
    assert main(["inspect", str(PTE)]) == 0
    assert "external tensors (4): fc1.bias, fc1.weight, fc2.bias, fc2.weight" in capsys.readouterr().out


def test_cli_run_with_data_path(capsys):
    assert main(["run", str(PTE), "--data-path", str(PTD)]) == 0
    assert "output 0: float32[2, 4]" in capsys.readouterr().out


def test_xnnpack_program_with_weights_in_ptd():
    pte, ptd = FIXTURES / "xnn_ext_mlp.pte", FIXTURES / "xnn_ext_mlp.ptd"
    call = load_calls("xnn_ext_mlp")[0]
    out = Runtime.get().load_program(pte, data_path=ptd).load_method("forward").execute(call["inputs"])
    assert_matches(out[0], call["outputs"][0], "xnn_ext_mlp")


def test_xnnpack_program_without_its_ptd_is_a_clean_error():
    # (ExecuTorch 1.5.1's own runtime crashes with a segmentation fault here)
    from pterun import DelegateError
    program = Runtime.get().load_program(FIXTURES / "xnn_ext_mlp.pte")
    with pytest.raises(DelegateError, match=r"needs named data '[0-9a-f]{64}'.*pass it as data_path="):
        program.load_method("forward")


def test_inspect_summarises_xnnpack_payloads(capsys):
    assert main(["inspect", str(FIXTURES / "xnn_8da4w.pte")]) == 0
    out = capsys.readouterr().out
    assert "nodes: XNNConvert x2, XNNFullyConnected x2" in out
    assert "value types: fp32 x4, qbint4 x2, qdint8 x2" in out


def test_read_data_file_is_the_public_ptd_reader():
    from pterun.sources import read_data_file

    ptd = read_data_file(PTD)
    assert ptd.name == str(PTD) and "fc1.weight" in ptd
    assert read_data_file(PTD.read_bytes()).keys() == ptd.keys()
    with pytest.raises(InvalidProgramError):
        read_data_file(b"\0" * 64)
    with pytest.raises(FileNotFoundError, match="no such external data file"):
        read_data_file(FIXTURES / "nope.ptd")
