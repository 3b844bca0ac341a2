#!/usr/bin/env python3
"""Random official Mamba-3 SISO language models (state-spaces/mamba MambaLMHeadModel with Mamba3 layers) and
their float64 reference outputs, for mamba4j's Mamba3OfficialParityTest.

Run on the GPU device machine (torch + triton; no network), after scripts/official_mamba3_sources.sh laid the
official sources into the ignored third_party/official-mamba:
    PYTHONPATH=third_party/official-mamba python3 scripts/mamba3_official_reference.py OUT_DIR

For each shape it writes OUT_DIR/<shape>/ as an official folder:
    config.json        the official MambaConfig (ssm_cfg.layer = "Mamba3"), as MambaLMHeadModel.save_pretrained writes it
    model.safetensors  the float32 weights under the official names (tied head: no lm_head.weight entry)
and OUT_DIR/<shape>/reference.safetensors (float64; metadata batch, steps, prompt_len, vocab, layers):
    input_ids        [B, T]         token ids (exact integers)
    logits           [B, T, V]      every position, from a zero state
    decode_logits    [B, T-P, V]    prefill of the first P tokens, then one token at a time with the state carried
    state.L.ssm      [B, nh, hd, ds]  layer L's state after the P-token prompt (mamba4j ops.h layout S, k, v, θ)
    state.L.k        [B, nh, ds]      last rotated, biased key
    state.L.v        [B, nh, hd]      last input x
    state.L.angle    [B, nh, na]      rotary angles, wrapped to [0, 2π) every step
    grad_proj        [B, T, V]      R: the loss is sum(logits ⊙ R) (from a zero state, all T positions)
    grad.<name>      (param shape)  dloss/d<name> for every official parameter tensor (tied: the embedding
                                    gradient holds both the lookup and the head contributions)
and OUT_DIR/<shape>/official_errors.json: the official Triton kernels' errors against that reference.

The float64 reference is the official PyTorch path run in float64 on the saved float32 weights: the official
MambaLMHeadModel / Mamba3 module code, with its three kernel entry points swapped for the official plain-PyTorch
references — mamba3_siso_combined -> mamba3_siso_step_ref (tests/ops/triton/test_mamba3_siso.py), Triton
RMSNorm -> layer_norm.rms_norm_ref, gated RMSNorm -> layernorm_gated.rms_norm_ref — and the module's two
float32 casts (A's heavy-tail input and the angle projection) kept in float64. The step reference wraps the
angles to [0, 2π) every step, as mamba4j does (the official CuTe module step does not; same math, mamba3-siso.md
§5.2). layernorm_gated.rms_norm_ref always casts its weight to float32 (exact for these f32 weights; the B/C/out
norm weight gradients pass that cast and carry f32 rounding, ~6e-8 relative).
"""
import copy
import json
import math
import os
import sys
import time
import types
from dataclasses import asdict

HERE = os.path.dirname(os.path.abspath(__file__))
OFFICIAL = os.environ.get("MAMBA4J_OFFICIAL_MAMBA", os.path.join(HERE, "..", "third_party", "official-mamba"))
sys.path.insert(0, OFFICIAL)
for _pkg in ("einops", "pytest"):
    try:
        __import__(_pkg)
    except ImportError:  # minimal stand-ins laid by official_mamba3_sources.sh
        sys.path.append(os.path.join(OFFICIAL, "fallbacks"))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from mamba_ssm.models.config_mamba import MambaConfig  # noqa: E402
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel  # noqa: E402
import mamba_ssm.modules.mamba3 as m3mod  # noqa: E402
import mamba_ssm.ops.triton.layer_norm as ln  # noqa: E402
import mamba_ssm.ops.triton.layernorm_gated as lng  # noqa: E402
from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step  # noqa: E402
import tests.ops.triton.test_mamba3_siso as testmod  # noqa: E402
from tests.ops.triton.test_mamba3_siso import mamba3_siso_fwd_ref, mamba3_siso_step_ref  # noqa: E402

BATCH, STEPS, PROMPT = 2, 96, 80   # 80 = one full chunk of 64 and part of the next

