"""Run ExecuTorch-exported LLMs from Python: a streaming text-generation runner that never imports torch.

The API mirrors ``executorch.extension.llm.runner`` (``TextLLMRunner``, ``GenerationConfig``, ``Stats``), so
code written for it moves over by changing the import; :meth:`TextLLMRunner.stream` adds a plain iterator of
text pieces. Tokenizers need the optional extra: ``pip install 'pterun[llm]'``. Example::

    >>> from pterun.llm import TextLLMRunner, GenerationConfig               # doctest: +SKIP
    >>> runner = TextLLMRunner("llama.pte", "tokenizer.json")                # doctest: +SKIP
    >>> runner.generate("Hello", GenerationConfig(max_new_tokens=16, temperature=0),
    ...                 token_callback=lambda s: print(s, end=""))           # doctest: +SKIP
    >>> print("".join(runner.stream("Hello", max_new_tokens=16, seed=0)))   # doctest: +SKIP
"""

from pterun.kernels import llm as _llm_kernels  # noqa: F401  (registers the llama:: custom operators)
from pterun.llm.config import GenerationConfig, Stats
from pterun.llm.runner import ModelInfo, TextLLMRunner, read_model_info
from pterun.llm.sampler import Sampler
from pterun.llm.tokenizer import StreamDecoder, Tokenizer, load_tokenizer

__all__ = ["TextLLMRunner", "GenerationConfig", "Stats", "Sampler", "StreamDecoder", "Tokenizer", "load_tokenizer",
           "ModelInfo", "read_model_info"]
