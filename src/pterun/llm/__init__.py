"""Run ExecuTorch-exported LLMs from Python: text, multimodal and speech-to-text runners that never import torch.

The API mirrors ``executorch.extension.llm.runner`` (``TextLLMRunner``, ``MultimodalRunner``, ``GenerationConfig``,
``Stats``, the ``make_*_input`` helpers), so code written for it moves over by changing the import;
``stream()`` adds a plain iterator of text pieces. :class:`Seq2SeqRunner` is ExecuTorch's C++-only Whisper runner.
Tokenizers need the optional extra: ``pip install 'pterun[llm]'``. Example::

    >>> from pterun.llm import TextLLMRunner, GenerationConfig               # doctest: +SKIP
    >>> runner = TextLLMRunner("llama.pte", "tokenizer.json")                # doctest: +SKIP
    >>> runner.generate("Hello", GenerationConfig(max_new_tokens=16, temperature=0),
    ...                 token_callback=lambda s: print(s, end=""))           # doctest: +SKIP
    >>> print("".join(runner.stream("Hello", max_new_tokens=16, seed=0)))   # doctest: +SKIP
"""

from pterun.llm.asr import AsrRunner, AsrTranscribeConfig, Seq2SeqRunner, Seq2SeqTranscribeConfig
from pterun.llm.config import GenerationConfig, Stats
from pterun.llm.inputs import (Audio, Image, MultimodalInput, RawAudio, make_audio_input, make_image_input,
                               make_raw_audio_input, make_text_input, make_token_input)
from pterun.llm.multimodal import MultimodalInfo, MultimodalRunner, read_multimodal_info
from pterun.llm.runner import ModelInfo, TextLLMRunner, read_model_info
from pterun.llm.sampler import Sampler
from pterun.llm.tokenizer import StreamDecoder, Tokenizer, load_tokenizer

__all__ = ["TextLLMRunner", "GenerationConfig", "Stats", "Sampler", "StreamDecoder", "Tokenizer", "load_tokenizer",
           "ModelInfo", "read_model_info",
           "MultimodalRunner", "MultimodalInfo", "read_multimodal_info", "MultimodalInput", "Image", "Audio",
           "RawAudio", "make_text_input", "make_token_input", "make_image_input", "make_audio_input",
           "make_raw_audio_input", "Seq2SeqRunner", "Seq2SeqTranscribeConfig", "AsrRunner", "AsrTranscribeConfig"]