SHAPES = {
    # official Mamba3 defaults (d_state 128, headdim 64, rope 0.5, ngroups 1, plain gate); ssm_cfg names only the layer
    "default-d256": dict(d_model=256, n_layer=2, vocab_size=512, tie=True, ssm={}),
    "hd32-ds64-g2": dict(d_model=128, n_layer=2, vocab_size=1000, tie=True, ssm=dict(d_state=64, headdim=32, ngroups=2)),
    "rope1-outnorm-untied": dict(d_model=128, n_layer=3, vocab_size=777, tie=False,
                                 ssm=dict(d_state=64, headdim=32, rope_fraction=1.0, is_outproj_norm=True)),
}

# ---------------------------------------------------------------- kernel dispatch
_ORIG_COMBINED = m3mod.mamba3_siso_combined
_ORIG_RMS = ln.RMSNorm.forward
_ORIG_GATED = lng.RMSNorm.forward
_ORIG_TORCH = m3mod.torch
_ORIG_TEST_TORCH = testmod.torch
CTX = {"impl": "triton", "layer": None, "carry": None, "finals": {}}


def _dispatch(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, Input_States=None, chunk_size=64,
              return_final_states=False, cu_seqlens=None, **kw):
    """Stands in for mamba3_siso_combined inside the official module: picks the implementation and, when CTX
    carries states, feeds the layer's incoming (angle, ssm, k, v) state (the module itself always passes None)."""
    layer, impl = CTX["layer"], CTX["impl"]
    init = CTX["carry"][layer] if CTX["carry"] is not None else Input_States
    if impl == "ref64":
        out, finals = mamba3_siso_step_ref(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, Input_States=init)
    elif impl == "chunkref32":
        out, finals = mamba3_siso_fwd_ref(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z,
                                          Initial_States=init, chunk_size=chunk_size, dtype=torch.float32)
    elif impl == "tritonstep":
        assert Q.shape[1] == 1 and init is not None
        z = Z[:, 0].contiguous() if Z is not None else None
        out, finals = mamba3_siso_step(Q[:, 0].contiguous(), K[:, 0].contiguous(), V[:, 0].contiguous(),
                                       ADT[:, :, 0].contiguous(), DT[:, :, 0].contiguous(), Trap[:, :, 0].contiguous(),
                                       Q_bias.contiguous(), K_bias.contiguous(), Angles[:, 0].contiguous(), D, z,
                                       tuple(s.contiguous() for s in init))
        out = out.unsqueeze(1)
    else:  # the official Triton combined kernel (final states only outside autograd, as the module asks)
        want = return_final_states or not torch.is_grad_enabled()
        res = _ORIG_COMBINED(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, Input_States=init,
                             chunk_size=chunk_size, return_final_states=want, cu_seqlens=cu_seqlens)
        if not want:
            return res
        out, finals = res[0], tuple(res[1:5])
    CTX["finals"][layer] = tuple(finals)
    return (out, *finals) if return_final_states else out


class _TorchF64(types.ModuleType):
    """`torch` with float32 read as float64, for the official module (its A and angle casts) and the official step
    reference (its zero states and its cast of an incoming SSM state) while the float64 reference runs."""

    def __getattr__(self, name):
        return torch.float64 if name == "float32" else getattr(torch, name)


def use(impl):
    """Selects the numerics for the next official-module calls: 'ref64', 'chunkref32', 'tritonstep' or 'triton'."""
    CTX["impl"] = impl
    ref_norms = impl in ("ref64", "chunkref32")
    m3mod.torch = _TorchF64("torch") if impl == "ref64" else _ORIG_TORCH
    testmod.torch = _TorchF64("torch") if impl == "ref64" else _ORIG_TEST_TORCH
    if ref_norms:
        ln.RMSNorm.forward = lambda self, x, residual=None, prenorm=False, residual_in_fp32=False: ln.rms_norm_ref(
            x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm, upcast=False)
        lng.RMSNorm.forward = lambda self, x, z=None: lng.rms_norm_ref(
            x, self.weight, self.bias, z=z, eps=self.eps, group_size=self.group_size,
            norm_before_gate=self.norm_before_gate, upcast=False)
    else:
        ln.RMSNorm.forward = _ORIG_RMS
        lng.RMSNorm.forward = _ORIG_GATED


