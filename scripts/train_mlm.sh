#!/usr/bin/env bash
# Train a masked LM of the paper (RoBERTa-base, pre-norm; configs/mlm_VARIANT.yaml) with fairseq-hydra-train.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 VARIANT [hydra overrides...]

VARIANT: eva_2048 | softmax_2048 | eva_4096 | softmax_4096 (paper validation ppl, EVA: 3.94 / 3.73;
         softmax 3.74); the baselines of the paper's table: local_2048 | performer_2048 | linformer_2048 |
         reformer_2048 | lara_2048 | combiner_2048 | long_short_2048
Effective batch 256 sequences (batch_size x GPUs x nodes x update_freq), as in the paper.

  DATA         binarised data (data-bin/mlm, from data_prep/prepare_mlm.sh)
  SAVE_DIR     checkpoints and hydra_train.log (checkpoints/mlm_VARIANT)
  BATCH_SIZE   sequences per GPU and step (the config's: 16 at 2048, 8 at 4096)
  TOTAL_SEQS   effective batch in sequences (256)
$TRAIN_ENV_HELP
Then: scripts/eval_mlm.sh \$SAVE_DIR/checkpoint_best.pt
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($#)) || { usage >&2; die "give a VARIANT"; }
VARIANT=$1; shift
case $VARIANT in eva_2048|softmax_2048|eva_4096|softmax_4096) ;; local_2048|performer_2048|linformer_2048|reformer_2048|lara_2048|combiner_2048|long_short_2048) ;;
  *) die "unknown VARIANT '$VARIANT' (eva_2048, softmax_2048, eva_4096, softmax_4096; baselines: local_2048, performer_2048, linformer_2048, reformer_2048, lara_2048, combiner_2048, long_short_2048)" ;; esac
CONFIG=${CONFIG:-mlm_$VARIANT}
DATA=${DATA:-data-bin/mlm}
SAVE_DIR=${SAVE_DIR:-checkpoints/mlm_$VARIANT}
BATCH_SIZE=${BATCH_SIZE:-$(config_value "$CONFIG" dataset.batch_size)}
TOTAL_SEQS=${TOTAL_SEQS:-256}
need_data "$DATA" data_prep/prepare_mlm.sh
run_training "$CONFIG" dataset.batch_size "$BATCH_SIZE" "$TOTAL_SEQS" "$@"
