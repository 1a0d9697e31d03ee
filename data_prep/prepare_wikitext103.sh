#!/usr/bin/env bash
# Wikitext-103 for language modelling, as in fairseq's language_model example: the official
# token-level release, binarised with fairseq-preprocess --only-source (its whole vocabulary, 267K words).
set -euo pipefail
source "$(dirname "$0")/common.sh"

URL=https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip

usage() {
    cat <<USAGE
usage: $0 [--local DIR | --raw DIR]

  (no option)  download $URL into \$WORK (resumable) and unzip it
  --local DIR  DIR holds wikitext-103-v1.zip, or its unzipped wiki.{train,valid,test}.tokens
  --raw DIR    any English text as DIR/{train,valid,test}.txt: it is Moses-tokenised with aggressive
               dash splitting ("@-@", as in Wikitext) first (the tests run this on data/sample/doc_en)

Environment (default):
  WORK     working folder (data/wikitext-103)
  DEST     fairseq-preprocess output (data-bin/wikitext-103)
  THRESHOLD  map words seen fewer than THRESHOLD times in train to <unk> (0: keep all, as for
             Wikitext-103, whose text already has its <unk>s; 2 drops the words seen once)
  WORKERS  processes (\$(nproc))
USAGE
}

WORK=${WORK:-data/wikitext-103}
DEST=${DEST:-data-bin/wikitext-103}
THRESHOLD=${THRESHOLD:-0}
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
need_count THRESHOLD 0 "the count below which a word becomes <unk>; 0 by default"
need_count WORKERS 1 "processes; the number of cores by default"
need_cmd fairseq-preprocess
if [[ -n $RAW ]]; then
    need_text "$RAW"/{train,valid,test}.txt
elif [[ -n $LOCAL && -e $LOCAL/wiki.train.tokens ]]; then
    need_text "$LOCAL"/wiki.{train,valid,test}.tokens
elif [[ -n $LOCAL ]]; then
    need_file "$LOCAL/$(basename $URL)"
fi
made_here "$WORK"/{tokens,wikitext-103} "$DEST.tmp"  # not the downloaded zip
mkdir -p "$WORK"

if [[ -n $RAW ]]; then
    step "[1/2] Moses-tokenising the plain text in $RAW"
    TOK=$WORK/tokens
    mkdir -p "$TOK"
    for split in train valid test; do
        quietly "$HERE/moses.py" tokenize -l en -a -j "$WORKERS" < "$RAW/$split.txt" > "$TOK/wiki.$split.tokens"
    done
else
    if [[ -n $LOCAL && -e $LOCAL/wiki.train.tokens ]]; then
        step "[1/2] token files from $LOCAL"
        TOK=$LOCAL
    else
        if [[ -n $LOCAL ]]; then
            step "[1/2] archive from $LOCAL"
            zip=$LOCAL/$(basename $URL)
        else
            step "[1/2] download into $WORK"
            fetch "$WORK" "$URL"
            zip=$WORK/$(basename $URL)
        fi
        "$PYTHON" -m zipfile -e "$zip" "$WORK" 2>/dev/null \
            || die "cannot extract $zip (damaged or incomplete?): download it again"
        TOK=$WORK/wikitext-103
    fi
fi
need_text "$TOK"/wiki.{train,valid,test}.tokens
for split in train valid test; do echo "$split: $(wc -w < "$TOK/wiki.$split.tokens") tokens"; done

step "[2/2] fairseq-preprocess --only-source into $DEST"
preprocess_into "$DEST" --only-source --thresholdsrc "$THRESHOLD" --workers "$WORKERS" \
    --trainpref "$TOK/wiki.train.tokens" --validpref "$TOK/wiki.valid.tokens" --testpref "$TOK/wiki.test.tokens"
echo "done: $DEST ($(wc -l < "$DEST/dict.txt") dictionary entries)"