m3mod.mamba3_siso_combined = _dispatch


def one_config_per_kernel():
    """Limits every official Triton autotuner to one launch configuration (num_stages 1, 4 warps, no register cap,
    CHUNK_SIZE 64 where the configuration sets it). The official spaces hold 9 to 81 configurations per kernel, and
    compiling them all costs minutes of device time per head-dim combination; launch settings do not change the
    arithmetic (CHUNK_SIZE 64 is the module's own chunk). MAMBA4J_M3_FULL_AUTOTUNE=1 keeps the official spaces."""
    import importlib
    from triton.runtime.autotuner import Autotuner
    names = ["mamba_ssm.ops.triton.layer_norm", "mamba_ssm.ops.triton.layernorm_gated"] + [
        "mamba_ssm.ops.triton.mamba3." + m for m in ("angle_dt", "mamba3_siso_fwd", "mamba3_siso_bwd", "mamba3_siso_step")]
    for name in names:
        for obj in vars(importlib.import_module(name)).values():
            if isinstance(obj, Autotuner) and len(obj.configs) > 1:
                def score(c):
                    return (c.kwargs.get("CHUNK_SIZE", 64) != 64, c.num_stages != 1, c.num_warps != 4,
                            getattr(c, "maxnreg", None) is not None, c.num_warps)
                obj.configs = [min(obj.configs, key=score)]


if os.environ.get("MAMBA4J_M3_FULL_AUTOTUNE") != "1":
    one_config_per_kernel()


def hook_layers(model):
    for block in model.backbone.layers:
        block.mixer.register_forward_pre_hook(lambda mod, args: CTX.__setitem__("layer", mod.layer_idx))


def unfused(model):
    """The reference runs the unfused block path (same math; the fused add+norm is a Triton kernel)."""
    model.backbone.fused_add_norm = False
    for block in model.backbone.layers:
        block.fused_add_norm = False
        block.residual_in_fp32 = False
    return model


# ---------------------------------------------------------------- model making
def make_model(shape, seed, device):
    torch.manual_seed(seed)
    ssm = dict(layer="Mamba3", **shape["ssm"])
    cfg = MambaConfig(d_model=shape["d_model"], n_layer=shape["n_layer"], vocab_size=shape["vocab_size"], ssm_cfg=ssm,
                      rms_norm=True, residual_in_fp32=True, fused_add_norm=True, pad_vocab_size_multiple=8,
                      tie_embeddings=shape["tie"])
    model = MambaLMHeadModel(cfg, device=device, dtype=torch.float32)
    with torch.no_grad():  # official init, then every 0/1 parameter made generic and Δ spread wider (angles wrap)
        for block in model.backbone.layers:
            m = block.mixer
            dt = torch.exp(torch.empty_like(m.dt_bias).uniform_(math.log(0.01), math.log(0.5)))
            m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            m.B_bias.copy_(1 + 0.5 * torch.randn_like(m.B_bias))
            m.C_bias.copy_(1 + 0.5 * torch.randn_like(m.C_bias))
            m.B_norm.weight.uniform_(0.5, 1.5)
            m.C_norm.weight.uniform_(0.5, 1.5)
            m.D.uniform_(-0.5, 1.5)
            if m.is_outproj_norm:
                m.norm.weight.uniform_(0.5, 1.5)
            block.norm.weight.uniform_(0.5, 1.5)
        model.backbone.norm_f.weight.uniform_(0.5, 1.5)
        if not shape["tie"]:
            model.lm_head.weight.normal_(0.0, 0.02)
    return cfg, model


def save_official(folder, cfg, model):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(asdict(cfg), f, indent=4)
    sd = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight")
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


class _InferenceParams:  # what Mamba3.forward reads from mamba_ssm.utils.generation.InferenceParams
    def __init__(self):
        self.key_value_memory_dict = {}
        self.seqlen_offset = 0


