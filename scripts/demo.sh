#!/usr/bin/env bash
# The main job: the whole pipeline of the paper's language experiments, at toy size, on the bundled real
# sample (data/sample), on a CPU, in minutes. The same scripts and configs as the full runs do the work.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() {
    cat <<USAGE
usage: $0

Preprocess (Moses + joint BPE + fairseq-preprocess; Wikitext-style tokens), train a tiny EVA and a tiny
softmax translation model, average their last checkpoints, beam search and BLEU; train a tiny EVA
language model and evaluate its perplexity with several context windows; print a results table and
plot the training curves. Re-runnable: each run starts its output folder afresh.

Environment (default):
  DEMO_OUT            output folder (outputs/demo)
  DEMO_SAMPLE         the sample (data/sample: po_en_de/ and doc_en/)
  DEMO_TRAIN_LINES    use only the first N training pairs / lines (all)
  DEMO_EVAL_LINES     use only the first N valid and test pairs / lines (all)
  DEMO_BPE_TOKENS     joint BPE merges (2000)
  DEMO_MT_EPOCHS      epochs of each translation model (8: about 1,050 updates)
  DEMO_MT_LR          their peak learning rate (0.01)
  DEMO_MT_MAX_TOKENS  tokens per translation batch (2048)
  DEMO_LM_UPDATES     updates of the language model (300)
  DEMO_LM_MAX_TOKENS  tokens per language-model batch (2048)
  DEMO_N_AVG          epoch checkpoints averaged (3)
  DEMO_LM_LENGTH      language-model training length (128)
  DEMO_LM_CONTEXTS    eval-lm context windows ("0 64 112": 0, 256 and 480 of 512 scaled to 128)
  NGPUS               0 (the demo runs on the CPU; set it to use GPUs)
  OMP_NUM_THREADS     threads per process (1)
  DEMO_PROGRESS       seconds between looks at the running jobs: a line for each whose progress
                      changed, a reminder after 4 looks without change (15)
USAGE
}
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 0)) || { usage >&2; die "no arguments expected (use the environment)"; }

cd "$ROOT"
OUT=${DEMO_OUT:-outputs/demo}
SAMPLE=${DEMO_SAMPLE:-data/sample}
TRAIN_LINES=${DEMO_TRAIN_LINES:-}
EVAL_LINES=${DEMO_EVAL_LINES:-}
BPE_TOKENS=${DEMO_BPE_TOKENS:-2000}
MT_EPOCHS=${DEMO_MT_EPOCHS:-8}
MT_LR=${DEMO_MT_LR:-0.01}
MT_MAX_TOKENS=${DEMO_MT_MAX_TOKENS:-2048}
LM_UPDATES=${DEMO_LM_UPDATES:-300}
LM_MAX_TOKENS=${DEMO_LM_MAX_TOKENS:-2048}
N_AVG=${DEMO_N_AVG:-3}
LM_LENGTH=${DEMO_LM_LENGTH:-128}
LM_CONTEXTS=${DEMO_LM_CONTEXTS:-0 64 112}
export NGPUS=${NGPUS:-0}
# One thread per process, and two jobs side by side where they are independent: on a small shared CPU
# this is several times faster than processes whose two threads fight for the cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
need_cmd fairseq-hydra-train
for f in po_en_de/{train,valid,test}.{en,de} doc_en/{train,valid,test}.txt; do
    [[ -s $SAMPLE/$f ]] || die "missing $SAMPLE/$f: the demo needs the bundled sample (data/sample)"
done

START=$SECONDS
STAGE="" STAGE_START=$SECONDS TIMES=()  # where the time goes: each stage's duration, printed at the end
stage_done() { [[ -z $STAGE ]] || TIMES+=("$(printf '  %-52s %5d s' "$STAGE" $((SECONDS - STAGE_START)))"); }
banner() {
    stage_done
    STAGE="[$1] ${3:-$2}" STAGE_START=$SECONDS
    echo; echo "################ [$1] $2   (+$((SECONDS - START)) s)"
}
# run_quiet LOG CMD...: the full output goes to LOG; progress lines (==> steps, fairseq's json
# records, results) are echoed; on failure, the end of LOG is shown
run_quiet() {
    local log=$1; shift
    echo "  log: $log"
    if ! "$@" > "$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "failed: $* (full log: $log)"
    fi
}
follow() { grep -E '^==>|\]\[(train|valid)\]|BLEU|^valid |^test |^subset|done:|averaging' "$1" | sed 's/^\[[^]]*\]//' || true; }

if [[ -e $OUT && -n $(ls -A "$OUT") && ! -e $OUT/.fairseq-eva-demo ]]; then
    die "$OUT exists and is not a demo output folder; set DEMO_OUT to another folder"
fi
rm -rf "$OUT"
mkdir -p "$OUT/logs"
touch "$OUT/.fairseq-eva-demo"
OUT=$(cd "$OUT" && pwd)

