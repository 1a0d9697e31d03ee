#!/usr/bin/env bash
# WMT14 English-German as in the paper (and fairseq's scaling-NMT recipe): ~4.5M training pairs
# (Europarl v7 + Common Crawl + News Commentary v9), newstest2013 as valid, newstest2014 as test,
# Moses tokenisation (sacremoses), a joint BPE of 32K merges (subword-nmt), fairseq-preprocess with a
# joined dictionary.
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
    cat <<USAGE
usage: $0 [--local DIR | --raw DIR]

Downloads, tokenises, BPE-encodes and binarises WMT14 En-De into \$DEST.
  (no option)  download the official archives from statmt.org into \$WORK/orig (resumable)
  --local DIR  use the archives already downloaded into DIR (same file names as the URLs below)
  --raw DIR    skip download and extraction: DIR holds plain text {train,valid,test}.{en,de},
               one sentence a line (the tests run this on data/sample/po_en_de)

Environment (default):
  WORK        working folder for downloads and intermediate text (data/wmt14_en_de)
  DEST        fairseq-preprocess output (data-bin/wmt14_en_de)
  BPE_TOKENS  number of joint BPE merges (32000)
  MAX_LEN     longest training sentence kept, in BPE tokens (250); RATIO length ratio (1.5)
  AGGRESSIVE  1 = Moses aggressive dash splitting (0, as in the data of the paper's BLEU)
  WORKERS     processes for tokenisation and binarisation (\$(nproc))
URLs:
$(printf '  %s\n' "${URLS[@]}")
USAGE
}

URLS=(
    http://statmt.org/wmt13/training-parallel-europarl-v7.tgz
    http://statmt.org/wmt13/training-parallel-commoncrawl.tgz
    http://statmt.org/wmt14/training-parallel-nc-v9.tgz
    http://statmt.org/wmt14/dev.tgz
    http://statmt.org/wmt14/test-full.tgz
)
CORPORA=(training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v9.de-en)

WORK=${WORK:-data/wmt14_en_de}
DEST=${DEST:-data-bin/wmt14_en_de}
BPE_TOKENS=${BPE_TOKENS:-32000}
MAX_LEN=${MAX_LEN:-250}
RATIO=${RATIO:-1.5}
AGGRESSIVE=${AGGRESSIVE:-0}
WORKERS=${WORKERS:-$(nproc)}
LOCAL="" RAW=""
while (($#)); do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --local) LOCAL=${2:?--local needs a folder}; shift 2 ;;
        --raw) RAW=${2:?--raw needs a folder}; shift 2 ;;
        *) usage >&2; die "unknown argument $1" ;;
    esac
done
need_count BPE_TOKENS 1 "joint BPE merges, 32000 by default"
need_count MAX_LEN 1 "the longest training sentence kept, in BPE tokens; 250 by default"
need_number RATIO "the largest length ratio of a training pair; 1.5 by default"
[[ $AGGRESSIVE == 0 || $AGGRESSIVE == 1 ]] || die "AGGRESSIVE=$AGGRESSIVE must be 0 or 1"
need_count WORKERS 1 "processes; the number of cores by default"
need_cmd fairseq-preprocess
need_cmd subword-nmt
if [[ -n $RAW ]]; then
    need_text "$RAW"/{train,valid,test}.{en,de}
elif [[ -n $LOCAL ]]; then
    for url in "${URLS[@]}"; do need_file "$LOCAL/$(basename "$url")"; done
fi
made_here "$WORK"/{raw,tok,bpe,extracted} "$DEST.tmp"  # not $WORK/orig: downloads stay
mkdir -p "$WORK/raw" "$WORK/tok" "$WORK/bpe"
src=en tgt=de

if [[ -n $RAW ]]; then
    step "[1/5] raw text from $RAW"
    for f in {train,valid,test}.{en,de}; do cp "$RAW/$f" "$WORK/raw/$f"; done
