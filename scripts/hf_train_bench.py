#!/usr/bin/env python3
"""transformers' training step on the GPU device, the peer of GpuTrainBench's language-model rows (issue 12 item 9).

    python3 scripts/hf_train_bench.py [--shape 768x24] [--batch 8] [--seq 256] [--steps 3] [--dtype bf16|f32]

A MambaForCausalLM of the given d_model x layers (vocabulary 50,280, tied head, random init), next-token
cross-entropy, AdamW (lr 1e-4, weight decay 0.1, fused), clip 1.0; bf16 = f32 master weights under bf16 autocast
(PyTorch's usual mixed precision). Without the mamba-ssm CUDA package transformers runs its sequential PyTorch
path, as any user of transformers alone does. Prints one markdown row with the median step time, tokens/s and MFU
(6 x parameters x tokens / 780 TFLOP/s, as GpuTrainBench counts it).
"""
import argparse
import time

import torch
from transformers import MambaConfig, MambaForCausalLM

PEAK_TFLOPS = 780.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="768x24")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    d_model, layers = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    cfg = MambaConfig(hidden_size=d_model, num_hidden_layers=layers, vocab_size=50280, state_size=16,
                      tie_word_embeddings=True)
    model = MambaForCausalLM(cfg).cuda().train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    ids = torch.randint(0, 50280, (a.batch, a.seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()  # warm-up
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tokens = a.batch * a.seq
    mfu = 6.0 * params * tokens / med / (PEAK_TFLOPS * 1e12)
    print(f"| transformers {a.shape} lm | {a.dtype} | {a.batch} x {a.seq} | {params / 1e6:.1f}M | {med * 1e3:.1f} | "
          f"{tokens / med:.0f} | {100 * mfu:.2f}% |")


if __name__ == "__main__":
    main()
