#!/usr/bin/env python3
"""transformers' side of the fine-tuning comparison (issue 12 item 7); run on the GPU device machine.

    python3 scripts/hf_finetune.py make DIR    a tiny MambaForCausalLM (f32) in DIR/initial, token data, the AdamW
                                               settings, and transformers' own fine-tuning run: per-step losses and
                                               final weights in DIR/reference.safetensors
    python3 scripts/hf_finetune.py check DIR   loads DIR/ours (written by HfFinetuneComparisonTest through
                                               MambaLM.savePretrained) with MambaForCausalLM.from_pretrained and
                                               compares its logits with ours (DIR/ours/probe.safetensors); exit 1 if off

scripts/device-hf-finetune.sh runs make, the Java test, then check. Everything in f32, TF32 off.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import MambaConfig, MambaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import condition  # noqa: E402  (the same initial conditioning as the inference comparison)

SHAPE = dict(hidden_size=64, num_hidden_layers=2, state_size=16, vocab_size=1000, tie_word_embeddings=True)
SETTINGS = dict(steps=8, batch=4, seq_len=64, lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, clip=1.0)
LOGITS_TOLERANCE = 1e-4  # worst per-position relative L2 between transformers' and our logits of our saved model


def no_decay(name):
    """mamba4j's default no-decay group: embeddings, norms, biases, A_log, D."""
    return "embeddings" in name or "norm" in name or name.endswith("bias") or name.endswith("A_log") or name.endswith(".D")


def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def make(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(4321)
    config = MambaConfig(expand=2, conv_kernel=4, time_step_rank="auto", use_bias=False, use_conv_bias=True,
                         layer_norm_epsilon=1e-5, **SHAPE)
    model = MambaForCausalLM(config)
    condition(model, SHAPE)
    model.save_pretrained(os.path.join(out, "initial"), safe_serialization=True)
    s = SETTINGS
    ids = torch.randint(0, SHAPE["vocab_size"], (s["steps"], s["batch"], s["seq_len"]))
    model = model.to(device()).train()
    names = [n for n, _ in model.named_parameters()]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": s["weight_decay"]},
        {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"])
    losses = []
    for step in range(s["steps"]):
        batch = ids[step].to(device())
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=batch, labels=batch).loss  # mean over B·(T−1) next-token positions
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])
        opt.step()
        losses.append(loss.item())
        print(f"transformers step {step + 1}: loss {loss.item():.7f}", flush=True)
    tensors = {"losses": torch.tensor(losses, dtype=torch.float64).float(), "ids": ids.float()}
    for n, p in model.named_parameters():
        tensors["final." + n] = p.detach().float().cpu().contiguous()
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "settings.json"), "w") as f:
        json.dump(dict(s, no_decay=[n for n in names if no_decay(n)], decay=[n for n in names if not no_decay(n)]), f, indent=1)
    print(f"made {out}: {sum(p.numel() for p in model.parameters()):,} parameters, {s['steps']} steps", flush=True)


def check(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    probe = load_file(os.path.join(out, "ours", "probe.safetensors"))
    ids = probe["input_ids"].long().unsqueeze(0)
    model = MambaForCausalLM.from_pretrained(os.path.join(out, "ours")).to(device()).eval()
    with torch.no_grad():
        theirs = model(ids.to(device())).logits[0].double().cpu()
    ours = probe["logits"].double()
    rel = ((theirs - ours).norm(dim=-1) / ours.norm(dim=-1)).max().item()
    ok = rel < LOGITS_TOLERANCE
    print(f"transformers loads our saved folder: logits worst rel L2 {rel:.2e} (tolerance {LOGITS_TOLERANCE:.0e}): "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
