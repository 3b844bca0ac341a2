#!/usr/bin/env python3
"""Makes random HuggingFace MambaForCausalLM models with transformers and their reference outputs.

Run on the GPU device machine (it has torch + transformers; no network needed):
    python3 scripts/hf_reference.py OUT_DIR
For each shape it writes OUT_DIR/<shape>/ (save_pretrained: config.json + model.safetensors) and
OUT_DIR/<shape>/reference.safetensors with
    input_ids  [64]        the prompt (float32, exact integers)
    generated  [32]        transformers' greedy continuation (float32, exact integers)
    logits     [95, vocab] logits of every position of prompt + generated[:-1], computed in float64 from the
               saved float32 weights (a higher-precision oracle), stored as float32
The Java test HfTransformersComparisonTest (tag gpu) loads the folder with MambaLM and compares.
"""
import copy
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


def condition(model, shape):
    """Re-initialises a fresh MambaForCausalLM the way a freshly initialised official model is conditioned."""
    with torch.no_grad():
        # transformers' own init draws every Linear from N(0, 0.1): at 768 wide and 24 layers that net is
        # chaotic (f32 vs f64 logits already differ by ~5e-4, bf16 by KL ~ 2). Use the conditioning of a
        # freshly initialised official model instead (state-spaces/mamba: U(±1/sqrt(fan_in)), out_proj
        # divided by sqrt(n_layer), embedding N(0, 0.02)), then make the 0/1 parameters generic.
        n_layer = shape["num_hidden_layers"]
        for layer in model.backbone.layers:
            for lin in (layer.mixer.in_proj, layer.mixer.x_proj, layer.mixer.out_proj):
                bound = lin.weight.shape[1] ** -0.5
                lin.weight.uniform_(-bound, bound)
            layer.mixer.out_proj.weight.div_(n_layer ** 0.5)
        model.backbone.embeddings.weight.normal_(0.0, 0.02)
        if not shape["tie_word_embeddings"]:
            model.lm_head.weight.normal_(0.0, 0.02)
        for layer in model.backbone.layers:
            layer.mixer.D.uniform_(0.5, 1.5)
            layer.mixer.conv1d.bias.uniform_(-0.3, 0.3)
            layer.norm.weight.uniform_(0.5, 1.5)
        model.backbone.norm_f.weight.uniform_(0.5, 1.5)


def main(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, shape in SHAPES.items():
        torch.manual_seed(1234)
        config = MambaConfig(expand=2, conv_kernel=4, time_step_rank="auto", use_bias=False, use_conv_bias=True,
                             layer_norm_epsilon=1e-5, **shape)
        model = MambaForCausalLM(config).eval()
        condition(model, shape)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        ids = torch.randint(0, shape["vocab_size"], (1, 64))
        with torch.no_grad():
            f32 = model(ids).logits[0].double()
            bf16 = copy.deepcopy(model).to(torch.bfloat16)(ids).logits[0].double()
            oracle = model.double()  # the saved f32 weights, upcast: the reference is their exact-math answer
            gen = oracle.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
            logits = oracle(gen[:, :-1]).logits[0].float()
            exact = oracle(ids).logits[0]
            rel = ((f32 - exact).norm(dim=-1) / exact.norm(dim=-1)).max().item()
            kl = torch.nn.functional.kl_div(bf16.log_softmax(-1), exact.log_softmax(-1), log_target=True,
                                            reduction="batchmean").item()
        print(f"{name}: transformers itself vs its float64: f32 worst rel L2 {rel:.2e}, bf16 mean KL {kl:.2e}", flush=True)
        save_file({"input_ids": ids[0].float(), "generated": gen[0, 64:].float(), "logits": logits.contiguous()},
                  os.path.join(folder, "reference.safetensors"))
        print(f"{name}: {sum(p.numel() for p in model.parameters()):,} params, logits {tuple(logits.shape)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
