#!/usr/bin/env bash
# Language-model evaluation as in the paper: valid and test perplexity with context windows 0, 256, 480.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 CHECKPOINT.pt

Runs fairseq-eval-lm on each subset with each context window (a window of C scores each block of
TOKENS_PER_SAMPLE - C new tokens with the C tokens before it as context) and prints a table of
perplexities, also written to OUT/ppl.tsv.

Environment (default):
  DATA               binarised data (data-bin/wikitext-103)
  SUBSETS            splits ("valid test")
  CONTEXTS           context windows ("0 256 480")
  TOKENS_PER_SAMPLE  evaluation length (512, the training length)
  BATCH_SIZE         sequences per batch (16)
  OUT                folder for the logs and ppl.tsv (the checkpoint's folder)
  NGPUS              0 = evaluate on the CPU (default: a GPU if torch sees one)
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 1)) || { usage >&2; die "give one checkpoint"; }
CKPT=$1
DATA=${DATA:-data-bin/wikitext-103}
SUBSETS=${SUBSETS:-valid test}
CONTEXTS=${CONTEXTS:-0 256 480}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-512}
BATCH_SIZE=${BATCH_SIZE:-16}
OUT=${OUT:-$(dirname "$CKPT")}
need_cmd fairseq-eval-lm
need_data "$DATA" data_prep/prepare_wikitext103.sh
need_checkpoint "$CKPT"
made_out=0; [[ -e $OUT ]] || made_out=1
mkdir -p "$OUT"
cpu=(); [[ $(count_gpus) == 0 ]] && cpu=(--cpu)

for ctx in $CONTEXTS; do
    (( ctx < TOKENS_PER_SAMPLE )) || die "context window $ctx must be below TOKENS_PER_SAMPLE $TOKENS_PER_SAMPLE"
done

# The table and the logs are written to a temporary folder and moved into OUT when every evaluation has
# succeeded; a failure shows the end of the failing log and leaves nothing behind.
TABLE=$OUT/ppl.tsv
TMP=$(mktemp -d "$OUT/.eval_lm.XXXXXX")
# An OUT made here goes if left empty; the trap's own status must not replace the script's (a full OUT is kept)
trap 'rm -rf "$TMP"; if ((made_out)); then rmdir "$OUT" 2>/dev/null || true; fi' EXIT
printf 'subset\tcontext\tloss_base2\tppl\n' > "$TMP/ppl.tsv"
for subset in $SUBSETS; do
    for ctx in $CONTEXTS; do
        log=eval_lm.$subset.ctx$ctx.log
        step "fairseq-eval-lm $subset, context window $ctx (log: $OUT/$log)"
        fairseq-eval-lm "$DATA" --user-dir "$USER_DIR" --path "$CKPT" --gen-subset "$subset" \
            --tokens-per-sample "$TOKENS_PER_SAMPLE" --context-window "$ctx" --batch-size "$BATCH_SIZE" \
            --softmax-batch 1024 --required-batch-size-multiple 1 "${cpu[@]}" 2>&1 | tee "$TMP/$log" | grep -E 'Evaluated|Loss \(base 2\)' || true
        line=$(grep -o 'Loss (base 2): [0-9.]*, Perplexity: [0-9.]*' "$TMP/$log" | tail -n 1) \
            || { tail -n 20 "$TMP/$log" >&2; die "fairseq-eval-lm failed on $subset, context window $ctx (its output is above)"; }
        loss=$(sed -E 's/.*base 2\): ([0-9.]+),.*/\1/' <<< "$line")
        ppl=$(sed -E 's/.*Perplexity: ([0-9.]+)/\1/' <<< "$line")
        printf '%s\t%s\t%s\t%s\n' "$subset" "$ctx" "$loss" "$ppl" >> "$TMP/ppl.tsv"
    done
done
mv "$TMP"/eval_lm.*.log "$OUT"/
mv "$TMP/ppl.tsv" "$TABLE"
echo
column -t -s $'\t' "$TABLE" 2>/dev/null || cat "$TABLE"
echo "results: $TABLE"
