#!/usr/bin/env bash
# Train a WMT14 En-De model of the paper (configs/wmt14_en_de_VARIANT.yaml) with fairseq-hydra-train.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 VARIANT [hydra overrides...]

VARIANT: eva16 | eva32 | eva64 | softmax (paper BLEU 27.2 / 27.3 / 27.5 / 27.5); the baselines of the paper's
         table: performer128 | lara16 | lara32 | lara64
Effective batch 32768 tokens (max_tokens x GPUs x nodes x update_freq), as in the paper.

  DATA         binarised data (data-bin/wmt14_en_de, from data_prep/prepare_wmt14_en_de.sh)
  SAVE_DIR     checkpoints and hydra_train.log (checkpoints/wmt14_en_de_VARIANT)
  MAX_TOKENS   tokens per GPU and step (4096, the config's)
  TOTAL_TOKENS effective batch in tokens (32768)
$TRAIN_ENV_HELP
Then: scripts/eval_wmt14.sh \$SAVE_DIR
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($#)) || { usage >&2; die "give a VARIANT"; }
VARIANT=$1; shift
case $VARIANT in eva16|eva32|eva64|softmax|performer128|lara16|lara32|lara64) ;;
  *) die "unknown VARIANT '$VARIANT' (eva16, eva32, eva64, softmax; baselines: performer128, lara16, lara32, lara64)" ;; esac
CONFIG=${CONFIG:-wmt14_en_de_$VARIANT}
DATA=${DATA:-data-bin/wmt14_en_de}
SAVE_DIR=${SAVE_DIR:-checkpoints/wmt14_en_de_$VARIANT}
MAX_TOKENS=${MAX_TOKENS:-$(config_value "$CONFIG" dataset.max_tokens)}
TOTAL_TOKENS=${TOTAL_TOKENS:-32768}
need_data "$DATA" data_prep/prepare_wmt14_en_de.sh
run_training "$CONFIG" dataset.max_tokens "$MAX_TOKENS" "$TOTAL_TOKENS" "$@"
