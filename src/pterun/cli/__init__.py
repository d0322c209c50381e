"""The ``pterun`` command: a thin layer over the public API.

Example::

    $ pterun demo
    $ pterun inspect model.pte
    $ pterun run model.pte --input x.npy --output out.npz
    $ pterun bench model.pte --threads 1 --json

Global options (``--threads``, ``--engine``, ``--cache``/``--cache-dir``/``--no-cache``, ``--debug``) work before
or after the command. Settings come from, first to last: a command-line flag, then an environment variable
(``PTERUN_NUM_THREADS``, ``PTERUN_ENGINE``, ``PTERUN_CACHE_DIR``), then pterun's default (:mod:`pterun.config`).
The flags configure the one :class:`pterun.Runtime` every command loads its programs with (``args.runtime``); they
change nothing else in the process.

The package holds one module per command group (:mod:`~pterun.cli.run`: run and demo; :mod:`~pterun.cli.info`:
inspect, ops and verify; :mod:`~pterun.cli.bench`; :mod:`~pterun.cli.trace`; ``generate`` is
:mod:`pterun.llm.cli`), the parser (:mod:`~pterun.cli.parser`), inputs (:mod:`~pterun.cli.inputs`), files
(:mod:`~pterun.cli.files`) and printing (:mod:`~pterun.cli.output`). This module maps what a command raises to an
exit status.
"""

from __future__ import annotations

import sys

__all__ = ["command", "main", "build_parser"]


def build_parser():
    """The ``pterun`` argument parser (:func:`pterun.cli.parser.build_parser`)."""
    from pterun.cli.parser import build_parser as build
    return build()


# library messages name Python arguments; on the command line the same hint is a flag
_CLI_HINTS = (("pass it as data_path=", "pass it with --data-path"),
              ("no data_path was given to load_program", "no --data-path was given"),
              ("use Runtime.load_bundled_program", "pterun takes the .bpte itself"))


def _error_line(e: BaseException) -> str:
    from pterun.cli.files import InputError
    from pterun.errors import PterunError
    if isinstance(e, IsADirectoryError) and e.filename is not None:
        return f"{e.filename} is a directory, not a file"
    msg = str(e.args[0]) if isinstance(e, KeyError) and not isinstance(e, PterunError) and e.args else str(e)
    for python, cli in _CLI_HINTS:
        msg = msg.replace(python, cli)
    return msg if isinstance(e, InputError) else f"{type(e).__name__}: {msg}"


def _quiet_stdout() -> None:
    # the reader went away (``pterun inspect x.pte | head``): send what is still buffered nowhere, so the
    # interpreter's own flush at exit does not fail again
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _runtime(args):
    """The Runtime the command loads with: the flags as its settings (a flag beats its environment variable, as
    passing the setting to Runtime does); :meth:`pterun.Runtime.get` when no flag is given. ``trace`` loads
    without merging, so that every instruction has its own outputs to record."""
    import pterun
    cache = getattr(args, "cache", None)
    if getattr(args, "command", None) == "trace":  # every instruction's outputs: nothing merged into one call
        return pterun.Runtime(num_threads=args.threads, engine=args.engine, merge_delegates=False, cache=cache)
    if args.threads is None and args.engine is None and cache is None:
        return pterun.Runtime.get()
    from pterun.threads import default_num_threads
    if args.threads is not None and args.threads > default_num_threads():
        print(f"pterun: warning: --threads {args.threads} is more than the {default_num_threads()} core(s) this "
              "process may use; the threads beyond them take turns", file=sys.stderr)
    return pterun.Runtime(num_threads=args.threads, engine=args.engine, cache=cache)


def _command(fn):
    """A command's function: ``fn`` itself, or ``"module:function"`` in this package, imported now."""
    if callable(fn):
        return fn
    import importlib
    module, name = fn.split(":")
    return getattr(importlib.import_module(f"pterun.cli.{module}"), name)


def _run(argv: list[str] | None) -> int:
    from pterun.cli.parser import parse
    try:
        args = parse(build_parser(), argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse has already printed
        return e.code if isinstance(e.code, int) else 2
    import logging
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(name)s: %(message)s")
    try:
        args.runtime = _runtime(args)
        status = _command(args.fn)(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except Exception as e:  # noqa: BLE001  (the command line prints one line for any error; --debug the traceback)
        from pterun.cli import ctrlc
        ctrlc.check()  # Ctrl-C that an extension's import turned into its own error (NumPy's: ImportError)
        if args.debug:
            raise
        from pterun.cli.files import InputError
        from pterun.errors import PterunError
        expected = (PterunError, InputError, OSError, ValueError, TypeError, KeyError, ImportError)
        line = _error_line(e) if isinstance(e, expected) else (f"internal error: {_error_line(e)} (run again with "
                                                               "--debug for the traceback, and please report it)")
        print(f"pterun: error: {line}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Run the ``pterun`` command line; returns the exit status: 0 ok, 1 a bad file or input (or a failed check:
    a ``verify`` case, an operator ``ops`` lacks), 2 a wrong option (argparse's usage error, found before any file
    is opened), 130 Ctrl-C, at any moment, 141 when the reader of stdout went away."""
    from pterun.cli import ctrlc
    command = ctrlc.installed()
    try:
        with command:
            # everything but this module and ctrlc is imported in here, so Ctrl-C during an import is caught too
            return _run(argv)
    except KeyboardInterrupt:
        pass
    except Exception:  # noqa: BLE001  (Ctrl-C while building the parser, turned into an import's error)
        if not command.pressed:
            raise
    try:
        print("pterun: interrupted", file=sys.stderr)
    except KeyboardInterrupt:  # a second Ctrl-C while saying so
        pass
    return 130


def command() -> None:
    """The ``pterun`` executable: :func:`main`, then exit with its status. Where LiteRT's ``CompiledModel`` ran (a
    model with KV caches joined into one call, or the packed-weight cache), LiteRT's own environment logs two
    ``INFO: ... DestroyAccelerator`` lines to stderr as the process's C++ objects are torn down. The command
    leaves without that teardown: its exit handler, registered before anything else the command does, runs
    after every other one, flushes the streams and ends the process there."""
    import atexit
    status: list[int] = []
    atexit.register(_leave, status)
    status.append(main())
    sys.exit(status[0])


def _leave(status: list) -> None:
    compiled = sys.modules.get("pterun.delegates.xnnpack.litert_engine.compiled")
    if not status or compiled is None or not compiled.used():
        return
    import os
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status[0])
