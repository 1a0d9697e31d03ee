"""Sub-word encoding of a plain-text corpus for masked language modelling, and its block counts.

    python data_prep/mlm_text.py train-spm --input train.txt --prefix OUT/spm --vocab-size 32000
    python data_prep/mlm_text.py encode --spm OUT/spm.model < raw > encoded
    python data_prep/mlm_text.py encode --gpt2 DIR < raw > encoded      # DIR: encoder.json, vocab.bpe
    python data_prep/mlm_text.py blocks DATA_BIN --sizes 2048 4096

Input: one paragraph a line, a blank line between documents. Blank lines stay blank, so that
fairseq's `complete_doc` break mode sees the document boundaries. `encode --spm` writes sentencepiece
pieces; `encode --gpt2` writes GPT-2 BPE ids as fairseq's RoBERTa recipe does (binarise them with
--srcdict DIR/dict.txt). `blocks` prints how many training blocks of each length the binarised
train split gives with --sample-break-mode complete (a block holds tokens_per_sample - 1 tokens
plus <s>, as the masked_lm task builds it).
"""

import argparse
import sys

from utf8_check import NotUtf8, checked_lines


def train_spm(args):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=args.input, model_prefix=args.prefix, vocab_size=args.vocab_size, model_type="bpe",
        character_coverage=args.character_coverage, input_sentence_size=args.input_sentence_size,
        shuffle_input_sentence=True, num_threads=args.threads, minloglevel=1,
        # fairseq adds its own <s> <pad> </s> <unk>; sentencepiece keeps only <unk>
        bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0,
    )


def encode(args):
    if args.spm:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=args.spm)
        fn = lambda line: " ".join(sp.encode(line, out_type=str))  # noqa: E731
    else:
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        bpe = get_encoder(f"{args.gpt2}/encoder.json", f"{args.gpt2}/vocab.bpe")
        fn = lambda line: " ".join(map(str, bpe.encode(line)))  # noqa: E731
    try:
        lines = checked_lines(sys.stdin.buffer)
    except NotUtf8 as e:
        sys.exit(f"error: {e}")
    out = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    for line in lines:
        line = line.strip()
        out.write((fn(line) if line else "") + "\n")
    out.flush()


def blocks(args):
    from fairseq.data import Dictionary, TokenBlockDataset, data_utils

    d = Dictionary.load(f"{args.data}/dict.txt")
    ds = data_utils.load_indexed_dataset(f"{args.data}/{args.split}", d)
    if ds is None:
        raise SystemExit(f"no binarised split {args.split} in {args.data}")
    print(f"{args.split}: {int(ds.sizes.sum())} tokens in {len(ds)} lines")
    for size in args.sizes:
        blocked = TokenBlockDataset(ds, ds.sizes, size - 1, pad=d.pad(), eos=d.eos(), break_mode="complete")
        print(f"  tokens_per_sample {size}: {len(blocked)} blocks, {blocked.sizes.mean():.0f} tokens each on average")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train-spm")
    p.add_argument("--input", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--character-coverage", type=float, default=0.9999)
    p.add_argument("--input-sentence-size", type=int, default=10_000_000, help="lines sampled for training")
    p.add_argument("--threads", type=int, default=1)
    p = sub.add_parser("encode")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--spm", help="sentencepiece model")
    g.add_argument("--gpt2", help="folder with GPT-2's encoder.json and vocab.bpe")
    p = sub.add_parser("blocks")
    p.add_argument("data")
    p.add_argument("--split", default="train")
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    args = parser.parse_args(argv)
    {"train-spm": train_spm, "encode": encode, "blocks": blocks}[args.command](args)


if __name__ == "__main__":
    main()
