#!/usr/bin/env bash
# Does the tiny EVA model learn like the same model with softmax attention? On the bundled sample
# (data/sample), train both for the same number of updates, with the same seed and settings, then report
#   translation, en->de (po_en_de): sacreBLEU of fairseq-generate --beam 4 --lenpen 0.6 on test
#                                   (outputs capped at 1.2 x source length + 10 tokens; all 500
#                                   sentences: fairseq 0.12.3 drops a last batch that is not a multiple
#                                   of --required-batch-size-multiple, 8 by default)
#                                   (transformer_eva_tiny: EVA vs --encoder-attention softmax)
#   language model (doc_en):        test perplexity of fairseq-eval-lm, context window 0 and 64
#                                   (transformer_lm_eva_tiny: EVA vs --decoder-attention softmax)
# A small CPU job (about 10 minutes on 2 cores); not a test. Results go to WORK/results.mt-lm.md.
set -euo pipefail

usage() {
    cat <<USAGE
usage: $0 WORK

Trains the tiny EVA and softmax models on the bundled sample (data/sample) for the same number of updates
and compares them: translation (sacreBLEU, beam 4) and language model (test perplexity, context windows
0 and 64). A CPU job of about 10 minutes on 2 cores; everything goes to the folder WORK, the table to
WORK/results.mt-lm.md. Run it again in the same WORK with more updates, and training continues from the
checkpoints there (fairseq-train resumes from checkpoint_last.pt): e.g. TASKS=mt MT_UPDATES=700 after a
first run.

Environment (default):
  MT_UPDATES  translation updates (300)
  LM_UPDATES  language-model updates (300)
  VOCAB       sentencepiece pieces (2000)
  TASKS       what to run ("mt lm")
  PYTHON      the python whose fairseq tools run it (.venv/bin/python)
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 1)) || { usage >&2; echo "error: give the WORK folder (e.g. /tmp/fairseq_eva_sample_learning)" >&2; exit 1; }
[[ $1 != -* ]] || { usage >&2; echo "error: unknown option $1" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$1
PY=${PYTHON:-$REPO/.venv/bin/python}
BIN=$(dirname "$PY")
TASKS=${TASKS:-mt lm}
MT_UPDATES=${MT_UPDATES:-300}
LM_UPDATES=${LM_UPDATES:-300}
VOCAB=${VOCAB:-2000}
USER_DIR=$REPO/fairseq_eva
[[ -f $USER_DIR/__init__.py ]] || { echo "error: no fairseq_eva plugin at '$USER_DIR' (the --user-dir this script passes): run it from the repository's scripts/ folder" >&2; exit 1; }
SAMPLE=$REPO/data/sample

for tool in fairseq-preprocess fairseq-train fairseq-generate fairseq-eval-lm; do
  [[ -x $BIN/$tool ]] || { echo "error: $BIN/$tool not found (run make setup, or set PYTHON)" >&2; exit 1; }
done
mkdir -p "$WORK"
cd "$WORK"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------- data: sentencepiece, binarised
if [[ ! -f mt-bin/dict.en.txt || ! -f lm-bin/dict.txt ]]; then
  log "sentencepiece ($VOCAB pieces) and fairseq-preprocess"
  "$PY" - "$SAMPLE" "$VOCAB" <<'EOF'
import os, sys
import sentencepiece as spm
sample, vocab = sys.argv[1], int(sys.argv[2])
def train_encode(inputs, prefix, files):
    spm.SentencePieceTrainer.train(input=",".join(inputs), model_prefix=prefix, vocab_size=vocab,
                                   character_coverage=1.0, num_threads=2, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    for src, dst in files:
        with open(src, encoding="utf-8") as fin, open(dst, "w", encoding="utf-8") as fout:
            for line in fin:
                fout.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
os.makedirs("mt-spm", exist_ok=True); os.makedirs("lm-spm", exist_ok=True)
splits = ("train", "valid", "test")
mt = f"{sample}/po_en_de"
train_encode([f"{mt}/train.en", f"{mt}/train.de"], "mt-spm/spm",
             [(f"{mt}/{s}.{l}", f"mt-spm/{s}.{l}") for s in splits for l in ("en", "de")])
lm = f"{sample}/doc_en"
train_encode([f"{lm}/train.txt"], "lm-spm/spm", [(f"{lm}/{s}.txt", f"lm-spm/{s}.txt") for s in splits])
EOF
  "$BIN/fairseq-preprocess" -s en -t de --trainpref mt-spm/train --validpref mt-spm/valid --testpref mt-spm/test \
    --destdir mt-bin --joined-dictionary --workers 2 > mt-bin.log 2>&1
  "$BIN/fairseq-preprocess" --only-source --trainpref lm-spm/train.txt --validpref lm-spm/valid.txt \
    --testpref lm-spm/test.txt --destdir lm-bin --workers 2 > lm-bin.log 2>&1
fi

# ---------------------------------------------------------------- translation
MT_TRAIN=(--user-dir "$USER_DIR" --cpu --task translation -s en -t de --arch transformer_eva_tiny
  --share-all-embeddings --dropout 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --lr 3e-3
  --lr-scheduler inverse_sqrt --warmup-updates 100 --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --max-tokens 4096 --max-update "$MT_UPDATES" --seed 1 --log-format json
  --log-interval 50 --no-epoch-checkpoints --max-source-positions 512 --max-target-positions 512
  --skip-invalid-size-inputs-valid-test)
declare -A BLEU MT_WALL PPL0 PPL64 LM_WALL
for attn in eva softmax; do
  [[ " $TASKS " == *" mt "* ]] || break
  log "translation, encoder self-attention $attn: $MT_UPDATES updates"
  start=$SECONDS
  "$BIN/fairseq-train" mt-bin "${MT_TRAIN[@]}" --encoder-attention "$attn" --save-dir "mt-$attn" > "mt-$attn.train.log" 2>&1
  MT_WALL[$attn]=$((SECONDS - start))
  "$BIN/fairseq-generate" mt-bin --user-dir "$USER_DIR" --cpu -s en -t de --path "mt-$attn/checkpoint_last.pt" \
    --beam 4 --lenpen 0.6 --max-len-a 1.2 --max-len-b 10 --remove-bpe sentencepiece --scoring sacrebleu \
    --max-tokens 8192 --required-batch-size-multiple 1 --gen-subset test \
    > "mt-$attn.generate.log" 2>&1
  BLEU[$attn]=$(grep -o 'BLEU = [0-9.]*' "mt-$attn.generate.log" | tail -1 | cut -d' ' -f3)
  log "  sacreBLEU ${BLEU[$attn]} (training ${MT_WALL[$attn]} s)"
done

# ---------------------------------------------------------------- language model
LM_TRAIN=(--user-dir "$USER_DIR" --cpu --task language_modeling --arch transformer_lm_eva_tiny
  --tokens-per-sample 128 --sample-break-mode none --share-decoder-input-output-embed --dropout 0.1
  --optimizer adam --adam-betas '(0.9,0.98)' --lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 100
  --criterion cross_entropy --max-tokens 4096 --max-update "$LM_UPDATES" --seed 1 --log-format json
  --log-interval 50 --no-epoch-checkpoints)
for attn in eva softmax; do
  [[ " $TASKS " == *" lm "* ]] || break
  log "language model, self-attention $attn: $LM_UPDATES updates"
  start=$SECONDS
  "$BIN/fairseq-train" lm-bin "${LM_TRAIN[@]}" --decoder-attention "$attn" --save-dir "lm-$attn" > "lm-$attn.train.log" 2>&1
  LM_WALL[$attn]=$((SECONDS - start))
  for cw in 0 64; do
    "$BIN/fairseq-eval-lm" lm-bin --user-dir "$USER_DIR" --cpu --path "lm-$attn/checkpoint_last.pt" \
      --tokens-per-sample 128 --context-window "$cw" --max-tokens 8192 --gen-subset test > "lm-$attn.eval$cw.log" 2>&1
  done
  PPL0[$attn]=$(grep -o 'Perplexity: [0-9.]*' "lm-$attn.eval0.log" | tail -1 | cut -d' ' -f2)
  PPL64[$attn]=$(grep -o 'Perplexity: [0-9.]*' "lm-$attn.eval64.log" | tail -1 | cut -d' ' -f2)
  log "  test perplexity ${PPL0[$attn]} (context window 0), ${PPL64[$attn]} (64) (training ${LM_WALL[$attn]} s)"
done

# ---------------------------------------------------------------- summary
{
  echo "| model | attention | updates | test metric | value | training wall time (s) |"
  echo "|---|---|---|---|---|---|"
  for attn in eva softmax; do
    [[ " $TASKS " == *" mt "* ]] || break
    echo "| transformer_eva_tiny (en-de) | $attn (encoder) | $MT_UPDATES | sacreBLEU, beam 4, lenpen 0.6 | ${BLEU[$attn]} | ${MT_WALL[$attn]} |"
  done
  for attn in eva softmax; do
    [[ " $TASKS " == *" lm "* ]] || break
    echo "| transformer_lm_eva_tiny | $attn | $LM_UPDATES | perplexity, context window 0 / 64 | ${PPL0[$attn]} / ${PPL64[$attn]} | ${LM_WALL[$attn]} |"
  done
} | tee "results.$(echo "$TASKS" | tr ' ' '-').md"
