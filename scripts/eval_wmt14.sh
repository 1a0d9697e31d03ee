#!/usr/bin/env bash
# WMT14 En-De evaluation as in the paper: average the last checkpoints, beam 4, length penalty 0.6,
# BPE removed; BLEU on compound-split tokenised text (fairseq's compound_split_bleu.sh) and sacreBLEU
# on detokenised text against the raw references.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0 CHECKPOINT_DIR | CHECKPOINT.pt

With a folder, averages its last \$N_AVG epoch checkpoints (checkpoint<N>.pt) into
checkpoint_avg\$N_AVG.pt first (N_AVG=0: use its checkpoint_best.pt); with a file, uses it as it is.

Environment (default):
  DATA        binarised data (data-bin/wmt14_en_de)
  N_AVG       epoch checkpoints to average (10, as in the paper)
  SUBSET      split to translate (test = newstest2014)
  BEAM        beam size (4);  LENPEN  length penalty (0.6)
  MAX_TOKENS  tokens per batch of fairseq-generate (8192)
  REF         untokenised reference for sacreBLEU (\$DATA/raw.SUBSET.de, written by the data prep;
              sacreBLEU is skipped when it is missing)
  OUT         folder for gen.out, hyp/ref files and bleu.txt (the checkpoint's folder)
  GEN_ARGS    more fairseq-generate options, e.g. "--max-len-a 1.2 --max-len-b 10" ("")
  NGPUS       0 = decode on the CPU (default: a GPU if torch sees one)
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 1)) || { usage >&2; die "give one checkpoint folder or file"; }
DATA=${DATA:-data-bin/wmt14_en_de}
N_AVG=${N_AVG:-10}
SUBSET=${SUBSET:-test}
BEAM=${BEAM:-4}
LENPEN=${LENPEN:-0.6}
MAX_TOKENS=${MAX_TOKENS:-8192}
read -r -a GEN_ARGS <<< "${GEN_ARGS:-}"
REF=${REF:-$DATA/raw.$SUBSET.de}
need_cmd fairseq-generate
need_data "$DATA" data_prep/prepare_wmt14_en_de.sh
# sacreBLEU reads the reference as UTF-8: say so now, not with a traceback after the translation
[[ -s $REF ]] && { "$PYTHON" "$ROOT/data_prep/utf8_check.py" "$REF" || exit 1; }

if [[ -d $1 ]]; then
    OUT=${OUT:-$1}
    if ((N_AVG > 0)); then
        n=$(find "$1" -maxdepth 1 -regex '.*/checkpoint[0-9]+\.pt' | wc -l)
        if ((n < N_AVG)); then
            use="N_AVG=0 to evaluate its checkpoint_best.pt without averaging"
            ((n > 0)) && use="N_AVG=$n to average those, or $use"
            die "$1 holds $n epoch checkpoints (checkpoint<N>.pt), fewer than N_AVG=$N_AVG: set $use"
        fi
        step "averaging the last $N_AVG epoch checkpoints of $1"
        CKPT=$1/checkpoint_avg$N_AVG.pt
        "$PYTHON" "$ROOT/scripts/average_checkpoints.py" --inputs "$1" --num-epoch-checkpoints "$N_AVG" --output "$CKPT"
    else
        CKPT=$1/checkpoint_best.pt
    fi
else
    CKPT=$1
    OUT=${OUT:-$(dirname "$1")}
fi
need_checkpoint "$CKPT"
mkdir -p "$OUT"
cpu=(); [[ $(count_gpus) == 0 ]] && cpu=(--cpu)

step "fairseq-generate $SUBSET: beam $BEAM, length penalty $LENPEN ($CKPT)"
# --required-batch-size-multiple 1: with fairseq's default of 8, the fairseq 0.12 builds for Python 3.11
# drop the last (number of sentences mod 8) sentences of an evaluation set
GEN=$OUT/gen.$SUBSET.out
fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$CKPT" --gen-subset "$SUBSET" --source-lang en --target-lang de \
    --beam "$BEAM" --lenpen "$LENPEN" --remove-bpe --max-tokens "$MAX_TOKENS" --required-batch-size-multiple 1 "${cpu[@]}" "${GEN_ARGS[@]}" > "$GEN"
n_hyp=$(grep -c '^H-' "$GEN" || true)
(( n_hyp > 0 )) || die "fairseq-generate wrote no hypothesis; see $GEN"
if [[ -s $DATA/raw.$SUBSET.en ]] && (( n_hyp != $(wc -l < "$DATA/raw.$SUBSET.en") )); then
    die "fairseq-generate translated $n_hyp of $(wc -l < "$DATA/raw.$SUBSET.en") sentences (some were dropped: see its log)"
fi
tail -n 1 "$GEN"

step "BLEU on compound-split tokenised text (as in the paper)"
# fairseq's scripts/compound_split_bleu.sh: "Top-Modell" -> "Top ##AT##-##AT## Modell", on both sides
split_compounds() { sed -E 's/(\S)-(\S)/\1 ##AT##-##AT## \2/g'; }
grep '^H-' "$GEN" | cut -f3- | split_compounds > "$OUT/$SUBSET.hyp.tok"
grep '^T-' "$GEN" | cut -f2- | split_compounds > "$OUT/$SUBSET.ref.tok"
fairseq-score --sys "$OUT/$SUBSET.hyp.tok" --ref "$OUT/$SUBSET.ref.tok" 2>/dev/null | grep '^BLEU' | tee "$OUT/bleu.$SUBSET.txt"

if [[ -s $REF ]]; then
    step "sacreBLEU on detokenised output against $REF"
    # hypotheses back in the order of the source file, then Moses-detokenised
    grep '^H-' "$GEN" | sed 's/^H-//' | sort -n -k1,1 | cut -f3- \
        | "$PYTHON" "$ROOT/data_prep/moses.py" detokenize -l de > "$OUT/$SUBSET.hyp.detok"
    [[ $(wc -l < "$OUT/$SUBSET.hyp.detok") == "$(wc -l < "$REF")" ]] \
        || die "$REF has $(wc -l < "$REF") lines but there are $(wc -l < "$OUT/$SUBSET.hyp.detok") hypotheses"
    sacrebleu "$REF" -i "$OUT/$SUBSET.hyp.detok" -m bleu -w 2 -f text | tee -a "$OUT/bleu.$SUBSET.txt"
else
    echo "no untokenised reference $REF: sacreBLEU skipped (set REF)"
fi
echo "results: $OUT/bleu.$SUBSET.txt"
