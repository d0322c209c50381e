"""pterun's logger, named ``"pterun"``, made on first use: importing ``logging`` costs ~5 ms that
``import pterun`` need not pay, since pterun logs only in rare cases (a skipped optimization, a BLAS library
it cannot set)."""

from __future__ import annotations


def logger():
    import logging

    return logging.getLogger("pterun")
