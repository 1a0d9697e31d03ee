#!/usr/bin/env bash
# A masked-LM corpus from any plain text (the paper used Books3, which cannot be redistributed):
# sentencepiece BPE (trained here) or GPT-2 BPE (RoBERTa's), fairseq-preprocess --only-source, and a
# count of the blocks of 2048 and 4096 tokens that training will cut (--sample-break-mode complete).
set -euo pipefail
source "$(dirname "$0")/common.sh"

GPT2_URLS=(
    https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/encoder.json
    https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/vocab.bpe
    https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/dict.txt
)

usage() {
    cat <<USAGE
usage: $0 --raw DIR

DIR holds plain text {train,valid,test}.txt (test optional): one paragraph a line, a blank line between
documents (the tests run this on data/sample/doc_en).

Environment (default):
  BPE         sentencepiece (train a BPE model on train.txt) or gpt2 (RoBERTa's GPT-2 BPE) (sentencepiece)
  VOCAB_SIZE  sentencepiece vocabulary size (32000)
  GPT2_DIR    folder with encoder.json, vocab.bpe, dict.txt; downloaded there when missing
              (\$WORK/gpt2_bpe; URLs: ${GPT2_URLS[*]})
  WORK        working folder (data/mlm)
  DEST        fairseq-preprocess output (data-bin/mlm)
  BLOCKS      block lengths to report ("2048 4096")
  WORKERS     processes for fairseq-preprocess (\$(nproc))
USAGE
}

BPE=${BPE:-sentencepiece}
VOCAB_SIZE=${VOCAB_SIZE:-32000}
WORK=${WORK:-data/mlm}
GPT2_DIR=${GPT2_DIR:-$WORK/gpt2_bpe}
DEST=${DEST:-data-bin/mlm}
BLOCKS=${BLOCKS:-2048 4096}
WORKERS=${WORKERS:-$(nproc)}
RAW=""
while (($#)); do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --raw) RAW=${2:?--raw needs a folder}; shift 2 ;;
        *) usage >&2; die "unknown argument $1" ;;
    esac
done
[[ -n $RAW ]] || { usage >&2; die "--raw DIR is required"; }
need_count VOCAB_SIZE 1 "the sentencepiece vocabulary; 32000 by default"
need_count WORKERS 1 "processes; the number of cores by default"
[[ $BLOCKS =~ ^[[:space:]]*[0-9]+([[:space:]]+[0-9]+)*[[:space:]]*$ ]] \
    || die "BLOCKS=\"$BLOCKS\" must be block lengths in tokens, whole numbers (e.g. BLOCKS=\"2048 4096\")"
need_cmd fairseq-preprocess
splits=(train valid); [[ -e $RAW/test.txt ]] && splits+=(test)
for split in "${splits[@]}"; do need_text "$RAW/$split.txt"; done
made_here "$WORK"/{spm_input.txt,spm.model,spm.vocab,train.bpe,valid.bpe,test.bpe} "$DEST.tmp"  # not GPT2_DIR: downloads stay
mkdir -p "$WORK"

case $BPE in
    sentencepiece)
        step "[1/3] sentencepiece BPE, vocabulary $VOCAB_SIZE, trained on $RAW/train.txt"
        grep -v '^\s*$' "$RAW/train.txt" > "$WORK/spm_input.txt"
        quietly "$HERE/mlm_text.py" train-spm --input "$WORK/spm_input.txt" --prefix "$WORK/spm" \
            --vocab-size "$VOCAB_SIZE" --threads "$WORKERS"
        rm "$WORK/spm_input.txt"
        enc=(--spm "$WORK/spm.model"); dict=()
        ;;
    gpt2)
        step "[1/3] GPT-2 BPE from $GPT2_DIR"
        if ! [[ -s $GPT2_DIR/encoder.json && -s $GPT2_DIR/vocab.bpe && -s $GPT2_DIR/dict.txt ]]; then
            fetch "$GPT2_DIR" "${GPT2_URLS[@]}"
        fi
        enc=(--gpt2 "$GPT2_DIR"); dict=(--srcdict "$GPT2_DIR/dict.txt")
        ;;
    *) die "BPE must be sentencepiece or gpt2, not $BPE" ;;
esac

step "[2/3] encoding ${splits[*]}"
for split in "${splits[@]}"; do
    quietly "$HERE/mlm_text.py" encode "${enc[@]}" < "$RAW/$split.txt" > "$WORK/$split.bpe"
    echo "$split: $(wc -l < "$WORK/$split.bpe") lines, $(wc -w < "$WORK/$split.bpe") tokens"
done

step "[3/3] fairseq-preprocess --only-source into $DEST"
prefs=(--trainpref "$WORK/train.bpe" --validpref "$WORK/valid.bpe")
[[ " ${splits[*]} " == *" test "* ]] && prefs+=(--testpref "$WORK/test.bpe")
preprocess_into "$DEST" --only-source --workers "$WORKERS" "${dict[@]}" "${prefs[@]}"
[[ $BPE == sentencepiece ]] && cp "$WORK/spm.model" "$DEST/spm.model"
# shellcheck disable=SC2086
quietly "$HERE/mlm_text.py" blocks "$DEST" --sizes $BLOCKS
echo "done: $DEST ($(wc -l < "$DEST/dict.txt") dictionary entries)"