else
    ORIG=$WORK/orig
    if [[ -n $LOCAL ]]; then
        step "[1/5] archives from $LOCAL"
        ORIG=$LOCAL
    else
        step "[1/5] download into $ORIG"
        fetch "$ORIG" "${URLS[@]}"
    fi
    X=$WORK/extracted
    mkdir -p "$X"
    for url in "${URLS[@]}"; do
        echo "extracting $(basename "$url")"
        tar -xzf "$ORIG/$(basename "$url")" -C "$X" \
            || die "cannot extract $ORIG/$(basename "$url") (damaged or incomplete?): download it again"
    done
    for l in $src $tgt; do
        : > "$WORK/raw/train.$l"
        for c in "${CORPORA[@]}"; do need_text "$X/$c.$l"; cat "$X/$c.$l" >> "$WORK/raw/train.$l"; done
        need_text "$X/dev/newstest2013.$l"
        cp "$X/dev/newstest2013.$l" "$WORK/raw/valid.$l"
        if [[ $l == "$src" ]]; then t=src; else t=ref; fi
        sgm=$X/test-full/newstest2014-deen-$t.$l.sgm
        need_text "$sgm"
        grep '<seg id' "$sgm" | sed -e 's/<seg id="[0-9]*">\s*//g' -e 's/\s*<\/seg>\s*//g' -e "s/\’/\'/g" \
            > "$WORK/raw/test.$l"
    done
fi
need_text "$WORK"/raw/{train,valid,test}.{$src,$tgt}
for split in train valid test; do
    n_src=$(wc -l < "$WORK/raw/$split.$src"); n_tgt=$(wc -l < "$WORK/raw/$split.$tgt")
    [[ $n_src == "$n_tgt" ]] || die "$split.$src has $n_src lines but $split.$tgt has $n_tgt"
    echo "$split: $n_src pairs"
done

step "[2/5] Moses tokenisation (sacremoses, $WORKERS workers)"
dash=(); [[ $AGGRESSIVE == 1 ]] && dash=(-a)
for split in train valid test; do
    for l in $src $tgt; do
        quietly "$HERE/moses.py" tokenize -l $l "${dash[@]}" -j "$WORKERS" < "$WORK/raw/$split.$l" > "$WORK/tok/$split.$l"
    done
done

step "[3/5] joint BPE, $BPE_TOKENS merges (subword-nmt)"
quietly subword-nmt learn-joint-bpe-and-vocab --input "$WORK/tok/train.$src" "$WORK/tok/train.$tgt" -s "$BPE_TOKENS" \
    -o "$WORK/bpe/code" --write-vocabulary "$WORK/bpe/vocab.$src" "$WORK/bpe/vocab.$tgt"
for split in train valid test; do
    for l in $src $tgt; do
        quietly subword-nmt apply-bpe -c "$WORK/bpe/code" --vocabulary "$WORK/bpe/vocab.$l" --vocabulary-threshold 50 \
            < "$WORK/tok/$split.$l" > "$WORK/bpe/$split.$l"
    done
done

step "[4/5] keep training pairs of 1..$MAX_LEN tokens with a length ratio <= $RATIO (clean-corpus-n)"
paste -d '\t' "$WORK/bpe/train.$src" "$WORK/bpe/train.$tgt" \
    | awk -F'\t' -v max="$MAX_LEN" -v r="$RATIO" \
        '{ n = split($1, a, " "); m = split($2, b, " ") }
         n >= 1 && m >= 1 && n <= max && m <= max && n <= r * m && m <= r * n' > "$WORK/bpe/train.clean.tsv"
cut -f1 "$WORK/bpe/train.clean.tsv" > "$WORK/bpe/train.clean.$src"
cut -f2 "$WORK/bpe/train.clean.tsv" > "$WORK/bpe/train.clean.$tgt"
rm "$WORK/bpe/train.clean.tsv"
[[ -s $WORK/bpe/train.clean.$src ]] || die "no training pair of 1..$MAX_LEN tokens with a length ratio <= $RATIO in $WORK/bpe/train.{$src,$tgt}"
echo "train: $(wc -l < "$WORK/bpe/train.clean.$src") of $(wc -l < "$WORK/bpe/train.$src") pairs kept"

step "[5/5] fairseq-preprocess (joined dictionary) into $DEST"
preprocess_into "$DEST" --source-lang $src --target-lang $tgt --joined-dictionary --workers "$WORKERS" \
    --trainpref "$WORK/bpe/train.clean" --validpref "$WORK/bpe/valid" --testpref "$WORK/bpe/test"
# what evaluation and translation of new text need: the BPE codes and the untokenised test set
cp "$WORK/bpe/code" "$DEST/bpecodes"
for l in $src $tgt; do cp "$WORK/raw/test.$l" "$DEST/raw.test.$l"; done
echo "done: $DEST ($(wc -l < "$DEST/dict.$src.txt") dictionary entries)"
