#!/usr/bin/env python3
"""Makes random HuggingFace MambaForCausalLM models with transformers and their reference outputs.

Run on the GPU device machine (it has torch + transformers; no network needed):
    python3 scripts/hf_reference.py OUT_DIR
For each shape it writes OUT_DIR/<shape>/ (save_pretrained: config.json + model.safetensors) and
OUT_DIR/<shape>/reference.safetensors with
    input_ids  [64]        the prompt (float32, exact integers)
    generated  [32]        transformers' greedy continuation (float32, exact integers)
    logits     [95, vocab] float32 logits of every position of prompt + generated[:-1]
The Java test HfTransformersComparisonTest (tag gpu) loads the folder with MambaLM and compares.
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import MambaConfig, MambaForCausalLM

SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, state_size=16, vocab_size=1000, tie_word_embeddings=True),
    "tiny-untied": dict(hidden_size=64, num_hidden_layers=3, state_size=8, vocab_size=777, tie_word_embeddings=False),
    "130m": dict(hidden_size=768, num_hidden_layers=24, state_size=16, vocab_size=50280, tie_word_embeddings=True),
}


def main(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, shape in SHAPES.items():
        torch.manual_seed(1234)
        config = MambaConfig(expand=2, conv_kernel=4, time_step_rank="auto", use_bias=False, use_conv_bias=True,
                             layer_norm_epsilon=1e-5, **shape)
        model = MambaForCausalLM(config).eval()
        with torch.no_grad():  # make the mixer parameters generic rather than their 0/1 initial values
            for layer in model.backbone.layers:
                layer.mixer.D.uniform_(0.5, 1.5)
                layer.mixer.conv1d.bias.uniform_(-0.3, 0.3)
                layer.norm.weight.uniform_(0.5, 1.5)
            model.backbone.norm_f.weight.uniform_(0.5, 1.5)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        ids = torch.randint(0, shape["vocab_size"], (1, 64))
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
            logits = model(gen[:, :-1]).logits[0].float()
        save_file({"input_ids": ids[0].float(), "generated": gen[0, 64:].float(), "logits": logits.contiguous()},
                  os.path.join(folder, "reference.safetensors"))
        print(f"{name}: {sum(p.numel() for p in model.parameters()):,} params, logits {tuple(logits.shape)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
