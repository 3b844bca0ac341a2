#!/usr/bin/env bash
# Lays the official state-spaces/mamba Mamba-3 SISO sources into the IGNORED folder third_party/official-mamba/
# (never committed), so scripts/mamba3_official_reference.py and scripts/bench_official_mamba3.py can import
# them on the device with PYTHONPATH=third_party/official-mamba.
#
#   bash scripts/official_mamba3_sources.sh GIT_DIR [COMMIT]
#
# GIT_DIR is a bare clone of state-spaces/mamba (the session tool `fetch github:state-spaces/mamba` gives one);
# COMMIT defaults to e9594ce1c732d97440f0332fdc43170a2294dbfa (the one the parity figures were made with).
#
# Copied verbatim: the minimal import closure of MambaLMHeadModel with Mamba3 (SISO) layers and the official
# test file holding the plain-PyTorch references (mamba3_siso_step_ref, mamba3_siso_fwd_ref).
# Written here instead (small shims, our own code): mamba_ssm/__init__.py (the official one imports the compiled
# selective-scan extension), modules/mamba_simple.py and modules/mamba2.py (Mamba-1/2 need causal_conv1d and the
# CUDA extension; MixerModel only imports their class names), utils/generation.py and utils/hf.py
# (GenerationMixin / hub loading are not used), and fallbacks/ with minimal einops and pytest stand-ins that
# the scripts put on sys.path only when the real packages are missing.
set -euo pipefail
GIT_DIR=${1:?usage: official_mamba3_sources.sh GIT_DIR [COMMIT]}
COMMIT=${2:-e9594ce1c732d97440f0332fdc43170a2294dbfa}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/third_party/official-mamba
rm -rf "$DEST"
mkdir -p "$DEST"
FILES="
mamba_ssm/models/__init__.py
mamba_ssm/models/config_mamba.py
mamba_ssm/models/mixer_seq_simple.py
mamba_ssm/modules/__init__.py
mamba_ssm/modules/block.py
mamba_ssm/modules/mamba3.py
mamba_ssm/modules/mha.py
mamba_ssm/modules/mlp.py
mamba_ssm/ops/__init__.py
mamba_ssm/ops/triton/__init__.py
mamba_ssm/ops/triton/layer_norm.py
mamba_ssm/ops/triton/layernorm_gated.py
mamba_ssm/ops/triton/mamba3/__init__.py
mamba_ssm/ops/triton/mamba3/angle_dt.py
mamba_ssm/ops/triton/mamba3/mamba3_mimo_rotary_step.py
mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py
mamba_ssm/ops/triton/mamba3/mamba3_siso_combined.py
mamba_ssm/ops/triton/mamba3/mamba3_siso_fwd.py
mamba_ssm/ops/triton/mamba3/mamba3_siso_step.py
mamba_ssm/ops/triton/mamba3/utils.py
mamba_ssm/utils/__init__.py
mamba_ssm/utils/determinism.py
mamba_ssm/utils/torch.py
tests/ops/triton/test_mamba3_siso.py
LICENSE
"
for f in $FILES; do
  mkdir -p "$DEST/$(dirname "$f")"
  git --git-dir="$GIT_DIR" show "$COMMIT:$f" > "$DEST/$f"
done
touch "$DEST/tests/__init__.py" "$DEST/tests/ops/__init__.py" "$DEST/tests/ops/triton/__init__.py"
echo "$COMMIT" > "$DEST/COMMIT"

cat > "$DEST/mamba_ssm/__init__.py" <<'EOF'
# shim (mamba4j): the official __init__ imports the compiled selective-scan extension; import submodules directly.
__version__ = "official-subset"
EOF
cat > "$DEST/mamba_ssm/modules/mamba_simple.py" <<'EOF'
# shim (mamba4j): Mamba-1 needs the compiled extension; only the name is imported by mixer_seq_simple.
class Mamba:
    def __init__(self, *a, **k):
        raise NotImplementedError("Mamba-1 is not part of this official subset")
