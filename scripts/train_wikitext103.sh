#!/usr/bin/env bash
# Train a Wikitext-103 language model of the paper (configs/wikitext103_VARIANT.yaml) with fairseq-hydra-train.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 VARIANT [hydra overrides...]

VARIANT: eva_16l | softmax_16l | eva_32l | softmax_32l (paper, EVA: test ppl 19.4 (16 layers),
         18.3 with context window 480 (32 layers)); the baselines of the paper's table, at 16 layers:
         elu_16l | rfa_16l | t2r_16l
Effective batch 65536 tokens (max_tokens x GPUs x nodes x update_freq), as in the paper.

  DATA         binarised data (data-bin/wikitext-103, from data_prep/prepare_wikitext103.sh)
  SAVE_DIR     checkpoints and hydra_train.log (checkpoints/wikitext103_VARIANT)
  MAX_TOKENS   tokens per GPU and step (8192, the config's)
  TOTAL_TOKENS effective batch in tokens (65536)
$TRAIN_ENV_HELP
Then: scripts/eval_lm.sh \$SAVE_DIR/checkpoint_best.pt
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($#)) || { usage >&2; die "give a VARIANT"; }
VARIANT=$1; shift
case $VARIANT in eva_16l|softmax_16l|eva_32l|softmax_32l|elu_16l|rfa_16l|t2r_16l) ;;
  *) die "unknown VARIANT '$VARIANT' (eva_16l, softmax_16l, eva_32l, softmax_32l; baselines: elu_16l, rfa_16l, t2r_16l)" ;; esac
CONFIG=${CONFIG:-wikitext103_$VARIANT}
DATA=${DATA:-data-bin/wikitext-103}
SAVE_DIR=${SAVE_DIR:-checkpoints/wikitext103_$VARIANT}
MAX_TOKENS=${MAX_TOKENS:-$(config_value "$CONFIG" dataset.max_tokens)}
TOTAL_TOKENS=${TOTAL_TOKENS:-65536}
need_data "$DATA" data_prep/prepare_wikitext103.sh
run_training "$CONFIG" dataset.max_tokens "$MAX_TOKENS" "$TOTAL_TOKENS" "$@"
