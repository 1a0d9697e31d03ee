# Shared helpers of the training and evaluation scripts (sourced, not run).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run by itself: say what it is
    usage="usage: source scripts/lib.sh (from a script): the helpers that scripts/train_*.sh, eval_*.sh and
demo.sh are sourced with; it does nothing by itself. Run one of those with --help."
    if [[ ${1:-} == -h || ${1:-} == --help ]]; then echo "$usage"; exit 0; fi
    echo "$usage" >&2; exit 1
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
USER_DIR=$ROOT/fairseq_eva
# fairseq imports --user-dir before the plugin can say anything, and a wrong one ends in a traceback
[[ -f $USER_DIR/__init__.py ]] || { echo "error: no fairseq_eva plugin at '$USER_DIR' (the --user-dir the scripts pass): run the scripts from the repository's scripts/ folder" >&2; exit 1; }
PYTHON=${PYTHON:-python}
# OpenMP threads that wait sleep instead of spinning: beside another busy process the spinning threads take the
# cores that the working ones need (on 2 cores, training 3.5 times slower than alone, 1.9 times with it; 1.1 times
# alone: docs/results.md, "On a shared CPU"). OpenMP reads it when torch starts: it is set here, not in the plugin.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

die() { echo "error: $*" >&2; exit 1; }
step() { echo; echo "==> $*"; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: run 'make setup' and put .venv/bin on PATH"; }
# shell_words ARG...: the arguments as one line that a shell reads back as the same words (to paste)
shell_words() {
    local word safe='^[A-Za-z0-9_./:=,+@%-]+$' out=()
    for word in "$@"; do
        if [[ $word =~ $safe ]]; then out+=("$word"); else out+=("'${word//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}

# need_data DIR PREP: DIR must hold a fairseq-preprocess output (a dry run only says that it does not yet)
need_data() {
    compgen -G "$1/dict*.txt" >/dev/null && return
    local missing="no binarised data in '$1' (no dict*.txt)"
    [[ ${DRY_RUN:-0} == 1 ]] || die "$missing: run $2 first, or set DATA"
    echo "note: $missing yet: run $2 before the command below, or set DATA" >&2
}

# need_checkpoint FILE
need_checkpoint() { [[ -s $1 ]] || die "no checkpoint '$1': train one first (or give the right path)"; }

# number of GPUs: $NGPUS, else all that torch sees (0: train on the CPU)
count_gpus() {
    if [[ -n ${NGPUS:-} ]]; then echo "$NGPUS"; return; fi
    "$PYTHON" -c 'import torch; print(torch.cuda.device_count())'
}

# config_value NAME KEY: a value of configs/NAME.yaml (e.g. dataset.max_tokens)
config_value() {
    local file=$ROOT/configs/$1.yaml
    [[ -s $file ]] || die "no config $file (see ls $ROOT/configs)"
    "$PYTHON" -c 'import sys; from omegaconf import OmegaConf
print(OmegaConf.select(OmegaConf.load(sys.argv[1]), sys.argv[2]))' "$file" "$2"
}

# log_progress LOG: how far the job writing LOG is: the epoch and update of fairseq's last training record
# (train_inner, valid with its loss, or the epoch's train summary), else its last "==>" step, else "starting"
log_progress() {
    local line
    line=$(grep -E '\]\[(train_inner|valid|train)\]' "$1" 2>/dev/null | tail -n 1 | sed -nE \
        -e 's/.*"epoch": ([0-9]+).*"valid_loss": "([^"]+)".*"valid_num_updates": "([0-9]+)".*/epoch \1, update \3, valid loss \2/p' -e t \
        -e 's/.*"epoch": ([0-9]+).*"(train_)?num_updates": "([0-9]+)".*/epoch \1, update \3/p')
    [[ -n $line ]] || line=$(grep -E '^==>' "$1" 2>/dev/null | tail -n 1)
    echo "${line:-starting}"
}

# ceil_div A B
ceil_div() { echo $(( ($1 + $2 - 1) / $2 )); }

# run_training CONFIG BATCH_KEY PER_DEVICE TOTAL [hydra overrides...]
# Trains with fairseq-hydra-train on configs/CONFIG.yaml. update_freq = ceil(TOTAL / (PER_DEVICE x processes
# per node x NNODES)) keeps the effective batch of the paper (UPDATE_FREQ overrides it). With more than one
# process in all, torchrun starts this node's processes and fairseq joins them into one data-parallel group
# through env:// (fairseq's own options; fairseq_eva/fairseq_fixes/distributed.py says why they must be explicit).
run_training() {
    local config=$1 batch_key=$2 per_device=$3 total=$4; shift 4
    need_cmd fairseq-hydra-train
    local gpus nnodes=${NNODES:-1} nproc world uf
    gpus=$(count_gpus)
    nproc=${NPROC_PER_NODE:-$(( gpus > 0 ? gpus : 1 ))}
    world=$(( nproc * nnodes ))
    uf=${UPDATE_FREQ:-$(ceil_div "$total" $(( per_device * world )))}
    if (( per_device * world * uf != total )); then
        echo "warning: effective batch $(( per_device * world * uf )) ($batch_key $per_device x $world processes x update_freq $uf) differs from the paper's $total" >&2
    fi
    local args=(--config-dir "$ROOT/configs" --config-name "$config"
        "common.user_dir=$USER_DIR" "task.data=$DATA" "checkpoint.save_dir=$SAVE_DIR"
        "$batch_key=$per_device" "optimization.update_freq=[$uf]"
        "distributed_training.distributed_world_size=$world")
    if (( gpus == 0 )); then
        args+=(common.cpu=true common.fp16=false)
    fi
    local cmd=(fairseq-hydra-train "${args[@]}" "$@")
    if (( world > 1 )); then
        args+=(distributed_training.distributed_init_method=env:// 'distributed_training.distributed_rank=${oc.env:RANK}'
               distributed_training.distributed_no_spawn=true)
        if (( gpus == 0 )); then  # NCCL and PyTorch's DDP wrapper (as fairseq calls it) need GPUs
            args+=(distributed_training.distributed_backend=gloo distributed_training.ddp_backend=legacy_ddp)
        fi
        need_cmd torchrun
        local launch=(--standalone --nproc-per-node "$nproc")  # one node: a free port on localhost
        if (( nnodes > 1 )); then
            [[ -n ${MASTER_ADDR:-} && -n ${NODE_RANK:-} ]] || die "NNODES=$nnodes needs NODE_RANK and MASTER_ADDR (and MASTER_PORT) on every node"
            launch=(--nnodes "$nnodes" --node-rank "$NODE_RANK" --nproc-per-node "$nproc"
                    --master-addr "$MASTER_ADDR" --master-port "${MASTER_PORT:-29500}")
        fi
        cmd=(torchrun "${launch[@]}" "$(command -v fairseq-hydra-train)" "${args[@]}" "$@")
    fi
    echo "config $config: $world process(es) ($nproc per node x $nnodes node(s), $gpus GPU(s)), $batch_key $per_device, update_freq $uf"
    echo "+ $(shell_words "${cmd[@]}")"
    [[ ${DRY_RUN:-0} == 1 ]] && return 0
    "${cmd[@]}"  # the save dir is made by hydra or fairseq, where the overrides say
}

# Help text shared by the training scripts.
TRAIN_ENV_HELP="Environment (default):
  NGPUS        GPUs to use on this node (all that torch sees; 0 = CPU, fp16 off)
  NPROC_PER_NODE  training processes on this node (one per GPU; 1 on the CPU); with more than one
               process in all, torchrun starts them (NCCL on GPUs, gloo on the CPU)
  NNODES       nodes (1); with more, also NODE_RANK, MASTER_ADDR, MASTER_PORT (29500) on every node
               (several \"nodes\" on one machine: MASTER_ADDR=127.0.0.1)
  UPDATE_FREQ  gradient accumulation (computed: effective batch / (per-process batch x processes))
  DRY_RUN      1 = print the command and stop (the data need not be there yet)
Further arguments are hydra overrides, e.g. optimization.max_update=1000 model.dropout=0.2
A stopped run resumes from SAVE_DIR/checkpoint_last.pt when started again with the same command."
