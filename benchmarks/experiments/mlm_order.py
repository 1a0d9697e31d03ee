"""How much a masked LM reads word order: its perplexity on blocks as they are and with their tokens shuffled.
scripts/mlm_order.py is its command line."""

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