banner 1/6 "data: cut the sample into $OUT/sample" "cut the sample"
cut_lines() {  # cut_lines N SRC DST
    if [[ -n $1 ]]; then head -n "$1" "$2" > "$3"; else cp "$2" "$3"; fi
}
mkdir -p "$OUT/sample/po_en_de" "$OUT/sample/doc_en"
for l in en de; do
    cut_lines "$TRAIN_LINES" "$SAMPLE/po_en_de/train.$l" "$OUT/sample/po_en_de/train.$l"
    for s in valid test; do cut_lines "$EVAL_LINES" "$SAMPLE/po_en_de/$s.$l" "$OUT/sample/po_en_de/$s.$l"; done
done
cut_lines "$TRAIN_LINES" "$SAMPLE/doc_en/train.txt" "$OUT/sample/doc_en/train.txt"
for s in valid test; do cut_lines "$EVAL_LINES" "$SAMPLE/doc_en/$s.txt" "$OUT/sample/doc_en/$s.txt"; done
wc -l "$OUT"/sample/po_en_de/*.en "$OUT"/sample/doc_en/*.txt | sed '$d'

banner 2/6 "preprocess: WMT14 recipe on the En-De pairs (Moses, joint BPE $BPE_TOKENS, joined dictionary); Wikitext-103 recipe on the prose" \
    "preprocess (Moses, BPE, fairseq-preprocess)"
run_quiet "$OUT/logs/prep_mt.log" env WORK="$OUT/work/mt" DEST="$OUT/data-bin/mt" BPE_TOKENS="$BPE_TOKENS" \
    bash "$ROOT/data_prep/prepare_wmt14_en_de.sh" --raw "$OUT/sample/po_en_de"
follow "$OUT/logs/prep_mt.log"
run_quiet "$OUT/logs/prep_lm.log" env WORK="$OUT/work/lm" DEST="$OUT/data-bin/lm" THRESHOLD=2 \
    bash "$ROOT/data_prep/prepare_wikitext103.sh" --raw "$OUT/sample/doc_en"
follow "$OUT/logs/prep_lm.log"

PROGRESS=${DEMO_PROGRESS:-15}
declare -A JOBS GOALS BEGUN  # name -> pid, what it does and how far it goes, when it started
job() {  # job NAME GOAL CMD...: run in the background, output in logs/NAME.log
    local name=$1 goal=$2; shift 2
    echo "  started $name: $goal"
    run_quiet "$OUT/logs/$name.log" "$@" &
    JOBS[$name]=$!
    GOALS[$name]=$goal
    BEGUN[$name]=$SECONDS
}
declare -A SHOWN SINCE SAID  # name -> the progress line last printed, since when it holds, when it was printed
wait_jobs() {  # wait for the jobs; every PROGRESS seconds, a line for each running job whose progress changed
    local name failed=0 ticks=0 running now
    while :; do
        running=()
        for name in "${!JOBS[@]}"; do
            if kill -0 "${JOBS[$name]}" 2>/dev/null; then
                running+=("$name")
            elif [[ -n ${BEGUN[$name]:-} ]]; then  # just ended: how long it took (which job the stage waits for)
                echo "  [+$((SECONDS - START)) s] $name: ended after $((SECONDS - BEGUN[$name])) s"
                unset "BEGUN[$name]"
            fi
        done
        ((${#running[@]})) || break
        if ((ticks > 0 && ticks % PROGRESS == 0)); then
            for name in "${running[@]}"; do
                now=$(log_progress "$OUT/logs/$name.log")  # (scripts/lib.sh)
                if [[ $now != "${SHOWN[$name]:-}" ]]; then
                    SHOWN[$name]=$now SINCE[$name]=$SECONDS SAID[$name]=$SECONDS
                    echo "  [+$((SECONDS - START)) s] $name: $now  (${GOALS[$name]})"
                elif ((SECONDS - SAID[$name] >= 4 * PROGRESS)); then  # unchanged: a reminder now and then
                    SAID[$name]=$SECONDS
                    echo "  [+$((SECONDS - START)) s] $name: $now, for $((SECONDS - SINCE[$name])) s  (${GOALS[$name]})"
                fi
            done
        fi
        sleep 1
        ticks=$((ticks + 1))
    done
    for name in "${!JOBS[@]}"; do wait "${JOBS[$name]}" || failed=1; done
    JOBS=()
    ((failed == 0)) || die "a job failed (logs in $OUT/logs)"
}

# Tiny translation models: the paper's configs with the tiny architecture (2+2 layers, 64 units),
# EVA with abs(E) = 8 (window 4 with overlap) and C = 4 chunks, a short schedule.
MT_TINY=(model._name=transformer_eva_tiny "optimization.max_epoch=$MT_EPOCHS" "optimization.lr=[$MT_LR]"
    lr_scheduler.warmup_updates=60 "checkpoint.keep_last_epochs=$N_AVG" common.log_interval=10
    dataset.num_workers=0)
train_mt() {  # train_mt NAME VARIANT overrides...
    local name=$1 variant=$2; shift 2
    job "train_$name" "$MT_EPOCHS epochs of configs/wmt14_en_de_$variant.yaml, tiny" env DATA="$OUT/data-bin/mt" SAVE_DIR="$OUT/checkpoints/$name" \
        MAX_TOKENS="$MT_MAX_TOKENS" TOTAL_TOKENS="$MT_MAX_TOKENS" \
        bash "$ROOT/scripts/train_wmt14.sh" "$variant" "${MT_TINY[@]}" "$@"
}
banner 3/6 "train a tiny EVA and a tiny softmax translation model side by side ($MT_EPOCHS epochs each; configs/wmt14_en_de_{eva32,softmax}.yaml, tiny)" \
    "train the two translation models"
train_mt mt_eva eva32 model.eva_window_size=4 model.eva_num_chunks=4
train_mt mt_softmax softmax
wait_jobs
for name in mt_eva mt_softmax; do echo "-- $name"; follow "$OUT/logs/train_$name.log" | grep -v train_inner; done

banner 4/6 "average the last $N_AVG checkpoints, beam search (beam 4, lenpen 0.6), BLEU  |  meanwhile: train a tiny EVA language model ($LM_UPDATES updates, length $LM_LENGTH; configs/wikitext103_eva_16l.yaml, tiny)" \
    "beam search and BLEU | train the language model"
eval_mt() {
    local name
    for name in mt_eva mt_softmax; do
        echo "==> $name: scripts/eval_wmt14.sh, log $OUT/logs/eval_$name.log"
        # its steps ("==>" lines) go on to this job's log too, for the progress lines
        env DATA="$OUT/data-bin/mt" N_AVG="$N_AVG" bash "$ROOT/scripts/eval_wmt14.sh" "$OUT/checkpoints/$name" 2>&1 \
            | tee "$OUT/logs/eval_$name.log" | { grep --line-buffered '^==>' || true; } \
            || { tail -n 30 "$OUT/logs/eval_$name.log"; return 1; }
    done
}
job eval_mt "average, beam search and BLEU of mt_eva, then mt_softmax" eval_mt
# the paper's adaptive-input architecture, shrunk: 2 layers of 64 units, adaptive cutoffs for a small vocabulary;
# causal EVA with abs(E) = 16 and chunks of 4
VOCAB=$(wc -l < "$OUT/data-bin/lm/dict.txt")
CUTOFFS="$((VOCAB / 6)),$((VOCAB / 2))"
job train_lm_eva "$LM_UPDATES updates of configs/wikitext103_eva_16l.yaml, tiny" env DATA="$OUT/data-bin/lm" SAVE_DIR="$OUT/checkpoints/lm_eva" \
    MAX_TOKENS="$LM_MAX_TOKENS" TOTAL_TOKENS="$LM_MAX_TOKENS" \
    bash "$ROOT/scripts/train_wikitext103.sh" eva_16l "optimization.max_update=$LM_UPDATES" \
    "task.tokens_per_sample=$LM_LENGTH" +model.decoder_layers=2 +model.decoder_embed_dim=64 +model.decoder_input_dim=64 \
    +model.decoder_output_dim=64 +model.decoder_ffn_embed_dim=256 +model.decoder_attention_heads=4 \
    "+model.adaptive_input_cutoff='$CUTOFFS'" "+model.adaptive_softmax_cutoff='$CUTOFFS'" \
    model.eva_window_size=16 model.eva_chunk_size=4 model.dropout=0.1 "optimization.lr=[0.5]" \
    lr_scheduler.warmup_updates=60 lr_scheduler.lr_period_updates="$LM_UPDATES" lr_scheduler.min_lr=0.01 \
    common.log_interval=10 dataset.num_workers=0
wait_jobs
for name in mt_eva mt_softmax; do echo "-- $name"; follow "$OUT/logs/eval_$name.log"; done
echo "-- lm_eva"; follow "$OUT/logs/train_lm_eva.log" | grep -v train_inner

banner 5/6 "eval-lm: valid and test perplexity with context windows $LM_CONTEXTS" "eval-lm perplexity"
run_quiet "$OUT/logs/eval_lm_eva.log" env DATA="$OUT/data-bin/lm" TOKENS_PER_SAMPLE="$LM_LENGTH" \
    CONTEXTS="$LM_CONTEXTS" BATCH_SIZE=32 bash "$ROOT/scripts/eval_lm.sh" "$OUT/checkpoints/lm_eva/checkpoint_best.pt"
follow "$OUT/logs/eval_lm_eva.log"

banner 6/6 "results table and training curves" "results table and curves"
"$PYTHON" "$ROOT/scripts/demo_report.py" --out "$OUT" --wall-seconds $((SECONDS - START))
stage_done
echo
echo "where the time went (wall time of each stage):"
printf '%s\n' "${TIMES[@]}"
echo "demo done in $((SECONDS - START)) s: $OUT/results.md, $OUT/curves.png"
