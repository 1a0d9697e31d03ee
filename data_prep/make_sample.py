"""Draw the bundled sample (data/sample) from the full corpora it comes from; kept for provenance.

    python data_prep/make_sample.py --source CORPORA --out data/sample

CORPORA holds po_en_de/{train,valid,test}.{en,de} and doc_en/{train,valid,test}.txt.

Parallel pairs are sampled uniformly per split (seed 13, order kept); prose is sampled as whole
documents until a line budget is reached.
"""

import argparse
import os
import random

from utf8_check import NotUtf8, check_file

PAIRS = {"train": 12000, "valid": 500, "test": 500}
PROSE_LINES = {"train": 5000, "valid": 400, "test": 400}


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="folder with po_en_de/ and doc_en/")
    parser.add_argument("--out", default="data/sample")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    try:  # every input, before anything is written
        for path in [f"{args.source}/po_en_de/{split}.{lang}" for split in PAIRS for lang in ("en", "de")] + \
                [f"{args.source}/doc_en/{split}.txt" for split in PROSE_LINES]:
            check_file(path)
    except NotUtf8 as e:
        raise SystemExit(f"error: {e}") from None
    except FileNotFoundError as e:
        raise SystemExit(f"error: missing input file {e.filename}") from None
    os.makedirs(f"{args.out}/po_en_de", exist_ok=True)
    os.makedirs(f"{args.out}/doc_en", exist_ok=True)
    for split, n in PAIRS.items():
        en = read_lines(f"{args.source}/po_en_de/{split}.en")
        de = read_lines(f"{args.source}/po_en_de/{split}.de")
        if len(en) != len(de):
            raise SystemExit(f"{split}.en and {split}.de differ in length ({len(en)} vs {len(de)})")
        keep = sorted(rng.sample(range(len(en)), n))
        write(f"{args.out}/po_en_de/{split}.en", "".join(en[i] + "\n" for i in keep))
        write(f"{args.out}/po_en_de/{split}.de", "".join(de[i] + "\n" for i in keep))
    for split, budget in PROSE_LINES.items():
        with open(f"{args.source}/doc_en/{split}.txt", encoding="utf-8") as f:
            docs = [d.strip("\n") for d in f.read().split("\n\n") if d.strip()]
        rng.shuffle(docs)
        out, lines = [], 0
        for doc in docs:
            k = doc.count("\n") + 1
            if lines + k > budget:
                continue
            out.append(doc)
            lines += k
            if lines >= budget * 0.98:
                break
        write(f"{args.out}/doc_en/{split}.txt", "\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
