"""The model zoo: real architectures from torchvision and Hugging Face transformers, built with random seeded
weights and small inputs, and the program variants each is exported as.

Imported only by ``tools/zoo/export.py`` under the reference virtualenv (torch, torchvision, transformers).
Each entry builds ``(module, example_inputs)``; ``prepare`` makes random init non-trivial:

* parameters that are all zero or tiny (zero-initialised classifier heads and biases, 1e-6 layer scales) are
  re-drawn, so a model cannot look right by producing a constant;
* BatchNorm gets random affine parameters and statistics *measured* on random data (train-mode passes with
  cumulative averaging), so activations stay in range through deep networks and static int8 scales are real.

Variants: ``portable`` (no delegate), ``xnn_fp32`` (XNNPACK), ``xnn_int8`` (PT2E static int8, XNNPACKQuantizer,
per-channel; vision models), ``xnn_8da4w`` / ``xnn_8da8w`` (int8 dynamic activations x int4 group-32 / int8
per-channel weights through torchao; transformers).
"""

from __future__ import annotations

import math

import torch
from torch import nn

VISION = ("portable", "xnn_fp32", "xnn_int8")
TEXT = ("portable", "xnn_fp32", "xnn_8da4w", "xnn_8da8w")
VISION_TRANSFORMER = VISION + ("xnn_8da4w", "xnn_8da8w")  # ViT, Swin: static int8 and dynamic linears both

MODELS: dict = {}  # name -> (family, variants, builder)


def model(name: str, family: str, variants: tuple):
    def register(fn):
        MODELS[name] = (family, variants, fn)
        return fn

    return register


class Select(nn.Module):
    """Wraps a model whose forward returns a dict / ModelOutput / tuple: returns one tensor of it."""

    def __init__(self, inner: nn.Module, key):
        super().__init__()
        self.inner, self.key = inner, key

    def forward(self, *args):
        out = self.inner(*args)
        if isinstance(self.key, str):
            return out[self.key]
        return out[self.key]