EOF
cat > "$DEST/mamba_ssm/modules/mamba2.py" <<'EOF'
# shim (mamba4j): Mamba-2 needs causal_conv1d; only the name is imported by mixer_seq_simple.
class Mamba2:
    def __init__(self, *a, **k):
        raise NotImplementedError("Mamba-2 is not part of this official subset")
EOF
cat > "$DEST/mamba_ssm/utils/generation.py" <<'EOF'
# shim (mamba4j): generation utilities are not used by the parity scripts.
class GenerationMixin:
    pass
EOF
cat > "$DEST/mamba_ssm/utils/hf.py" <<'EOF'
# shim (mamba4j): hub loading is not used (no network on the device).
def load_config_hf(*a, **k):
    raise NotImplementedError
def load_state_dict_hf(*a, **k):
    raise NotImplementedError
EOF

mkdir -p "$DEST/fallbacks/einops" "$DEST/fallbacks/pytest"
cat > "$DEST/fallbacks/pytest/__init__.py" <<'EOF'
# fallback (mamba4j): just enough of pytest for the official test module to import.
class _Mark:
    def __getattr__(self, name):
        return lambda *a, **k: (lambda f: f)
mark = _Mark()
def skip(msg=""):
    raise RuntimeError("skip: " + msg)
EOF
cat > "$DEST/fallbacks/einops/__init__.py" <<'EOF'
# fallback (mamba4j): minimal rearrange/repeat (names, '...', parenthesised groups, new axes in repeat).
import math

def _parse(side):
    items, group, tok = [], None, ""
    def flush():
        nonlocal tok
        if tok:
            (group if group is not None else items).append(tok)
            tok = ""
    for ch in side.replace("(", " ( ").replace(")", " ) ").split():
        if ch == "(":
            group = []
        elif ch == ")":
            items.append(tuple(group)); group = None
        else:
            tok = ch; flush()
    return items

def _expand(items, ndim=None):
    n_ell = 0 if ndim is None else ndim - (len(items) - 1)
    out = []
    for it in items:
        if it == "...":
            out.append(tuple("_e%d" % i for i in range(n_ell)) if ndim is not None else "...")
        else:
            out.append(it)
    return out

def _einop(x, pattern, sizes, allow_new):
    lhs, rhs = [s.strip() for s in pattern.split("->")]
    L = _parse(lhs)
    has_ell = "..." in L
    L = _expand(L, x.dim()) if has_ell else L
    n_ell = x.dim() - (len(_parse(lhs)) - 1) if has_ell else 0
    R = _parse(rhs)
    R = [tuple("_e%d" % i for i in range(n_ell)) if it == "..." else it for it in R]
    dims = dict(sizes)
    elem_l = []
    for it, d in zip(L, x.shape):
        names = it if isinstance(it, tuple) else (it,)
        known = [dims[n] for n in names if n in dims]
        unknown = [n for n in names if n not in dims]
        if len(unknown) == 1:
            dims[unknown[0]] = d // (math.prod(known) if known else 1)
        elif len(unknown) > 1:
            raise ValueError("cannot infer axes %s" % unknown)
        elem_l.extend(names)
    y = x.reshape([dims[n] for n in elem_l]) if elem_l else x
    elem_r = []
    for it in R:
        elem_r.extend(it if isinstance(it, tuple) else (it,))
    new = [n for n in elem_r if n not in elem_l]
    if new and not allow_new:
        raise ValueError("new axes in rearrange: %s" % new)
    y = y.permute([elem_l.index(n) for n in elem_r if n in elem_l])
    kept = [n for n in elem_r if n in elem_l]
    shape, j = [], 0
    for n in elem_r:
        if n in elem_l:
            shape.append(dims[n])
        else:
            y = y.unsqueeze(len(shape)); shape.append(dims[n])
        j += 1
    y = y.expand(shape)
    return y.reshape([math.prod(dims[n] for n in (it if isinstance(it, tuple) else (it,))) for it in R])

def rearrange(x, pattern, **sizes):
    return _einop(x, pattern, sizes, False)

def repeat(x, pattern, **sizes):
    return _einop(x, pattern, sizes, True)
EOF
echo "official Mamba-3 subset at commit $COMMIT in $DEST"
