#!/usr/bin/env python
"""Does a masked language model read word order? Its masked-token perplexity on a subset, as it is and with
each block's tokens in a random order.

A model that predicts a masked token from the bag of words in its block (as one whose attention is still
spread evenly over the block does) scores the shuffled blocks about as well as the real ones: a ratio near 1.
A model that reads its neighbours loses on the shuffled blocks. The masks are the task's own (the
checkpoint's seed), so the perplexity as it is equals fairseq-validate's on the same blocks. The shuffle
moves each masked position's target with it, and keeps the block's first token (<s>) and the padding in
place.

  python scripts/mlm_order.py --data data-bin/mlm --subset test run/mlm-exact/checkpoint_last.pt run/mlm-eva/checkpoint_last.pt
"""

import argparse
import math

import torch


def shuffle_blocks(src, tgt, pad, generator):
    """src, tgt (B x N, right-padded): each row's tokens after the first in a random order of its own, the
    same order for src and tgt; padding stays at the end."""
    keys = torch.rand(src.shape, generator=generator)
    keys[:, 0] = -1.0
    keys[src.eq(pad)] = 2.0
    order = keys.argsort(dim=1)
    return src.gather(1, order), tgt.gather(1, order)


@torch.no_grad()
def masked_nll(model, src, tgt, pad, batch_blocks):
    """Summed negative log-likelihood (nats) of the masked tokens (tgt != pad), and their number."""
    total, count = 0.0, 0
    for i in range(0, src.size(0), batch_blocks):
        s, t = src[i:i + batch_blocks], tgt[i:i + batch_blocks]
        logits = model(s)[0]
        masked = t.ne(pad)
        total += torch.nn.functional.cross_entropy(logits[masked].float(), t[masked], reduction="sum").item()
        count += int(masked.sum())
    return total, count


def checkpoint_row(path, data, subset, num_blocks, seed, batch_blocks):
    from fairseq import checkpoint_utils

    import fairseq_eva.plugin  # noqa: F401  (registers the models the checkpoints name)

    state = checkpoint_utils.load_checkpoint_to_cpu(path, {"data": data})  # read once: the model and its updates
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    model = models[0].eval()
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    dataset.set_epoch(1)  # the masks depend on (seed, epoch, index); fairseq-validate reads epoch 1
    n = len(dataset) if num_blocks <= 0 else min(num_blocks, len(dataset))
    batch = dataset.collater([dataset[i] for i in range(n)])
    src, tgt = batch["net_input"]["src_tokens"], batch["target"]
    pad = task.source_dictionary.pad()
    nll, count = masked_nll(model, src, tgt, pad, batch_blocks)
    shuffled = shuffle_blocks(src, tgt, pad, torch.Generator().manual_seed(seed))
    nll_shuffled, _ = masked_nll(model, *shuffled, pad, batch_blocks)
    updates = state["optimizer_history"][-1].get("num_updates", "-")
    return dict(updates=updates, blocks=n, masked=count, ppl=math.exp(nll / count), shuffled=math.exp(nll_shuffled / count))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help="fairseq masked-LM checkpoints (masked_lm task)")
    parser.add_argument("--data", required=True, help="binarised data folder (the checkpoints' dictionary)")
    parser.add_argument("--subset", default="test", help="subset to read blocks from (test)")
    parser.add_argument("--num-blocks", type=int, default=0, help="the subset's first blocks only (0: all)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the shuffle (1)")
    parser.add_argument("--batch-blocks", type=int, default=16, help="blocks a forward pass (16)")
    args = parser.parse_args()
    print("| checkpoint | updates | blocks | masked tokens | perplexity | shuffled | ratio |")
    print("|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        r = checkpoint_row(path, args.data, args.subset, args.num_blocks, args.seed, args.batch_blocks)
        print(f"| {path} | {r['updates']} | {r['blocks']} | {r['masked']} | {r['ppl']:.2f} | {r['shuffled']:.2f} | "
              f"{r['shuffled'] / r['ppl']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