# -- making random init non-trivial ---------------------------------------------------------------------------
def randomize_degenerate(m: nn.Module, g: torch.Generator) -> None:
    """Re-draw parameters that are all (near) zero: zero-initialised heads/biases and tiny layer scales."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not p.is_floating_point() or p.numel() == 0 or float(p.abs().max()) > 1e-4:
                continue
            if p.ndim >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(max(fan_in, 1)))
            elif "scale" in name or "gamma" in name or name.endswith("layer_scale"):
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.25)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def calibrate_batchnorm(m: nn.Module, g: torch.Generator, make_batch, passes: int = 3) -> None:
    """Random BN affine parameters, then running statistics measured on data (cumulative average)."""
    bns = [x for x in m.modules() if isinstance(x, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    with torch.no_grad():
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
            if bn.affine:
                bn.weight.copy_(torch.rand(bn.weight.shape, generator=g) + 0.5)
                bn.bias.copy_(torch.randn(bn.bias.shape, generator=g) * 0.1)
        m.train()
        for _ in range(passes):
            m(*make_batch())
    m.eval()


def image(g: torch.Generator, res: int, batch: int = 1) -> tuple:
    return (torch.randn(batch, 3, res, res, generator=g),)


# -- torchvision ----------------------------------------------------------------------------------------------
def tv(name: str, res: int, variants=VISION, **kwargs):
    def build(g: torch.Generator):
        import torchvision

        fn = getattr(torchvision.models, name, None) or getattr(torchvision.models.segmentation, name)
        m = fn(weights=None, **kwargs)
        randomize_degenerate(m, g)
        calibrate_batchnorm(m, g, lambda: image(g, res, batch=4))
        return m.eval(), image(g, res)

    model(name, "torchvision", variants)(build)


for _name, _res, _variants, _kw in [
    ("resnet18", 64, VISION, {}), ("resnet50", 64, VISION, {}), ("resnext50_32x4d", 64, VISION, {}),
    ("wide_resnet50_2", 32, VISION, {}), ("mobilenet_v2", 64, VISION, {}), ("mobilenet_v3_small", 64, VISION, {}),
    ("mobilenet_v3_large", 64, VISION, {}), ("efficientnet_b0", 64, VISION, {}),
    ("shufflenet_v2_x1_0", 64, VISION, {}), ("squeezenet1_1", 64, VISION, {}), ("mnasnet1_0", 64, VISION, {}),
    ("regnet_y_400mf", 64, VISION, {}), ("regnet_x_400mf", 64, VISION, {}),
    ("densenet121", 64, VISION, {}), ("googlenet", 64, VISION, {"aux_logits": False, "init_weights": True}),
    ("inception_v3", 96, VISION, {"aux_logits": False, "init_weights": True}),
    ("convnext_tiny", 64, VISION, {}), ("swin_t", 64, VISION_TRANSFORMER, {}),
]:
    tv(_name, _res, _variants, num_classes=100, **_kw)


@model("deeplabv3_mobilenet_v3_large", "torchvision", VISION)
def _deeplab(g):
    import torchvision

    m = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                      num_classes=8, aux_loss=False)
    randomize_degenerate(m, g)
    calibrate_batchnorm(m, g, lambda: image(g, 64, batch=4))
    return Select(m.eval(), "out").eval(), image(g, 64)


@model("vit_small", "torchvision", VISION_TRANSFORMER)
def _vit(g):
    from torchvision.models.vision_transformer import VisionTransformer

    m = VisionTransformer(image_size=32, patch_size=8, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=256,
                          num_classes=100)
    randomize_degenerate(m, g)
    return m.eval(), image(g, 32)


# -- transformers ---------------------------------------------------------------------------------------------
SEQ = 16
VOCAB = 512


def ids(g: torch.Generator, seq: int = SEQ) -> tuple:
    return (torch.randint(0, VOCAB, (1, seq), generator=g),)


def hf(name: str, config_name: str, model_name: str, key: str = "last_hidden_state", inputs=ids, sub=None,
       variants=TEXT, **cfg):
    def build(g: torch.Generator):
        import transformers

        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
        common = dict(vocab_size=VOCAB, initializer_range=0.05)
        common.update(cfg)
        config = getattr(transformers, config_name)(**common)
        config._attn_implementation = "eager"
        m = getattr(transformers, model_name)(config).eval()
        randomize_degenerate(m, g)
        if sub:
            m = getattr(m, sub)
        calibrate_batchnorm(m, g, lambda: inputs(g))
        return Select(m, key).eval(), inputs(g)

    model(name, "transformers", variants)(build)


_ENC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64)
_DEC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64, use_cache=False)
hf("bert", "BertConfig", "BertModel", **_ENC)
hf("distilbert", "DistilBertConfig", "DistilBertModel", dim=64, n_layers=2, n_heads=4, hidden_dim=128,
   max_position_embeddings=64)
hf("mobilebert", "MobileBertConfig", "MobileBertModel", hidden_size=64, num_hidden_layers=2,
   num_attention_heads=4, intermediate_size=64, intra_bottleneck_size=32, embedding_size=32,
   true_hidden_size=32, max_position_embeddings=64)
hf("albert", "AlbertConfig", "AlbertModel", embedding_size=32, **_ENC)
hf("roberta", "RobertaConfig", "RobertaModel", pad_token_id=1, **_ENC)
hf("electra", "ElectraConfig", "ElectraModel", embedding_size=32, **_ENC)
hf("gpt2", "GPT2Config", "GPT2LMHeadModel", key="logits", n_embd=64, n_layer=2, n_head=4, n_positions=64,
   use_cache=False)
hf("llama", "LlamaConfig", "LlamaForCausalLM", key="logits", num_key_value_heads=2, **_DEC)
hf("qwen2", "Qwen2Config", "Qwen2ForCausalLM", key="logits", num_key_value_heads=2, **_DEC)
hf("mistral", "MistralConfig", "MistralForCausalLM", key="logits", num_key_value_heads=2, **_DEC)
hf("phi", "PhiConfig", "PhiForCausalLM", key="logits", **_DEC)
hf("opt", "OPTConfig", "OPTForCausalLM", key="logits", hidden_size=64, num_hidden_layers=2,
   num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=64, use_cache=False)
hf("t5_encoder", "T5Config", "T5EncoderModel", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)


def mel(g: torch.Generator) -> tuple:
    return (torch.randn(1, 16, 128, generator=g),)


def audio(g: torch.Generator) -> tuple:
    return (torch.randn(1, 4000, generator=g),)


def pixels(g: torch.Generator) -> tuple:
    return (torch.randn(1, 3, 32, 32, generator=g),)


hf("whisper_encoder", "WhisperConfig", "WhisperModel", inputs=mel, sub="encoder", d_model=64, encoder_layers=2,
   encoder_attention_heads=4, decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=128,
   decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=64, max_target_positions=16, pad_token_id=0,
   bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
hf("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", inputs=audio, hidden_size=64, num_hidden_layers=2,
   num_attention_heads=4, intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 4, 2),
   conv_kernel=(10, 4, 2), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=True)
hf("vit_hf", "ViTConfig", "ViTModel", inputs=pixels, image_size=32, patch_size=8, **_ENC)
hf("deit", "DeiTConfig", "DeiTModel", inputs=pixels, image_size=32, patch_size=8, **_ENC)


# -- torchaudio -----------------------------------------------------------------------------------------------
AUDIO = ("portable", "xnn_fp32", "xnn_int8")
AUDIO_TRANSFORMER = AUDIO + ("xnn_8da4w", "xnn_8da8w")


def ta(name: str, make_inputs, variants=AUDIO):
    def register(fn):
        def build(g: torch.Generator):
            m = fn()
            randomize_degenerate(m, g)
            calibrate_batchnorm(m, g, lambda: make_inputs(g))
            return m.eval(), make_inputs(g)

        model(name, "torchaudio", variants)(build)
        return fn

    return register


@ta("ta_wav2letter", lambda g: (torch.randn(1, 40, 200, generator=g),))
def _wav2letter():
    import torchaudio

    return torchaudio.models.Wav2Letter(num_classes=30, input_type="mfcc", num_features=40)


@ta("ta_deepspeech", lambda g: (torch.randn(1, 1, 50, 40, generator=g),))
def _deepspeech():
    import torchaudio

    return torchaudio.models.DeepSpeech(n_feature=40, n_hidden=64, n_class=30)


@ta("ta_conv_tasnet", lambda g: (torch.randn(1, 1, 800, generator=g),))
def _conv_tasnet():
    import torchaudio

    return torchaudio.models.ConvTasNet(num_sources=2, enc_kernel_size=16, enc_num_feats=64, msk_kernel_size=3,
                                        msk_num_feats=32, msk_num_hidden_feats=64, msk_num_layers=3,
                                        msk_num_stacks=2)


class _Conformer(nn.Module):
    def __init__(self):
        super().__init__()
        import torchaudio

        self.m = torchaudio.models.Conformer(input_dim=64, num_heads=4, ffn_dim=128, num_layers=2,
                                             depthwise_conv_kernel_size=7)

    def forward(self, x):
        # every sequence is full length, so the padding mask is all False, i.e. no mask: Conformer.forward's
        # own mask comes from lengths.max(), a data-dependent size that torch.export refuses
        y = x.transpose(0, 1)
        for layer in self.m.conformer_layers:
            y = layer(y, None)
        return y.transpose(0, 1)


@ta("ta_conformer", lambda g: (torch.randn(1, 32, 64, generator=g),), AUDIO_TRANSFORMER)
def _conformer():
    return _Conformer()


class _W2V(nn.Module):
    def __init__(self):
        super().__init__()
        import torchaudio

        self.m = torchaudio.models.wav2vec2_model(
            extractor_mode="group_norm", extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 2, 2)],
            extractor_conv_bias=False, encoder_embed_dim=64, encoder_projection_dropout=0.0,
            encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=4,
            encoder_attention_dropout=0.0, encoder_ff_interm_features=128, encoder_ff_interm_dropout=0.0,
            encoder_dropout=0.0, encoder_layer_norm_first=False, encoder_layer_drop=0.0, aux_num_out=None)

    def forward(self, x):
        return self.m(x)[0]


@ta("ta_wav2vec2", lambda g: (torch.randn(1, 4000, generator=g),), AUDIO_TRANSFORMER)
def _ta_wav2vec2():
    return _W2V()
