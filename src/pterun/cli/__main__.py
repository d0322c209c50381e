"""``python -m pterun.cli``: the ``pterun`` command."""

from pterun.cli import command

command()
