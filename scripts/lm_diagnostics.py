#!/usr/bin/env python
"""Where does a causal language model lose, and how do its EVA layers weigh the chunks?

For each checkpoint (fairseq language models: EVA or softmax), on the first blocks of a subset:
  1. the loss (nats) by position: in the first window of the sample (only local keys exist there),
     and, in later windows, by position inside the window (its first queries see one local key plus
     the chunks);
  2. for each causal EVA self-attention layer, on the layer's own inputs:
     - the scale of the logits s(q, k) of the local keys, of the exact keys before E^n and of the
       chunk summaries s(q, k~);
     - the share of the attention that goes outside E^n: exact softmax (same q, k, same bias inside E, with a
       --eva-chunk-logit-offset moved from the bias back to the chunk logits)
       against EVA's chunks; and log sum exp of the logits of the keys before E^n against that of the
       chunk summaries (a chunk of s keys summarised by one k~ starts log(s) too low);
     - the relative error of the layer's EVA output against exact softmax attention;
  3. for an EVA model with chunks, the loss again with the chunks removed at test time (local attention
     with the same weights): what the chunk summaries carry.
Without a checkpoint (--init), the same layer statistics of a freshly initialised EVAAttention on
LayerNorm'd Gaussian inputs. Everything is computed in evaluation mode (omega = mu, no dropout).

  python scripts/lm_diagnostics.py --data data-bin/lm --subset valid run/eva/checkpoint_last.pt run/local/checkpoint_last.pt
  python scripts/lm_diagnostics.py --init --embed-dim 256 --heads 4
"""

import argparse
import math

import torch

from benchmarks.experiments.lm_diagnostics import checkpoint_report, layer_stats, print_stats


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", help="fairseq language-model checkpoints")
    parser.add_argument("--data", help="binarised data folder (the checkpoint's dictionary)")
    parser.add_argument("--subset", default="valid", help="subset to read blocks from (valid)")
    parser.add_argument("--num-blocks", type=int, default=32, help="blocks of tokens_per_sample to use (32)")
    parser.add_argument("--init", action="store_true", help="statistics of a fresh EVAAttention instead")
    parser.add_argument("--embed-dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    if args.init:
        from fairseq_eva.attention import EVAAttention

        attn = EVAAttention(args.embed_dim, args.heads, causal=True, window_size=args.window,
                            chunk_size=args.chunk_size).eval()
        x = torch.nn.functional.layer_norm(torch.randn(2, args.length, args.embed_dim), (args.embed_dim,))
        with torch.no_grad():
            print_stats(f"init (d_model {args.embed_dim}, {args.heads} heads, w {args.window}, s {args.chunk_size},"
                        f" log s = {math.log(args.chunk_size):.3f})", layer_stats(attn, x))
    elif not args.checkpoints or not args.data:
        parser.error("give checkpoints and --data, or --init")
    for path in args.checkpoints:
        checkpoint_report(path, args.data, args.subset, args.num_blocks, args.window)


if __name__ == "__main__":
    main()