# ---------------------------------------------------------------- runs
def run_forward(model, ids):
    CTX["carry"] = None
    return model(ids).logits


def run_decode(model, ids, prompt, step_impl):
    """Prefill of `prompt` tokens (carrying from zero), then one token at a time with every layer's state carried."""
    CTX["carry"], CTX["finals"] = None, {}
    model(ids[:, :prompt])
    states = dict(CTX["finals"])
    impl = CTX["impl"]
    out = []
    for t in range(prompt, ids.shape[1]):
        use(step_impl)
        CTX["carry"], CTX["finals"] = dict(states), {}
        out.append(model(ids[:, t:t + 1]).logits)
        states = dict(CTX["finals"])
        use(impl)
    CTX["carry"] = None
    return torch.cat(out, dim=1)


def prompt_states(model, ids, prompt):
    """Every layer's (angle, ssm, k, v) after the prompt, as the module's inference cache receives it."""
    CTX["carry"], CTX["finals"] = None, {}
    ip = _InferenceParams()
    model(ids[:, :prompt], inference_params=ip)
    return {l: tuple(ip.key_value_memory_dict[l]) for l in ip.key_value_memory_dict}


def grads(model, ids, R, autocast=False):
    model.zero_grad(set_to_none=True)
    CTX["carry"] = None
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(ids).logits
    (logits.double() * R).sum().backward()
    return {n: p.grad.detach().double().clone() for n, p in model.named_parameters()}


def err(a, b, angle=False):
    a, b = a.detach().double(), b.detach().double()
    d = a - b
    if angle:
        d = torch.remainder(d + math.pi, 2 * math.pi) - math.pi
    return {"rel_l2": (d.norm() / b.norm().clamp_min(1e-300)).item(), "max_abs": d.abs().max().item()}


def state_errs(got, ref):
    worst = {}
    for l in ref:
        for i, name in enumerate(("angle", "ssm", "k", "v")):
            g = got[l][i].reshape(ref[l][i].shape)
            e = err(g, ref[l][i], angle=(name == "angle"))
            if name not in worst or e["rel_l2"] > worst[name]["rel_l2"]:
                worst[name] = e
    return worst


def grad_errs(got, ref):
    per = {n: err(got[n], ref[n]) for n in ref}
    worst = max(per, key=lambda n: per[n]["rel_l2"])
    return {"worst": worst, **per[worst], "per_tensor": per}


