"""Helpers the generation tests share: greedy configs and parsed ``pterun generate`` arguments."""

from __future__ import annotations

import argparse

from pterun.llm import GenerationConfig
from pterun.llm.cli import add_generate_parser


def greedy_config(max_new: int, **kw) -> GenerationConfig:
    """A greedy, non-echoing config of ``max_new`` new tokens with one BOS token, as the recorded generations
    used; ``kw`` overrides any of these."""
    return GenerationConfig(**{"echo": False, "temperature": 0.0, "max_new_tokens": max_new, "num_bos": 1, **kw})


def generate_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` (starting with "generate") parsed as the command line parses it."""
    parser = argparse.ArgumentParser()
    add_generate_parser(parser.add_subparsers())
    return parser.parse_args(argv)
