"""The ``pterun`` argument parser: the global options, each command's options, and the types that check them.

Example::

    >>> args = build_parser().parse_args(["bench", "model.pte", "--repeat", "5"])
    >>> args.command, args.repeat, args.warmup
    ('bench', 5, 2)

Each command's ``fn`` default is ``"module:function"`` in this package, imported when the command runs, so
building the parser imports no command (``generate``'s options come from :mod:`pterun.llm.cli`, whose package
imports pterun's LLM kernels, and NumPy with them).
"""

from __future__ import annotations

import argparse
from typing import Any

from pterun.cli.options import array_file, directory, number, threads, whole
from pterun.config import ENGINE_CHOICES

__all__ = ["build_parser", "parse"]


def _add_global_options(p: argparse.ArgumentParser, *, on_command: bool) -> None:
    """The options that work before or after the command. On a command's parser their default is SUPPRESS, so
    leaving one out there keeps what was given before the command."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if on_command else {}
    p.add_argument("--debug", action="store_true", help="show full tracebacks and debug logging", **d)
    p.add_argument("--threads", type=threads, metavar="N", help="compute on N threads (default: "
                   "$PTERUN_NUM_THREADS, else the cores this process may use; at most 4 per core); BLAS stays at "
                   "one thread", **d)
    p.add_argument("--engine", choices=ENGINE_CHOICES, help="what runs XNNPACK delegates: LiteRT "
                   "(on XNNPACK itself), pterun's NumPy engine, or auto: LiteRT where installed and able (default: "
                   "$PTERUN_ENGINE, else auto)", **d)
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache", action="store_const", const=True,
                       help="keep XNNPACK's packed weights on disk, in the user's cache directory (~/.cache/pterun "
                       "on Linux), so that later loads of a large model skip packing them (default: "
                       "$PTERUN_CACHE_DIR, else off)", **d)
    cache.add_argument("--cache-dir", dest="cache", type=directory, metavar="DIR",
                       help="the same, in DIR", **d)
    cache.add_argument("--no-cache", dest="cache", action="store_const", const=False,
                       help="no packed-weight cache, whatever $PTERUN_CACHE_DIR says", **d)


def _add_program_options(p: argparse.ArgumentParser, *, data_help: str = "external data file(s)",
                         seed_default: int | None = 0) -> None:
    """--method, --input, --seed and --data-path: what run, bench and trace take to run one method."""
    p.add_argument("--method", help="method to run (default: forward)")
    p.add_argument("--input", action="append", default=[], metavar="FILE", type=array_file,
                   help="a .npy (one input) or .npz (inputs in file order); repeat for several")
    p.add_argument("--seed", type=whole(0), default=seed_default, help="seed for random inputs (default 0)")
    p.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd", help=data_help)


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="run a method on inputs from .npy/.npz files (or random inputs)")
    r.add_argument("file", help="the .pte program (or a .bpte bundled program: its first test case's inputs)")
    _add_program_options(r, data_help="external data file(s) holding the program's weights")
    r.add_argument("--output", metavar="OUT.npz", help="save outputs as out0, out1, ... (.npz is added if missing)")
    r.add_argument("--json", action="store_true", help="print inputs and outputs (with values) as JSON")
    r.set_defaults(fn="run:cmd_run")


def _add_inspect(sub) -> None:
    i = sub.add_parser("inspect", help="show methods, inputs/outputs, operators, delegates and memory")
    i.add_argument("file", help="a .pte program, .ptd external data file or .bpte bundled program")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s), to run constant methods that need them")
    i.set_defaults(fn="info:cmd_inspect")


def _add_demo(sub) -> None:
    d = sub.add_parser("demo", help="run the small model shipped with pterun and check it against ExecuTorch")
    d.add_argument("--repeat", type=whole(1), default=20, help="timed calls after the first (default 20)")
    d.set_defaults(fn="run:cmd_demo")


def _add_verify(sub) -> None:
    v = sub.add_parser("verify", help="run every test case of a bundled program (.bpte) and check its outputs")
    v.add_argument("file", help="the .bpte bundled program")
    v.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) for the embedded program")
    v.add_argument("--rtol", type=number(0.0), default=1e-5, help="relative tolerance (default 1e-5, as ExecuTorch)")
    v.add_argument("--atol", type=number(0.0), default=1e-8, help="absolute tolerance (default 1e-8, as ExecuTorch)")
    v.set_defaults(fn="info:cmd_verify")


def _add_bench(sub) -> None:
    b = sub.add_parser("bench", help="time load, first call and repeated calls; --profile shows time per operator")
    b.add_argument("file", help="the .pte program (or .bpte)")
    _add_program_options(b)
    b.add_argument("--repeat", type=whole(1), default=20, help="timed calls (default 20)")
    b.add_argument("--warmup", type=whole(0), default=2, help="untimed calls after the first (default 2)")
    b.add_argument("--json", action="store_true", help="print the timings as JSON")
    b.add_argument("--profile", action="store_true", help="print the time per operator / XNNPACK node")
    b.set_defaults(fn="bench:cmd_bench")


def _add_ops(sub) -> None:
    o = sub.add_parser("ops", help="list registered operators, or check a program's operators")
    o.add_argument("file", nargs="?", help="a .pte (or .bpte) program to check")
    o.set_defaults(fn="info:cmd_ops")


#: the options of ``trace --compare``'s tolerances, when not given
TRACE_RTOL, TRACE_ATOL = 1e-5, 1e-6


def _add_trace(sub) -> None:
    t = sub.add_parser("trace", help="save every instruction's outputs (--out), or find where two traces first "
                       "diverge (--compare)")
    t.add_argument("file", nargs="?", help="the .pte program (with --out)")
    _add_program_options(t, seed_default=None)
    what = t.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", metavar="TRACE.npz", help="where to write the trace")
    what.add_argument("--compare", nargs=2, metavar=("A.npz", "B.npz"),
                      help="report the first instruction whose outputs differ (exit status 1), or none (0)")
    t.add_argument("--rtol", type=number(0.0), help=f"relative tolerance for --compare (default {TRACE_RTOL:g})")
    t.add_argument("--atol", type=number(0.0), help=f"absolute tolerance for --compare (default {TRACE_ATOL:g})")
    t.set_defaults(fn="trace:cmd_trace", check=_check_trace)


def _check_trace(args) -> str | None:
    """What is wrong with a trace command line that argparse alone cannot see, or None."""
    if args.compare:
        options = ((f"the program {args.file}", args.file), ("--method", args.method), ("--input", args.input),
                   ("--seed", args.seed), ("--data-path", args.data_path))
        given = [what for what, v in options if v is not None and v != []]
        if given:
            return f"{given[0]} is not used by --compare, which compares two saved traces"
        args.rtol = TRACE_RTOL if args.rtol is None else args.rtol
        args.atol = TRACE_ATOL if args.atol is None else args.atol
        return None
    if args.file is None:
        return "--out needs the program to trace: pterun trace MODEL.pte --out TRACE.npz"
    if args.rtol is not None or args.atol is not None:
        return f"{'--rtol' if args.rtol is not None else '--atol'} is for --compare only"
    args.seed = 0 if args.seed is None else args.seed
    return None


def build_parser() -> argparse.ArgumentParser:
    """The ``pterun`` parser, every command on it."""
    p = argparse.ArgumentParser(prog="pterun", description="Run ExecuTorch .pte programs with NumPy only.",
                                epilog="Options such as --threads work before or after the command. A flag beats "
                                       "its environment variable, which beats the default.")
    from pterun import __version__
    p.add_argument("--version", action="version", version=f"pterun {__version__}")
    _add_global_options(p, on_command=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_inspect(sub)
    _add_demo(sub)
    _add_verify(sub)
    _add_bench(sub)
    from pterun.llm.cli import add_generate_parser, add_transcribe_parser
    add_generate_parser(sub)
    add_transcribe_parser(sub)
    _add_ops(sub)
    _add_trace(sub)
    for command in sub.choices.values():
        _add_global_options(command, on_command=True)
        command.set_defaults(command_parser=command)
    return p


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, then the command's own checks of how its options go together: a mistake is
    the command's usage error (SystemExit 2), as a bad value is."""
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem is not None:
        args.command_parser.error(problem)
    args.threads = getattr(args, "threads", None)
    args.engine = getattr(args, "engine", None)
    args.cache = getattr(args, "cache", None)
    return args
