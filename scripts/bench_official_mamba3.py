#!/usr/bin/env python3
"""Times the official state-spaces/mamba Mamba-3 SISO Triton kernels in MambaLMHeadModel, as a baseline for
mamba4j's own figures. Device machine, after scripts/official_mamba3_sources.sh:

    PYTHONPATH=third_party/official-mamba python3 scripts/bench_official_mamba3.py [CASE ...] [--json FILE]

CASEs (default: all): train-768x24-T2048, train-768x24-T256, train-2048x48-T2048, prefill-1024x48, prefill-2048x48.
- train-DxL-TN: one training step of MambaLMHeadModel (Mamba3 layers at the official defaults d_state 128,
  headdim 64, expand 2; tied head, vocab 50280 padded to 50280; fp32 master weights, bf16 autocast as the official
  training scripts run it; cross-entropy on next tokens; torch AdamW fused=True), batch 8.
- prefill-DxL: backbone prefill of T = 4096 tokens, batch 1, bf16 weights, no grad, with the inference cache
  (every layer's final angle/ssm/k/v state written, as generation's prefill does).
Median of N (default 10, --iters) after 3 warm-ups, CUDA events. Prints a table and a JSON line.
Triton autotuning runs in the first warm-up: the official spaces (9 to 81 configurations per kernel) cost minutes
of compiling on a fresh machine (reported as warmup_s). --tune one limits every kernel to one configuration
(num_stages 1, 4 warps, CHUNK_SIZE 64) for a quick look; such figures are marked untuned and are not the official
baseline.
"""
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OFFICIAL = os.environ.get("MAMBA4J_OFFICIAL_MAMBA", os.path.join(HERE, "..", "third_party", "official-mamba"))
sys.path.insert(0, OFFICIAL)
try:
    import einops  # noqa: F401
except ImportError:
    sys.path.append(os.path.join(OFFICIAL, "fallbacks"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mamba_ssm.models.config_mamba import MambaConfig  # noqa: E402
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel  # noqa: E402

VOCAB = 50280
CASES = {
    "train-768x24-T2048": ("train", 768, 24, 8, 2048),
    "train-768x24-T256": ("train", 768, 24, 8, 256),
    "train-2048x48-T2048": ("train", 2048, 48, 8, 2048),
    "prefill-1024x48": ("prefill", 1024, 48, 1, 4096),
    "prefill-2048x48": ("prefill", 2048, 48, 1, 4096),
}
TUNED = True
PEAK_BF16 = 780e12  # measured bf16 matmul rate on this H200 (shared/device/README.md)


class _InferenceParams:
    def __init__(self):
        self.key_value_memory_dict = {}
        self.seqlen_offset = 0


def build(d_model, n_layer, dtype):
    cfg = MambaConfig(d_model=d_model, n_layer=n_layer, vocab_size=VOCAB, ssm_cfg={"layer": "Mamba3"}, rms_norm=True,
                      residual_in_fp32=True, fused_add_norm=True, pad_vocab_size_multiple=8, tie_embeddings=True)
    return MambaLMHeadModel(cfg, device="cuda", dtype=dtype)


def timed(fn, iters, warmup=3):
    import time
    t0 = time.time()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    warm = time.time() - t0
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times), warm


def bench(case, iters):
    kind, D, L, B, T = CASES[case]
    torch.manual_seed(0)
    if kind == "train":
        model = build(D, L, torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
        ids = torch.randint(0, VOCAB, (B, T + 1), device="cuda")
        x, y = ids[:, :-1], ids[:, 1:]

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
        flops_per_token = 6 * sum(p.numel() for p in model.parameters())  # weights incl. tied head, fwd + bwd
    else:
        model = build(D, L, torch.bfloat16).eval()
        ids = torch.randint(0, VOCAB, (B, T), device="cuda")

        @torch.no_grad()
        def step():
            model.backbone(ids, inference_params=_InferenceParams())
        flops_per_token = 2 * sum(p.numel() for n, p in model.named_parameters() if "embedding" not in n)
    med, lo, hi, warm = timed(step, iters)
    floor_ms = flops_per_token * B * T / PEAK_BF16 * 1e3
    params = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return {"case": case, "kind": kind, "d_model": D, "n_layer": L, "batch": B, "seq": T, "params": params,
            "median_ms": med, "min_ms": lo, "max_ms": hi, "tokens_per_s": B * T / med * 1e3,
            "matmul_floor_ms": floor_ms, "floor_fraction": floor_ms / med, "warmup_s": warm, "tuned": TUNED}


def one_config_per_kernel():
    global TUNED
    TUNED = False
    import importlib
    from triton.runtime.autotuner import Autotuner
    names = ["mamba_ssm.ops.triton.layer_norm", "mamba_ssm.ops.triton.layernorm_gated"] + [
        "mamba_ssm.ops.triton.mamba3." + m for m in ("angle_dt", "mamba3_siso_fwd", "mamba3_siso_bwd", "mamba3_siso_step")]
    for name in names:
        for obj in vars(importlib.import_module(name)).values():
            if isinstance(obj, Autotuner) and len(obj.configs) > 1:
                obj.configs = [min(obj.configs, key=lambda c: (c.kwargs.get("CHUNK_SIZE", 64) != 64, c.num_stages != 1,
                                                                c.num_warps != 4, getattr(c, "maxnreg", None) is not None))]


def main(argv):
    iters, out_json, cases = 10, None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--iters":
            iters = int(argv[i + 1]); i += 2
        elif argv[i] == "--tune":
            if argv[i + 1] == "one":
                one_config_per_kernel()
            i += 2
        elif argv[i] == "--json":
            out_json = argv[i + 1]; i += 2
        else:
            cases.append(argv[i]); i += 1
    cases = cases or list(CASES)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for c in cases:
        try:
            r = bench(c, iters)
        except torch.cuda.OutOfMemoryError as e:
            r = {"case": c, "error": f"out of memory: {e}"}
            torch.cuda.empty_cache()
        rows.append(r)
        print(json.dumps(r), flush=True)
    print("\n| case | B×T | params | median ms | min–max ms | tokens/s | bf16 matmul floor ms (fraction) | warm-up s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | | | {r['error']} | | | |")
            continue
        print(f"| {r['case']} | {r['batch']}×{r['seq']} | {r['params'] / 1e6:.1f} M | {r['median_ms']:.1f} | "
              f"{r['min_ms']:.1f}–{r['max_ms']:.1f} | {r['tokens_per_s']:,.0f} | "
              f"{r['matmul_floor_ms']:.1f} ({r['floor_fraction']:.0%}) | {r['warmup_s']:.0f}{'' if r['tuned'] else ' (untuned)'} |")
    print("JSON " + json.dumps(rows))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
