#!/usr/bin/env bash
# Masked-LM validation perplexity (fairseq-validate with the masked_lm criterion: 2 ** loss in base 2).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 CHECKPOINT.pt

Environment (default):
  DATA        binarised data (data-bin/mlm)
  SUBSET      split (valid)
  BATCH_SIZE  sequences per batch (8)
  OUT         folder for the log and ppl.txt (the checkpoint's folder)
  NGPUS       0 = evaluate on the CPU (default: a GPU if torch sees one)
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 1)) || { usage >&2; die "give one checkpoint"; }
CKPT=$1
DATA=${DATA:-data-bin/mlm}
SUBSET=${SUBSET:-valid}
BATCH_SIZE=${BATCH_SIZE:-8}
OUT=${OUT:-$(dirname "$CKPT")}
need_cmd fairseq-validate
need_data "$DATA" data_prep/prepare_mlm.sh
need_checkpoint "$CKPT"
mkdir -p "$OUT"
cpu=(); [[ $(count_gpus) == 0 ]] && cpu=(--cpu)

step "fairseq-validate $SUBSET ($CKPT)"
log=$OUT/validate.$SUBSET.log
# the task (masking, tokens_per_sample) comes from the checkpoint; only the data folder is replaced
fairseq-validate "$DATA" --task masked_lm --user-dir "$USER_DIR" --path "$CKPT" --valid-subset "$SUBSET" --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 --skip-invalid-size-inputs-valid-test \
    --model-overrides "{'data': '$DATA'}" --log-format simple "${cpu[@]}" 2>&1 | tee "$log" | grep -E "subset \|" || true
ppl=$(grep -o "| ppl [0-9.]*" "$log" | tail -n 1 | awk '{print $3}') || die "fairseq-validate failed; see $log"
echo "$SUBSET perplexity: $ppl" | tee "$OUT/ppl.$SUBSET.txt"
