#!/bin/bash
# usage: bash benchmarks/mlm_warmup_device.sh BUDGET_MINUTES [check]
# The masked LM on a GPU with a warm-up of 1000 updates, exact and eva-32-16 seed 1 side by side (the run of
# benchmarks/results/mlm_h200_warmup1000). gpu_in/bin: scripts/long_context.py's binarised data (256 pieces);
# .whl: fairseq and its needs as wheels, for a machine without a package index.
M=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch,triton,sys;print(torch.__version__, triton.__version__, sys.version.split()[0])"; echo "commit e1fad15"; } > $OUT/gpu.txt
if [ "$2" = check ]; then
  timeout 100 python3 -m benchmarks.gpu_check --out $OUT/check --work /tmp/gpu_work --parts correctness --budget 60 > $OUT/check.log 2>&1; echo "check rc $?"
  tail -3 $OUT/check.log
fi
for w in w1 w2; do [ -d /tmp/$w/bin ] || { mkdir -p /tmp/$w && cp -r gpu_in/bin /tmp/$w/bin; }; done
A="--task mlm --device cuda --tokens-per-sample 512 --blocks-per-batch 128 --layers 2 --dim 128 --ffn 512 --heads 4 --lr 2e-3 --vocab 256 --validate-every 250 --warmup 1000 --budget-minutes $M"
python3 scripts/long_context.py doc_en --work /tmp/w1 $A --rows exact --seeds 1 > $OUT/progress_exact_$M.log 2>&1 &
python3 scripts/long_context.py doc_en --work /tmp/w2 $A --rows eva-32-16 --seeds 1 > $OUT/progress_eva_$M.log 2>&1 &
wait
for w in w1 w2; do
  mkdir -p $OUT/$w; cp /tmp/$w/results.md /tmp/$w/mlm_curves.png $OUT/$w/ 2>/dev/null
  for r in /tmp/$w/mlm-*; do mkdir -p $OUT/$w/$(basename $r); cp $r/command.txt $r/curve.jsonl $r/load.json $r/test_ppl.json $r/validate.test.log $r/train.log $r/checkpoint_last.pt $OUT/$w/$(basename $r)/ 2>/dev/null; done
done
tail -4 $OUT/progress_*_$M.log
