#!/usr/bin/env bash
# The transformers fine-tuning comparison (issue 12 item 7) on the device machine, repo root, bundle with mamba-lm:
#   1. scripts/hf_finetune.py make: a tiny MambaForCausalLM, token data, transformers' own AdamW run (f32)
#   2. HfFinetuneComparisonTest (JUnit, tag gpu): the same run with Trainer.stepTokens on CUDA — per-step losses and
#      final weights against transformers'; saves our model with MambaLM.savePretrained and our logits
#   3. scripts/hf_finetune.py check: transformers loads our folder and gives our logits
# Exit 0 only if all three pass; logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=/tmp/hf-finetune; rm -rf "$D"; mkdir -p "$D"
python3 scripts/hf_finetune.py make "$D" 2>&1 | tee "$OUT/hf_finetune.log"; made=${PIPESTATUS[0]}
MAMBA4J_HF_FINETUNE=$D bash .device/run.sh tests --include-classname '.*HfFinetuneComparisonTest' > "$OUT/hf_finetune_test.log" 2>&1
java=$?
sed 's/\x1b\[[0-9;]*m//g' "$OUT/hf_finetune_test.log" | grep -E '✔|✘|■|tests (successful|failed)|step [0-9]|weights' | head -40
python3 scripts/hf_finetune.py check "$D" 2>&1 | tee -a "$OUT/hf_finetune.log"; checked=${PIPESTATUS[0]}
echo "make $made, java test $java, transformers check $checked"
[ "$made" -eq 0 ] && [ "$java" -eq 0 ] && [ "$checked" -eq 0 ]