def main(out):
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    table = []
    for si, (name, shape) in enumerate(SHAPES.items()):
        folder = os.path.join(out, name)
        cfg, model = make_model(shape, 1234 + si, dev)
        save_official(folder, cfg, model)
        hook_layers(model)
        Vp = model.lm_head.weight.shape[0]
        g = torch.Generator(device="cpu").manual_seed(99 + si)
        ids = torch.randint(0, shape["vocab_size"], (BATCH, STEPS), generator=g).to(dev)
        R = torch.randn(BATCH, STEPS, Vp, generator=g, dtype=torch.float64).to(dev)

        # ---- float64 reference (official PyTorch path)
        ref = unfused(copy.deepcopy(model)).double()
        use("ref64")
        with torch.no_grad():
            logits = run_forward(ref, ids)
            dec = run_decode(ref, ids, PROMPT, "ref64")
            CTX["carry"], CTX["finals"] = None, {}
            ref(ids[:, :PROMPT])
            states = dict(CTX["finals"])
        g64 = grads(ref, ids, R)
        selfcheck = err(dec, logits[:, PROMPT:])
        print(f"{name}: float64 reference: decode vs forward rel L2 {selfcheck['rel_l2']:.1e} "
              f"({time.time() - t0:.0f} s)", flush=True)

        tensors = {"input_ids": ids.double(), "logits": logits, "decode_logits": dec, "grad_proj": R}
        for l, (ang, ssm, k, v) in states.items():
            tensors[f"state.{l}.ssm"], tensors[f"state.{l}.k"] = ssm, k
            tensors[f"state.{l}.v"], tensors[f"state.{l}.angle"] = v, ang
        for n, gr in g64.items():
            tensors[f"grad.{n}"] = gr
        meta = {"batch": str(BATCH), "steps": str(STEPS), "prompt_len": str(PROMPT), "vocab": str(Vp),
                "layers": str(shape["n_layer"]), "official_commit": open(os.path.join(OFFICIAL, "COMMIT")).read().strip(),
                "loss": "sum(logits * grad_proj), zero start state, all positions"}
        save_file({k: v.detach().double().contiguous().cpu() for k, v in tensors.items()},
                  os.path.join(folder, "reference.safetensors"), metadata=meta)

        # ---- official implementations against it (a failing row is recorded, the reference stays)
        rows = {}

        def attempt(row, fn):
            try:
                rows[row] = fn()
            except Exception as e:  # noqa: BLE001 - an official kernel refusing a shape is a result too
                rows[row] = {"error": {"rel_l2": float("nan"), "max_abs": float("nan"), "what": repr(e)[:300]}}
                print(f"{name}: {row}: {e!r}", flush=True)
            else:
                print(f"{name}: {row} done ({time.time() - t0:.0f} s)", flush=True)
            finally:
                use("triton")
                CTX["carry"] = None

        def chunked():
            chunk = unfused(copy.deepcopy(model))
            use("chunkref32")
            with torch.no_grad():
                return {"logits": err(run_forward(chunk, ids), logits)}

        def triton_f32():
            use("triton")
            with torch.no_grad():
                r = {"logits": err(run_forward(model, ids), logits),
                     "states": state_errs(prompt_states(model, ids, PROMPT), states)}
            r["grads"] = grad_errs(grads(model, ids, R), g64)
            return r

        def triton_step():
            use("triton")
            with torch.no_grad():
                return {"decode_logits": err(run_decode(model, ids, PROMPT, "tritonstep"), dec)}

        def triton_autocast():
            use("triton")
            r = {"grads": grad_errs(grads(model, ids, R, autocast=True), g64)}
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                r["logits"] = err(run_forward(model, ids), logits)
            return r

        def triton_bf16():
            use("triton")
            bf = copy.deepcopy(model).to(torch.bfloat16)  # deepcopy keeps the layer hooks
            with torch.no_grad():
                return {"logits": err(run_forward(bf, ids), logits),
                        "states": state_errs(prompt_states(bf, ids, PROMPT), states)}

        attempt("official chunked ref, f32", chunked)
        attempt("official Triton, f32 weights", triton_f32)
        attempt("official Triton prefill + Triton step decode, f32 weights", triton_step)
        attempt("official Triton, bf16 autocast", triton_autocast)
        attempt("official Triton, bf16 weights", triton_bf16)
        with open(os.path.join(folder, "official_errors.json"), "w") as f:
            json.dump({"shape": name, "float64_decode_vs_forward": selfcheck, "rows": rows}, f, indent=1)
        for row, qs in rows.items():
            for q, e in qs.items():
                if q == "states":
                    for sname, se in e.items():
                        table.append((name, row, f"state.{sname}", se["rel_l2"], se["max_abs"]))
                elif q == "grads":
                    table.append((name, row, f"grads (worst: {e['worst']})", e["rel_l2"], e["max_abs"]))
                else:
                    table.append((name, row, q if "what" not in e else "ERROR " + e["what"], e["rel_l2"], e["max_abs"]))
        print(f"{name}: {sum(p.numel() for p in model.parameters()):,} params, vocab {Vp}, wrote {folder}", flush=True)
        del model, ref
        torch.cuda.empty_cache()

    print("\nOfficial implementations vs the float64 official reference (rel L2 over the whole tensor, max abs):")
    print(f"| shape | implementation | quantity | rel L2 | max abs |\n|---|---|---|---|---|")
    for r in table:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2e} | {r[4]:.2e} |")
    with open(os.path.join(out, "official_errors.json"), "w") as f:
        json.dump([dict(zip(("shape", "implementation", "quantity", "rel_l2", "max_abs"), r)) for r in table], f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
