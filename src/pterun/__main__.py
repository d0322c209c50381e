"""``python -m pterun``: the ``pterun`` command."""

from pterun.cli import command

command()
